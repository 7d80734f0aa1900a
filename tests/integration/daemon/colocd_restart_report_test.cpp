// colocd restarts while jobs run (real processes, real sockets): a running job's report keeps its
// start, its timeline and its counters; a job whose processes die while the daemon is down still
// gets a report, marked as ended while the daemon was away; a corrupt saved state is named and
// costs nothing else; a `coloc set --mem` (raised or lowered) is written to every process's
// control page, used for growth at once, and survives the restart.
#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cstring>

#include "coloc/wire.h"
#include "colocd_fixture.h"
#include "engine/resume_state.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

/// The running job's report as `coloc report` shows it.
json live_report(const Colocd& d, const std::string& job) {
  coloc::cli::Answer a = d.ask(coloc::proto::AdminOp::kReport, job);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  return json::parse(a.text);
}

coloc::cli::Answer set_mem(const Colocd& d, const std::string& job, uint64_t bytes) {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(coloc::proto::AdminOp::kSet);
  m.set_fields = coloc::proto::kSetMem;
  m.mem = bytes;
  coloc::proto::set_string(m.job, job.c_str());
  return coloc::cli::admin_request(d.socket(), m, 5000);
}

int64_t wall_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// What colocd last recorded as "still running" (<state>/jobs/colocd.alive; null when none).
json daemon_alive(const Colocd& d) {
  json j = json::parse(read_file(d.state() + "/jobs/colocd.alive"), nullptr, false);
  return j.is_discarded() ? json() : j;
}

/// The limit on the control page of slot 0 as the client's n-th "status" step printed it.
uint64_t page_limit(const Proc& p, size_t n) {
  auto all = events_of(p, "status");
  REQUIRE(all.size() > n);
  return all[n]["slots"][0]["limit"].get<uint64_t>();
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd restart: a running job's report keeps its start, its timeline before the restart, and its end") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "long", "--reconnect", "attach:1:20GiB:256MiB", "alloc:0:1GiB", "hold-file:" + go,
                     "alloc:0:512MiB", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  // The daemon saves a running job's report state (once a second when it changed).
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "long");
                    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
                           s["recorder"]["devices"][0]["peak"] == GiB;
                  }),
                  d.log());
  json before = live_report(d, "long");
  d.kill9();
  d.start();
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  REQUIRE(wait_until([&] { return !d.status()["daemon"]["holding_for_restart"].get<bool>(); }));
  json during = live_report(d, "long");
  CHECK(during["start_unix_ms"] == before["start_unix_ms"]);
  write_file(go, "");
  ProcResult r = a->wait(20s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(event_of(*a, "alloc")["ok"] == true);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/long.json"); }));
  json rep = d.report("long");
  CHECK(rep["start_unix_ms"] == before["start_unix_ms"]);  // not the time of the re-registration
  CHECK(rep["ended_while_daemon_away"] == false);
  CHECK(rep["exit_status"] == 0);
  CHECK(rep["duration_s"].get<double>() > before["duration_s"].get<double>());
  REQUIRE(rep["processes"].size() == 1);
  CHECK(rep["processes"][0]["noticed_by"] != "daemon-away");
  json tl_before = before["devices"][0]["timeline"], tl = rep["devices"][0]["timeline"];
  REQUIRE(tl_before["t_s"].size() >= 2);
  // Every point from before the restart (but the closing one, "now" then) is still there.
  for (size_t i = 0; i + 1 < tl_before["t_s"].size(); ++i) {
    CAPTURE(i);
    REQUIRE(i < tl["t_s"].size());
    CHECK(tl["t_s"][i] == tl_before["t_s"][i]);
    CHECK(tl["bytes"][i] == tl_before["bytes"][i]);
  }
  CHECK(rep["devices"][0]["peak"] == GiB + 512 * MiB);
  CHECK(rep["devices"][0]["allocations"] == 2);
  CHECK(rep["devices"][0]["admitted_s"] == before["devices"][0]["admitted_s"]);
  CHECK(saved_job(d, "long").is_null());           // removed with the report
}

