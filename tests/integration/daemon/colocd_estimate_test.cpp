// colocd and a job's declared estimate (Register v10, kRegEstimate) with the reference client
// (tests/programs/colocd_client --estimate, as libcoloc.so sends COLOC_MEM_ESTIMATE): the job is
// reserved on it at admission, before it allocates anything, when it has no limit and no history;
// a newcomer that does not fit beside it waits; history outranks it; a v9 client's job has none;
// and a reservation from it survives a colocd SIGKILL and restart.
#include <doctest/doctest.h>

#include <filesystem>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

constexpr uint64_t GiB = 1ull << 30;

json history(const Colocd& d) {
  coloc::cli::Answer a = d.ask(coloc::proto::AdminOp::kHistory);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  return json::parse(a.text);
}

/// The job's one device as status shows it, once it is admitted there; null until then.
json admitted_device(const Colocd& d, const std::string& job) {
  json j = d.job(job);
  if (j.is_null() || j["devices"].empty() || j["devices"][0]["state"] == "admission-pending") return nullptr;
  return j["devices"][0];
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd estimate: a declared estimate is the reservation at admission; a newcomer waits beside it; a v9 client has none") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "est-a", "--estimate", "10GiB", "attach:1:16GiB:512MiB", "hold-file:" + go, "goodbye:0",
                     "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  json dev = admitted_device(d, "est-a");
  REQUIRE(!dev.is_null());
  // Before it allocated anything (its context request aside): its estimate is held, not a limit.
  CHECK(dev["reservation_source"] == "estimate");
  CHECK(dev["reserved"] == 10 * GiB);
  CHECK(dev["limit"].is_null());
  CHECK(d.job("est-a")["estimate"] == 10 * GiB);
  CHECK(d.job("est-a")["limit"].is_null());
  // Another 10 GiB does not fit beside it on 16 GiB: admitted only once est-a is done.
  auto b = d.client({"--job", "est-b", "--estimate", "10GiB", "attach:1:16GiB:512MiB", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] {
    json j = d.job("est-b");
    return !j.is_null() && j["state"] == "admission-pending";
  }));
  CHECK_FALSE(has_event(*b, "attach"));
  write_file(go, "");
  for (Proc* p : {a.get(), b.get()}) {
    ProcResult r = p->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  json rb = d.report("est-b");
  CHECK(rb["devices"][0]["reservation_source"] == "estimate");
  CHECK(rb["devices"][0]["wait_admission_s"].get<double>() > 0);
  CHECK(d.report("est-a")["devices"][0]["reservation_source"] == "estimate");
  // A v9 client cannot declare one (the reference client leaves it out, as libcoloc.so would).
  ProcResult old = d.client({"--job", "old", "--proto", "9", "--estimate", "10GiB", "attach:1:16GiB:512MiB",
                             "goodbye:0", "exit:0"})->wait(20s);
  REQUIRE_MESSAGE(old.exit_code == 0, describe(old));
  CHECK(d.report("old")["devices"][0]["reservation_source"] == "none");
}

TEST_CASE("colocd estimate: --mem over history over the declared estimate") {
  Colocd d;
  // The same argv each time (one fingerprint), the same job id (reports <id>.json, <id>.2.json).
  const std::vector<std::string> steps = {"--estimate", "2GiB", "attach:1:40GiB:1GiB", "alloc:0:6GiB", "goodbye:0",
                                          "exit:0"};
  auto run = [&](const std::string& report, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--job", "same"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), steps.begin(), steps.end());
    ProcResult r = d.client(args)->wait(30s);
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    return d.report(report)["devices"][0];
  };
  // No history yet: the estimate (which the job then grows past by ordinary grants).
  json first = run("same");
  CHECK(first["reservation_source"] == "estimate");
  CHECK(first["reservation"] == 2 * GiB);
  REQUIRE(wait_until([&] { return history(d)["fingerprints"].size() == 1; }));
  const json fp = history(d)["fingerprints"][0];
  CHECK(fp["fingerprint"] == first["fingerprint"]);
  // Then history, although an estimate is declared.
  json again = run("same.2");
  CHECK(again["reservation_source"] == "history");
  CHECK(again["reservation"] == fp["estimate"]);
  // And --mem over both (another argv: a fingerprint of its own, no history).
  json mem = run("same.3", {"--mem", "8GiB"});
  CHECK(mem["reservation_source"] == "mem");
  CHECK(mem["reservation"] == 8 * GiB);
}

TEST_CASE("colocd estimate: a reservation from the declared estimate survives a colocd SIGKILL and restart") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "across", "--estimate", "9GiB", "--reconnect", "attach:1:40GiB:512MiB", "alloc:0:1GiB",
                     "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE(admitted_device(d, "across")["reservation_source"] == "estimate");
  // Its state is saved with the reservation's source (a job's first save comes after its first second).
  REQUIRE(wait_until([&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d.state() + "/jobs", ec)) {
      if (e.path().extension() != ".json") continue;  // a save in progress (X.json.tmp) is not saved yet
      json s = json::parse(read_file(e.path()), nullptr, false);
      if (s.is_discarded() || !s.contains("estimate") || !s["estimate"].is_object()) continue;
      for (const json& r : s["estimate"].value("reservations", json::array()))
        if (r.value("source", "") == "estimate") return true;
    }
    return false;
  }, 20s));
  d.kill9();
  d.start();
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  REQUIRE(wait_until([&] {
    json dev = admitted_device(d, "across");
    return !dev.is_null() && dev["reservation_source"] == "estimate" && dev["reserved"] == 9 * GiB;
  }, 20s));
  write_file(go, "");
  ProcResult r = a->wait(20s);
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  json rep = d.report("across");
  CHECK(rep["devices"][0]["reservation_source"] == "estimate");
  CHECK(rep["devices"][0]["reservation"] == 9 * GiB);
}

}  // TEST_SUITE
