// daemon/history/history_store: colocd's run history in SQLite. Record, lookup, list, forget;
// the last N runs kept; the admission rule (failed runs never lower the estimate); another user's
// command hidden; persistence across a restart; and the robustness the issue asks for: a colocd
// SIGKILLed in the middle of a write, a corrupt, a locked and a read-only database (logged once,
// history off, nothing crashes or hangs).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>

#include "../../../estimator/history.h"
#include "../../support/proc.h"
#include "history/history_store.h"
#include "util/log.h"

using coloc::history::Fingerprint;
using coloc::history::HistoryStore;
using coloc::history::RunEnd;
using coloc::history::RunRecord;
using coloc::test::TempDir;
using nlohmann::json;

namespace {

constexpr uint64_t GiB = 1ull << 30;

Fingerprint fp_of(uint32_t uid, uint64_t cmd = 0xc0ffee, const std::string& model = "NVIDIA H100 80GB HBM3") {
  return Fingerprint{uid, cmd, 0xe17, model};
}

RunRecord run_of(const Fingerprint& fp, uint64_t peak, RunEnd end = RunEnd::kClean, int64_t ended = 1000) {
  RunRecord r;
  r.fp = fp;
  r.command = "python train.py --lr 0.1";
  r.ended_wall_ms = ended;
  r.duration_ms = 60000;
  r.exit_status = end == RunEnd::kClean ? std::optional<int>(0) : std::optional<int>(137);
  r.end = end;
  r.peak = peak;
  return r;
}

/// Lines the "history" logger writes while it lives (beside stderr).
class LogCapture {
 public:
  // Other tests in the same binary may have turned logging off: the logger logs while captured.
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    auto lg = coloc::log::get("history");
    level_ = lg->level();
    lg->set_level(spdlog::level::info);
    lg->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto lg = coloc::log::get("history");
    auto& sinks = lg->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    lg->set_level(level_);
  }
  std::string text() {
    coloc::log::get("history")->flush();
    return out_.str();
  }
  size_t count(const std::string& needle) {
    const std::string t = text();
    size_t n = 0;
    for (size_t at = t.find(needle); at != std::string::npos; at = t.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_ = spdlog::level::info;
};

/// Rows of `db`'s runs table, and its integrity_check verdict, through a connection of our own.
struct DbFacts {
  int rows = -1;
  std::string integrity;
};
DbFacts facts_of(const std::string& db) {
  DbFacts f;
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      f.integrity = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    s = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT count(*) FROM runs", -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      f.rows = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
  }
  sqlite3_close(h);
  return f;
}

/// A store on `db` holding `n` clean runs of `fp` (written, then closed).
void seed(const std::string& db, const Fingerprint& fp, int n, uint64_t peak = 10 * GiB) {
  HistoryStore s(db);
  for (int i = 0; i < n; ++i) s.record(run_of(fp, peak, RunEnd::kClean, 1000 + i));
  s.wait_idle();
  REQUIRE(s.usable());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("history store: fingerprint ids are 16 hex digits of all four fields") {
  const Fingerprint a = fp_of(1000);
  CHECK(a.id().size() == 16);
  CHECK(a.id().find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a.id() == fp_of(1000).id());
  CHECK(a.id() != fp_of(1001).id());
  CHECK(a.id() != fp_of(1000, 0xc0ffef).id());
  CHECK(a.id() != fp_of(1000, 0xc0ffee, "NVIDIA A100").id());
  Fingerprint e = a;
  e.env_hash ^= 1;
  CHECK(a.id() != e.id());
}

TEST_CASE("history store: record, lookup, list, forget; the estimate follows the rule") {
  TempDir dir("history");
  HistoryStore s(dir / "history.db");
  s.wait_idle();
  REQUIRE(s.loaded());
  REQUIRE(s.usable());
  const Fingerprint mine = fp_of(1000), roots = fp_of(0);
  CHECK_FALSE(s.lookup(mine).has_value());

  s.record(run_of(mine, 20 * GiB, RunEnd::kClean, 1000));
  // The cache at once: no waiting for the disk.
  auto k = s.lookup(mine);
  REQUIRE(k.has_value());
  CHECK(k->runs == 1);
  CHECK(k->p50 == 20 * GiB);
  CHECK(k->estimate == *coloc::est::history_estimate(std::vector<coloc::est::PastRun>{{20 * GiB, false}}));
  // A killed run with a small peak does not lower it; an OOM above every clean run raises it.
  s.record(run_of(mine, 2 * GiB, RunEnd::kKilled, 2000));
  CHECK(s.lookup(mine)->estimate == k->estimate);
  CHECK(s.lookup(mine)->runs == 2);
  s.record(run_of(mine, 30 * GiB, RunEnd::kOom, 3000));
  CHECK(s.lookup(mine)->estimate ==
        *coloc::est::history_estimate(std::vector<coloc::est::PastRun>{{30 * GiB, true}}));
  CHECK(s.lookup(mine)->p95 == 30 * GiB);
  CHECK_FALSE(s.lookup(fp_of(1000, 1)).has_value());  // another command

  s.record(run_of(roots, 5 * GiB, RunEnd::kClean, 500));
  // The list: newest first; the command only to its owner and root.
  json l = s.list(1000);
  CHECK(l["usable"] == true);
  CHECK(l["loaded"] == true);
  CHECK(l["path"] == dir / "history.db");
  REQUIRE(l["fingerprints"].size() == 2);
  const json& first = l["fingerprints"][0];
  CHECK(first["fingerprint"] == mine.id());
  CHECK(first["uid"] == 1000);
  CHECK(first["model"] == "NVIDIA H100 80GB HBM3");
  CHECK(first["command"] == "python train.py --lr 0.1");
  CHECK(first["runs"] == 3);
  CHECK(first["last_end"] == "oom");
  CHECK(first["last_exit_status"] == 137);
  CHECK(first["last_ended_ms"] == 3000);
  CHECK(first["estimate"] == s.lookup(mine)->estimate);
  CHECK(l["fingerprints"][1]["fingerprint"] == roots.id());
  CHECK(l["fingerprints"][1]["user"] == "root");
  CHECK(l["fingerprints"][1]["command"].is_null());  // root's, seen by uid 1000
  json as_root = s.list(0);
  CHECK(as_root["fingerprints"][0]["command"] == "python train.py --lr 0.1");
  CHECK(as_root["fingerprints"][1]["command"] == "python train.py --lr 0.1");
  CHECK(s.list(1001)["fingerprints"][0]["command"].is_null());

  // Forget: unknown, another user's, one's own; "all" takes only the caller's (root: every one).
  size_t n = 99;
  CHECK(s.forget(1000, "0123456789abcdef", &n) == HistoryStore::Forget::kNotFound);
  CHECK(n == 0);
  CHECK(s.forget(1000, roots.id(), &n) == HistoryStore::Forget::kNotAllowed);
  CHECK(s.forget(1001, mine.id()) == HistoryStore::Forget::kNotAllowed);
  CHECK(s.forget(1000, "all", &n) == HistoryStore::Forget::kOk);
  CHECK(n == 1);
  CHECK_FALSE(s.lookup(mine).has_value());
  CHECK(s.lookup(roots).has_value());
  s.record(run_of(mine, 1 * GiB));
  CHECK(s.forget(0, mine.id(), &n) == HistoryStore::Forget::kOk);  // root: anyone's
  CHECK(n == 1);
  CHECK(s.forget(0, "all", &n) == HistoryStore::Forget::kOk);
  CHECK(n == 1);
  CHECK(s.list(0)["fingerprints"].empty());
  s.wait_idle();
  CHECK(facts_of(dir / "history.db").rows == 0);  // gone from the disk too
}

TEST_CASE("history store: the expected run is the median time from admission to end of the clean runs; failed runs alone give a lower bound") {
  TempDir dir("history");
  HistoryStore s(dir / "history.db");
  s.wait_idle();
  const Fingerprint fp = fp_of(1000);
  auto with_run = [&](RunEnd end, uint64_t ms) {
    RunRecord r = run_of(fp, 8 * GiB, end);
    r.duration_ms = ms;
    return r;
  };
  s.record(with_run(RunEnd::kOom, 5'000));
  auto k = s.lookup(fp);
  REQUIRE(k.has_value());
  CHECK(k->run_ms == 0);  // no clean run: no expected end
  CHECK(k->lower_bound);
  s.record(with_run(RunEnd::kClean, 90'000));
  s.record(with_run(RunEnd::kKilled, 1'000));
  s.record(with_run(RunEnd::kClean, 30'000));
  s.record(with_run(RunEnd::kClean, 60'000));
  k = s.lookup(fp);
  CHECK(k->run_ms == 60'000);  // of 30, 60, 90 s: the failed runs' are left out
  CHECK_FALSE(k->lower_bound);
  const auto row = s.list(1000)["fingerprints"][0];
  CHECK(row["run_ms"] == 60'000);
  CHECK(row["lower_bound"] == false);
  // After a restart, from the disk.
  s.wait_idle();
  HistoryStore again(dir / "history.db");
  again.wait_idle();
  REQUIRE(again.lookup(fp).has_value());
  CHECK(again.lookup(fp)->run_ms == 60'000);
}

TEST_CASE("history store: each failed run keeps its cause (own limit, device, kill, cancel), in the list and across a restart") {
  TempDir dir("history");
  const Fingerprint fp = fp_of(1000);
  {
    HistoryStore s(dir / "history.db");
    s.wait_idle();
    for (RunEnd e : {RunEnd::kOomLimit, RunEnd::kOomLimit, RunEnd::kOomDevice, RunEnd::kCancelled, RunEnd::kClean,
                     RunEnd::kKilled})
      s.record(run_of(fp, 8 * GiB, e));
    const json row = s.list(1000)["fingerprints"][0];
    CHECK(row["failures"] == json{{"oom-limit", 2}, {"oom-device", 1}, {"cancelled", 1}, {"killed", 1}});
    CHECK(row["last_end"] == "killed");
    s.wait_idle();
  }
  HistoryStore again(dir / "history.db");
  again.wait_idle();
  const json row = again.list(1000)["fingerprints"][0];
  CHECK(row["failures"] == json{{"oom-limit", 2}, {"oom-device", 1}, {"cancelled", 1}, {"killed", 1}});
  CHECK(again.lookup(fp)->runs == 6);
}

TEST_CASE("history store: only the last runs_kept runs are kept, in the cache and on disk") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(1000), g = fp_of(1000, 2);
  {
    HistoryStore::Options o;
    o.runs_kept = 3;
    HistoryStore s(db, o);
    // Old large peaks, then small ones: the old ones drop out of the estimate.
    s.record(run_of(f, 50 * GiB, RunEnd::kClean, 1));
    s.record(run_of(f, 50 * GiB, RunEnd::kClean, 2));
    for (int i = 0; i < 5; ++i) s.record(run_of(f, 10 * GiB, RunEnd::kClean, 10 + i));
    s.record(run_of(g, 7 * GiB));
    CHECK(s.lookup(f)->runs == 3);
    CHECK(s.lookup(f)->p95 == 10 * GiB);
    s.wait_idle();
  }
  CHECK(facts_of(db).rows == 4);  // 3 of f, 1 of g
  HistoryStore::Options o;
  o.runs_kept = 3;
  HistoryStore s(db, o);
  s.wait_idle();
  REQUIRE(s.lookup(f).has_value());
  CHECK(s.lookup(f)->runs == 3);
  CHECK(s.lookup(f)->p95 == 10 * GiB);
  CHECK(s.lookup(g)->runs == 1);
}

TEST_CASE("history store: a user's fingerprints are capped; the one run longest ago goes first") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  HistoryStore::Options o;
  o.max_per_user = 3;
  {
    HistoryStore s(db, o);
    for (uint64_t i = 0; i < 5; ++i) s.record(run_of(fp_of(1000, i), 10 * GiB, RunEnd::kClean, int64_t(100 + i)));
    s.record(run_of(fp_of(2000, 9), 10 * GiB));  // another user's: not counted against the first's
    CHECK_FALSE(s.lookup(fp_of(1000, 0)).has_value());
    CHECK_FALSE(s.lookup(fp_of(1000, 1)).has_value());
    for (uint64_t i = 2; i < 5; ++i) CHECK(s.lookup(fp_of(1000, i)).has_value());
    CHECK(s.lookup(fp_of(2000, 9)).has_value());
    s.wait_idle();
  }
  CHECK(facts_of(db).rows == 4);  // gone from the disk too
}

TEST_CASE("history store: persists across a restart, records made before the load come after the old runs") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(1000);
  {
    HistoryStore s(db);
    s.record(run_of(f, 12 * GiB, RunEnd::kClean, 100));
    s.record(run_of(f, 3 * GiB, RunEnd::kKilled, 200));
  }  // (the destructor writes what is queued)
  HistoryStore s(db);
  s.record(run_of(f, 11 * GiB, RunEnd::kClean, 300));  // possibly before the worker has loaded
  s.wait_idle();
  REQUIRE(s.usable());
  auto k = s.lookup(f);
  REQUIRE(k.has_value());
  CHECK(k->runs == 3);
  json l = s.list(1000);
  REQUIRE(l["fingerprints"].size() == 1);
  CHECK(l["fingerprints"][0]["last_ended_ms"] == 300);
  CHECK(l["fingerprints"][0]["last_end"] == "clean");
  CHECK(l["fingerprints"][0]["last_exit_status"] == 0);
  CHECK(k->estimate == *coloc::est::history_estimate(
                           std::vector<coloc::est::PastRun>{{12 * GiB, false}, {3 * GiB, true}, {11 * GiB, false}}));
}

TEST_CASE("history store: a SIGKILL in the middle of a write loses only that run") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(1000);
  seed(db, f, 3);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(p[0]);
    HistoryStore::Options o;
    const int w = p[1];
    o.on_write_begun = [w] {
      (void)!::write(w, "x", 1);
      for (;;) ::pause();  // inside the transaction, after the INSERT, until killed
    };
    HistoryStore s(db, o);
    s.record(run_of(f, 99 * GiB, RunEnd::kClean, 5000));
    for (;;) ::pause();
  }
  ::close(p[1]);
  pollfd pfd{p[0], POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 10000) == 1);
  char c = 0;
  REQUIRE(::read(p[0], &c, 1) == 1);
  ::close(p[0]);
  ::kill(child, SIGKILL);
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  REQUIRE(WIFSIGNALED(st));
  CHECK(coloc::test::file_exists(db + "-wal"));  // the kill left the write-ahead log behind

  // The earlier runs are intact, the half-written one is not there, the file checks ok.
  DbFacts facts = facts_of(db);
  CHECK(facts.integrity == "ok");
  CHECK(facts.rows == 3);
  HistoryStore s(db);
  s.wait_idle();
  REQUIRE(s.usable());
  REQUIRE(s.lookup(f).has_value());
  CHECK(s.lookup(f)->runs == 3);
  CHECK(s.lookup(f)->p95 == 10 * GiB);
  s.record(run_of(f, 11 * GiB, RunEnd::kClean, 6000));
  s.wait_idle();
  CHECK(s.usable());
  CHECK(s.lookup(f)->runs == 4);
  CHECK(facts_of(db).rows == 4);
}

TEST_CASE("history store: a corrupt database is logged once and ignored; the file is left alone") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(1000);
  seed(db, f, 2);
  std::string garbage(16384, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 131 + 7) & 0xff);
  coloc::test::write_file(db, garbage);
  ::unlink((db + "-wal").c_str());
  ::unlink((db + "-shm").c_str());
  LogCapture log;
  {
    HistoryStore s(db);
    s.wait_idle();
    CHECK(s.loaded());
    CHECK_FALSE(s.usable());
    CHECK_FALSE(s.lookup(f).has_value());
    for (int i = 0; i < 3; ++i) s.record(run_of(f, 1 * GiB));  // accepted, dropped
    CHECK_FALSE(s.lookup(f).has_value());
    CHECK(s.forget(1000, "all") == HistoryStore::Forget::kOk);
    CHECK(s.forget(1000, f.id()) == HistoryStore::Forget::kNotFound);
    json l = s.list(0);
    CHECK(l["usable"] == false);
    CHECK(l["fingerprints"].empty());
    s.wait_idle();
  }
  CHECK_MESSAGE(log.count("run history is off") == 1, log.text());
  CHECK_MESSAGE(log.text().find(db) != std::string::npos, log.text());
  CHECK(coloc::test::read_file(db) == garbage);  // nothing else is lost: not truncated, not replaced
}

TEST_CASE("history store: a locked database neither stalls the caller nor hangs the worker") {
  TempDir dir("history");
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(1000);
  LogCapture log;
  // A busy timeout of 2 s: a caller that waited for the worker would take at least that long, so
  // "returns at once" can be checked with a bound (1 s) that a loaded machine cannot miss.
  coloc::history::HistoryOptions opts;
  opts.busy_timeout_ms = 2000;

  SUBCASE("a WAL database whose write lock another connection holds: loads, then the first write gives up") {
    seed(db, f, 2);
    sqlite3* other = nullptr;
    REQUIRE(sqlite3_open(db.c_str(), &other) == SQLITE_OK);
    REQUIRE(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK);
    const auto t0 = std::chrono::steady_clock::now();
    {
      HistoryStore s(db, opts);
      s.record(run_of(f, 20 * GiB));  // never waits for the worker
      CHECK(seconds_since(t0) < 1.0);
      s.wait_idle();
      CHECK(seconds_since(t0) >= 1.9);  // the worker waited out the busy timeout, the caller did not
      CHECK(seconds_since(t0) < 20.0);  // and it bounds the wait
      CHECK(s.loaded());
      CHECK_FALSE(s.usable());  // (and stays off once the lock goes: until restart)
      CHECK_FALSE(s.lookup(f).has_value());
      sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
      s.record(run_of(f, 20 * GiB));
      s.wait_idle();
      CHECK_FALSE(s.usable());
    }
    sqlite3_close(other);
    CHECK(log.count("run history is off") == 1);
    CHECK(facts_of(db).rows == 2);  // the seeded runs are still there
    HistoryStore again(db);  // a restart after the lock went: history is back
    again.wait_idle();
    CHECK(again.usable());
    CHECK(again.lookup(f)->runs == 2);
  }
  SUBCASE("a database locked exclusively before WAL mode: the open gives up") {
    sqlite3* other = nullptr;
    REQUIRE(sqlite3_open(db.c_str(), &other) == SQLITE_OK);
    REQUIRE(sqlite3_exec(other, "CREATE TABLE t(x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    const auto t0 = std::chrono::steady_clock::now();
    {
      HistoryStore s(db, opts);
      CHECK(seconds_since(t0) < 1.0);
      CHECK_FALSE(s.lookup(f).has_value());
      s.record(run_of(f, 20 * GiB));
      s.wait_idle();
      CHECK(seconds_since(t0) < 20.0);
      CHECK(s.loaded());
      CHECK_FALSE(s.usable());
      CHECK_FALSE(s.lookup(f).has_value());
    }
    sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    CHECK_MESSAGE(log.count("run history is off") == 1, log.text());
  }
}

TEST_CASE("history store: a read-only database (colocd without write permission) is logged once and ignored") {
  struct passwd* pw = ::getpwnam("nobody");
  if (::geteuid() != 0 || !pw) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  TempDir dir("history");
  ::chmod(dir.path().c_str(), 0755);
  const std::string db = dir / "history.db";
  const Fingerprint f = fp_of(pw->pw_uid);
  seed(db, f, 2);
  ::chmod(db.c_str(), 0644);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Exit codes: 0 as expected; 10+ which check failed.
    if (::setgroups(0, nullptr) != 0 || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0) ::_exit(9);
    int code = 0;
    {
      LogCapture log;
      {
        HistoryStore s(db);
        s.wait_idle();
        if (!s.loaded()) code = 10;
        else if (s.usable()) code = 11;
        else if (s.lookup(f).has_value()) code = 12;
        s.record(run_of(f, 1 * GiB));
        s.wait_idle();
        if (!code && s.lookup(f).has_value()) code = 13;
        if (!code && s.list(pw->pw_uid)["usable"] != false) code = 14;
      }
      if (!code && log.count("run history is off") != 1) code = 15;
      if (!code && log.text().find("read-only") == std::string::npos) code = 16;
    }
    ::_exit(code);
  }
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(facts_of(db).rows == 2);  // untouched
}

}  // TEST_SUITE
