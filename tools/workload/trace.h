// tools/workload/trace.h — recorded GPU allocation traces: the strict parser, and their replay at
// segment level (what the driver saw) through DeviceMemory.
//
// Format (the data README of the shared traces; tools/workload/README.md has the details):
//   # free-form metadata lines start with '#'
//   # preexisting_segment,<bytes>,<handle>      a segment live before recording started
//   t_us,kind,event,size,stream,handle          the header line, exactly
//   0,segment,alloc,20971520,0,227              rows: µs since the first event, segment|block,
//                                               alloc|free, bytes, stream, handle
// Handles stand for addresses: a free matches the live allocation with that handle (for segments,
// also a pre-existing one), and a freed handle may be allocated again. Handles are matched within
// one kind. The parser checks all of that, so a replay never meets an inconsistent trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <istream>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_memory.h"

namespace coloc::workload {

/// A device segment that existed when recording started.
struct PreexistingSegment {
  uint64_t bytes = 0;
  uint64_t handle = 0;
};

/// One segment-level event.
struct SegmentEvent {
  uint64_t t_us = 0;      ///< microseconds since the first event
  bool alloc = true;      ///< alloc, else free
  uint64_t bytes = 0;
  uint64_t handle = 0;
  int line = 0;           ///< line number in the file, for messages
};

struct Trace {
  std::string source;
  std::vector<PreexistingSegment> preexisting;
  std::vector<SegmentEvent> segments;   ///< the rows the driver saw, in file order
  uint64_t block_rows = 0;              ///< tensor-level rows: checked, not replayed
  uint64_t duration_us = 0;             ///< time of the last row

  /// Bytes of the pre-existing segments.
  uint64_t preexisting_bytes() const;
};

/// Parses a trace. `source` names it in errors. Throws InputError with one line
/// "<source>:<line>: <problem>" for: a malformed line (wrong field count, not a number, negative
/// number, unknown kind or event, zero size), a missing or wrong header, time going backwards, an
/// alloc of a handle that is live, a free of a handle that is neither live nor pre-existing, a free
/// whose size differs from the allocation, a repeated pre-existing handle.
Trace parse_trace(std::istream& in, const std::string& source);
/// Reads and parses the file at `path`. Throws InputError when it cannot be read or parsed.
Trace load_trace(const std::string& path);

/// The size a segment of `bytes` gets at `scale` (> 0): the scaled size rounded up to a multiple of
/// 2 MiB (the caching allocator's large-segment rounding, kRoundLarge), at least 2 MiB. A scale of
/// exactly 1 keeps sizes unchanged.
uint64_t scaled_segment_bytes(uint64_t bytes, double scale);

/// Waits for the moments events are due; a fake in unit tests.
class Pacer {
 public:
  virtual ~Pacer() = default;
  /// Marks the start of a loop: due times count from here.
  virtual void start_loop() = 0;
  /// Returns once `since_start` has passed since start_loop().
  virtual void wait_until(std::chrono::nanoseconds since_start) = 0;
};

/// The real clock: CLOCK_MONOTONIC via std::chrono::steady_clock.
class SteadyPacer final : public Pacer {
 public:
  void start_loop() override;
  void wait_until(std::chrono::nanoseconds since_start) override;

 private:
  std::chrono::steady_clock::time_point start_{};
};

/// Replays a trace's segments against a device, straight to the driver: segments are what the
/// recorded caching allocator got from the driver, so no allocator of ours stands in between.
class TraceReplayer {
 public:
  /// `size_scale` > 0 multiplies every size (see scaled_segment_bytes); `time_scale` >= 0 stretches
  /// time (2 = twice as slow, 0 = as fast as possible).
  TraceReplayer(const Trace& trace, DeviceMemory& device, double size_scale, double time_scale);
  /// Frees whatever is still live (errors ignored: this runs on the way out).
  ~TraceReplayer();
  TraceReplayer(const TraceReplayer&) = delete;
  TraceReplayer& operator=(const TraceReplayer&) = delete;

  /// Allocates the pre-existing segments that are not live: the state every loop starts from.
  /// Throws CudaError.
  void restore_preexisting();
  /// One loop: every segment event at its time, then back to the pre-existing state (free what the
  /// loop allocated and still holds; allocate again the pre-existing segments it freed), as the
  /// data README defines loops. Call restore_preexisting() once before the first loop.
  /// Throws CudaError.
  void run_loop(Pacer& pacer);
  /// Frees every live segment. Throws CudaError.
  void release_all();

  uint64_t live_bytes() const { return live_bytes_; }
  /// Peak of live segment bytes so far: the peak the driver saw.
  uint64_t peak_bytes() const { return peak_bytes_; }
  uint64_t device_allocs() const { return device_allocs_; }

 private:
  struct Live {
    CUdeviceptr ptr = 0;
    uint64_t bytes = 0;
    bool preexisting = false;  ///< the original pre-existing allocation of this handle
  };
  void allocate(uint64_t handle, uint64_t bytes, bool preexisting);
  void release(uint64_t handle);

  const Trace& trace_;
  DeviceMemory& device_;
  double size_scale_;
  double time_scale_;
  std::unordered_map<uint64_t, Live> live_;
  uint64_t live_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
  uint64_t device_allocs_ = 0;
};

}  // namespace coloc::workload
