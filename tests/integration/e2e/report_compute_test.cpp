// The job report's compute part end to end: three equal GPU-bound jobs on a timesliced device
// (interpose_client's spin loops under libcoloc.so on simgpu). Each report has a plausible GPU
// time from completions (a share of the run, never more than its wall time), its turns, launches
// made holding the device; `coloc report` says so in text and draws the turn lane in the SVG. A
// job on a device in share mode has none of it.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;
using namespace std::chrono_literals;

namespace {

/// `coloc run --job NAME -- interpose_client init ctx 0 spin kernel 2ms SECONDS 10 0`.
std::unique_ptr<Proc> spin(const Node& n, const std::string& name, double seconds) {
  return n.run({"--job", name}, {client(), "init", "ctx", "0", "spin", "kernel", "2000000", std::to_string(seconds), "10", "0"});
}

}  // namespace

TEST_SUITE("e2e") {
TEST_CASE("report compute: timesliced jobs report GPU time, turns and window launches; the SVG draws the lane") {
  if (simulated_only()) return;
  Node n;
  ProcResult p = n.cli({"policy", "all", "timeslice", "--quantum", "50ms"});
  REQUIRE_MESSAGE(p.exit_code == 0, describe(p));
  std::vector<std::unique_ptr<Proc>> jobs;
  for (const char* name : {"ra", "rb", "rc"}) jobs.push_back(spin(n, name, 2));
  for (auto& j : jobs) finish(*j);
  for (const char* name : {"ra", "rb", "rc"}) {
    CAPTURE(name);
    json r = n.report(name);
    REQUIRE(r["devices"].size() == 1);
    const json& d = r["devices"][0];
    INFO(d.dump());
    const double wall = r["duration_s"].get<double>(), gpu = d["gpu_time_s"].get<double>();
    CHECK(gpu > 0);
    CHECK(gpu <= wall);
    // Three equal jobs on one device: about a third each (the bounds leave room for a loaded
    // machine and for the run's start and end, when fewer than three compete).
    CHECK(gpu / wall >= 0.15);
    CHECK(gpu / wall <= 0.60);
    CHECK(d["turns_count"].get<uint64_t>() >= 2);
    CHECK(d["turns"].size() >= 2);
    double held = 0, last_end = 0;
    for (const json& t : d["turns"]) {
      CHECK(t[0].get<double>() >= last_end);
      CHECK(t[1].get<double>() >= t[0].get<double>());
      CHECK(t[1].get<double>() <= wall + 1e-6);
      held += t[1].get<double>() - t[0].get<double>();
      last_end = t[1].get<double>();
    }
    CHECK(held < wall);  // it shared the device: it did not hold it throughout
    CHECK(d["launches_by_gate"]["window"].get<uint64_t>() > 0);
    CHECK(d["launches_by_gate"]["run"].get<uint64_t>() + d["launches_by_gate"]["window"].get<uint64_t>() >=
          d["kernel_launches"].get<uint64_t>());
    CHECK(d["window_waits"].is_number_unsigned());
    CHECK(d["drain_timeouts"].is_number_unsigned());
  }
  // The CLI: text and picture.
  const std::string id = n.report("ra")["job"];
  ProcResult text = n.cli({"report", id});
  REQUIRE_MESSAGE(text.exit_code == 0, describe(text));
  CHECK(text.out.find("Compute (timesliced devices):") != std::string::npos);
  CHECK(text.out.find("GPU time") != std::string::npos);
  CHECK(text.out.find(" turns") != std::string::npos);
  ProcResult svg = n.cli({"report", id, "--svg", n.file("ra.svg")});
  REQUIRE_MESSAGE(svg.exit_code == 0, describe(svg));
  const std::string pic = read_file(n.file("ra.svg"));
  CHECK(pic.find("<g class='turn-lane'>") != std::string::npos);
  CHECK(pic.find("<rect class='turn'") != std::string::npos);
}

TEST_CASE("report compute: GPU time and turns from before a colocd restart stay in the report") {
  if (simulated_only()) return;
  Node n;
  ProcResult p = n.cli({"policy", "all", "timeslice", "--quantum", "50ms"});
  REQUIRE_MESSAGE(p.exit_code == 0, describe(p));
  // Two jobs taking turns; colocd stops late in their run, so that what they do after the
  // restart (about half of a second or so) is less than what was saved before it.
  auto a = spin(n, "rs", 4), b = spin(n, "rt", 4);
  std::string id;
  json before;
  // Wait until the job's state is saved with some GPU time in it (saved once a second).
  bool saved = wait_until([&] {
    json j = n.job("rs");
    if (j.is_null()) return false;
    id = j["job"];
    ProcResult r = n.cli({"report", id, "--json"});
    if (r.exit_code != 0) return false;
    json rep = json::parse(r.out, nullptr, false);
    if (rep.is_discarded() || !rep.contains("devices") || rep["devices"].empty()) return false;
    before = rep["devices"][0];
    return before.value("gpu_time_s", 0.0) > 0.6 && before.value("turns_count", uint64_t(0)) >= 2;
  }, 20s, 50ms);
  REQUIRE_MESSAGE(saved, before.dump());
  // The GPU time in the job's saved state (counters: 6, 2 per gate state, then busy_ns), once a
  // save (once a second, later on a loaded machine) has that in it: waited for, not slept for.
  auto saved_gpu_time = [&] {
    double gpu = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(n.state() + "/jobs", ec)) {
      if (e.path().extension() != ".json") continue;  // not a save's X.json.tmp: it would count twice
      json j = json::parse(read_file(e.path()), nullptr, false);
      if (j.is_discarded() || !j.is_object() || j.value("job", "") != id) continue;
      const json& devs = j["recorder"]["devices"];
      if (!devs.is_array() || devs.empty()) continue;  // (a save from before its attach: none here)
      for (const char* k : {"folded", "live"}) gpu += devs[0][k][14].get<double>() / 1e9;
    }
    return gpu;
  };
  double saved_gpu = 0;
  bool caught_up = wait_until([&] { return (saved_gpu = saved_gpu_time()) >= before["gpu_time_s"].get<double>(); }, 20s, 50ms);
  REQUIRE_MESSAGE(caught_up, "saved ", saved_gpu, " s; before: ", before.dump());
  REQUIRE(a->running());
  n.kill_daemon();
  n.start_daemon();
  finish(*a);
  finish(*b);
  json d = n.report("rs")["devices"][0];
  INFO("saved: ", saved_gpu, " s; before: ", before.dump(), "\nafter: ", d.dump());
  // What was saved stays (the clients do not carry their tracking counters over to the new pages:
  // had the report taken their new figures alone, it would show only the time since the restart).
  CHECK(d["gpu_time_s"].get<double>() >= saved_gpu);
  CHECK(d["turns_count"].get<uint64_t>() > before["turns_count"].get<uint64_t>());
  CHECK(d["launches_by_gate"]["window"].get<uint64_t>() > before["launches_by_gate"]["window"].get<uint64_t>());
  CHECK(d["turns"][0] == before["turns"][0]);
}

