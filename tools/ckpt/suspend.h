// tools/ckpt/suspend.h — suspending and resuming a whole job through the driver's checkpoint API
// (cuda.h, CUDA_CHECKPOINT), with roll-back: what coloc-ckpt does, apart from loading the driver.
//
// A job is a set of processes. Checkpoint is per process, so a job is suspended whole:
//   1. every process must be RUNNING (nothing is touched otherwise);
//   2. lock each, in order; a lock that fails (its timeout passed, CUDA_ERROR_NOT_READY) unlocks
//      the ones already locked, and the job runs on;
//   3. checkpoint each; one that fails restores the ones already checkpointed and unlocks every
//      process that is LOCKED. A process the driver leaves FAILED is reported as such, never hidden.
// Resume restores every CHECKPOINTED process, then unlocks every LOCKED one. A restore that fails
// checkpoints again the ones it had restored, so the job stays wholly suspended (and the device's
// memory wholly free) for the caller to try later; each process's state is reported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace coloc::ckpt {

/// The driver's entry points, as functions of a pid returning a CUresult (0: CUDA_SUCCESS).
/// `state` sets *state to a CUprocessState (0 RUNNING, 1 LOCKED, 2 CHECKPOINTED, 3 FAILED).
struct Api {
  std::function<int(int pid, unsigned timeout_ms)> lock;
  std::function<int(int pid)> checkpoint, restore, unlock;
  std::function<int(int pid, int* state)> state;
  std::function<std::string(int rc)> error_name;  ///< "CUDA_ERROR_..." for a CUresult
  std::function<uint64_t()> now_ns;               ///< a monotonic clock, for the times reported
};

/// What happened to one process.
struct ProcessOutcome {
  int pid = 0;
  std::string state;         ///< running, locked, checkpointed, failed, or unknown (GetState failed)
  std::string failed_step;   ///< the step that failed for it (lock, checkpoint, restore, unlock, state), or ""
  std::string error;         ///< that step's CUresult name, or ""
  double lock_ms = 0, checkpoint_ms = 0, restore_ms = 0, unlock_ms = 0;  ///< times of its steps
};

/// What happened to the job.
struct Outcome {
  bool ok = false;           ///< the action completed for every process
  std::string summary;       ///< one line: what was done, or why not and what was rolled back
  std::vector<ProcessOutcome> processes;  ///< in the order given
};

/// The name of a CUprocessState (0..3), or "unknown".
std::string state_name(int state);

/// Suspends the processes `pids` (at least one) of one job, locking each with `lock_timeout_ms`
/// (0: no timeout, the driver may then wait forever on a kernel that never ends).
Outcome suspend(const Api& api, const std::vector<int>& pids, unsigned lock_timeout_ms);

/// Resumes the processes `pids` of a suspended job (RUNNING processes are left as they are).
Outcome resume(const Api& api, const std::vector<int>& pids);

/// Reports the state of each process.
Outcome states(const Api& api, const std::vector<int>& pids);

}  // namespace coloc::ckpt
