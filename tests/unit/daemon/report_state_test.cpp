// Reports across a daemon restart: the timeline's and the job recorder's saved state round-trip
// exactly, bad saved state is refused with the field named, a job that ended while the daemon was
// away is reported as such, the recorder stays bounded, and the job state files are written whole.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "engine/resume_state.h"
#include "report/job_recorder.h"
#include "report/job_state_store.h"
#include "report/timeline.h"
#include "../../support/proc.h"

using namespace coloc::report;
using coloc::broker::Event;
using coloc::broker::Reason;
using coloc::broker::Uuid;
using nlohmann::json;

namespace {
Uuid gpu(uint8_t n) {
  Uuid u;
  u.bytes.fill(0x22);
  u.bytes[15] = n;
  return u;
}
constexpr uint64_t kSec = 1'000'000'000;
constexpr uint64_t GiB = 1ull << 30;

/// A recorder with a bit of everything: samples, a closed and an open wait, an OOM, a driver
/// OOM, a departed process's counters, and two processes.
JobRecorder busy_recorder() {
  JobRecorder r(7, {1000, "train-x1"}, "alice", "python train.py", 0xabc, "high", 100 * kSec, 1700000000000);
  r.add_process(4242);
  r.add_process(4243);
  DeviceSample s;
  s.capacity = 80 * GiB;
  s.limit = 20 * GiB;
  s.reservation = 8 * GiB;
  for (uint64_t i = 0; i < 3000; ++i) {  // enough to have merged points
    s.in_use = (i % 7) * GiB;
    s.live.allocs = i;
    s.live.launches = 3 * i;
    r.sample(gpu(1), 100 * kSec + i * 10'000'000, s);
  }
  Event e{};
  e.device = gpu(1);
  e.kind = Event::Kind::kAdmitted;
  e.at = 101 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kWaitBegin;
  e.at = 102 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kWaitEnd;
  e.at = 104 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kRefused;
  e.reason = Reason::kOwnLimit;
  e.bytes = 21 * GiB;
  e.in_use = 6 * GiB;
  e.at = 105 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kDriverOom;
  r.on_event(e);
  e.kind = Event::Kind::kWaitBegin;  // open
  e.reason = Reason::kNone;
  e.at = 120 * kSec;
  r.on_event(e);
  Counters gone;
  gone.allocs = 5;
  gone.launches = 100;
  r.fold(gpu(1), gone, 7 * GiB);
  r.process_exited({4243, 1, std::nullopt, "goodbye"});
  return r;
}
}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("timeline: a restored state continues the same curve") {
  Timeline a(50), b(50);
  for (uint64_t i = 0; i < 777; ++i) a.add(i * 1000, (i * 37) % 11);
  std::string why;
  REQUIRE(b.restore(json::parse(a.state().dump()), &why));
  for (uint64_t i = 777; i < 2000; ++i) {
    a.add(i * 1000, (i * 37) % 11);
    b.add(i * 1000, (i * 37) % 11);
  }
  auto pa = a.points(), pb = b.points();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CHECK(pa[i].t_ns == pb[i].t_ns);
    CHECK(pa[i].bytes == pb[i].bytes);
  }
  CHECK(a.peak() == b.peak());

  json bad = a.state();
  bad["t_ns"][1] = 0;  // out of time order
  Timeline c(50);
  c.add(5, 5);
  CHECK_FALSE(c.restore(bad, &why));
  CHECK(why.find("point 1") != std::string::npos);
  CHECK(c.points().back().bytes == 5);  // unchanged
  bad = a.state();
  bad["t_ns"] = json::array();
  bad["bytes"] = json::array();
  for (int i = 0; i < 100; ++i) {
    bad["t_ns"].push_back(i);
    bad["bytes"].push_back(i);
  }
  CHECK_FALSE(c.restore(bad, &why));  // over its bound (2 * 50)
  CHECK(why.find("more than") != std::string::npos);
}

