// colocd's reservations through the real daemon (fake protocol clients, real sockets): a raised
// limit raises the reservation when it fits and says so in the answer to the set; a job that
// comes back after the resume grace, into a device a newcomer was admitted into meanwhile, keeps
// what it has in use but does not over-commit the device.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstring>

#include "coloc/wire.h"
#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

coloc::cli::Answer set_mem(const Colocd& d, const std::string& job, uint64_t bytes) {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(coloc::proto::AdminOp::kSet);
  m.set_fields = coloc::proto::kSetMem;
  m.mem = bytes;
  coloc::proto::set_string(m.job, job.c_str());
  return coloc::cli::admin_request(d.socket(), m, 5000);
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd: coloc set --mem raising a limit raises the reservation when it fits, keeps it when not, and says which") {
  Colocd d({"--headroom", "0"});
  auto a = d.client({"--job", "a", "--mem", "8GiB", "attach:1:40GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  coloc::cli::Answer ans = set_mem(d, "a", 20 * GiB);
  REQUIRE_MESSAGE(ans.kind == coloc::cli::Answer::Kind::kOk, ans.text);
  json reply = json::parse(ans.text);
  CHECK(reply["limit"] == 20 * GiB);
  CHECK(reply["reserved"] == 20 * GiB);
  REQUIRE(reply["reservation_changes"].size() == 1);
  CHECK(reply["reservation_changes"][0]["outcome"] == "raised");
  CHECK(reply["reservation_changes"][0]["before"] == 8 * GiB);
  CHECK(reply["reservation_changes"][0]["after"] == 20 * GiB);
  CHECK(d.job("a")["devices"][0]["reserved"] == 20 * GiB);
  // Another job takes 15 GiB; raising a's limit to 30 GiB would need 10 GiB more: only 5 are left.
  auto b = d.client({"--job", "b", "--mem", "15GiB", "attach:1:40GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*b, "holding"); }));
  ans = set_mem(d, "a", 30 * GiB);
  REQUIRE_MESSAGE(ans.kind == coloc::cli::Answer::Kind::kOk, ans.text);
  reply = json::parse(ans.text);
  CHECK(reply["limit"] == 30 * GiB);
  CHECK(reply["reserved"] == 20 * GiB);
  CHECK(reply["reservation_changes"][0]["outcome"] == "kept: does not fit now");
  CHECK(reply["reservation_changes"][0]["available"] == 5 * GiB);
  json dev = d.status()["devices"][0];
  CHECK(dev["committed"] == 35 * GiB);
  CHECK(dev["over_committed"] == false);
  for (Proc* p : {a.get(), b.get()}) p->kill(SIGTERM);
}

TEST_CASE("colocd restart: a job back after the resume grace does not over-commit the device a newcomer got meanwhile") {
  Colocd d({"--resume-grace", "300ms"});
  // 40 GiB device, 2% headroom: 39.2 GiB usable. "late" holds 25 GiB reserved, 12 GiB in use (the
  // fake client re-registers with the device's free memory it was given: 28 GiB, as after its alloc).
  auto late = d.client({"--job", "late", "--mem", "25GiB", "--reconnect", "attach:1:40GiB:256MiB:28GiB", "alloc:0:12GiB",
                        "hold"});
  REQUIRE(wait_until([&] { return has_event(*late, "holding"); }));
  REQUIRE(wait_until([&] { return read_file(d.state() + "/clients").find(std::to_string(late->pid()) + " ") == 0; }));
  late->kill(SIGSTOP);  // alive, holding its memory, but it cannot re-register in time
  d.kill9();
  d.start();
  REQUIRE_MESSAGE(wait_until([&] { return d.status()["daemon"]["holding_for_restart"] == false; }), d.log());
  // A newcomer declares 25 GiB; the device shows late's 12 GiB used, by no coloc client now.
  auto fresh = d.client({"--job", "fresh", "--mem", "25GiB", "attach:1:40GiB:256MiB:28GiB", "hold"});
  REQUIRE_MESSAGE(wait_until([&] { return has_event(*fresh, "holding"); }), d.log());
  REQUIRE(d.job("fresh")["reserved"] == 25 * GiB);
  late->kill(SIGCONT);
  REQUIRE_MESSAGE(wait_until([&] { return has_event(*late, "reregistered"); }), d.log());
  REQUIRE(wait_until([&] { return !d.job("late").is_null(); }));
  json s = d.status();
  json dev = s["devices"][0];
  INFO(s.dump(1));
  CHECK(dev["outside"] == 0);  // late's memory is coloc's again
  CHECK(dev["committed"].get<uint64_t>() <= dev["usable"].get<uint64_t>());
  CHECK(dev["over_committed"] == false);
  json lj = d.job("late");
  CHECK(lj["granted"].get<uint64_t>() >= 12 * GiB);  // what it has in use is kept
  CHECK(lj["reserved"].get<uint64_t>() < 25 * GiB);  // its reservation is cut to what was left
  CHECK(d.job("fresh")["reserved"] == 25 * GiB);
  CHECK(d.log().find("reservation cut") != std::string::npos);
  for (Proc* p : {late.get(), fresh.get()}) p->kill(SIGTERM);
}

}  // TEST_SUITE
