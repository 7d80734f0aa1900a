// colocd's driver overhead from a ContextFootprint, through the real daemon (fake protocol
// clients on devices NVML does not know, real sockets): booked once per Attach from the device's
// use around the context, capped at what the job could have been granted when the client lies,
// and a flood of footprints neither changes the books nor floods the log.
#include <doctest/doctest.h>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {
constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;
}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd: a ContextFootprint books the driver overhead once, within what the job could be granted") {
  Colocd d({"--headroom", "0"});
  // The device's first figure: a job whose Attach says 15 of 16 GiB are free (1 GiB outside coloc;
  // its unused reservation lets its word count, outside.h).
  auto first = d.client({"--job", "first", "--mem", "2GiB", "attach:1:16GiB:0:15GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*first, "holding"); }));
  // An honest process: its ledger holds 512 MiB for its context, the driver took 2 GiB.
  auto honest = d.client({"--job", "honest", "--mem", "4GiB", "attach:1:16GiB:512MiB", "alloc:0:512MiB",
                          "footprint:0:13GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*honest, "holding"); }));
  REQUIRE(wait_until([&] { return d.job("honest")["driver_overhead"] == 1536 * MiB; }));
  CHECK(d.status()["devices"][0]["outside"] == 1 * GiB);
  // A liar claims the device is full after its context, again and again: it books no more than
  // its limit allows, once, and the log does not grow with the flood.
  auto liar = d.client({"--job", "liar", "--mem", "4GiB", "attach:1:16GiB:512MiB", "alloc:0:512MiB",
                        "footprint:0:0", "hold"});
  REQUIRE(wait_until([&] { return has_event(*liar, "holding"); }));
  REQUIRE(wait_until([&] { return d.job("liar")["driver_overhead"] == 4 * GiB - 512 * MiB; }));
  const size_t log_before = d.log().size();
  auto flood = d.client({"--job", "liar", "attach:1:16GiB:0", "footprint:0:0:2000", "status", "hold"});
  REQUIRE(wait_until([&] { return has_event(*flood, "holding"); }));
  json liar_job = d.job("liar");
  CHECK(liar_job["driver_overhead"] == 4 * GiB - 512 * MiB);  // its second process has no room left to book
  CHECK(liar_job["reserved"] == 4 * GiB);
  json dev = d.status()["devices"][0];
  CHECK(dev["committed"] <= 16 * GiB);
  CHECK(d.job("honest")["reserved"] == 4 * GiB);  // the honest job's reservation stands
  CHECK(d.log().size() - log_before < 4096);
}

}  // TEST_SUITE
