// `coloc report`'s compute part: the text names GPU time, turns and launches by gate state; the
// SVG has a lane per timesliced device with a bar per turn, on the memory panels' time axis, and
// no lane when the job never held a timesliced device.
#include <doctest/doctest.h>

#include "../../support/proc.h"
#include "format.h"
#include "svg_plot.h"

using namespace coloc::cli;
using nlohmann::json;
using coloc::test::TempDir;

namespace {

json timesliced_report() {
  return json::parse(R"({
    "job": "ts-a", "uid": 1000, "user": "alice", "command": "spin", "priority": "normal", "complete": true,
    "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:00:10.000Z", "duration_s": 10.0,
    "exit_status": 0, "exit_signal": null, "processes": [],
    "devices": [{
      "uuid": "GPU-00000000-0000-0000-0000-000000000001", "capacity": 17179869184, "limit": null,
      "reservation": 0, "peak": 1073741824, "allocations": 3, "frees": 3, "failures": 0,
      "kernel_launches": 3000, "wait_memory_s": 0.0, "wait_admission_s": 0.0, "driver_ooms": 0,
      "gate_wait_s": {"quantum": 6.1, "window": 0.2, "pause": 0.0},
      "gate_waited_launches": {"quantum": 40, "window": 12, "pause": 0},
      "gpu_time_s": 3.25, "launches_by_gate": {"run": 100, "window": 2900}, "window_waits": 12,
      "turns": [[0.5, 0.56], [0.7, 0.76], [2.0, 2.5], [9.0, 9.9]], "turns_count": 4, "drain_timeouts": 1,
      "waits": [], "oom_events": [],
      "timeline": {"t_s": [0.1, 10.0], "bytes": [1073741824, 0]}
    }, {
      "uuid": "GPU-00000000-0000-0000-0000-000000000002", "capacity": 17179869184, "limit": null,
      "reservation": 0, "peak": 0, "allocations": 0, "frees": 0, "failures": 0,
      "kernel_launches": 0, "wait_memory_s": 0.0, "wait_admission_s": 0.0, "driver_ooms": 0,
      "gpu_time_s": 0.0, "launches_by_gate": {"run": 0, "window": 0}, "window_waits": 0,
      "turns": [], "turns_count": 0, "drain_timeouts": 0,
      "waits": [], "oom_events": [], "timeline": {"t_s": [], "bytes": []}
    }]
  })");
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("report: the text shows GPU time, turns and launches by gate state of timesliced devices only") {
  const std::string t = report_table(timesliced_report());
  INFO(t);
  CHECK(t.find("Compute (timesliced devices):") != std::string::npos);
  CHECK(t.find("GPU-00000000...: GPU time 3.2 s · 4 turns (1 not drained in time) · launches 2900 holding the "
               "device, 100 with the gate open, 12 waited for the window") != std::string::npos);
  CHECK(count(t, "GPU time") == 1);  // the second device was never timesliced
  // A report without any of it (an older colocd, or share mode) has no such section.
  json plain = timesliced_report();
  plain["devices"].erase(0);
  CHECK(report_table(plain).find("Compute") == std::string::npos);
  for (const char* k : {"gpu_time_s", "launches_by_gate", "window_waits", "turns", "turns_count", "drain_timeouts"})
    plain["devices"][0].erase(k);
  CHECK(report_table(plain).find("Compute") == std::string::npos);
}

TEST_CASE("svg: a lane per timesliced device, a bar per turn on the shared time axis; none without turns") {
  TempDir tmp("coloc-svg-turns");
  const std::string svg = render_svg(timesliced_report());
  coloc::test::write_file(tmp / "r.svg", svg);
  auto lint = coloc::test::run({"xmllint", "--noout", tmp / "r.svg"}, coloc::test::Env(), std::chrono::seconds(20));
  CHECK_MESSAGE(lint.exit_code == 0, coloc::test::describe(lint));
  CHECK(count(svg, "<g class='turn-lanes'>") == 1);
  CHECK(count(svg, "<g class='turn-lane'>") == 1);  // the device without turns has no lane
  CHECK(count(svg, "<rect class='turn'") == 4);
  CHECK(svg.find("GPU-00000000... · 4 turns · GPU 3.25 s") != std::string::npos);
  CHECK(svg.find("held the device from +2.00 s to +2.50 s") != std::string::npos);
  // Shared axis: the bar of the turn from 2.0 to 2.5 s of a 10 s job starts a fifth of the way in.
  const double pw = 1060 - 86 - 280;
  CHECK(svg.find("<rect class='turn' x='" + std::to_string(86 + pw * 0.2).substr(0, 6)) != std::string::npos);
  // The picture grows by the lanes: taller than the same report without turns.
  json none = timesliced_report();
  for (json& d : none["devices"]) d["turns"] = json::array();
  const std::string plain = render_svg(none);
  CHECK(plain.find("turn-lane") == std::string::npos);
  CHECK(plain.size() < svg.size());
  // Malformed turns are skipped, not fatal.
  json bad = timesliced_report();
  bad["devices"][0]["turns"] = json::array({"x", json::array({1}), json::array({3.0, 4.0})});
  CHECK(count(render_svg(bad), "<rect class='turn'") == 1);
}

}  // TEST_SUITE