TEST_CASE("colocd restart: a job that died while the daemon was down gets its report; a corrupt saved state costs nothing else") {
  Colocd d({"--resume-grace", "1s"});
  auto a = d.client({"--job", "lost", "attach:1:20GiB:256MiB", "alloc:0:2GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "lost");
                    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
                           s["recorder"]["devices"][0]["peak"] == 2 * GiB;
                  }),
                  d.log());
  json before = live_report(d, "lost");
  d.kill9();
  a->kill(SIGKILL);
  a->wait(10s);
  const std::string corrupt = d.state() + "/jobs/0.bogus.0123456789abcdef.json";
  write_file(corrupt, "{\"format\": 1, \"uid\": ");
  d.start();
  REQUIRE_MESSAGE(wait_until([&] { return file_exists(d.state() + "/reports/lost.json"); }), d.log());
  json rep = d.report("lost");
  CHECK(rep["ended_while_daemon_away"] == true);
  CHECK(rep["complete"] == true);
  CHECK(rep["exit_status"].is_null());
  CHECK(rep["exit_signal"].is_null());
  CHECK(rep["start_unix_ms"] == before["start_unix_ms"]);
  CHECK(rep["end_unix_ms"].get<int64_t>() >= before["start_unix_ms"].get<int64_t>());
  REQUIRE(rep["processes"].size() == 1);
  CHECK(rep["processes"][0]["noticed_by"] == "daemon-away");
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["peak"] == 2 * GiB);
  CHECK(rep["devices"][0]["allocations"] == 1);
  json bytes = rep["devices"][0]["timeline"]["bytes"];
  CHECK(std::find(bytes.begin(), bytes.end(), json(2 * GiB)) != bytes.end());
  CHECK(saved_job(d, "lost").is_null());
  CHECK(d.log().find("ended while colocd was away, between") != std::string::npos);
  // The corrupt file: one clear line, set aside, the daemon serves.
  CHECK(d.log().find(corrupt + " is unusable (it is not JSON)") != std::string::npos);
  CHECK(file_exists(corrupt + ".bad"));
  CHECK_FALSE(file_exists(corrupt));
  CHECK(d.running());
  CHECK(d.status()["jobs"].empty());
}

TEST_CASE("colocd restart: a job that died while the daemon was down ended between the daemon's last sign of life and its restart") {
  Colocd d({"--resume-grace", "1s"});
  auto a = d.client({"--job", "idle", "attach:1:20GiB:256MiB", "alloc:0:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "idle");
                    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
                           s["recorder"]["devices"][0]["peak"] == GiB;
                  }),
                  d.log());
  // The job is idle: its state is not saved again for a while, but colocd keeps saying it runs.
  const int64_t saved_ms = saved_job(d, "idle")["saved_unix_ms"].get<int64_t>();
  REQUIRE_MESSAGE(wait_until([&] {
                    json alive = daemon_alive(d);
                    return !alive.is_null() && alive["unix_ms"].get<int64_t>() >= saved_ms + 1500;
                  }),
                  d.log());
  REQUIRE(saved_job(d, "idle")["saved_unix_ms"] == saved_ms);  // still the old save
  const int64_t alive_ms = daemon_alive(d)["unix_ms"].get<int64_t>();
  const int64_t killed_ms = wall_ms_now();
  d.kill9();
  a->kill(SIGKILL);
  a->wait(10s);
  const int64_t restarted_ms = wall_ms_now();
  d.start();
  REQUIRE_MESSAGE(wait_until([&] { return file_exists(d.state() + "/reports/idle.json"); }), d.log());
  const int64_t reported_ms = wall_ms_now();
  json rep = d.report("idle");
  CHECK(rep["ended_while_daemon_away"] == true);
  // The earliest it can have ended: colocd's last sign of life, not the job's last save.
  CHECK(rep["ended_after_unix_ms"] == rep["end_unix_ms"]);
  CHECK(rep["ended_after_unix_ms"].get<int64_t>() >= alive_ms);
  CHECK(rep["ended_after_unix_ms"].get<int64_t>() <= killed_ms);
  CHECK(rep["ended_after"] == rep["end"]);
  // The latest: the restart (its processes were already gone then).
  CHECK(rep["ended_before_unix_ms"].get<int64_t>() >= restarted_ms);
  CHECK(rep["ended_before_unix_ms"].get<int64_t>() <= reported_ms);
  CHECK(rep["ended_before"].is_string());
  const double gap = double(rep["ended_before_unix_ms"].get<int64_t>() - rep["ended_after_unix_ms"].get<int64_t>()) / 1e3;
  CHECK(rep["duration_max_s"].get<double>() == doctest::Approx(rep["duration_s"].get<double>() + gap).epsilon(1e-6));
  CHECK(d.log().find("ended while colocd was away, between") != std::string::npos);
}

