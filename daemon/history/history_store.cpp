#include "history/history_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "../../estimator/history.h"
#include "util/log.h"

namespace coloc::history {

using nlohmann::json;

namespace {

/// The schema this colocd writes (PRAGMA user_version). A database of a later version is left
/// alone (history off).
constexpr int kSchemaVersion = 1;

// One table of runs, oldest first by id; `run_end` is run_end_name's ('clean', 'oom-limit', ...) ("end" is an SQL
// keyword). Integers are SQLite's signed 64 bits: the hashes and sizes are stored bit for bit.
constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS runs ("
    " id INTEGER PRIMARY KEY,"
    " fingerprint TEXT NOT NULL,"
    " uid INTEGER NOT NULL,"
    " command_hash INTEGER NOT NULL,"
    " env_hash INTEGER NOT NULL,"
    " model TEXT NOT NULL,"
    " command TEXT NOT NULL,"
    " ended_wall_ms INTEGER NOT NULL,"
    " duration_ms INTEGER NOT NULL,"
    " exit_status INTEGER,"
    " run_end TEXT NOT NULL,"
    " peak INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS runs_by_fingerprint ON runs (fingerprint, id);";

struct Run {
  int64_t ended_wall_ms = 0;
  uint64_t duration_ms = 0;
  std::optional<int> exit_status;
  RunEnd end = RunEnd::kClean;
  uint64_t peak = 0;
};

struct Entry {
  Fingerprint fp;
  std::string command;  ///< the latest run's
  std::deque<Run> runs;  ///< oldest first
};

std::optional<RunEnd> parse_end(std::string_view s) {
  if (s == "clean") return RunEnd::kClean;
  if (s == "oom") return RunEnd::kOom;
  if (s == "killed") return RunEnd::kKilled;
  if (s == "oom-limit") return RunEnd::kOomLimit;
  if (s == "oom-device") return RunEnd::kOomDevice;
  if (s == "cancelled") return RunEnd::kCancelled;
  return std::nullopt;
}

std::string user_of(uint32_t uid) {
  struct passwd pw, *out = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid_t(uid), &pw, buf, sizeof buf, &out) == 0 && out) return out->pw_name;
  return std::to_string(uid);
}

Known known_of(const Entry& e) {
  std::vector<est::PastRun> past;
  std::vector<uint64_t> peaks, clean_runs;
  for (const Run& r : e.runs) {
    past.push_back({r.peak, r.end != RunEnd::kClean});
    peaks.push_back(r.peak);
    if (r.end == RunEnd::kClean) clean_runs.push_back(r.duration_ms);
  }
  Known k;
  k.run_ms = est::percentile(clean_runs, 50);
  k.lower_bound = clean_runs.empty();
  k.estimate = est::history_estimate(past).value_or(0);
  k.runs = uint32_t(e.runs.size());
  k.p50 = est::percentile(peaks, 50);
  k.p95 = est::percentile(peaks, 95);
  return k;
}

struct Op {
  enum class Kind { kInsert, kForget } kind = Kind::kInsert;
  RunRecord run;
  std::string id;  ///< kInsert: the run's fingerprint id
  std::vector<std::string> ids;  ///< kForget
};

/// One prepared statement, finalized with it.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(s); }
};

}  // namespace

const char* run_end_name(RunEnd e) {
  switch (e) {
    case RunEnd::kClean: return "clean";
    case RunEnd::kOom: return "oom";
    case RunEnd::kKilled: return "killed";
    case RunEnd::kOomLimit: return "oom-limit";
    case RunEnd::kOomDevice: return "oom-device";
    case RunEnd::kCancelled: return "cancelled";
  }
  return "clean";
}

