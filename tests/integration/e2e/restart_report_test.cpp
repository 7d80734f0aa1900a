// End-to-end: colocd restarts under running jobs (coloc run, libcoloc.so, simgpu). A limit changed
// with `coloc set --mem` (raised or lowered) still holds for the job's next growth after the
// restart; the report keeps the job's real start and what happened before the restart; a job
// killed while colocd is down still gets a report, marked as ended while colocd was away.
#include <chrono>
#include <filesystem>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The saved report state of the job whose id starts with `name` (null when none yet).
json saved_state(const Node& n, const std::string& name) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(n.state() + "/jobs", ec)) {
    std::string f = e.path().filename();
    if (f.size() < 5 || f.compare(f.size() - 5, 5, ".json") != 0) continue;
    json j = json::parse(read_file(e.path()), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("job", "").rfind(name + "-", 0) == 0) return j;
  }
  return nullptr;
}

json live_report(const Node& n, const std::string& id) {
  ProcResult r = n.cli({"report", id, "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  return json::parse(r.out);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: coloc set --mem, then a colocd restart before the job's next growth: the new limit holds, the report goes on") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto up = n.run({"--job", "raised", "--mem", "2GiB"},
                  {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("up-ready"), "hold-file",
                   n.file("go"), "alloc", "2GiB", "b"});
  auto down = n.run({"--job", "lowered", "--mem", "4GiB"},
                    {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("down-ready"), "hold-file",
                     n.file("go"), "alloc", "1GiB", "b"});
  REQUIRE(reached(*up, n.file("up-ready")));
  REQUIRE(reached(*down, n.file("down-ready")));
  const std::string up_id = n.job("raised")["job"], down_id = n.job("lowered")["job"];
  ProcResult set = n.cli({"set", up_id, "--mem", "4GiB"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  set = n.cli({"set", down_id, "--mem", "2GiB"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  json before = live_report(n, up_id);

  n.kill_daemon();
  n.start_daemon();
  bool back = wait_until([&] {
    json s = n.status();
    return s["jobs"].size() == 2 && !s["daemon"]["holding_for_restart"].get<bool>();
  }, 20s, 20ms);
  REQUIRE_MESSAGE(back, n.status_text(), "\n", n.log());
  CHECK(n.job("raised")["limit"] == 4 * GiB);
  CHECK(n.job("lowered")["limit"] == 2 * GiB);

  write_file(n.file("go"), "");
  ProcResult ru = finish(*up);
  CHECK(step(ru.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");  // 3.5 GiB: over 2 GiB, within 4 GiB
  ProcResult rd = finish(*down);
  CHECK(step(rd.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // 2.5 GiB > 2 GiB

  json r = n.report("raised");
  CHECK(r["start_unix_ms"] == before["start_unix_ms"]);  // not the re-registration
  CHECK(r["ended_while_daemon_away"] == false);
  CHECK(r["exit_status"] == 0);
  json d = r["devices"][0];
  CHECK(d["limit"] == 4 * GiB);
  CHECK(d["peak"] == 3 * GiB + kContext);
  CHECK(d["allocations"].get<uint64_t>() >= 2);
  json tl_before = before["devices"][0]["timeline"];
  REQUIRE(tl_before["t_s"].size() >= 2);
  CHECK(d["timeline"]["t_s"][0] == tl_before["t_s"][0]);  // the curve from before the restart
  CHECK(d["timeline"]["bytes"][1] == tl_before["bytes"][1]);
  json dl = n.report("lowered")["devices"][0];
  CHECK(dl["limit"] == 2 * GiB);
  REQUIRE(dl["oom_events"].size() == 1);
  CHECK(dl["oom_events"][0]["reason"] == "own-limit");
}

TEST_CASE("e2e: a job killed while colocd is down still gets its report, marked as ended while colocd was away") {
  if (simulated_only()) return;
  Node n("16GiB", {"--resume-grace", "1s"});
  auto job = n.run({"--job", "doomed", "--mem", "8GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "3GiB", "a", "touch", n.file("ready"), "hold-file",
                    n.file("never")});
  REQUIRE(reached(*job, n.file("ready")));
  // colocd saves a running job's report state (once a second when it changed).
  bool saved = wait_until([&] {
    json s = saved_state(n, "doomed");
    return !s.is_null() && s["recorder"]["devices"].size() == 1 &&
           s["recorder"]["devices"][0]["peak"] == 3 * GiB + kContext;
  }, 20s, 20ms);
  REQUIRE_MESSAGE(saved, n.log());
  json before = live_report(n, n.job("doomed")["job"]);
  const auto wall_now = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t killed_ms = wall_now();
  n.kill_daemon();
  job->kill(SIGKILL);
  job->wait(10s);
  const int64_t restarted_ms = wall_now();
  n.start_daemon();
  json r = n.report("doomed");
  CHECK(r["ended_while_daemon_away"] == true);
  CHECK(r["complete"] == true);
  CHECK(r["exit_status"].is_null());
  CHECK(r["exit_signal"].is_null());
  CHECK(r["start_unix_ms"] == before["start_unix_ms"]);
  REQUIRE(r["processes"].size() == 1);
  CHECK(r["processes"][0]["noticed_by"] == "daemon-away");
  json d = r["devices"][0];
  CHECK(d["peak"] == 3 * GiB + kContext);
  CHECK(d["limit"] == 8 * GiB);
  CHECK(saved_state(n, "doomed").is_null());
  CHECK(n.status()["jobs"].empty());
  // When it ended is known within bounds: after colocd last saw it, before colocd came back.
  CHECK(r["ended_after_unix_ms"].get<int64_t>() <= killed_ms);
  CHECK(r["ended_after_unix_ms"].get<int64_t>() >= before["start_unix_ms"].get<int64_t>());
  CHECK(r["ended_before_unix_ms"].get<int64_t>() >= restarted_ms);
  CHECK(r["duration_max_s"].get<double>() > r["duration_s"].get<double>());
  // ... and `coloc report` says so, in the table and in the plot.
  const std::string svg = n.file("doomed.svg");
  ProcResult shown = n.cli({"report", r["job"].get<std::string>(), "--svg", svg});
  CHECK_MESSAGE(shown.exit_code == 0, describe(shown));
  const std::string span = "ended while colocd was away, between " + r["ended_after"].get<std::string>() + " and " +
                           r["ended_before"].get<std::string>();
  CHECK_MESSAGE(shown.out.find(span) != std::string::npos, shown.out);
  CHECK(shown.out.find(" · ran ") != std::string::npos);
  CHECK(shown.out.find("\u2013") != std::string::npos);  // the duration as a range
  const std::string plot = read_file(svg);
  CHECK(plot.find(span) != std::string::npos);
  CHECK(plot.find("\u2013") != std::string::npos);  // the duration as a range
}

TEST_CASE("e2e: a job not admitted yet, then cancelled with Ctrl-C, reports the limit it was started with") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto hog = n.run({"--job", "hog", "--mem", "12GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "a", "touch",
                                                         n.file("ready"), "hold-file", n.file("never")});
  REQUIRE(reached(*hog, n.file("ready")));
  auto p = n.run({"--job", "admit", "--mem", "14GiB"}, {client(), "init", "catch-signals", "ctx", "0", "signals"});
  REQUIRE(n.wait_state("admit", "admission-pending"));
  const std::string id = n.job("admit")["job"];
  ProcResult shown = n.cli({"report", id});
  REQUIRE_MESSAGE(shown.exit_code == 0, describe(shown));
  CHECK_MESSAGE(shown.out.find("14.00 GiB") != std::string::npos, shown.out);  // LIMIT, not "none"
  json live = live_report(n, id);
  REQUIRE(live["devices"].size() == 1);
  CHECK(live["devices"][0]["limit"] == 14 * GiB);
  CHECK(live["devices"][0]["capacity"] == 16 * GiB);
  p->kill(SIGINT);
  ProcResult r = finish(*p, 20s);  // generous: it ends within a wait slice (100 ms); a loaded sanitizer run is slower
  CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  json rep = n.report("admit");
  CHECK(rep["limit"] == 14 * GiB);
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["limit"] == 14 * GiB);
  CHECK(rep["devices"][0]["capacity"] == 16 * GiB);
  REQUIRE(rep["devices"][0]["waits"].size() == 1);
  CHECK(rep["devices"][0]["waits"][0]["outcome"] == "cancelled");
  hog->kill(SIGKILL);
}

}  // TEST_SUITE
