// daemon/compute/policy_store.h: the devices' compute policies on disk (by UUID, and the default
// `coloc policy all` sets), a malformed file kept aside; a job's saved weight
// (report/job_state_store.h), absent in states saved before weights.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "compute/policy_store.h"
#include "compute/scheduler.h"
#include "report/job_state_store.h"
#include "../../support/proc.h"

using coloc::broker::Uuid;
using coloc::compute::PolicySettings;
using coloc::compute::PolicyStore;
using coloc::proto::PolicyMode;
using nlohmann::json;
using namespace coloc::test;

namespace {

Uuid uuid(uint8_t n) {
  Uuid u;
  u.bytes.fill(0xab);
  u.bytes[15] = n;
  return u;
}

PolicySettings timeslice(uint64_t ms) {
  PolicySettings s;
  s.mode = PolicyMode::kTimeslice;
  s.quantum = ms * 1'000'000;
  return s;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("uuid: parse is the inverse of str") {
  Uuid u = uuid(7), back;
  REQUIRE(Uuid::parse(u.str(), &back));
  CHECK(back == u);
  std::string upper = u.str();
  for (size_t i = 4; i < upper.size(); ++i) upper[i] = char(std::toupper(static_cast<unsigned char>(upper[i])));
  REQUIRE(Uuid::parse(upper, &back));
  CHECK(back == u);
  for (std::string bad : {std::string(""), std::string("GPU-"), u.str().substr(0, 39), u.str() + "0",
                          "MIG-" + u.str().substr(4), u.str().substr(0, 12) + "x" + u.str().substr(13),
                          u.str().substr(0, 39) + "g"})
    CHECK_FALSE(Uuid::parse(bad, &back));
}

TEST_CASE("policy store: devices by UUID and the default survive a save and a load") {
  TempDir dir("policy-store");
  const std::string path = dir / "policies.json";
  {
    PolicyStore s(path);
    CHECK(s.load().empty());  // no file: nothing set, nothing wrong
    CHECK(s.devices().empty());
    CHECK_FALSE(s.default_settings());
    s.set(uuid(1), timeslice(50));
    s.set(uuid(2), PolicySettings{});
    REQUIRE(s.save().ok());
  }
  PolicyStore s(path);
  CHECK(s.load().empty());
  REQUIRE(s.devices().size() == 2);
  CHECK(s.devices().at(uuid(1)) == timeslice(50));
  CHECK(s.devices().at(uuid(2)) == PolicySettings{});
  CHECK_FALSE(s.for_device(uuid(3)));
  json j = json::parse(read_file(path));
  CHECK(j["format"] == 1);
  CHECK(j["default"].is_null());
  CHECK(j["devices"][uuid(1).str()] == json{{"mode", "timeslice"}, {"quantum_ms", 50}});

  // The scheduler gets each device's settings.
  coloc::compute::Scheduler sched;
  s.apply(sched);
  CHECK(sched.policy(uuid(1)) == timeslice(50));
  CHECK(sched.policy(uuid(3)) == PolicySettings{});

  // "all": the default for every device, each one's own entry dropped; a device learned later gets it.
  s.set_default(timeslice(200));
  CHECK(s.devices().empty());
  CHECK(*s.for_device(uuid(1)) == timeslice(200));
  REQUIRE(s.save().ok());
  PolicyStore again(path);
  CHECK(again.load().empty());
  REQUIRE(again.default_settings());
  CHECK(*again.default_settings() == timeslice(200));
  CHECK(again.apply_new_device(uuid(9), sched));
  CHECK(sched.policy(uuid(9)) == timeslice(200));
  CHECK_FALSE(again.apply_new_device(uuid(9), sched));  // already so
  // A device's own entry wins over the default.
  again.set(uuid(4), PolicySettings{});
  CHECK_FALSE(again.apply_new_device(uuid(4), sched));
  CHECK(*again.for_device(uuid(4)) == PolicySettings{});
}

TEST_CASE("policy store: a malformed file is kept aside as .bad, said, and nothing of it is used") {
  TempDir dir("policy-store");
  const std::string path = dir / "policies.json";
  const std::string good_uuid = uuid(1).str();
  for (std::string text :
       {std::string("{not json"), std::string("[]"), std::string(R"({"format": 2, "devices": {}})"),
        std::string(R"({"format": 1})"),
        R"({"format": 1, "devices": {")" + good_uuid + R"(": {"mode": "fast"}}})",
        R"({"format": 1, "devices": {")" + good_uuid + R"(": {"mode": "timeslice", "quantum_ms": 0}}})",
        R"({"format": 1, "devices": {")" + good_uuid + R"(": {"mode": "priority", "target_pct": 51}}})",
        std::string(R"({"format": 1, "devices": {"GPU-1": {"mode": "share"}}})"),
        std::string(R"({"format": 1, "default": "timeslice", "devices": {}})")}) {
    CAPTURE(text);
    write_file(path, text);
    ::unlink((path + ".bad").c_str());
    PolicyStore s(path);
    s.set(uuid(5), timeslice(10));  // whatever it held is replaced by what it loads: nothing
    std::vector<std::string> problems = s.load();
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].find(path) != std::string::npos);
    CHECK(problems[0].find("kept as " + path + ".bad") != std::string::npos);
    CHECK(s.devices().empty());
    CHECK_FALSE(s.default_settings());
    CHECK_FALSE(file_exists(path));
    CHECK(read_file(path + ".bad") == text);
    // The next save writes a good file again.
    s.set(uuid(1), timeslice(100));
    REQUIRE(s.save().ok());
    PolicyStore t(path);
    CHECK(t.load().empty());
    CHECK(t.devices().size() == 1);
  }
}

TEST_CASE("policy store: a save that cannot be written is an error naming the file") {
  PolicyStore s("/nonexistent-dir-of-coloc/policies.json");
  s.set(uuid(1), timeslice(100));
  auto r = s.save();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("/nonexistent-dir-of-coloc/policies.json") != std::string::npos);
}

TEST_CASE("job state store: the saved weight (absent: a state saved before weights, weight 1)") {
  coloc::report::SavedJob a;
  a.key = {0, "j"};
  a.priority = "normal";
  a.boot_id = "b";
  a.recorder = json::object();
  a.weight = 7;
  json j = coloc::report::JobStateStore::to_json(a);
  CHECK(j["weight"] == 7);
  CHECK(coloc::report::JobStateStore::from_json(j).value().weight == 7);
  j.erase("weight");
  CHECK(coloc::report::JobStateStore::from_json(j).value().weight == 1);
  for (json bad : {json(0), json(101), json(-1), json("2"), json(1.5)}) {
    j["weight"] = bad;
    auto r = coloc::report::JobStateStore::from_json(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("weight") != std::string::npos);
  }
}

}  // TEST_SUITE