std::string Fingerprint::id() const {
  std::string buf;
  buf.resize(4 + 8 + 8);
  for (int i = 0; i < 4; ++i) buf[size_t(i)] = char((uid >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) buf[size_t(4 + i)] = char((command_hash >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) buf[size_t(12 + i)] = char((env_hash >> (8 * i)) & 0xff);
  buf += model;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(XXH3_64bits(buf.data(), buf.size())));
  return out;
}

struct HistoryStore::Shared {
  std::string path;
  Options opt;

  mutable std::mutex mu;
  std::condition_variable work;  ///< the worker: something queued, or stop
  std::condition_variable idle;  ///< wait_idle and the destructor: the worker finished something
  std::map<std::string, Entry> cache;  ///< by fingerprint id
  std::deque<Op> queue;
  bool busy = false;     ///< the worker is doing an op it took from the queue
  bool stop = false;     ///< the destructor asks the worker to finish the queue and leave
  bool abandon = false;  ///< the destructor gave up waiting: leave without the rest of the queue
  bool exited = false;   ///< the worker has left (the database is closed)
  /// Forgets made before the database was loaded: (caller uid, id or "all"), applied to what is
  /// loaded before it joins the cache.
  std::vector<std::pair<uint32_t, std::string>> early_forgets;
  std::atomic<bool> loaded{false};
  std::atomic<bool> usable{true};
  /// A write failed for want of disk space, and has not succeeded since (under mu).
  bool waiting_for_space = false;
  /// The most changes kept queued while the disk is full, and how often the first is tried again.
  static constexpr size_t kMaxQueued = 10000;
  static constexpr std::chrono::milliseconds kFullRetry{1000};
  std::thread thread;

  // The worker's own.
  sqlite3* db = nullptr;
  Stmt insert, prune, forget, begin, commit, rollback;

  void run();
  bool open();
  bool load(std::map<std::string, Entry>* out);
  void merge(std::map<std::string, Entry> loaded_entries);
  /// Writes one op: true when written (or failed for good: history off), false when the disk is
  /// full (nothing written; the op is to be tried again).
  bool write(const Op& op);
  bool exec_step(sqlite3_stmt* s, const char* what);
  /// The last failure was for want of disk space (SQLITE_FULL, or an I/O error of ENOSPC/EDQUOT):
  /// not the database's fault, and it passes when space returns.
  bool full_ = false;
  bool no_space(int rc) const;
  bool prepare(Stmt* st, const char* sql, const char* what = "cannot prepare a statement");
  /// The database failed: logs it (once, the first failure only), turns history off.
  void bad(const char* what, int rc);
};

void HistoryStore::Shared::bad(const char* what, int rc) {
  if (usable.exchange(false)) {
    const char* msg = db && sqlite3_errcode(db) != SQLITE_OK ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    std::string why = msg ? msg : "?";
    if (std::strcmp(why.c_str(), sqlite3_errstr(rc)) != 0) why += fmt::format(" ({})", sqlite3_errstr(rc));
    log::get("history")->error("run history is off until colocd restarts: {}: {}: {}; colocd goes on without it", path,
                               what, why);
  }
  std::lock_guard lk(mu);
  cache.clear();
  queue.clear();
}

bool HistoryStore::Shared::prepare(Stmt* st, const char* sql, const char* what) {
  int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->s, nullptr);
  if (rc != SQLITE_OK) {
    bad(what, rc);
    return false;
  }
  return true;
}

bool HistoryStore::Shared::no_space(int rc) const {
  if ((rc & 0xff) == SQLITE_FULL) return true;
  if ((rc & 0xff) != SQLITE_IOERR || !db) return false;
  const int e = sqlite3_system_errno(db);
  return e == ENOSPC || e == EDQUOT;
}

bool HistoryStore::Shared::exec_step(sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    if (no_space(rc)) {  // tried again once space returns (run)
      full_ = true;
      return false;
    }
    bad(what, rc);
    return false;
  }
  return true;
}

