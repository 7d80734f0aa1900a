// simgpu/trace.h — the kernel-slice trace (SIMGPU_TRACE): a CSV file that several processes
// append to. Columns: pid,device,context,stream,launch_id,kernel,start_ns,end_ns — one line per
// executed slice of a kernel; device is the physical index in SIMGPU_DEVICES, context and stream
// are per-process numbers (stream 0 = legacy default stream, 1 = per-thread default stream),
// launch_id numbers launches within a process, times are CLOCK_MONOTONIC nanoseconds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace simgpu {

/// One executed slice of a kernel.
struct TraceSlice {
  pid_t pid;
  int device;
  uint32_t context;
  uint32_t stream;
  uint64_t launch_id;
  const char* kernel;
  uint64_t start_ns;
  uint64_t end_ns;
};

class Trace {
 public:
  /// Opens `path` for appending (mode 0644) and writes the header if the file is empty, under an
  /// exclusive flock so that it is written exactly once. False with *error on failure.
  bool open(const std::string& path, std::string* error);
  bool enabled() const { return fd_ >= 0; }
  /// Appends one line with a single write(2) on the O_APPEND descriptor, so lines from several
  /// processes never interleave. Commas and newlines in the kernel name become '_'.
  void write(const TraceSlice& s) const;

 private:
  int fd_ = -1;  // never closed: executor threads may still write while the process exits
};

}  // namespace simgpu
