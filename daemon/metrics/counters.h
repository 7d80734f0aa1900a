// daemon/metrics/counters.h — the counters /metrics shows that no other part of colocd keeps:
// admissions, memory waits and their time, refusals by reason, processes released after
// SIGKILL, and the grant round trip as a histogram. Pure: the engine feeds it broker events and
// timings on its loop thread; the exporter gets a copy (Counters::Values) in each snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>

#include "broker/types.h"
#include "coloc/protocol.h"

namespace coloc::metrics {

/// The grant round trip's bucket bounds (seconds, upper bounds; +Inf follows).
inline constexpr std::array<double, 14> kGrantBuckets = {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
                                                         2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 1.0};

/// A Prometheus histogram over kGrantBuckets.
struct Histogram {
  std::array<uint64_t, kGrantBuckets.size() + 1> counts{};  ///< per bucket, not cumulative; the last: above all
  uint64_t count = 0;
  double sum = 0;  ///< seconds
  /// One observation of `ns` nanoseconds.
  void observe(broker::Nanos ns);
};

/// What a request waited for, as the counters name it.
enum class WaitKind : uint32_t { kGrowth = 0, kAdmission = 1 };
inline constexpr const char* kWaitKindNames[] = {"growth", "admission"};
/// The requests whose round trip is measured.
enum class Request : uint32_t { kGrow = 0, kAttach = 1 };
inline constexpr const char* kRequestNames[] = {"grow", "attach"};
/// The refusal reasons the counters show: protocol.h's Reason 1..kMaxReason (reason_name).
inline constexpr uint32_t kMaxReason = uint32_t(proto::Reason::kBadRequest);

/// Monotonic counters since colocd started (not carried across a restart).
struct Values {
  uint64_t admissions = 0;                  ///< jobs admitted on a device (kAdmitted events)
  std::array<uint64_t, 2> waits{};          ///< requests parked, by WaitKind
  std::array<double, 2> wait_seconds{};     ///< time of the parked requests answered since, by WaitKind
  std::array<uint64_t, kMaxReason + 1> refusals{};  ///< by proto::Reason (index 0 unused)
  uint64_t sigkill_releases = 0;            ///< job processes that died by SIGKILL (released without a Goodbye)
  uint64_t suspensions = 0;                 ///< jobs suspended to host memory (issue 29), by any cause
  uint64_t suspension_bytes = 0;            ///< bytes those suspensions moved to host memory
  double suspended_seconds = 0;             ///< time suspensions lasted (counted when each ends: restore or exit)
  std::array<Histogram, 2> grant_round_trip;  ///< by Request
};

class Counters {
 public:
  /// A broker event (engine: every event settle() hands on, whether or not the job has a recorder).
  void on_event(const broker::Event& e);
  /// A process of a job died by SIGKILL; what it held is released.
  void on_sigkill() { ++v_.sigkill_releases; }
  /// A job was suspended, moving `bytes` to host memory; a suspension ended after `seconds`.
  void on_suspended(broker::Bytes bytes) {
    ++v_.suspensions;
    v_.suspension_bytes += bytes;
  }
  void on_suspension_end(double seconds) { v_.suspended_seconds += seconds; }
  /// The round trip of a request answered without waiting: from receiving it to sending the answer.
  void observe(Request r, broker::Nanos ns) { v_.grant_round_trip[uint32_t(r)].observe(ns); }
  const Values& values() const { return v_; }

 private:
  Values v_;
  /// The start times of parked requests not answered yet, per (job, WaitKind): the time of the
  /// answered ones is the sum of the ends minus the sum of the starts, whichever start each end pairs with.
  std::map<std::pair<broker::JobSerial, uint32_t>, std::deque<broker::Nanos>> open_;
};

}  // namespace coloc::metrics