bool HistoryStore::Shared::open() {
  // Private to colocd's user: the runs' command lines are shown to their owners only. Created
  // here with mode 0600 (SQLite gives the -wal and -shm files the database file's mode).
  if (int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600); fd >= 0) ::close(fd);
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    bad("cannot open", rc);
    return false;
  }
  sqlite3_busy_timeout(db, opt.busy_timeout_ms);
  sqlite3_extended_result_codes(db, 1);
  // Without write permission SQLite opens the file read-only without a word: history could then
  // never learn. (Said as SQLite would say it on the first write.)
  if (sqlite3_db_readonly(db, "main") == 1) {
    bad("the database is read-only (no write permission for colocd)", SQLITE_READONLY);
    return false;
  }
  // Every statement below reads the file: a file that is no database (garbage) fails here
  // (SQLITE_NOTADB), a locked one after the busy timeout (SQLITE_BUSY).
  {
    Stmt wal;
    if (!prepare(&wal, "PRAGMA journal_mode=WAL", "cannot read the database")) return false;
    rc = sqlite3_step(wal.s);
    if (rc != SQLITE_ROW) {
      bad("cannot set WAL mode", rc);
      return false;
    }
    const unsigned char* mode = sqlite3_column_text(wal.s, 0);
    if (!mode || std::strcmp(reinterpret_cast<const char*>(mode), "wal") != 0) {
      bad("cannot set WAL mode (another connection holds the database?)", SQLITE_BUSY);
      return false;
    }
  }
  {
    Stmt check;
    if (!prepare(&check, "PRAGMA quick_check")) return false;
    rc = sqlite3_step(check.s);
    if (rc != SQLITE_ROW) {
      bad("cannot check the database", rc);
      return false;
    }
    const unsigned char* verdict = sqlite3_column_text(check.s, 0);
    if (!verdict || std::strcmp(reinterpret_cast<const char*>(verdict), "ok") != 0) {
      log::get("history")->error("{}: quick_check: {}", path, verdict ? reinterpret_cast<const char*>(verdict) : "?");
      bad("the database is corrupt", SQLITE_CORRUPT);
      return false;
    }
  }
  int version = 0;
  {
    Stmt v;
    if (!prepare(&v, "PRAGMA user_version")) return false;
    rc = sqlite3_step(v.s);
    if (rc != SQLITE_ROW) {
      bad("cannot read the schema version", rc);
      return false;
    }
    version = sqlite3_column_int(v.s, 0);
  }
  if (version > kSchemaVersion) {
    log::get("history")->error("{}: schema version {} is newer than this colocd's {}", path, version, kSchemaVersion);
    bad("written by a newer colocd", SQLITE_MISMATCH);
    return false;
  }
  if (version < kSchemaVersion) {
    char* err = nullptr;
    const std::string sql = std::string("BEGIN IMMEDIATE;") + kSchema + "PRAGMA user_version=" +
                            std::to_string(kSchemaVersion) + ";COMMIT;";
    rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      bad("cannot create the schema", rc);
      return false;
    }
  }
  return prepare(&insert,
                 "INSERT INTO runs (fingerprint, uid, command_hash, env_hash, model, command, ended_wall_ms,"
                 " duration_ms, exit_status, run_end, peak) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)") &&
         prepare(&prune,
                 "DELETE FROM runs WHERE fingerprint = ?1 AND id NOT IN"
                 " (SELECT id FROM runs WHERE fingerprint = ?1 ORDER BY id DESC LIMIT ?2)") &&
         prepare(&forget, "DELETE FROM runs WHERE fingerprint = ?1") && prepare(&begin, "BEGIN IMMEDIATE") &&
         prepare(&commit, "COMMIT") && prepare(&rollback, "ROLLBACK");
}

bool HistoryStore::Shared::load(std::map<std::string, Entry>* out) {
  Stmt q;
  if (!prepare(&q,
               "SELECT fingerprint, uid, command_hash, env_hash, model, command, ended_wall_ms, duration_ms,"
               " exit_status, run_end, peak FROM runs ORDER BY id"))
    return false;
  size_t skipped = 0;
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
    auto text = [&](int col) {
      const unsigned char* t = sqlite3_column_text(q.s, col);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    Fingerprint fp{uint32_t(sqlite3_column_int64(q.s, 1)), uint64_t(sqlite3_column_int64(q.s, 2)),
                   uint64_t(sqlite3_column_int64(q.s, 3)), text(4)};
    const std::string id = text(0);
    const std::optional<RunEnd> end = parse_end(text(9));
    if (id != fp.id() || !end) {  // not a row this colocd wrote: left out
      ++skipped;
      continue;
    }
    Run r;
    r.ended_wall_ms = sqlite3_column_int64(q.s, 6);
    r.duration_ms = uint64_t(sqlite3_column_int64(q.s, 7));
    if (sqlite3_column_type(q.s, 8) != SQLITE_NULL) r.exit_status = sqlite3_column_int(q.s, 8);
    r.end = *end;
    r.peak = uint64_t(sqlite3_column_int64(q.s, 10));
    Entry& e = (*out)[id];
    e.fp = fp;
    e.command = text(5);
    e.runs.push_back(r);
    while (e.runs.size() > opt.runs_kept) e.runs.pop_front();
  }
  if (rc != SQLITE_DONE) {
    bad("cannot read the runs", rc);
    return false;
  }
  size_t runs = 0;
  for (auto& [id, e] : *out) runs += e.runs.size();
  log::get("history")->info("run history {}: {} fingerprint(s), {} run(s){}", path, out->size(), runs,
                            skipped ? fmt::format(" ({} row(s) left out)", skipped) : std::string());
  return true;
}