TEST_CASE("colocd restart: a job waiting for admission before, during and after a restart has one wait row, and the rows add up") {
  Colocd d;
  const std::string go = d.dir() / "go";
  // `big` holds most of the device; `patient` (limit 14 GiB) waits for admission behind it.
  auto big = d.client({"--job", "big", "--reconnect", "attach:1:20GiB:16GiB", "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*big, "holding"); }));
  auto patient = d.client({"--job", "patient", "--mem", "14GiB", "--reconnect", "attach:1:20GiB:8GiB", "goodbye:0",
                           "exit:0"});
  REQUIRE(wait_until([&] { return d.job("patient")["state"] == "admission-pending"; }));
  // Not admitted yet: the report already shows its limit and the device's capacity.
  json early = live_report(d, "patient");
  REQUIRE(early["devices"].size() == 1);
  CHECK(early["devices"][0]["limit"] == 14 * GiB);
  CHECK(early["limit"] == 14 * GiB);
  CHECK(early["devices"][0]["capacity"] == 20 * GiB);
  // Its open wait is saved, and colocd runs on well past that save before it is killed.
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "patient");
                    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
                           s["recorder"]["devices"][0]["waits"].size() == 1;
                  }),
                  d.log());
  const int64_t saved_ms = saved_job(d, "patient")["saved_unix_ms"].get<int64_t>();
  REQUIRE(wait_until([&] {
    json alive = daemon_alive(d);
    return !alive.is_null() && alive["unix_ms"].get<int64_t>() >= saved_ms + 500;
  }));
  d.kill9();
  d.start();
  REQUIRE(wait_until([&] { return has_event(*big, "reregistered"); }));
  REQUIRE(wait_until([&] { return has_event(*patient, "reregistered"); }));
  REQUIRE(wait_until([&] { return d.job("patient")["state"] == "admission-pending"; }));
  json during = live_report(d, "patient");
  REQUIRE(during["devices"][0]["waits"].size() == 1);
  CHECK(during["devices"][0]["waits"][0]["outcome"] == "waiting");
  CHECK(during["devices"][0]["waits"][0]["across_restart"] == true);
  write_file(go, "");  // `big` leaves: `patient` is admitted
  for (Proc* p : {big.get(), patient.get()}) {
    ProcResult r = p->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  CHECK(event_of(*patient, "attach")["granted"] == true);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/patient.json"); }));
  json dev = d.report("patient")["devices"][0];
  REQUIRE_MESSAGE(dev["waits"].size() == 1, dev.dump(1));  // one row across the restart, no gap
  json w = dev["waits"][0];
  CHECK(w["kind"] == "admission");
  CHECK(w["outcome"] == "granted");
  CHECK(w["across_restart"] == true);
  CHECK(w["start_s"] == early["devices"][0]["waits"][0]["start_s"]);
  CHECK(w["end_s"].get<double>() == doctest::Approx(dev["admitted_s"].get<double>()));
  // The row and the WAIT ADMISSION column agree. The column is the client's own measure (colocd
  // was away for part of the wait): it starts before colocd opened the row (the request was in
  // flight) and ends after the grant (the reply was), so it is at least the row, and longer only by
  // those round trips, slow under a sanitizer but nowhere near a second wait (~2.5 s) counted twice.
  const double row = w["end_s"].get<double>() - w["start_s"].get<double>();
  const double col = dev["wait_admission_s"].get<double>();
  CHECK(col >= row - 0.02);  // after a restart the job start is known to a clock tick (10 ms)
  CHECK(col <= row + 0.5);
  CHECK(dev["limit"] == 14 * GiB);
}

