// daemon/history/history_store.h — colocd's run history (issue 12, "History"): per fingerprint
// (user, command, environment, device model) the last N runs' peak, duration and exit, in
// <state-dir>/history.db (SQLite, WAL), so that a rerun of a known job can be admitted on its
// known footprint (estimator/history.h: the rule).
//
// Threads. SQLite lives on one worker thread the store starts, never on the event loop: the loop
// reads and changes an in-memory cache (lookup, list, record, forget never touch the disk or wait
// for it), and the worker loads the database into that cache at start and then writes what the
// loop queued, one transaction per change. A slow disk or a lock only delays the worker.
//
// A bad database. When the database proves corrupt, locked (by another connection, past a busy
// timeout of 100 ms), read-only, or otherwise fails (open, schema, a write), the store logs that
// ONCE (the path and SQLite's message) and turns history off until colocd restarts: usable()
// false, the cache emptied, lookups nullopt, records and forgets accepted and dropped. Nothing
// else in colocd depends on it. A lock is not waited out (history stays off even once it goes):
// an admission must never wait for history, and an estimate that silently stops learning is worse
// than none. A database written by a newer colocd (PRAGMA user_version above ours) is left alone
// the same way.
//
// A full disk is not a bad database: a write that fails for want of space (SQLITE_FULL, or an I/O
// error of ENOSPC/EDQUOT) leaves history on. The cache keeps the run (admissions use it), the
// change stays first in the worker's queue (at most 10000 wait; past that the oldest after it is
// dropped from the disk's copy) and is tried again every second; once one succeeds, the rest
// follow. Logged once when it starts and once when it ends. wait_idle() returns while waiting.
//
// Crash safety is SQLite's: each change is one transaction in WAL mode, so a colocd killed in the
// middle of a write loses at most that change (the next open rolls the WAL back to its last
// commit).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace coloc::history {

/// What makes two runs "the same job": the same user (one user's history never sets another's
/// reservation), the same command (without coloc's own options), the same environment variables
/// that change a footprint (wire::env_fingerprint), and the same device model.
struct Fingerprint {
  uint32_t uid = 0;
  uint64_t command_hash = 0;  ///< Register::cmdline_hash
  uint64_t env_hash = 0;      ///< Register::env_hash (v9, kRegEnvHash)
  std::string model;          ///< the device model's name, as the driver gives it at Attach
  /// 16 lowercase hex digits: XXH3-64 of the four fields (uid and the hashes as little-endian
  /// bytes, then the model's bytes).
  std::string id() const;
  bool operator==(const Fingerprint&) const = default;
};

/// How a run ended: cleanly; out of memory at the job's own limit (or its user's cap), or because
/// the device was full; out of memory with no cause recorded (runs recorded before colocd 0.28);
/// killed by a signal; cancelled (`coloc cancel`). Every end but kClean is a failure.
enum class RunEnd { kClean, kOom, kKilled, kOomLimit, kOomDevice, kCancelled };
/// "clean", "oom", "killed", "oom-limit", "oom-device", "cancelled".
const char* run_end_name(RunEnd e);

/// One ended run, as the engine records it.
struct RunRecord {
  Fingerprint fp;
  std::string command;            ///< its text (the report's command), shown to its owner and root only
  int64_t ended_wall_ms = 0;      ///< when it ended, Unix ms
  uint64_t duration_ms = 0;       ///< how long it ran from its first admission (ms)
  std::optional<int> exit_status; ///< none when unknown
  RunEnd end = RunEnd::kClean;
  uint64_t peak = 0;              ///< bytes: the job's peak on its devices of this model (max)
};