TEST_CASE("report compute: a job of two processes counts its device time once: never more than the wall time it ran") {
  // Issue 27, item 4: each process's busy intervals were added, so a job of two ranks busy at the
  // same time claimed twice the device time it had (7.45 s in a run of 4 s), and GPU SHARE with it.
  if (simulated_only()) return;
  Node n;
  ProcResult p = n.cli({"policy", "all", "timeslice", "--quantum", "50ms"});
  REQUIRE_MESSAGE(p.exit_code == 0, describe(p));
  // 5 s each: under a sanitizer one `coloc status` takes a few tenths of a second, and the looks
  // only count from a second after both jobs show; 3 s runs left room for one look (CI, ASan).
  const std::string spin2 = client() + " init ctx 0 spin kernel 2000000 5 10 0";
  auto pair = n.run({"--job", "pair"}, {"bash", "-c", spin2 + " & " + spin2 + "; wait"});
  auto solo = spin(n, "solo", 5);
  // While both run: their GPU SHAREs add up to about the whole device at most (each is the share
  // of the time since the job started, so the two windows differ by the jobs' starts: a little
  // room), not the ~1.5 that counting the pair's two ranks twice gives.
  double most = 0;
  int seen = 0;
  std::optional<std::chrono::steady_clock::time_point> both_shown;
  wait_until([&] {
    json s = n.status();
    double sum = 0;
    int shown = 0;
    for (const json& j : s["jobs"]) {
      const std::string id = j["job"];
      if (id.rfind("pair-", 0) != 0 && id.rfind("solo-", 0) != 0) continue;
      if (j["devices"].size() != 1 || !j["devices"][0]["gpu_share"].is_number()) continue;
      if (id.rfind("pair-", 0) == 0 && j["pids"].size() < 2) continue;
      sum += j["devices"][0]["gpu_share"].get<double>();
      ++shown;
    }
    // From the second second on: earlier, each share is over a few tenths of a second, and the
    // jobs' starts apart weigh in it.
    if (shown == 2 && !both_shown) both_shown = std::chrono::steady_clock::now();
    if (shown == 2 && std::chrono::steady_clock::now() - *both_shown >= 1s) {
      most = std::max(most, sum);
      ++seen;
    }
    return seen >= 10 || !solo->running();
  }, 20s, 100ms);
  finish(*pair);
  finish(*solo);
  INFO("the most the two jobs' GPU SHAREs added up to: ", most, " (", seen, " looks)");
  CHECK(seen >= 3);
  CHECK(most <= 1.1);
  json rp = n.report("pair"), rs = n.report("solo");
  REQUIRE(rp["devices"].size() == 1);
  REQUIRE(rs["devices"].size() == 1);
  const double wall = rp["duration_s"].get<double>(), gpu = rp["devices"][0]["gpu_time_s"].get<double>();
  const double solo_gpu = rs["devices"][0]["gpu_time_s"].get<double>();
  MESSAGE("pair: ", gpu, " s of device time in ", wall, " s; solo: ", solo_gpu, " s in ", rs["duration_s"].get<double>(),
          " s; the most their GPU SHAREs added up to: ", most);
  CHECK(rp["processes"].size() >= 2);
  CHECK(gpu > 0.2);
  CHECK(gpu <= wall);
  // The two jobs shared one device: together, no more than the longer run's wall time (their
  // runs overlap almost entirely; a little room for the start of one before the other).
  CHECK(gpu + solo_gpu <= std::max(wall, rs["duration_s"].get<double>()) + 0.2);
}

TEST_CASE("report compute: a job on a device in share mode has no GPU time, turns or lane") {
  if (simulated_only()) return;
  Node n;
  auto j = spin(n, "sh", 0.3);
  finish(*j);
  json r = n.report("sh");
  const json& d = r["devices"][0];
  INFO(d.dump());
  CHECK(d["gpu_time_s"] == 0.0);
  CHECK(d["turns"] == json::array());
  CHECK(d["turns_count"] == 0);
  CHECK(d["launches_by_gate"]["window"] == 0);
  CHECK(d["launches_by_gate"]["run"] == d["kernel_launches"]);
  ProcResult svg = n.cli({"report", r["job"].get<std::string>(), "--svg", n.file("sh.svg")});
  REQUIRE_MESSAGE(svg.exit_code == 0, describe(svg));
  CHECK(read_file(n.file("sh.svg")).find("turn-lane") == std::string::npos);
  CHECK(n.cli({"report", r["job"].get<std::string>()}).out.find("Compute") == std::string::npos);
}
}