TEST_CASE("colocd: a job that never got past admission reports its limit and the device's capacity") {
  Colocd d;
  auto big = d.client({"--job", "hog", "attach:1:20GiB:16GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*big, "holding"); }));
  auto never = d.client({"--job", "never", "--mem", "14GiB", "attach:1:20GiB:8GiB", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return d.job("never")["state"] == "admission-pending"; }));
  never->kill(SIGKILL);  // given up while waiting
  never->wait(10s);
  REQUIRE_MESSAGE(wait_until([&] { return file_exists(d.state() + "/reports/never.json"); }), d.log());
  json rep = d.report("never");
  CHECK(rep["limit"] == 14 * GiB);
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["limit"] == 14 * GiB);  // not null
  CHECK(rep["devices"][0]["capacity"] == 20 * GiB);
  CHECK(rep["devices"][0]["admitted_s"].is_null());
  big->kill(SIGKILL);
}

TEST_CASE("colocd restart: a new process of a job whose process is alive but not back yet continues the same report") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "twin", "--reconnect", "attach:1:20GiB:256MiB", "alloc:0:1GiB", "hold-file:" + go,
                     "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "twin");
                    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
                           s["recorder"]["devices"][0]["peak"] == GiB;
                  }),
                  d.log());
  REQUIRE(wait_until([&] { return read_file(d.state() + "/clients").find(std::to_string(a->pid()) + " ") == 0; }));
  json before = live_report(d, "twin");
  a->kill(SIGSTOP);  // alive, but it cannot re-register until it is continued
  d.kill9();
  d.start();
  auto b = d.client({"--job", "twin", "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*b, "holding"); }));
  CHECK(live_report(d, "twin")["start_unix_ms"] == before["start_unix_ms"]);
  a->kill(SIGCONT);
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  REQUIRE(wait_until([&] { return d.job("twin")["pids"].size() == 2; }));
  write_file(go, "");
  for (Proc* p : {a.get(), b.get()}) {
    ProcResult r = p->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/twin.json"); }));
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }));
  CHECK_FALSE(file_exists(d.state() + "/reports/twin.2.json"));  // one run, one report
  json rep = d.report("twin");
  CHECK(rep["ended_while_daemon_away"] == false);
  CHECK(rep["start_unix_ms"] == before["start_unix_ms"]);
  CHECK(rep["processes"].size() == 2);
  CHECK(rep["devices"][0]["peak"] == GiB);
}

TEST_CASE("colocd restart: without a saved state, a job coming back starts at its process's start, not at its re-registration") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "nostate", "--reconnect", "attach:1:20GiB:256MiB", "alloc:0:1GiB", "hold-file:" + go,
                     "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE(wait_until([&] { return read_file(d.state() + "/clients").find(std::to_string(a->pid()) + " ") == 0; }));
  // Long enough that a start at the re-registration would be plainly later than the process's.
  REQUIRE(wait_until([&] { return live_report(d, "nostate")["duration_s"].get<double>() >= 0.3; }));
  d.kill9();
  std::filesystem::remove_all(d.state() + "/jobs");  // the saved state is lost
  d.start();
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  json rep = live_report(d, "nostate");
  auto ticks = coloc::engine::process_start_time(a->pid());
  REQUIRE(ticks);
  auto mono_now = coloc::wire::now_ns();
  auto wall_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t expected = coloc::engine::start_on_daemon_clocks(*ticks, mono_now, wall_now).second;
  // Within 100 ms: the start is in clock ticks (10 ms), and colocd's and this test's reads of the
  // two clocks may each be preempted on a loaded machine; a start taken at the re-registration
  // would be at least 300 ms later.
  CHECK(std::llabs(rep["start_unix_ms"].get<int64_t>() - expected) <= 100);
  CHECK(rep["duration_s"].get<double>() >= 0.3);
  write_file(go, "");
  CHECK(a->wait(20s).exit_code == 0);
}

TEST_CASE("colocd stop: a job that ended just before (its exit status still awaited) gets its report") {
  Colocd d;
  const std::string go = d.dir() / "go";
  // It hangs up without a goodbye and keeps running: colocd waits briefly for an exit status.
  auto a = d.client({"--job", "hungup", "attach:1:20GiB:256MiB", "alloc:0:1GiB", "close", "wait-file:" + go, "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "closed"); }));
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }));  // the job has ended
  ProcResult r = d.stop();
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  REQUIRE_MESSAGE(file_exists(d.state() + "/reports/hungup.json"), d.log());
  json rep = d.report("hungup");
  CHECK(rep["complete"] == true);
  CHECK(rep["exit_status"].is_null());
  CHECK(rep["processes"][0]["noticed_by"] == "hangup");
  CHECK(rep["devices"][0]["peak"] == GiB);
  CHECK(saved_job(d, "hungup").is_null());
  write_file(go, "");
  CHECK(a->wait(20s).exit_code == 0);
}

