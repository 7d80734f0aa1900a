// `coloc report`'s processes by step (the report's `processes[].step`, Register v11: COLOC_STEP,
// a Slurm step's label): one row per step in the order the steps first registered, with how many
// processes, their pids and how they ended; nothing when no process has a step.
#include <doctest/doctest.h>

#include <string>

#include "format.h"

using namespace coloc::cli;
using nlohmann::json;

namespace {

json report_with(json processes) {
  json r = json::parse(R"({
    "job": "slurm-4242", "uid": 1000, "user": "alice", "command": "python train.py", "priority": "normal",
    "complete": true, "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:00:10.000Z",
    "duration_s": 10.0, "exit_status": 0, "exit_signal": null, "processes": [], "devices": []
  })");
  r["processes"] = std::move(processes);
  return r;
}

json process(int pid, json step, json exit_code = 0, json signal = nullptr, json noticed_by = "goodbye") {
  return {{"pid", pid}, {"exit_code", exit_code}, {"signal", signal}, {"noticed_by", noticed_by}, {"step", step}};
}

/// The line of `text` that starts with `prefix` (after the indent), or "".
std::string line_of(const std::string& text, const std::string& prefix) {
  size_t at = text.find("\n  " + prefix);
  if (at == std::string::npos) return "";
  size_t end = text.find('\n', at + 1);
  return text.substr(at + 3, end - at - 3);
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("report: processes by step, in the order the steps first registered") {
  json procs = json::array({process(100, "batch"), process(101, "0"), process(102, "0", 1), process(103, "1", nullptr, 9),
                            process(104, "0", nullptr, nullptr, nullptr), process(105, nullptr)});
  const std::string t = report_table(report_with(procs));
  INFO(t);
  REQUIRE(t.find("\nProcesses by step:\n") != std::string::npos);
  CHECK(t.find("STEP   PROCESSES  PIDS") != std::string::npos);
  CHECK(line_of(t, "batch") == "batch  1          100            0");
  CHECK(line_of(t, "0 ") == "0      3          101, 102, 104  0, 1, running");
  CHECK(line_of(t, "1 ") == "1      1          103            signal 9");
  CHECK(line_of(t, "- ") == "-      1          105            0");  // a process without a step
  CHECK(t.find("batch") < t.find("\n  0 "));
  CHECK(t.find("\n  0 ") < t.find("\n  1 "));
}

TEST_CASE("report: a step's pids are cut after 8, the rest counted; a process ended while colocd was away is unknown") {
  json procs = json::array();
  for (int i = 0; i < 11; ++i) procs.push_back(process(200 + i, "extern"));
  procs.push_back(process(300, "extern", nullptr, nullptr, "daemon-away"));
  const std::string t = steps_table(report_with(procs));
  INFO(t);
  CHECK(t.find("extern  12         200, 201, 202, 203, 204, 205, 206, 207 +4 more  0, unknown") != std::string::npos);
}

TEST_CASE("report: no step section when no process has a step (a job not run under Slurm, an older colocd's report)") {
  CHECK(steps_table(report_with(json::array({process(1, nullptr), process(2, nullptr)}))).empty());
  CHECK(steps_table(report_with(json::array())).empty());
  json old = report_with(json::array({{{"pid", 1}, {"exit_code", 0}, {"signal", nullptr}, {"noticed_by", "bpf"}}}));
  CHECK(steps_table(old).empty());
  CHECK(report_table(old).find("Processes by step") == std::string::npos);
  json none = report_with(json::array());
  none.erase("processes");
  CHECK(steps_table(none).empty());
}

}  // TEST_SUITE