TEST_CASE("job recorder: the saved state restores the same report, and the job goes on") {
  JobRecorder r = busy_recorder();
  const uint64_t now = 130 * kSec;
  auto restored = JobRecorder::from_state(json::parse(r.state().dump()), 9);
  REQUIRE_MESSAGE(restored.ok(), restored.error().message());
  JobRecorder& q = restored.value();
  CHECK(q.serial() == 9);
  CHECK(q.key() == r.key());
  CHECK(q.to_json(now) == r.to_json(now));

  // The daemon restarted, having last seen the job at 125 s: the open wait stays open until its
  // request comes back; one that does not closes there, marked; the rest continues.
  q.daemon_restarted(125 * kSec);
  json j = q.to_json(now);
  auto waits = j["devices"][0]["waits"];
  REQUIRE(waits.size() == 2);
  CHECK(waits[1]["outcome"] == "waiting");
  CHECK(waits[1]["across_restart"] == true);
  CHECK(waits[0]["across_restart"] == false);
  q.close_restart_waits();
  j = q.to_json(now);
  waits = j["devices"][0]["waits"];
  CHECK(waits[1]["outcome"] == "daemon-restart");
  CHECK(waits[1]["end_s"].get<double>() == doctest::Approx(25.0));
  CHECK(j["start_unix_ms"] == 1700000000000);
  DeviceSample s;
  s.capacity = 80 * GiB;
  s.in_use = 9 * GiB;
  q.sample(gpu(1), 140 * kSec, s);
  q.process_exited({4242, 0, std::nullopt, "goodbye"});
  q.finish(141 * kSec, 1700000041000);
  j = q.to_json(200 * kSec);
  CHECK(j["exit_status"] == 0);
  CHECK(j["duration_s"].get<double>() == doctest::Approx(41.0));
  auto d = j["devices"][0];
  CHECK(d["peak"] == 9 * GiB);
  CHECK(d["timeline"]["t_s"][0].get<double>() == doctest::Approx(0.0));  // from before the restart
  CHECK(d["driver_ooms"] == 1);
  CHECK(d["oom_events"].size() == 1);
  CHECK(d["admitted_s"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("job recorder: bad saved state is an error naming the field") {
  json good = busy_recorder().state();
  struct Case {
    const char* what;
    std::function<void(json&)> spoil;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"missing", [](json& j) { j.erase("mono_start"); }, "recorder.mono_start is missing"},
      {"mistyped", [](json& j) { j["command"] = 5; }, "recorder.command is not a string"},
      {"negative", [](json& j) { j["devices"][0]["peak"] = -1; }, "recorder.devices[0].peak"},
      {"uuid", [](json& j) { j["devices"][0]["uuid"] = "GPU-1"; }, "recorder.devices[0].uuid"},
      {"timeline", [](json& j) { j["devices"][0]["timeline"]["bytes"].push_back(1); }, "recorder.devices[0].timeline"},
      {"reason", [](json& j) { j["devices"][0]["ooms"][0][1] = 99; }, "recorder.devices[0].ooms[0]"},
      {"process", [](json& j) { j["processes"][0] = "x"; }, "recorder.processes[0]"},
      {"not an object", [](json& j) { j = json::array(); }, "recorder.uid is missing"},
      {"counters", [](json& j) { j["devices"][0]["live"].push_back(1); }, "recorder.devices[0].live is not an array of 6, 14 or 17"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    json j = good;
    c.spoil(j);
    auto r = JobRecorder::from_state(j, 1);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error().message().find(c.expect) != std::string::npos, r.error().message());
  }
}

TEST_CASE("job recorder: a job that ended while the daemon was away keeps what was seen, status unknown") {
  JobRecorder r = busy_recorder();
  // Last seen alive at +30 s; the new daemon started (and found it gone) at +34.5 s.
  r.finish_away(130 * kSec, 1700000030000, 1700000034500);
  json j = r.to_json(500 * kSec);
  CHECK(j["complete"] == true);
  CHECK(j["ended_while_daemon_away"] == true);
  CHECK(j["exit_status"].is_null());
  CHECK(j["exit_signal"].is_null());
  CHECK(j["end_unix_ms"] == 1700000030000);
  CHECK(j["duration_s"].get<double>() == doctest::Approx(30.0));
  // Both bounds of the end, and of the duration.
  CHECK(j["ended_after_unix_ms"] == 1700000030000);
  CHECK(j["ended_after"] == "2023-11-14T22:13:50.000Z");
  CHECK(j["ended_before_unix_ms"] == 1700000034500);
  CHECK(j["ended_before"] == "2023-11-14T22:13:54.500Z");
  CHECK(j["duration_max_s"].get<double>() == doctest::Approx(34.5));
  REQUIRE(j["processes"].size() == 2);
  CHECK(j["processes"][0]["noticed_by"] == "daemon-away");
  CHECK(j["processes"][1]["noticed_by"] == "goodbye");  // known before: kept
  auto d = j["devices"][0];
  CHECK(d["allocations"] == 2999 + 5);  // the last live sample plus the departed process
  CHECK(d["kernel_launches"] == 3 * 2999 + 100);
  CHECK(d["waits"][1]["outcome"] == "daemon-restart");
  json live = busy_recorder().to_json(1);
  CHECK(live["ended_while_daemon_away"] == false);
  for (const char* k : {"ended_after", "ended_before", "ended_after_unix_ms", "ended_before_unix_ms", "duration_max_s"})
    CHECK(live[k].is_null());
  // A restart time before the last sighting (a clock step) does not make the range negative.
  JobRecorder odd = busy_recorder();
  odd.finish_away(130 * kSec, 1700000030000, 1700000020000);
  CHECK(odd.to_json(1)["ended_before_unix_ms"] == 1700000030000);
}

TEST_CASE("job recorder: a wait open across a restart is one row when its request comes back, and adds up") {
  auto rec = [] {
    JobRecorder r(3, {0, "w"}, "root", "x", 0, "normal", 10 * kSec, 1700000000000);
    Event e{};
    e.device = gpu(3);
    e.admission = true;
    e.kind = Event::Kind::kWaitBegin;
    e.at = 12 * kSec;  // +2 s
    r.on_event(e);
    return r;
  };
  Event e{};
  e.device = gpu(3);
  e.admission = true;

  SUBCASE("parked again after the restart: continued, ends when granted") {
    JobRecorder r = rec();
    r.daemon_restarted(15 * kSec);  // last seen at +5 s
    // Across a second daemon's saved state too.
    auto back = JobRecorder::from_state(json::parse(r.state().dump()), 3);
    REQUIRE(back.ok());
    JobRecorder& q = back.value();
    e.kind = Event::Kind::kWaitBegin;  // the client re-sent its Attach at +8 s
    e.at = 18 * kSec;
    q.on_event(e);
    q.close_restart_waits();  // nothing to close: it came back
    e.kind = Event::Kind::kWaitEnd;
    e.at = 20 * kSec;
    q.on_event(e);
    e.kind = Event::Kind::kAdmitted;
    q.on_event(e);
    json d = q.to_json(30 * kSec)["devices"][0];
    REQUIRE(d["waits"].size() == 1);  // one row, not one per daemon
    CHECK(d["waits"][0]["start_s"].get<double>() == doctest::Approx(2.0));
    CHECK(d["waits"][0]["end_s"].get<double>() == doctest::Approx(10.0));
    CHECK(d["waits"][0]["outcome"] == "granted");
    CHECK(d["waits"][0]["across_restart"] == true);
    CHECK(d["wait_admission_s"].get<double>() == doctest::Approx(8.0));  // the rows add up to the column
  }
  SUBCASE("granted at once after the restart (memory freed meanwhile): ends at the admission") {
    JobRecorder r = rec();
    r.daemon_restarted(15 * kSec);
    e.kind = Event::Kind::kAdmitted;
    e.at = 17 * kSec;
    r.on_event(e);
    json d = r.to_json(30 * kSec)["devices"][0];
    REQUIRE(d["waits"].size() == 1);
    CHECK(d["waits"][0]["end_s"].get<double>() == doctest::Approx(7.0));
    CHECK(d["waits"][0]["outcome"] == "granted");
    CHECK(d["wait_admission_s"].get<double>() == doctest::Approx(5.0));
  }
  SUBCASE("refused at once after the restart: ends at the refusal, with its reason") {
    JobRecorder r = rec();
    r.daemon_restarted(15 * kSec);
    e.kind = Event::Kind::kRefused;
    e.reason = Reason::kDeviceFull;
    e.at = 16 * kSec;
    r.on_event(e);
    json d = r.to_json(30 * kSec)["devices"][0];
    REQUIRE(d["waits"].size() == 1);
    CHECK(d["waits"][0]["end_s"].get<double>() == doctest::Approx(6.0));
    CHECK(d["waits"][0]["outcome"] == "device-full");
  }
  SUBCASE("its request never came back: closed where the daemon last saw it") {
    JobRecorder r = rec();
    r.daemon_restarted(15 * kSec);
    r.close_restart_waits();
    e.kind = Event::Kind::kWaitBegin;  // a later, new wait is a row of its own
    e.at = 25 * kSec;
    r.on_event(e);
    json d = r.to_json(27 * kSec)["devices"][0];
    REQUIRE(d["waits"].size() == 2);
    CHECK(d["waits"][0]["end_s"].get<double>() == doctest::Approx(5.0));
    CHECK(d["waits"][0]["outcome"] == "daemon-restart");
    CHECK(d["waits"][1]["start_s"].get<double>() == doctest::Approx(15.0));
    CHECK(d["waits"][1]["outcome"] == "waiting");
    CHECK(d["wait_admission_s"].get<double>() == doctest::Approx(3.0 + 2.0));
  }
  SUBCASE("the job ended while the daemon was away: closed at the last sighting") {
    JobRecorder r = rec();
    r.finish_away(15 * kSec, 1700000005000, 1700000009000);
    json d = r.to_json(30 * kSec)["devices"][0];
    REQUIRE(d["waits"].size() == 1);
    CHECK(d["waits"][0]["end_s"].get<double>() == doctest::Approx(5.0));
    CHECK(d["waits"][0]["outcome"] == "daemon-restart");
  }
  SUBCASE("a state of an older daemon (five fields a wait) still loads") {
    JobRecorder r = rec();
    json st = r.state();
    for (json& w : st["devices"][0]["waits"]) w.erase(w.begin() + 5, w.end());
    st.erase("limit");
    st["devices"][0].erase("sampled");
    auto back = JobRecorder::from_state(st, 3);
    REQUIRE_MESSAGE(back.ok(), back.error().message());
    CHECK(back.value().to_json(30 * kSec)["devices"][0]["waits"].size() == 1);
  }
}

TEST_CASE("job recorder: before admission the report shows the job's limit and the device's capacity") {
  JobRecorder r(4, {0, "early"}, "root", "x", 0, "normal", 0, 1700000000000);
  r.set_limit(14 * GiB);
  r.set_capacity(gpu(4), 80 * GiB);
  Event e{};
  e.device = gpu(4);
  e.admission = true;
  e.kind = Event::Kind::kWaitBegin;
  e.at = kSec;
  r.on_event(e);
  json j = r.to_json(3 * kSec);
  CHECK(j["limit"] == 14 * GiB);
  REQUIRE(j["devices"].size() == 1);
  CHECK(j["devices"][0]["limit"] == 14 * GiB);  // not null ("none") while waiting
  CHECK(j["devices"][0]["capacity"] == 80 * GiB);
  CHECK(j["devices"][0]["reservation"] == 0);   // nothing is held for it yet
  // Cancelled (Ctrl-C) during admission: still the job's limit.
  e.kind = Event::Kind::kWaitEnd;
  e.reason = Reason::kCancelled;
  e.at = 2 * kSec;
  r.on_event(e);
  // Saved and restored (a restart meanwhile) it is the same.
  auto back = JobRecorder::from_state(json::parse(r.state().dump()), 4);
  REQUIRE(back.ok());
  CHECK(back.value().to_json(3 * kSec) == r.to_json(3 * kSec));
  r.finish(2 * kSec, 1700000002000);
  j = r.to_json(3 * kSec);
  CHECK(j["devices"][0]["limit"] == 14 * GiB);
  CHECK(j["devices"][0]["waits"][0]["outcome"] == "cancelled");
  // Once admitted, the samples say (a `coloc set` lowered it meanwhile).
  JobRecorder s(5, {0, "later"}, "root", "x", 0, "normal", 0, 0);
  s.set_limit(14 * GiB);
  DeviceSample ds;
  ds.capacity = 80 * GiB;
  ds.limit = 10 * GiB;
  ds.reservation = 10 * GiB;
  s.sample(gpu(4), kSec, ds);
  s.set_capacity(gpu(4), 1);  // ignored: the samples know better
  CHECK(s.to_json(2 * kSec)["devices"][0]["limit"] == 10 * GiB);
  CHECK(s.to_json(2 * kSec)["devices"][0]["capacity"] == 80 * GiB);
}

TEST_CASE("job recorder: waits, OOM events and processes stay bounded; the waiting time still adds up") {
  JobRecorder r(1, {0, "many"}, "root", "x", 0, "normal", 0, 0);
  Event e{};
  e.device = gpu(2);
  const size_t n = JobRecorder::kMaxListed + 500;
  for (size_t i = 0; i < n; ++i) {
    e.kind = Event::Kind::kWaitBegin;
    e.at = i * kSec;
    r.on_event(e);
    e.kind = Event::Kind::kWaitEnd;
    e.at = i * kSec + kSec / 2;
    r.on_event(e);
    e.kind = Event::Kind::kRefused;
    e.reason = Reason::kTimeout;
    r.on_event(e);
  }
  for (int pid = 1; pid <= int(n); ++pid) {
    r.add_process(pid);
    r.process_exited({pid, 0, std::nullopt, "goodbye"});
  }
  json j = r.to_json(n * kSec);
  auto d = j["devices"][0];
  CHECK(d["waits"].size() == JobRecorder::kMaxListed);
  CHECK(d["waits_omitted"] == 500);
  CHECK(d["oom_events"].size() == JobRecorder::kMaxListed);
  CHECK(d["oom_events_omitted"] == 500);
  CHECK(d["wait_memory_s"].get<double>() == doctest::Approx(double(n) / 2));
  CHECK(j["processes"].size() == JobRecorder::kMaxListed);
  CHECK(j["processes"][0]["pid"] == 1);  // the first (the job's status) stays
  CHECK(j["processes_omitted"] == 500);
  CHECK(r.state().dump().size() < 512 * 1024);
  auto back = JobRecorder::from_state(r.state(), 1);
  REQUIRE(back.ok());
  CHECK(back.value().to_json(n * kSec) == j);
}

TEST_CASE("job state store: saved whole, loaded back; a corrupt file is named, kept aside, and costs nothing else") {
  coloc::test::TempDir tmp("coloc-jobstate");
  JobStateStore store(tmp / "jobs");
  REQUIRE(store.prepare().ok());
  struct stat st;
  REQUIRE(::stat((tmp / "jobs").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  SavedJob a;
  a.key = {1000, "../weird id"};
  a.limit = 4 * GiB;
  a.priority = "high";
  a.paused = "admin";
  a.pids = {{4242, 123456}, {4243, 123999}};
  a.saved_mono = 130 * kSec;
  a.saved_unix_ms = 1700000030000;
  a.boot_id = "b00t";
  a.recorder = busy_recorder().state();
  a.recorder["uid"] = 1000;
  a.recorder["job"] = "../weird id";
  REQUIRE(store.save(a).ok());
  const std::string path = store.path(a.key);
  CHECK(std::filesystem::path(path).parent_path() == tmp / "jobs");  // the id cannot escape
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  SavedJob b = a;
  b.key = {0, "other"};
  b.limit = coloc::broker::kNoLimit;
  b.recorder["uid"] = 0;
  b.recorder["job"] = "other";
  REQUIRE(store.save(b).ok());
  a.limit = 6 * GiB;  // saved again: replaced
  REQUIRE(store.save(a).ok());
  CHECK_FALSE(coloc::test::file_exists(path + ".tmp"));

  coloc::test::write_file(tmp / "jobs/0.broken.0000000000000000.json", "{\"format\": 1, \"uid\": ");
  coloc::test::write_file(tmp / "jobs/0.half.0000000000000000.json.tmp", "{");  // a save cut short
  auto loaded = store.load();
  REQUIRE(loaded.jobs.size() == 2);
  REQUIRE(loaded.problems.size() == 1);
  CHECK(loaded.problems[0].find("0.broken.0000000000000000.json is unusable (it is not JSON)") != std::string::npos);
  CHECK(coloc::test::file_exists(tmp / "jobs/0.broken.0000000000000000.json.bad"));
  CHECK_FALSE(coloc::test::file_exists(tmp / "jobs/0.half.0000000000000000.json.tmp"));
  for (const SavedJob& j : loaded.jobs) {
    if (j.key.uid != 1000) continue;
    CHECK(j.key.id == "../weird id");
    CHECK(j.limit == 6 * GiB);
    CHECK(j.priority == "high");
    CHECK(j.paused == "admin");
    CHECK(j.pids == a.pids);
    CHECK(j.saved_mono == a.saved_mono);
    CHECK(j.saved_unix_ms == a.saved_unix_ms);
    CHECK(j.recorder == a.recorder);
  }

  // A file whose recorder is not what state() writes is refused as a whole.
  SavedJob c = b;
  c.key = {0, "spoiled"};
  c.recorder.erase("devices");
  REQUIRE(store.save(c).ok());
  loaded = store.load();
  CHECK(loaded.jobs.size() == 2);
  REQUIRE(loaded.problems.size() == 1);
  CHECK(loaded.problems[0].find("recorder.devices is missing") != std::string::npos);

  // A recorder of another job than the file names is refused too.
  SavedJob e = b;
  e.key = {0, "mismatched"};
  REQUIRE(store.save(e).ok());
  loaded = store.load();
  REQUIRE(loaded.problems.size() == 1);
  CHECK(loaded.problems[0].find("its recorder belongs to job 0:other, not 0:mismatched") != std::string::npos);

  store.remove(a.key);
  store.remove(a.key);  // already gone: fine
  CHECK(store.load().jobs.size() == 1);

  // The daemon's "still running" mark: replaced whole, read back, not taken for a job's file.
  CHECK_FALSE(store.load_alive());
  REQUIRE(store.save_alive({5 * kSec, 1700000005000, "b00t"}).ok());
  REQUIRE(store.save_alive({6 * kSec, 1700000006000, "b00t"}).ok());
  auto alive = store.load_alive();
  REQUIRE(alive);
  CHECK(alive->mono == 6 * kSec);
  CHECK(alive->unix_ms == 1700000006000);
  CHECK(alive->boot_id == "b00t");
  loaded = store.load();
  CHECK(loaded.jobs.size() == 1);
  CHECK(loaded.problems.empty());
  coloc::test::write_file(tmp / "jobs/colocd.alive", "{\"mono_ns\": -1}");
  CHECK_FALSE(store.load_alive());  // unusable: as if there were none
}

TEST_CASE("resume state: a process's start time on the daemon's clocks") {
  auto mono = [] {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * kSec + uint64_t(ts.tv_nsec);
  };
  auto wall = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  REQUIRE(child > 0);
  auto ticks = coloc::engine::process_start_time(child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  REQUIRE(ticks);
  const uint64_t m = mono();
  const int64_t w = wall();
  auto [start_mono, start_wall] = coloc::engine::start_on_daemon_clocks(*ticks, m, w);
  // It started just now: within a couple of clock ticks (10 ms each) plus scheduling.
  CHECK(start_mono <= m);
  CHECK(m - start_mono < 2 * kSec);
  CHECK(start_wall <= w);
  CHECK(w - start_wall < 2000);
  // Our own process started before the child.
  auto own = coloc::engine::start_on_daemon_clocks(*coloc::engine::process_start_time(::getpid()), m, w);
  CHECK(own.first <= start_mono + 20'000'000);
}

}  // TEST_SUITE

TEST_CASE("job state store: the saved pause is owner, admin or null (absent: a state saved before pauses existed)") {
  SavedJob a;
  a.key = {0, "j"};
  a.priority = "normal";
  a.boot_id = "b";
  a.recorder = nlohmann::json::object();
  nlohmann::json j = JobStateStore::to_json(a);
  CHECK(j["paused"].is_null());
  CHECK(JobStateStore::from_json(j).value().paused.empty());
  j.erase("paused");
  CHECK(JobStateStore::from_json(j).value().paused.empty());
  j["paused"] = "owner";
  CHECK(JobStateStore::from_json(j).value().paused == "owner");
  for (nlohmann::json bad : {nlohmann::json("root"), nlohmann::json(1), nlohmann::json(true), nlohmann::json("")}) {
    j["paused"] = bad;
    auto r = JobStateStore::from_json(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("paused") != std::string::npos);
  }
}

TEST_CASE("job recorder: a state saved before the launch gate (6 counters) loads, with no gate waits") {
  json j = busy_recorder().state();
  REQUIRE(j["devices"][0]["live"].size() == 6 + 2 * coloc::pages::kGateStates + 3);  // + completion tracking
  for (json& d : j["devices"])
    for (const char* k : {"folded", "live"}) {
      json old = json::array();
      for (size_t i = 0; i < 6; ++i) old.push_back(d[k][i]);
      d[k] = old;
    }
  auto r = JobRecorder::from_state(j, 1);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  json rep = r.value().to_json(200 * kSec);
  CHECK(rep["devices"][0]["gate_waited_launches"]["pause"] == 0);
  CHECK(rep["devices"][0]["gate_wait_s"]["pause"] == 0.0);
  CHECK(rep["devices"][0]["kernel_launches"] == busy_recorder().to_json(200 * kSec)["devices"][0]["kernel_launches"]);
}