/// What history knows of a fingerprint (bytes).
struct Known {
  uint64_t estimate = 0;  ///< est::history_estimate of its runs: what to admit it on
  uint32_t runs = 0;      ///< runs kept (at most Options::runs_kept)
  uint64_t p50 = 0, p95 = 0;  ///< of every kept run's peak (failed ones too), nearest rank
  /// The median time from admission to end of its clean runs (ms, nearest rank; 0 = no clean
  /// run): when a run of it is expected to end, for the queue's backfill (broker/backfill.h). Runs
  /// recorded before colocd 0.28 count from the job's start (their admission wait included).
  uint64_t run_ms = 0;
  /// No clean run: the estimate is the largest failed run's peak (plus the margin), a lower
  /// bound of what the job needs (estimator/history.h).
  bool lower_bound = false;
};

/// HistoryStore's options (outside the class: GCC cannot default a nested struct with member
/// initializers in the class's own constructor).
struct HistoryOptions {
  size_t runs_kept = 20;  ///< N: the last N runs per fingerprint are kept (older ones deleted)
  /// Fingerprints kept per user: recording a run of a new one past this forgets the user's
  /// fingerprint whose last run is the oldest (commands with unique arguments, run after run,
  /// must not grow colocd's memory without bound). 1,000 fingerprints of 20 runs are about 4 MiB.
  size_t max_per_user = 1000;
  /// How long SQLite retries a locked database before the op gives up (ms; sqlite3_busy_timeout).
  /// The worker waits it, never the caller.
  int busy_timeout_ms = 100;
  /// Tests only: called on the worker inside a run's write transaction, after its INSERT (and the
  /// pruning DELETE), before COMMIT.
  std::function<void()> on_write_begun;
};

class HistoryStore {
 public:
  using Options = HistoryOptions;

  /// Starts the worker, which opens `db_path` (creating it if needed), sets WAL mode, creates the
  /// schema and loads every run into the cache. Never throws; a bad database is logged (once) and
  /// turns history off (see the top of this file).
  explicit HistoryStore(std::string db_path, Options = {});
  /// Stops the worker after it has written what is queued; gives up after about 2 s (the worker
  /// is then left to finish, or not, on its own: what was not written is lost).
  ~HistoryStore();
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  /// What history knows of `fp`, from the cache (never the disk); nullopt for no runs, before the
  /// database is loaded (records made since excepted), and when history is off. Thread-safe.
  std::optional<Known> lookup(const Fingerprint& fp) const;
  /// Records an ended run: in the cache at once (the next lookup sees it; only the last runs_kept
  /// are kept), and queued for the database. Dropped when history is off.
  void record(RunRecord run);
  /// `coloc history`: {"path", "loaded", "usable", "fingerprints": [{"fingerprint" (16 hex),
  /// "uid", "user", "model", "command" (null unless `caller_uid` owns it or is root), "runs",
  /// "p50", "p95", "estimate" (bytes), "lower_bound" (Known::lower_bound), "run_ms"
  /// (Known::run_ms; 0: none), "last_ended_ms", "last_exit_status" (null: unknown),
  /// "last_end" (run_end_name), "failures" ({run_end_name: how many of the kept runs ended so},
  /// failures only)}]}, the most recent run first.
  nlohmann::json list(uint32_t caller_uid) const;

  enum class Forget { kOk, kNotFound, kNotAllowed };
  /// Forgets the fingerprint `id_or_all` names (its 16 hex digits), or with "all" every
  /// fingerprint the caller owns (root: every one; kOk even when that is none). kNotFound for an
  /// unknown fingerprint (and for every one when history is off or not loaded yet), kNotAllowed
  /// for another user's unless `caller_uid` is 0. *forgotten: how many fingerprints went.
  Forget forget(uint32_t caller_uid, std::string_view id_or_all, size_t* forgotten = nullptr);

  /// The worker has read the database (or given up on it).
  bool loaded() const;
  /// False once the database proved corrupt, locked, read-only or otherwise failed (history is
  /// then off until restart).
  bool usable() const;
  /// Tests: returns once the worker has loaded the database and done everything queued so far.
  void wait_idle();

  const std::string& path() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> s_;  ///< shared with the worker thread (which may outlive a timed-out destructor)
};

}  // namespace coloc::history
