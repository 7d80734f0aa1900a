// daemon/broker/preempt.h — which jobs to suspend so that a high-priority job's memory fits
// (issue 29, "Preemption without lost work"). Pure: the caller gathers the candidates from the
// books and the clock; nothing here touches a process.
//
// A candidate is a job on the device that could be suspended: its priority is low enough for the
// policy, it passed the preflight (no managed memory, no IPC, no exported handles), and it has run
// at least `min_run` since it last started or resumed (a job is suspended at most once per
// min_run of running, so that no job is kept from making progress). What suspending it frees on
// the device is what the device holds for it (`device_bytes`: NVML's per-process figures summed
// over its processes there, so the driver's own overhead included); what it costs the host is
// every byte it holds on any device (`host_bytes`: checkpoint moves all of a process's GPUs).
//
// The order (choose_victims): the fewest jobs whose device bytes cover `need`; among as few, the
// least device memory that suffices (suspend no more than needed); then the youngest (the latest
// started: the least work at risk, as Slurm's preemption orders by start time); then the job
// serial, so the choice is deterministic. The chosen set's host bytes must fit `host_room`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "broker/types.h"

namespace coloc::broker {

/// Which jobs a `high` job may suspend (colocd.toml `preempt`).
enum class PreemptMode : uint8_t {
  kOff,         ///< none
  kBestEffort,  ///< best-effort jobs
  kNormal,      ///< best-effort and normal jobs
};
/// "off", "best-effort", "normal".
const char* preempt_mode_name(PreemptMode m);
/// The inverse of preempt_mode_name; false for anything else.
bool parse_preempt_mode(const std::string& text, PreemptMode* out);

struct SuspendCandidate {
  JobSerial job = 0;
  Priority priority = Priority::kBestEffort;
  Bytes device_bytes = 0;  ///< what the device holds for it (bytes)
  Bytes host_bytes = 0;    ///< what a checkpoint would move to host memory, all its devices (bytes)
  Nanos started = 0;       ///< when it last started or resumed running (ns, the broker's clock)
  bool suspendable = true; ///< passed the preflight
};

/// Why no set was chosen (for the waiting job's reason and the log).
enum class NoVictims : uint8_t {
  kNone = 0,       ///< a set was chosen
  kPolicyOff,      ///< mode is kOff
  kNoCandidate,    ///< no job of a low enough priority, suspendable and past min_run
  kNotEnough,      ///< all of them together would not free `need`
  kHostMemory,     ///< sets that free enough exist, but none fits in host memory
};

struct VictimChoice {
  std::vector<JobSerial> jobs;  ///< in the order given, empty when none
  Bytes device_bytes = 0;       ///< what they free on the device
  Bytes host_bytes = 0;         ///< what they move to host memory
  NoVictims why = NoVictims::kNone;
};

/// Chooses the jobs to suspend so that `need` bytes (> 0) free on the device, from `candidates`
/// (any order; ineligible ones are skipped), under `mode`, at `now`, each having run at least
/// `min_run` ns since `started`, their host bytes together at most `host_room`. Exact up to
/// kMaxExactCandidates eligible jobs (every subset of the smallest size is tried); past that, the
/// largest jobs are taken greedily.
VictimChoice choose_victims(const std::vector<SuspendCandidate>& candidates, Bytes need, PreemptMode mode, Nanos now,
                            Nanos min_run, Bytes host_room);

inline constexpr size_t kMaxExactCandidates = 16;

}  // namespace coloc::broker