TEST_CASE("colocd: coloc set --mem reaches every process's control page, decides growth at once, and survives a restart") {
  Colocd d;
  const std::string go1 = d.dir() / "go1", go2 = d.dir() / "go2", go3 = d.dir() / "go3";
  // Two processes of one job (limit 2 GiB), one of another (limit 4 GiB).
  auto up1 = d.client({"--job", "raised", "--mem", "2GiB", "--reconnect", "attach:1:20GiB:256MiB", "alloc:0:1GiB",
                       "hold-file:" + go1, "status", "alloc:0:1536MiB", "hold-file:" + go2, "status", "hold-file:" + go3,
                       "status", "alloc:0:1GiB", "goodbye:0", "exit:0"});
  auto up2 = d.client({"--job", "raised", "--mem", "2GiB", "--reconnect", "attach:1:20GiB:64MiB", "hold-file:" + go1, "status",
                       "hold-file:" + go3, "status", "goodbye:0", "exit:0"});
  auto down = d.client({"--job", "lowered", "--mem", "4GiB", "--reconnect", "attach:1:20GiB:256MiB", "alloc:0:1GiB",
                        "hold-file:" + go3, "status", "alloc:0:1GiB", "goodbye:0", "exit:0"});
  for (Proc* p : {up1.get(), up2.get(), down.get()}) REQUIRE(wait_until([&] { return has_event(*p, "holding"); }));

  // Raised: both processes see it on their control pages, and the next growth uses it.
  coloc::cli::Answer a = set_mem(d, "raised", 6 * GiB);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  a = set_mem(d, "lowered", 1536 * MiB);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  write_file(go1, "");
  REQUIRE(wait_until([&] { return events_of(*up1, "holding").size() == 2 && events_of(*up2, "holding").size() == 2; }));
  CHECK(page_limit(*up1, 0) == 6 * GiB);
  CHECK(page_limit(*up2, 0) == 6 * GiB);
  CHECK(event_of(*up1, "alloc")["ok"] == true);  // 2.5 GiB: over the old limit, under the new one

  // The daemon is killed right after: the limits were saved with the set.
  d.kill9();
  d.start();
  for (Proc* p : {up1.get(), up2.get(), down.get()}) REQUIRE(wait_until([&] { return has_event(*p, "reregistered"); }));
  REQUIRE(wait_until([&] { return d.status()["jobs"].size() == 2 && !d.status()["daemon"]["holding_for_restart"]; }));
  CHECK(d.job("raised")["limit"] == 6 * GiB);  // not the 2 GiB its processes registered with
  CHECK(d.job("lowered")["limit"] == 1536 * MiB);
  write_file(go2, "");
  REQUIRE(wait_until([&] { return events_of(*up1, "holding").size() == 3; }));
  CHECK(page_limit(*up1, 1) == 6 * GiB);  // the new daemon's control page

  // Lowered again under the new daemon: every page follows, growth is refused at once.
  a = set_mem(d, "raised", 3 * GiB);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  write_file(go3, "");
  for (Proc* p : {up1.get(), up2.get(), down.get()}) {
    ProcResult r = p->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  CHECK(page_limit(*up1, 2) == 3 * GiB);
  CHECK(page_limit(*up2, 1) == 3 * GiB);
  CHECK(page_limit(*down, 0) == 1536 * MiB);
  CHECK(event_of(*up1, "alloc")["ok"] == false);   // 3.5 GiB > 3 GiB
  CHECK(event_of(*down, "alloc")["ok"] == false);  // 2 GiB > 1.5 GiB, after the restart
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/raised.json"); }));
  json rep = d.report("raised");
  CHECK(rep["devices"][0]["limit"] == 3 * GiB);
  CHECK(rep["devices"][0]["peak"] == 2 * GiB + 512 * MiB);
  REQUIRE(rep["devices"][0]["oom_events"].size() == 1);
  CHECK(rep["devices"][0]["oom_events"][0]["reason"] == "own-limit");
}

}  // TEST_SUITE
