// daemon/report/job_state_store.h — the running jobs' report state on disk, so that a restarted
// colocd continues each job's report (start, timeline, counters, waits) instead of starting it
// over, keeps a live `coloc set` limit, and still writes the report of a job that ended while it
// was away.
//
// One file per running job: <state-dir>/jobs/<uid>.<sanitized id>.<hash>.json (mode 0600, the
// directory 0700: command lines are private), written whole to a temporary file and renamed over
// the old one, so a daemon killed at any moment leaves either the previous or the new version. A
// file is at most kMaxFileBytes (the recorder is bounded: see job_recorder.h). The file is removed
// when the job's report is written.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/types.h"
#include "util/result.h"

namespace coloc::report {

/// What a restarted daemon needs of one running job.
struct SavedJob {
  broker::JobKey key;
  broker::Bytes limit = broker::kNoLimit;  ///< the job's limit in bytes as the daemon last set it
  std::string priority;                    ///< proto::priority_name of the job's priority
  std::string paused;                      ///< who paused it: "owner", "admin", or "" (running)
  uint32_t weight = proto::kDefaultWeight;  ///< coloc set --weight (states saved before weights: 1)
  /// The job's registered processes: pid and start time (/proc/PID/stat field 22, clock ticks
  /// since boot), so a reused pid does not pass for the job.
  std::vector<std::pair<pid_t, uint64_t>> pids;
  broker::Nanos saved_mono = 0;  ///< CLOCK_MONOTONIC (ns) when saved: the last time the daemon saw the job
  int64_t saved_unix_ms = 0;     ///< the same moment in Unix ms
  std::string boot_id;           ///< /proc/sys/kernel/random/boot_id then (pids and monotonic times hold within one boot)
  nlohmann::json recorder;       ///< JobRecorder::state()
  /// (issue 12) The job's history fingerprint and its reservations from history or prediction,
  /// so a restart neither loses its run from the history nor drops those reservations: an object
  /// the engine writes and reads (engine/server_estimate.cpp), null when none (older states too).
  nlohmann::json estimate;
};

/// The last moment a daemon is known to have been running, for the next one: a job that was
/// running then and whose processes are gone at the restart ended between then and the restart.
struct DaemonAlive {
  broker::Nanos mono = 0;  ///< CLOCK_MONOTONIC (ns)
  int64_t unix_ms = 0;     ///< the same moment in Unix ms
  std::string boot_id;     ///< the boot (monotonic times compare within one boot only)
};

class JobStateStore {
 public:
  /// The largest file written or read (bytes); larger ones are refused with an Error / skipped.
  static constexpr size_t kMaxFileBytes = 16u << 20;

  /// `dir` is the jobs directory (created by prepare()).
  explicit JobStateStore(std::string dir) : dir_(std::move(dir)) {}

  /// Creates the directory (mode 0700). Errors name the directory.
  Result<void> prepare() const;
  /// The file of job `key` (a sanitized, length-bounded name plus a hash of the exact key).
  std::string path(const broker::JobKey& key) const;
  /// Writes (replaces) the job's file: a temporary file in the directory, then rename(2).
  Result<void> save(const SavedJob& job) const;
  /// Removes the job's file (no error when it is already gone).
  void remove(const broker::JobKey& key) const;

  struct Loaded {
    std::vector<SavedJob> jobs;
    /// One sentence per file that could not be used (unreadable, too large, not a saved job);
    /// such files are renamed to <name>.bad so they are kept for inspection but not read again.
    std::vector<std::string> problems;
  };
  /// Every saved job of the previous run.
  Loaded load() const;

  /// Records that the daemon is running now (<dir>/colocd.alive, replaced whole like a job file);
  /// the daemon does so about once a second while it has jobs, and when it stops.
  Result<void> save_alive(const DaemonAlive& alive) const;
  /// What the previous daemon last recorded with save_alive(); nullopt when nothing (usable) was.
  std::optional<DaemonAlive> load_alive() const;

  /// The document of `job` (what save() writes) and back; from_json's Error names the bad field.
  static nlohmann::json to_json(const SavedJob& job);
  static Result<SavedJob> from_json(const nlohmann::json& j);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

/// This boot's id (/proc/sys/kernel/random/boot_id), or "" when unreadable.
std::string boot_id();

}  // namespace coloc::report
