// colocd's run history with the reference client (tests/programs/colocd_client): a v9 client's job
// is recorded under its fingerprint when it ends, and a rerun is admitted on it; a client of
// protocol v8 (no environment hash) still registers and runs, but its job gets no history.
#include <doctest/doctest.h>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

json history(const Colocd& d) {
  coloc::cli::Answer a = d.ask(coloc::proto::AdminOp::kHistory);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  return json::parse(a.text);
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd history: a v9 job is recorded and its rerun admitted on it; a v8 job gets no history") {
  Colocd d;
  const std::vector<std::string> steps = {"attach:1:40GiB:1GiB", "alloc:0:6GiB", "goodbye:0", "exit:0"};
  // The client's command line is its fingerprint's command: a rerun is the same argv (the same
  // job id too, so its second report is <id>.2.json).
  auto run = [&](const std::string& job, const char* proto, const std::string& report) {
    std::vector<std::string> args = {"--job", job};
    if (proto) args.insert(args.end(), {"--proto", proto});
    args.insert(args.end(), steps.begin(), steps.end());
    ProcResult r = d.client(args)->wait(30s);
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    return d.report(report);
  };
  // A v8 client: runs as before, and leaves nothing in the history.
  json old = run("old", "8", "old");
  CHECK(old["devices"][0]["fingerprint"].is_null());
  CHECK(old["devices"][0]["reservation_source"] == "none");
  CHECK(history(d)["fingerprints"].empty());
  // A v9 client: recorded under its fingerprint when it ends.
  json first = run("same", nullptr, "same");
  REQUIRE(first["devices"][0]["fingerprint"].is_string());
  REQUIRE(wait_until([&] { return history(d)["fingerprints"].size() == 1; }));
  const json fp = history(d)["fingerprints"][0];
  CHECK(fp["fingerprint"] == first["devices"][0]["fingerprint"]);
  CHECK(fp["runs"] == 1);
  CHECK(fp["p95"].get<uint64_t>() >= 6ull << 30);
  // The same command again: admitted on it.
  json again = run("same", nullptr, "same.2");
  CHECK(again["devices"][0]["reservation_source"] == "history");
  CHECK(again["devices"][0]["reservation"] == fp["estimate"]);
  CHECK(history(d)["fingerprints"][0]["runs"] == 2);
  // And a v8 rerun of the same command is not: its job has no fingerprint.
  json old2 = run("same", "8", "same.3");
  CHECK(old2["devices"][0]["reservation_source"] == "none");
}

}  // TEST_SUITE
