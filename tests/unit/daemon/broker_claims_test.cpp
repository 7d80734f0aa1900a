// The broker's books against a lying client (issue 26): a process's stats page is its own word.
// Its claim counts at most what colocd granted it and what the driver holds for the process
// (Broker::client_in_use, reconcile_device), the driver's list of processes bounds memory used
// outside coloc from below, and a page that claims more than the process can hold is shown.
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;

TEST_SUITE("daemon") {

TEST_CASE("claims: a stats page claiming the whole device counts only its grant, and outside memory stays seen") {
  Bench b;
  ClientId liar = b.add_pid("liar", 100);
  REQUIRE(b.granted(b.attach(liar, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  b.use(liar, 0, 16 * GiB);  // the lie
  const Client& c = *b.broker.find_client(liar);
  CHECK(b.broker.client_in_use(c, 0) == 512 * MiB);
  // 6.5 GiB used by a process outside coloc, 512 MiB by the liar's context.
  b.broker.refresh_outside(0, 16 * GiB - 7 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 6 * GiB + 512 * MiB);
  // So a job declaring 12 GiB does not fit (16 - 6.5 - 0.5 = 9 GiB) and waits.
  ClientId honest = b.add_pid("honest", 101, 12 * GiB);
  uint32_t s = b.attach(honest, {{1, 16 * GiB, 512 * MiB}});
  CHECK(b.reply(s) == nullptr);  // parked
  CHECK(b.broker.waiters().size() == 1);
}

TEST_CASE("claims: the driver's figure bounds a claim inside its grant, once two readings show it") {
  Bench b;
  ClientId a = b.add_pid("a", 100, 8 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  REQUIRE(b.granted(b.grow(a, 0, 8 * GiB)));
  const Client& c = *b.broker.find_client(a);
  // It holds 1.5 GiB (the driver's figure) and its page claims its whole grant.
  b.use(a, 0, 8 * GiB);
  b.processes({{100, 1536 * MiB}, {200, 6 * GiB}});
  CHECK(c.slots[0].excess == 0);  // one reading: it could be an allocation between charge and driver call
  b.processes({{100, 1536 * MiB}, {200, 6 * GiB}});
  CHECK(c.slots[0].excess == 6 * GiB + 512 * MiB);
  CHECK(b.broker.client_in_use(c, 0) == 1536 * MiB);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 0);
  b.broker.refresh_outside(0, 16 * GiB - 1536 * MiB - 6 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 6 * GiB);
  // Within its grant it is no overclaim (a pool's charge for what it may grow by looks the same).
  CHECK(c.slots[0].overclaim == 0);
  CHECK(b.broker.overclaimed(*b.broker.find_job({1000, "a"})) == 0);
  // The page tells the truth: the excess goes at once.
  b.use(a, 0, 1 * GiB);
  b.processes({{100, 1536 * MiB}, {200, 6 * GiB}});
  CHECK(c.slots[0].excess == 0);
  CHECK(b.broker.client_in_use(c, 0) == 1 * GiB);
  // Now the driver's figure is above the ledger: the difference is driver overhead, as before.
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 512 * MiB);
}

TEST_CASE("claims: a lie inside the liar's own grant, coming and going, never makes room that is not there") {
  // The claim is bounded by the grant, and the grant is committed: whatever the page says
  // between readings, what the books call available is never more than the device has free.
  Bench b;
  ClientId liar = b.add_pid("liar", 100, 8 * GiB);
  REQUIRE(b.granted(b.attach(liar, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  REQUIRE(b.granted(b.grow(liar, 0, 8 * GiB)));
  const Bytes outside = 4 * GiB, held = 1 * GiB;  // really used: 4 GiB outside, 1 GiB by the liar
  for (int i = 0; i < 8; ++i) {
    b.use(liar, 0, i % 2 ? 8 * GiB : held);
    b.processes({{100, held}, {200, outside}});
    b.broker.refresh_outside(0, 16 * GiB - outside - held, b.now);
    b.collect();
    CHECK(b.broker.available(0) <= 16 * GiB - outside - held);
  }
}

TEST_CASE("claims: a page above both the grant and the driver's figure, two readings in a row, is an overclaim") {
  Bench b;
  ClientId liar = b.add_pid("liar", 100);
  REQUIRE(b.granted(b.attach(liar, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  const Client& c = *b.broker.find_client(liar);
  b.use(liar, 0, 16 * GiB);
  b.processes({{100, 512 * MiB}});
  CHECK(c.slots[0].overclaim == 0);  // one reading: could be an allocation in flight
  b.processes({{100, 512 * MiB}});
  // (beyond one context's charge of slack: a force-charged context the driver made smaller)
  CHECK(c.slots[0].overclaim == 15 * GiB);
  CHECK(b.broker.overclaimed(*b.broker.find_job({1000, "liar"})) == 15 * GiB);
  CHECK(b.broker.find_job({1000, "liar"})->devices.at(0).overhead == 0);
  b.use(liar, 0, 512 * MiB);
  b.processes({{100, 512 * MiB}});
  CHECK(c.slots[0].overclaim == 0);
  // A force-charged context beyond the grant that the driver shows held is no overclaim: the
  // driver's memory beyond the grant is the job's driver overhead, inside its limit.
  b.use(liar, 0, 1 * GiB);
  b.processes({{100, 1 * GiB}});
  b.processes({{100, 1 * GiB}});
  CHECK(c.slots[0].overclaim == 0);
  CHECK(b.broker.client_in_use(c, 0) == 512 * MiB);
  CHECK(b.broker.find_job({1000, "liar"})->devices.at(0).overhead == 512 * MiB);
}

TEST_CASE("claims: processes the driver lists that are not attached are outside, whatever the ledgers say") {
  Bench b;
  ClientId a = b.add_pid("a", 100, 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  REQUIRE(b.granted(b.grow(a, 0, 4 * GiB)));
  b.use(a, 0, 512 * MiB);
  b.processes({{100, 512 * MiB}, {200, 2 * GiB}});
  // A 3.5 GiB allocation in flight (charged, not yet on the device) when the device is read: the
  // ledgers are ahead of the device, yet what pid 200 holds stays outside.
  b.use(a, 0, 4 * GiB);
  b.broker.refresh_outside(0, 16 * GiB - 512 * MiB - 2 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 2 * GiB);
  // Once it is attached (a process of the job, re-registered), it is coloc's again.
  ClientId late = b.add_pid("late", 200);
  REQUIRE(b.granted(b.attach(late, {{1, 16 * GiB, 512 * MiB}})));
  b.use(late, 0, 512 * MiB);
  b.use(a, 0, 512 * MiB);
  b.broker.refresh_outside(0, 16 * GiB - 512 * MiB - 2 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 2 * GiB - 512 * MiB);  // its figure beyond its ledger, until reconciled
}

TEST_CASE("claims: a process list older than the device's reading floors nothing: its processes may have ended") {
  // The race e2e/outside_test.cpp met under ASan: the last sample's list names a process outside
  // coloc (10 GiB) that has ended since; a reading prompted in between (a job's first context)
  // shows only the job's context used. Floored by the old list, outside was min(10 GiB, used):
  // the job's own context counted twice.
  Bench b;
  ClientId a = b.add_pid("a", 100, 8 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  b.use(a, 0, 512 * MiB);
  b.processes({{100, 512 * MiB}, {200, 10 * GiB}});
  b.broker.refresh_outside(0, 16 * GiB - 512 * MiB - 10 * GiB, b.now);
  b.collect();
  REQUIRE(b.broker.devices().at(0).outside == 10 * GiB);
  b.advance(50'000'000);  // pid 200 ends; no list read since
  b.broker.refresh_outside(0, 16 * GiB - 512 * MiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
  // The next list, read with its figure, agrees.
  b.advance(50'000'000);
  b.processes({{100, 512 * MiB}});
  b.broker.refresh_outside(0, 16 * GiB - 512 * MiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
}

TEST_CASE("claims: a process list of another PID namespace is not used") {
  Bench b;
  ClientId a = b.add_pid("a", 100, 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  REQUIRE(b.granted(b.grow(a, 0, 2 * GiB)));
  b.use(a, 0, 2 * GiB);
  const Client& c = *b.broker.find_client(a);
  // The driver names the process as pid 7100 (its namespace's pid), not as 100: the engine finds
  // the list's pids are not processes of colocd's namespace.
  b.processes({{7100, 2 * GiB + 512 * MiB}}, 0, false);
  b.processes({{7100, 2 * GiB + 512 * MiB}}, 0, false);
  CHECK(c.slots[0].excess == 0);
  CHECK(b.broker.client_in_use(c, 0) == 2 * GiB);
  b.broker.refresh_outside(0, 16 * GiB - 2 * GiB - 512 * MiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 512 * MiB);  // not all of it
  // No list at all (the driver cannot tell): nothing is learnt, what is booked stays.
  b.broker.reconcile_device(0, nullptr, b.now);
  CHECK_FALSE(b.broker.devices().at(0).processes_known);
}

TEST_CASE("claims: a process with two attachments shares its figure between them") {
  Bench b;
  ClientId a1 = b.add_pid("a", 100, 8 * GiB);
  ClientId a2 = b.add_pid("a", 100, 8 * GiB);
  REQUIRE(b.granted(b.attach(a1, {{1, 16 * GiB, 2 * GiB}}, 16 * GiB)));
  REQUIRE(b.granted(b.attach(a2, {{1, 16 * GiB, 2 * GiB}}, 16 * GiB)));
  b.use(a1, 0, 2 * GiB);
  b.use(a2, 0, 2 * GiB);
  // The driver holds 3 GiB for the process: 2 GiB of the first ledger, 1 of the second.
  b.processes({{100, 3 * GiB}});
  b.processes({{100, 3 * GiB}});
  CHECK(b.broker.client_in_use(*b.broker.find_client(a1), 0) == 2 * GiB);
  CHECK(b.broker.client_in_use(*b.broker.find_client(a2), 0) == 1 * GiB);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 0);
  // 4.5 GiB: 4 GiB of ledgers and 512 MiB more, the driver overhead, counted once.
  b.processes({{100, 4 * GiB + 512 * MiB}});
  CHECK(b.broker.client_in_use(*b.broker.find_client(a2), 0) == 2 * GiB);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 512 * MiB);
}

TEST_CASE("claims: a re-registration's in-use is granted past what fits only when it is known to be in use") {
  auto resumed = [](Bytes in_use, Bytes driver_used) {
    ResumeEntry e;
    e.uuid = gpu(1);
    e.capacity = 16 * GiB;
    e.physical_free = 16 * GiB - 11 * GiB;  // the device shows 11 GiB used
    e.in_use = in_use;
    e.grant = in_use;
    e.measured = true;
    e.driver_used = driver_used;
    return e;
  };
  // An honest job holds 4 GiB; 10.5 GiB is used outside coloc... and a client, with no restart to
  // expect it and nothing the driver shows, re-registers claiming 15 GiB, its job limited to 1 GiB.
  {
    Bench b;
    ClientId honest = b.add_pid("honest", 100, 4 * GiB);
    REQUIRE(b.granted(b.attach(honest, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
    ClientId liar = b.add_pid("liar", 101, 1 * GiB);
    b.broker.resume(liar, std::vector<ResumeEntry>{resumed(15 * GiB, kUnknown)}, b.now, false);
    b.collect();
    CHECK(b.grant(liar, 0) <= 1 * GiB);  // what fits, within its limit: not the 15 GiB it claimed
    CHECK(b.broker.client_in_use(*b.broker.find_client(liar), 0) <= 1 * GiB);
  }
  // The same claim where the driver says the process holds 512 MiB: that is all that counts.
  {
    Bench b;
    ClientId liar = b.add_pid("liar", 101, 1 * GiB);
    b.broker.resume(liar, std::vector<ResumeEntry>{resumed(15 * GiB, 512 * MiB)}, b.now, false);
    b.collect();
    CHECK(b.grant(liar, 0) <= 1 * GiB);  // its word as a grant: within its limit
    CHECK(b.broker.client_in_use(*b.broker.find_client(liar), 0) == 512 * MiB);
  }
  // A process the restart expected: its ledger is believed, as before (memory really in use is
  // granted even past what fits).
  {
    Bench b;
    ClientId back = b.add_pid("back", 102, 1 * GiB);
    b.broker.resume(back, std::vector<ResumeEntry>{resumed(3 * GiB, kUnknown)}, b.now, true);
    b.collect();
    CHECK(b.grant(back, 0) >= 3 * GiB);
  }
}

}  // TEST_SUITE
