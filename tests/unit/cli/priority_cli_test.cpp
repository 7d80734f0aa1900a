// The CLI's side of the priority policy: the --target-slowdown grammar, and how policies with a
// target read in `coloc policy`, `coloc status` and `coloc policy DEVICE MODE`.
#include <doctest/doctest.h>

#include <string>

#include "format.h"
#include "run_plan.h"

using namespace coloc::cli;
using nlohmann::json;

TEST_SUITE("cli") {

TEST_CASE("coloc policy --target-slowdown: a whole percentage from 1% to 50%, with or without the sign") {
  uint32_t pct = 0;
  std::string err;
  for (auto [text, want] : {std::pair<const char*, uint32_t>{"5%", 5}, {"5", 5}, {"1%", 1}, {"50", 50}, {"010%", 10}}) {
    CAPTURE(text);
    err.clear();
    REQUIRE(parse_target_slowdown(text, &pct, &err));
    CHECK(pct == want);
    CHECK(err.empty());
  }
  for (const char* bad : {"0", "0%", "51%", "100", "999999999%"}) {
    CAPTURE(bad);
    pct = 99;
    CHECK_FALSE(parse_target_slowdown(bad, &pct, &err));
    CHECK(err.find("out of range (1% to 50%") != std::string::npos);
    CHECK(pct == 99);  // untouched
  }
  for (const char* bad : {"", "%", "5.5%", "5%%", "-5", "+5", " 5", "five", "5 %", "0x5", "4294967301"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_target_slowdown(bad, &pct, &err));
    CHECK(err.find("--target-slowdown '" + std::string(bad) + "': a whole percentage from 1% to 50%") == 0);
  }
}

TEST_CASE("coloc policy and status show the priority policy's target") {
  CHECK(policy_text(json{{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 7}}) == "priority, target slowdown 7%");
  CHECK(policy_text(json{{"mode", "priority"}}) == "priority");  // (no target: said as it is)
  CHECK(policy_text(json{{"mode", "timeslice"}, {"quantum_ms", 50}}) == "timeslice, quantum 50 ms");

  json s = json::parse(R"({"daemon": {"pid": 1}, "devices": [], "policies": {
    "default": {"mode": "priority", "quantum_ms": 100, "target_pct": 5},
    "devices": [
      {"index": 0, "index_from": "nvml", "uuid": "GPU-aa", "policy": {"mode": "priority", "quantum_ms": 100, "target_pct": 12},
       "holder": null, "seen": true},
      {"index": 1, "index_from": "nvml", "uuid": "GPU-bb", "policy": {"mode": "timeslice", "quantum_ms": 50},
       "holder": "train-1", "seen": true}]}})");
  std::string t = policy_table(s);
  CHECK_MESSAGE(t.find("INDEX  DEVICE  POLICY     QUANTUM  TURN     TARGET") != std::string::npos, t);
  CHECK_MESSAGE(t.find("0      GPU-aa  priority   -        -        12%") != std::string::npos, t);
  CHECK_MESSAGE(t.find("1      GPU-bb  timeslice  50 ms    train-1  -") != std::string::npos, t);
  CHECK(t.find("Devices colocd learns of later: priority, target slowdown 5% (coloc policy all)") != std::string::npos);
  // The controller's state: idle without a control object, then probing, then its level.
  CHECK_MESSAGE(t.find("CONTROLLER") != std::string::npos, t);
  CHECK_MESSAGE(t.find("12%     idle") != std::string::npos, t);
  s["policies"]["devices"][0]["control"] = json{{"active", true}, {"probing", true}, {"allow", 0.5}, {"slowdown", 0}};
  t = policy_table(s);
  CHECK_MESSAGE(t.find("12%     probing") != std::string::npos, t);
  s["policies"]["devices"][0]["control"] = json{{"active", true}, {"probing", false}, {"allow", 0.85}, {"slowdown", 0.031}};
  t = policy_table(s);
  CHECK_MESSAGE(t.find("12%     allow 0.85, slowdown 3.1%") != std::string::npos, t);
  // No device under priority: no TARGET column (the table as before).
  s["policies"]["devices"][0]["policy"] = json{{"mode", "share"}, {"quantum_ms", 100}};
  CHECK(policy_table(s).find("TARGET") == std::string::npos);

  // coloc policy DEVICE priority: the change, with both targets.
  json reply = json::parse(R"({"device": "0", "all": false, "default": null,
    "devices": [{"index": 0, "index_from": "nvml", "uuid": "GPU-aa",
                 "policy": {"mode": "priority", "quantum_ms": 100, "target_pct": 10},
                 "was": {"mode": "priority", "quantum_ms": 100, "target_pct": 5}}]})");
  CHECK(policy_set_text(reply) == "device 0 GPU-aa: priority, target slowdown 10% (was priority, target slowdown 5%)\n");

  // coloc status: the device's line names its policy and target.
  json st = json::parse(R"({"daemon": {"pid": 7, "protocol": 8, "watcher": "pidfd", "policy": "priority-fifo", "uptime_s": 1},
    "devices": [{"uuid": "GPU-aa", "index": 0, "index_from": "nvml", "holder": null,
                 "policy": {"mode": "priority", "quantum_ms": 100, "target_pct": 5},
                 "capacity": 1, "headroom": 0, "outside": 0, "committed": 0, "in_use": 0, "available": 1, "jobs": []}],
    "jobs": []})");
  CHECK_MESSAGE(status_table(st).find("0  GPU-aa  priority, target slowdown 5%\n") != std::string::npos, status_table(st));
}

}  // TEST_SUITE
