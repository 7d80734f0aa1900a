// What a node admin trying coloc for the first time tripped over, on the CLI's pure side:
// GPU SHARE where colocd does not measure it (a share or priority device: colocd reports 0 for
// every job, busy or not), coloc top's device line cut at 80 columns under timeslice and priority
// (the capacity fell off), the status header's memory policy read as the compute policy, and
// `coloc run --sim` from an installed coloc (no simgpu next to it) not saying what to do.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <sstream>

#include "../../support/proc.h"
#include "format.h"
#include "run_plan.h"
#include "top_cmd.h"

using namespace coloc::cli;
using nlohmann::json;
using coloc::test::TempDir;

namespace {

constexpr uint64_t GiB = 1ull << 30;

json status_with(const json& policy) {
  json job = {{"job", "train-0a1b2c"}, {"user", "root"}, {"priority", "normal"}, {"state", "running"},
              {"compute_state", "running"}, {"limit", 20 * GiB}, {"in_use", 5 * GiB}, {"reserved", 20 * GiB},
              {"granted", 5 * GiB}, {"peak", 5 * GiB}, {"predicted_peak", nullptr}, {"waited_s", 0.0},
              {"weight", 1}, {"gpu_share", 0.0}};
  json dev = {{"uuid", "GPU-483e92e5-876a-c0ac-2c66-d660b37f3b4f"}, {"index", 0}, {"index_from", "nvml"},
              {"policy", policy}, {"capacity", 80 * GiB}, {"headroom", 2 * GiB}, {"outside", 0},
              {"committed", 20 * GiB}, {"in_use", 5 * GiB}, {"available", 58 * GiB}, {"granted", 5 * GiB},
              {"driver_overhead", 0}, {"jobs", json::array({job})}, {"outside_processes", json::array()},
              {"outside_processes_more", 0}};
  json daemon = {{"version", "0.14.0"}, {"pid", 99}, {"protocol", 10}, {"watcher", "bpf+pidfd"},
                 {"policy", "priority-fifo"}, {"uptime_s", 1.0}};
  return {{"daemon", daemon}, {"devices", json::array({dev})}, {"jobs", json::array({job})}};
}

/// The line of `text` that contains `what` ("" when none).
std::string line_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find(what) != std::string::npos) return l;
  return "";
}

}  // namespace

TEST_CASE("coloc status and top: GPU SHARE only on timesliced devices; elsewhere '-', not colocd's 0%") {
  const json share = {{"mode", "share"}, {"quantum_ms", 100}};
  const json prio = {{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 10}};
  const json ts = {{"mode", "timeslice"}, {"quantum_ms", 100}};
  for (const json& p : {share, prio}) {
    CAPTURE(p.dump());
    const json s = status_with(p);
    const std::string st = line_with(status_table(s, false), "train-0a1b2c");
    CHECK_MESSAGE(st.find("0%") == std::string::npos, st);
    CHECK_MESSAGE(st.substr(st.find_last_not_of(' ')) == "-", st);
    const std::string top = line_with(top_frame(s, TopView{}), "train-0a1b2c");
    CHECK_MESSAGE(top.find("0%") == std::string::npos, top);
    CHECK_MESSAGE(top.back() == '-', top);
  }
  json s = status_with(ts);
  s["devices"][0]["jobs"][0]["gpu_share"] = 0.5;
  CHECK(line_with(status_table(s, false), "train-0a1b2c").find("50%") != std::string::npos);
  CHECK(line_with(top_frame(s, TopView{}), "train-0a1b2c").find("50%") != std::string::npos);
  s["devices"][0]["jobs"][0]["gpu_share"] = nullptr;  // not measured yet
  CHECK(line_with(top_frame(s, TopView{}), "train-0a1b2c").back() == '-');
}

TEST_CASE("coloc top: the device line keeps the capacity within 80 columns under every policy") {
  const json policies[] = {{{"mode", "share"}, {"quantum_ms", 100}},
                           {{"mode", "timeslice"}, {"quantum_ms", 100}},
                           {{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 10}}};
  const char* shown[] = {"  share  80.0G total", "  timeslice 100ms  80.0G total", "  priority 10%  80.0G total"};
  for (int i = 0; i < 3; ++i) {
    const std::string head = line_with(top_frame(status_with(policies[i]), TopView{}), "GPU 0  GPU-");
    CHECK_MESSAGE(display_width(head) <= 80, head);
    CHECK_MESSAGE(head.find(shown[i]) != std::string::npos, head);
  }
  CHECK(short_policy_text(json()) == "share");
}

TEST_CASE("coloc status: the header names colocd's memory policy as such, not as a compute policy") {
  const std::string head = status_table(status_with({{"mode", "share"}}), false);
  CHECK_MESSAGE(head.rfind("colocd pid 99 · protocol 10 · watcher bpf+pidfd · memory policy priority-fifo · up", 0) == 0,
                head);
}

TEST_CASE("coloc run --sim from an installed coloc (no simgpu beside it) says what to do") {
  TempDir dir("coloc-nosim");
  ::mkdir((dir / "bin").c_str(), 0755);
  ::mkdir((dir / "lib").c_str(), 0755);
  ::mkdir((dir / "lib/coloc").c_str(), 0755);
  coloc::test::write_file(dir / "lib/coloc/libcoloc.so", "");
  RunOptions o;
  o.sim = true;
  o.command = {"python", "train.py"};
  RunPlan p;
  std::string err;
  CHECK_FALSE(plan_run(o, {}, dir / "bin", "a1b2c3", &p, &err));
  CHECK_MESSAGE(err.find("is not in " + dir / "bin/../sim") != std::string::npos, err);
  CHECK_MESSAGE(err.find("make install leaves out") != std::string::npos, err);
  CHECK_MESSAGE(err.find("build/bin/coloc run --sim") != std::string::npos, err);
  CHECK_MESSAGE(err.find("LD_LIBRARY_PATH") != std::string::npos, err);
}
