// Compute policies and weights across colocd restarts (real processes, real sockets): a device's
// policy and the "all" default survive SIGTERM and SIGKILL; a job's weight survives with the job;
// a malformed policies.json is kept aside as policies.json.bad, said in the log, and every device
// shares; kPolicy's refusals change nothing.
#include <doctest/doctest.h>

#include <cstring>

#include "colocd_fixture.h"

using namespace coloc::test;
using coloc::proto::AdminOp;
using coloc::proto::AdminStatus;
using coloc::proto::PolicyMode;
using nlohmann::json;

namespace {

const std::string kDev1 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001";

coloc::cli::Answer set_policy(const Colocd& d, const std::string& device, PolicyMode mode, uint32_t quantum_ms = 0) {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(AdminOp::kPolicy);
  m.mode = uint8_t(mode);
  m.quantum_ms = quantum_ms;
  coloc::proto::set_string(m.job, device.c_str());
  return coloc::cli::admin_request(d.socket(), m, 5000);
}

coloc::cli::Answer set_weight(const Colocd& d, const std::string& job, uint8_t weight) {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(AdminOp::kSet);
  m.set_fields = coloc::proto::kSetWeight;
  m.weight = weight;
  coloc::proto::set_string(m.job, job.c_str());
  return coloc::cli::admin_request(d.socket(), m, 5000);
}

/// The policy status shows for `uuid` in its "policies" list (null when not listed).
json policy_of(const Colocd& d, const std::string& uuid) {
  const json s = d.status();  // (not a temporary's member in the loop: it would be gone)
  for (const json& dev : s["policies"]["devices"])
    if (dev["uuid"] == uuid) return dev["policy"];
  return nullptr;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd restart: a device's policy and the default for all survive SIGTERM and SIGKILL") {
  Colocd d;
  auto c = d.client({"--job", "pj", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  auto a = set_policy(d, kDev1, PolicyMode::kTimeslice, 40);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  c->kill(SIGKILL);
  // The device is known from the saved policy alone after a restart (no client brings it).
  for (bool kill9 : {false, true}) {
    CAPTURE(kill9);
    if (kill9) d.kill9();
    else CHECK(d.stop().exit_code == 0);
    d.start();
    CHECK(policy_of(d, kDev1) == json{{"mode", "timeslice"}, {"quantum_ms", 40}});
  }
  // It applies to the device when a client brings it again.
  auto c2 = d.client({"--job", "pj2", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c2, "holding"); }));
  bool found = false;
  const json st = d.status();
  for (const json& dev : st["devices"])
    if (dev["uuid"] == kDev1) found = dev["policy"] == json{{"mode", "timeslice"}, {"quantum_ms", 40}};
  CHECK(found);
  // "all": the default survives too, and replaces the device's own entry.
  a = set_policy(d, "all", PolicyMode::kShare);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  CHECK(json::parse(a.text)["default"]["mode"] == "share");
  a = set_policy(d, "all", PolicyMode::kTimeslice, 250);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  CHECK(policy_of(d, kDev1) == json{{"mode", "timeslice"}, {"quantum_ms", 250}});
  d.kill9();
  d.start();
  CHECK(d.status()["policies"]["default"] == json{{"mode", "timeslice"}, {"quantum_ms", 250}});
  json saved = json::parse(read_file(d.state() + "/policies.json"));
  CHECK(saved["devices"].empty());  // "all" dropped the device's own entry: the default covers it
  c2->kill(SIGKILL);
}

TEST_CASE("colocd restart: a job's weight survives with the job") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "wr", "--reconnect", "attach:1:10GiB:1GiB", "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "attach"); }));
  auto r = set_weight(d, "wr", 6);
  REQUIRE_MESSAGE(r.kind == coloc::cli::Answer::Kind::kOk, r.text);
  CHECK(json::parse(r.text)["weight"] == 6);
  // Saved at once (like a limit, a priority or a pause).
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "wr");
                    return !s.is_null() && s["weight"] == 6;
                  }),
                  d.log());
  d.kill9();
  d.start();
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  CHECK(d.job("wr")["weight"] == 6);
  write_file(go, "");
  ProcResult pr = a->wait(10s);
  CHECK_MESSAGE(pr.exit_code == 0, describe(pr));
}

TEST_CASE("colocd: a malformed policies.json is kept aside, said in the log, and every device shares") {
  Colocd d({}, false);
  ::mkdir(d.state().c_str(), 0755);
  write_file(d.state() + "/policies.json", "{\"format\": 1, \"devices\": {\"" + kDev1 + "\": {\"mode\": \"turbo\"}}}");
  d.start();
  CHECK(file_exists(d.state() + "/policies.json.bad"));
  CHECK_FALSE(file_exists(d.state() + "/policies.json"));
  CHECK_MESSAGE(d.log().find("policies.json are unusable (" + kDev1 + ": mode is not share, timeslice or priority)") !=
                    std::string::npos,
                d.log());
  CHECK(d.status()["policies"]["default"].is_null());
  CHECK(policy_of(d, kDev1).is_null());  // not known at all
  // A new policy is saved as a good file; the bad one stays for inspection.
  auto c = d.client({"--job", "pj", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  auto a = set_policy(d, kDev1, PolicyMode::kTimeslice);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  CHECK(json::parse(read_file(d.state() + "/policies.json"))["devices"][kDev1]["quantum_ms"] == 100);
  CHECK(read_file(d.state() + "/policies.json.bad").find("turbo") != std::string::npos);
  // Other saved state was not touched: the daemon restarts on it.
  d.kill9();
  d.start();
  CHECK(policy_of(d, kDev1) == json{{"mode", "timeslice"}, {"quantum_ms", 100}});
  c->kill(SIGKILL);
}

TEST_CASE("colocd: kPolicy refusals change nothing: an unknown or ambiguous device") {
  Colocd d;
  auto c = d.client({"--job", "pj", "attach:1:10GiB:1GiB,2:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  auto a = set_policy(d, "GPU-c0c0", PolicyMode::kTimeslice);
  CHECK(a.status == AdminStatus::kNotFound);
  a = set_policy(d, "4000", PolicyMode::kTimeslice);
  CHECK(a.status == AdminStatus::kNotFound);
  a = set_policy(d, "GPU-zz", PolicyMode::kTimeslice);
  CHECK(a.status == AdminStatus::kNotFound);
  CHECK(policy_of(d, kDev1) == json{{"mode", "share"}, {"quantum_ms", 100}});
  CHECK_FALSE(file_exists(d.state() + "/policies.json"));
  // A weight through kSet is v7: the fixture's request carries it as v7 and colocd takes it.
  auto w = set_weight(d, "pj", 100);
  REQUIRE_MESSAGE(w.kind == coloc::cli::Answer::Kind::kOk, w.text);
  CHECK(d.job("pj")["weight"] == 100);
  c->kill(SIGKILL);
}

}  // TEST_SUITE