void HistoryStore::Shared::merge(std::map<std::string, Entry> from_disk) {
  std::vector<std::string> dropped;
  std::lock_guard lk(mu);
  for (const auto& [uid, what] : early_forgets)
    for (auto it = from_disk.begin(); it != from_disk.end();) {
      const bool match = what == "all" ? (uid == 0 || it->second.fp.uid == uid) : it->first == what;
      if (match) {
        dropped.push_back(it->first);
        it = from_disk.erase(it);
      } else {
        ++it;
      }
    }
  early_forgets.clear();
  // Runs recorded since the start are newer than the database's.
  for (auto& [id, e] : from_disk) {
    auto it = cache.find(id);
    if (it == cache.end()) {
      cache.emplace(id, std::move(e));
      continue;
    }
    for (auto r = e.runs.rbegin(); r != e.runs.rend(); ++r) it->second.runs.push_front(*r);
    while (it->second.runs.size() > opt.runs_kept) it->second.runs.pop_front();
  }
  if (!dropped.empty()) {
    Op op;
    op.kind = Op::Kind::kForget;
    op.ids = std::move(dropped);
    queue.push_front(std::move(op));
  }
}

bool HistoryStore::Shared::write(const Op& op) {
  full_ = false;
  if (!exec_step(begin.s, "cannot begin a write")) return !full_;
  bool ok = true;
  if (op.kind == Op::Kind::kInsert) {
    const RunRecord& r = op.run;
    sqlite3_stmt* s = insert.s;
    sqlite3_bind_text(s, 1, op.id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, int64_t(r.fp.uid));
    sqlite3_bind_int64(s, 3, int64_t(r.fp.command_hash));
    sqlite3_bind_int64(s, 4, int64_t(r.fp.env_hash));
    sqlite3_bind_text(s, 5, r.fp.model.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 6, r.command.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 7, r.ended_wall_ms);
    sqlite3_bind_int64(s, 8, int64_t(r.duration_ms));
    if (r.exit_status) sqlite3_bind_int(s, 9, *r.exit_status);
    else sqlite3_bind_null(s, 9);
    sqlite3_bind_text(s, 10, run_end_name(r.end), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 11, int64_t(r.peak));
    ok = exec_step(s, "cannot record a run");
    sqlite3_clear_bindings(s);
    if (ok) {
      sqlite3_bind_text(prune.s, 1, op.id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(prune.s, 2, int64_t(opt.runs_kept));
      ok = exec_step(prune.s, "cannot delete old runs");
      sqlite3_clear_bindings(prune.s);
    }
    if (ok && opt.on_write_begun) opt.on_write_begun();
  } else {
    for (const std::string& id : op.ids) {
      sqlite3_bind_text(forget.s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
      ok = exec_step(forget.s, "cannot forget a fingerprint");
      sqlite3_clear_bindings(forget.s);
      if (!ok) break;
    }
  }
  if (ok && exec_step(commit.s, "cannot commit")) return true;
  sqlite3_step(rollback.s);  // (a failed COMMIT may have rolled back already)
  sqlite3_reset(rollback.s);
  return !full_;
}

void HistoryStore::Shared::run() {
  std::map<std::string, Entry> from_disk;
  if (open()) load(&from_disk);
  if (usable) merge(std::move(from_disk));
  {
    std::lock_guard lk(mu);
    if (!usable) {
      cache.clear();
      queue.clear();
    }
    loaded = true;
  }
  idle.notify_all();
  for (;;) {
    std::unique_lock lk(mu);
    work.wait(lk, [&] { return stop || !queue.empty(); });
    if (abandon || queue.empty()) break;
    Op op = std::move(queue.front());
    queue.pop_front();
    busy = true;
    lk.unlock();
    const bool written = !usable || write(op);
    lk.lock();
    busy = false;
    if (!written) {
      // No disk space: the run stays in the cache (lookups see it) and its op first in the queue,
      // tried again every kFullRetry until space returns or colocd stops.
      if (!waiting_for_space)
        log::get("history")->warn("run history {}: no disk space; runs are kept in memory (admissions use them) and "
                                  "written once space returns", path);
      waiting_for_space = true;
      queue.push_front(std::move(op));
      if (stop) {  // colocd stops: what the disk had no room for is lost (the cache goes with it)
        log::get("history")->error("run history {}: {} change(s) not written for want of disk space", path,
                                   queue.size());
        break;
      }
      while (queue.size() > kMaxQueued) {
        log::limited(log::get("history"), spdlog::level::warn, "history queue full",
                     "run history {}: {} changes wait for disk space; the oldest is dropped from the disk's copy", path,
                     queue.size());
        queue.erase(queue.begin() + 1);  // (the one being retried stays first)
      }
      lk.unlock();
      idle.notify_all();
      lk.lock();
      work.wait_for(lk, kFullRetry, [&] { return stop; });
      continue;
    }
    if (waiting_for_space) {
      waiting_for_space = false;
      log::get("history")->info("run history {}: disk space is back; writing again ({} change(s) queued)", path,
                                queue.size());
    }
    lk.unlock();
    idle.notify_all();
  }
  for (Stmt* st : {&insert, &prune, &forget, &begin, &commit, &rollback}) {
    sqlite3_finalize(st->s);
    st->s = nullptr;
  }
  if (db) sqlite3_close_v2(db);
  db = nullptr;
  {
    std::lock_guard lk(mu);
    exited = true;
  }
  idle.notify_all();
}

HistoryStore::HistoryStore(std::string db_path, Options opt) : s_(std::make_shared<Shared>()) {
  s_->path = std::move(db_path);
  s_->opt = std::move(opt);
  if (s_->opt.runs_kept == 0) s_->opt.runs_kept = 1;
  // The thread takes no signal (colocd reads its own from a signalfd on the loop's thread: a
  // SIGTERM delivered here would kill the daemon instead of stopping it).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    s_->thread = std::thread([s = s_] { s->run(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  } catch (const std::exception& e) {  // no thread: no history
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    s_->usable = false;
    s_->loaded = true;
    s_->exited = true;
    log::get("history")->error("run history is off: cannot start its thread: {}", e.what());
  }
}

HistoryStore::~HistoryStore() {
  if (!s_->thread.joinable()) return;
  std::unique_lock lk(s_->mu);
  s_->stop = true;
  s_->work.notify_all();
  if (s_->idle.wait_for(lk, std::chrono::seconds(2), [&] { return s_->exited; })) {
    lk.unlock();
    s_->thread.join();
    return;
  }
  s_->abandon = true;
  const size_t left = s_->queue.size() + (s_->busy ? 1 : 0);
  lk.unlock();
  log::get("history")->warn("{}: the run history's writer did not finish within 2 s; {} change(s) may be lost",
                            s_->path, left);
  s_->thread.detach();  // it holds the shared state: it ends on its own
}

std::optional<Known> HistoryStore::lookup(const Fingerprint& fp) const {
  const std::string id = fp.id();
  std::lock_guard lk(s_->mu);
  if (!s_->usable) return std::nullopt;
  auto it = s_->cache.find(id);
  if (it == s_->cache.end() || it->second.runs.empty()) return std::nullopt;
  return known_of(it->second);
}

void HistoryStore::record(RunRecord run) {
  Op op;
  op.kind = Op::Kind::kInsert;
  op.id = run.fp.id();
  {
    std::lock_guard lk(s_->mu);
    if (!s_->usable || s_->exited) return;
    Entry& e = s_->cache[op.id];
    e.fp = run.fp;
    e.command = run.command;
    e.runs.push_back(Run{run.ended_wall_ms, run.duration_ms, run.exit_status, run.end, run.peak});
    while (e.runs.size() > s_->opt.runs_kept) e.runs.pop_front();
    // The user's fingerprints past the cap: the one whose last run is the oldest goes.
    const uint32_t uid = run.fp.uid;
    Op evict;
    evict.kind = Op::Kind::kForget;
    for (;;) {
      size_t mine = 0;
      auto oldest = s_->cache.end();
      for (auto it = s_->cache.begin(); it != s_->cache.end(); ++it) {
        if (it->second.fp.uid != uid) continue;
        ++mine;
        if (it->first != op.id && !it->second.runs.empty() &&
            (oldest == s_->cache.end() || it->second.runs.back().ended_wall_ms < oldest->second.runs.back().ended_wall_ms))
          oldest = it;
      }
      if (mine <= std::max<size_t>(s_->opt.max_per_user, 1) || oldest == s_->cache.end()) break;
      evict.ids.push_back(oldest->first);
      s_->cache.erase(oldest);
    }
    op.run = std::move(run);
    s_->queue.push_back(std::move(op));
    if (!evict.ids.empty()) s_->queue.push_back(std::move(evict));
  }
  s_->work.notify_one();
}

json HistoryStore::list(uint32_t caller_uid) const {
  json fps = json::array();
  std::vector<std::pair<int64_t, json>> rows;
  {
    std::lock_guard lk(s_->mu);
    if (s_->usable)
      for (const auto& [id, e] : s_->cache) {
        if (e.runs.empty()) continue;
        const Known k = known_of(e);
        const Run& last = e.runs.back();
        json failures = json::object();
        for (const Run& r : e.runs)
          if (r.end != RunEnd::kClean) failures[run_end_name(r.end)] = failures.value(run_end_name(r.end), 0) + 1;
        rows.emplace_back(last.ended_wall_ms,
                          json{{"fingerprint", id},
                               {"uid", e.fp.uid},
                               {"user", ""},
                               {"model", e.fp.model},
                               {"command", caller_uid == 0 || caller_uid == e.fp.uid ? json(e.command) : json(nullptr)},
                               {"runs", k.runs},
                               {"p50", k.p50},
                               {"p95", k.p95},
                               {"estimate", k.estimate},
                               {"lower_bound", k.lower_bound},
                               {"run_ms", k.run_ms},
                               {"last_ended_ms", last.ended_wall_ms},
                               {"last_exit_status", last.exit_status ? json(*last.exit_status) : json(nullptr)},
                               {"last_end", run_end_name(last.end)},
                               {"failures", std::move(failures)}});
      }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::map<uint32_t, std::string> names;  // (looked up outside the lock: NSS may be slow)
  for (auto& [t, j] : rows) {
    const uint32_t uid = j["uid"].get<uint32_t>();
    auto it = names.find(uid);
    if (it == names.end()) it = names.emplace(uid, user_of(uid)).first;
    j["user"] = it->second;
    fps.push_back(std::move(j));
  }
  return json{{"path", s_->path}, {"loaded", loaded()}, {"usable", usable()}, {"fingerprints", fps}};
}

HistoryStore::Forget HistoryStore::forget(uint32_t caller_uid, std::string_view id_or_all, size_t* forgotten) {
  if (forgotten) *forgotten = 0;
  Op op;
  op.kind = Op::Kind::kForget;
  {
    std::lock_guard lk(s_->mu);
    if (!s_->usable) return id_or_all == "all" ? Forget::kOk : Forget::kNotFound;
    if (id_or_all == "all") {
      for (auto it = s_->cache.begin(); it != s_->cache.end();) {
        if (caller_uid == 0 || it->second.fp.uid == caller_uid) {
          op.ids.push_back(it->first);
          it = s_->cache.erase(it);
        } else {
          ++it;
        }
      }
    } else {
      auto it = s_->cache.find(std::string(id_or_all));
      if (it == s_->cache.end()) return Forget::kNotFound;
      if (caller_uid != 0 && it->second.fp.uid != caller_uid) return Forget::kNotAllowed;
      op.ids.push_back(it->first);
      s_->cache.erase(it);
    }
    if (!s_->loaded) s_->early_forgets.emplace_back(caller_uid, std::string(id_or_all));
    if (forgotten) *forgotten = op.ids.size();
    if (!op.ids.empty() && !s_->exited) s_->queue.push_back(std::move(op));
  }
  s_->work.notify_one();
  return Forget::kOk;
}

bool HistoryStore::loaded() const { return s_->loaded; }
bool HistoryStore::usable() const { return s_->usable; }
const std::string& HistoryStore::path() const { return s_->path; }

void HistoryStore::wait_idle() {
  std::unique_lock lk(s_->mu);
  s_->idle.wait(lk, [&] {
    return s_->exited || (s_->loaded && !s_->busy && (s_->queue.empty() || s_->waiting_for_space));
  });
}

}  // namespace coloc::history
