// The job recorder's per-process step (Register v11, COLOC_STEP: a Slurm step's label): the
// report's `processes[].step`, null without one; kept when the process ends; carried through a
// daemon restart in the saved state (states of older daemons, without steps, still load); a
// process coming back after a restart whose state did not say gains its step.
#include <doctest/doctest.h>

#include "report/job_recorder.h"

using namespace coloc::report;
using nlohmann::json;

namespace {
constexpr uint64_t kSec = 1'000'000'000;

JobRecorder recorder() { return JobRecorder(3, {1000, "slurm-4242"}, "alice", "python train.py", 0xabc, "normal", 10 * kSec, 1700000000000); }
}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("job recorder: each process's step is in the report, null without one, and kept when it ends") {
  JobRecorder r = recorder();
  r.add_process(100, "batch");
  r.add_process(101, "0");
  r.add_process(102, "1");
  r.add_process(103);
  r.process_exited({101, 0, std::nullopt, "goodbye"});
  r.process_exited({102, std::nullopt, 9, "bpf"});
  json j = r.to_json(20 * kSec);
  REQUIRE(j["processes"].size() == 4);
  CHECK(j["processes"][0]["step"] == "batch");
  CHECK(j["processes"][1]["step"] == "0");
  CHECK(j["processes"][1]["exit_code"] == 0);
  CHECK(j["processes"][2]["step"] == "1");
  CHECK(j["processes"][2]["signal"] == 9);
  CHECK(j["processes"][3].contains("step"));
  CHECK(j["processes"][3]["step"].is_null());
}

TEST_CASE("job recorder: a process listed again (it came back after a restart) gains a step it had none of, never loses one") {
  JobRecorder r = recorder();
  r.add_process(100);
  const uint64_t before = r.revision();
  r.add_process(100, "0");
  CHECK(r.revision() != before);
  r.add_process(100, "1");  // a step once known stays
  r.add_process(100);
  json j = r.to_json(20 * kSec);
  REQUIRE(j["processes"].size() == 1);
  CHECK(j["processes"][0]["step"] == "0");
}

TEST_CASE("job recorder: steps survive a restart in the saved state; an older daemon's state (no steps) loads") {
  JobRecorder r = recorder();
  r.add_process(100, "0");
  r.add_process(101);
  r.process_exited({100, 0, std::nullopt, "goodbye"});
  json s = r.state();
  auto back = JobRecorder::from_state(s, 3);
  REQUIRE_MESSAGE(back.ok(), back.error().message());
  CHECK(back.value().state() == s);
  json j = back.value().to_json(20 * kSec);
  CHECK(j["processes"][0]["step"] == "0");
  CHECK(j["processes"][0]["exit_code"] == 0);
  CHECK(j["processes"][1]["step"].is_null());

  json old = s;  // [pid, exit code, signal, source]: as colocd wrote it before steps
  for (json& p : old["processes"]) p.erase(4);
  auto loaded = JobRecorder::from_state(old, 3);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message());
  CHECK(loaded.value().to_json(20 * kSec)["processes"][0]["step"].is_null());

  for (json bad : {json(5), json("a b"), json(std::string(16, 'x'))}) {
    CAPTURE(bad.dump());
    json spoiled = s;
    spoiled["processes"][0][4] = bad;
    auto r2 = JobRecorder::from_state(spoiled, 3);
    REQUIRE_FALSE(r2.ok());
    CHECK(r2.error().message().find("recorder.processes[0]") != std::string::npos);
  }
}

}  // TEST_SUITE
