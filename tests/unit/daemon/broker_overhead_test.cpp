// The broker's books of driver overhead: the driver's per-process figure (set_overhead) and the
// estimate from a process's context footprint (context_footprint), charged to the job inside its
// limit and never counted as memory used outside coloc.
#include <doctest/doctest.h>

#include "broker/overhead.h"
#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;

TEST_SUITE("daemon") {

TEST_CASE("overhead: the reconciliation arithmetic (driver's per-process figure minus the ledger, at least 0)") {
  CHECK(reconcile_overhead(true, 2 * GiB, 512 * MiB) == 1536 * MiB);
  CHECK(reconcile_overhead(true, 512 * MiB, 512 * MiB) == 0);
  // The ledger ahead (an allocation charged before its driver call): no overhead, never negative.
  CHECK(reconcile_overhead(true, 512 * MiB, 1 * GiB) == 0);
  // Not named by the driver on the device: it holds nothing there.
  CHECK(reconcile_overhead(false, 0, 1 * GiB) == 0);
  // NVML_VALUE_NOT_AVAILABLE: unknown, keep what is booked.
  CHECK_FALSE(reconcile_overhead(true, kUnknown, 1 * GiB).has_value());
  // Booking: a higher reading at once; a lower one only as far as the reading before agrees (one
  // reading can be low by an allocation in flight, never high).
  CHECK(settle_overhead(1 * GiB, 1 * GiB, 2 * GiB) == 2 * GiB);
  CHECK(settle_overhead(2 * GiB, 2 * GiB, 1 * GiB) == 2 * GiB);  // a dip: kept
  CHECK(settle_overhead(2 * GiB, 1 * GiB, 1 * GiB) == 1 * GiB);  // the second low reading: lowered
  CHECK(settle_overhead(2 * GiB, 1536 * MiB, 1 * GiB) == 1536 * MiB);
  CHECK(settle_overhead(2 * GiB, 0, 0) == 0);
}

TEST_CASE("broker: driver overhead is charged to the job inside its limit, and is not memory outside coloc") {
  Bench b;
  ClientId a = b.add("a", 4 * GiB);
  uint32_t s = b.attach(a, {{1, 16 * GiB, 512 * MiB}});
  REQUIRE(b.granted(s));
  b.use(a, 0, 512 * MiB);  // the context as COLOC_CONTEXT_BYTES guesses it
  // It grows to 3.5 GiB before colocd learns the driver's figure.
  uint32_t g = b.grow(a, 0, 3 * GiB + 512 * MiB);
  REQUIRE(b.granted(g));
  CHECK(b.grant(a, 0) == 3 * GiB + 512 * MiB);
  b.use(a, 0, 1 * GiB);
  // The driver holds 2 GiB for its context: 1.5 GiB beyond the ledger.
  b.broker.set_overhead(a, 0, 1536 * MiB, b.now);
  b.collect();
  const Job& job = *b.broker.find_job({1000, "a"});
  CHECK(job.devices.at(0).overhead == 1536 * MiB);
  // Grant plus overhead would pass the limit: the grant is trimmed to the in-use, so the next
  // allocation asks, and what passes limit - overhead is refused at once.
  CHECK(b.grant(a, 0) == 1 * GiB);
  CHECK(b.broker.overhead(0) == 1536 * MiB);
  CHECK(job.devices.at(0).granted == 1 * GiB + 1536 * MiB);
  g = b.grow(a, 0, 2 * GiB + 512 * MiB);
  REQUIRE(b.granted(g));
  CHECK(b.grant(a, 0) == 2 * GiB + 512 * MiB);
  g = b.grow(a, 0, 2 * GiB + 512 * MiB + 1);
  CHECK(b.refused(g, Reason::kOwnLimit));
  // The device shows the driver's 2 GiB context and 1.5 GiB of allocations (ledger 2 GiB in use,
  // within its grant): nothing is outside coloc.
  REQUIRE(b.granted(b.grow(a, 0, 2 * GiB)));
  b.use(a, 0, 2 * GiB);
  b.broker.refresh_outside(0, 16 * GiB - 2 * GiB - 1536 * MiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
  // The overhead falls (a context destroyed): one low reading keeps the books (it could be an
  // allocation in flight), the second lowers them, and the job may grow into it again.
  b.broker.set_overhead(a, 0, 0, b.now);
  b.collect();
  CHECK(b.broker.overhead(0) == 1536 * MiB);
  g = b.grow(a, 0, 4 * GiB);
  CHECK(b.refused(g, Reason::kOwnLimit));
  b.broker.set_overhead(a, 0, 0, b.now);
  b.collect();
  CHECK(b.broker.overhead(0) == 0);
  g = b.grow(a, 0, 4 * GiB);
  CHECK(b.granted(g));
  // Leaving takes the overhead with the client; the books audit clean (collect) and are empty.
  b.broker.set_overhead(a, 0, 256 * MiB, b.now);
  b.remove(a);
  CHECK(b.broker.devices().at(0).committed == 0);
}

TEST_CASE("broker: a context footprint on a device colocd reads: the device's use beyond its use at admission and coloc's books") {
  Bench b;
  // Another job is there already; 1 GiB of the 16 GiB device is used outside coloc.
  ClientId other = b.add("other");
  REQUIRE(b.granted(b.attach(other, {{1, 16 * GiB, 0}}, 15 * GiB)));
  CHECK(b.broker.devices().at(0).outside == 1 * GiB);
  ClientId a = b.add("a", 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 15 * GiB)));
  // Between a's admission and its footprint, the other job's books gain 1 GiB (on the device too).
  REQUIRE(b.granted(b.grow(other, 0, 1 * GiB)));
  b.use(other, 0, 1 * GiB);
  // The driver made a's context at 2 GiB; its ledger charges 512 MiB for it.
  b.use(a, 0, 512 * MiB);
  b.footprint(a, 0, 15 * GiB - 2 * GiB - 1 * GiB, 512 * MiB);
  const Job& job = *b.broker.find_job({1000, "a"});
  CHECK(job.devices.at(0).overhead == 1536 * MiB);
  CHECK(b.broker.find_client(a)->slots[0].overhead_estimated);
  CHECK(b.broker.devices().at(0).outside == 1 * GiB);  // not outside coloc
  CHECK(b.broker.find_job({1000, "other"})->devices.at(0).overhead == 0);
  // Only the first footprint after the admission counts.
  b.footprint(a, 0, 1 * GiB, 512 * MiB);
  CHECK(job.devices.at(0).overhead == 1536 * MiB);
  // Inside the job's limit: 4 GiB - 1.5 GiB leaves 2.5 GiB to grow to.
  CHECK(b.granted(b.grow(a, 0, 2 * GiB + 512 * MiB)));
  CHECK(b.refused(b.grow(a, 0, 2 * GiB + 512 * MiB + 1), Reason::kOwnLimit));
  // The driver's own figure, when it comes, replaces the estimate at once, lower or not.
  b.broker.set_overhead(a, 0, 1 * GiB, b.now);
  b.collect();
  CHECK(job.devices.at(0).overhead == 1 * GiB);
  CHECK_FALSE(b.broker.find_client(a)->slots[0].overhead_estimated);
}

TEST_CASE("broker: a booked driver overhead reaches the job's processes at once (their job view, not a sample later)") {
  // The process's view of its job (ControlSlot::job_others: cuMemGetInfo, and what a refusal at
  // the job's limit says is held besides its own in-use) must not lag the books: an allocation
  // right after the context is refused for the overhead it would not otherwise see.
  Bench b;
  ClientId other = b.add("other");
  REQUIRE(b.granted(b.attach(other, {{1, 16 * GiB, 0}}, 16 * GiB)));
  ClientId a = b.add("a", 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB)));
  b.use(a, 0, 512 * MiB);
  auto others = [&] { return b.pages.at(a).control->slots[0].job_others.load(); };
  CHECK(others() == 0);
  b.footprint(a, 0, 16 * GiB - 2 * GiB, 512 * MiB);  // the driver made a 2 GiB context
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 1536 * MiB);
  CHECK(others() == 1536 * MiB);
  // The driver's own figure, higher: the same.
  b.broker.set_overhead(a, 0, 2 * GiB, b.now);
  b.collect();
  CHECK(others() == 2 * GiB);
}

TEST_CASE("broker: a context footprint without a baseline books nothing, and gives the device its first figure") {
  Bench b;
  ClientId a = b.add("a", 4 * GiB);
  // The client's word only, and no figure: colocd knows nothing of the device's use yet.
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, kUnknown, false)));
  CHECK_FALSE(b.broker.devices().at(0).outside_known);
  b.use(a, 0, 512 * MiB);
  b.footprint(a, 0, 14 * GiB, 512 * MiB, false);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 0);
  CHECK(b.broker.devices().at(0).outside_known);
  // The next process on the device has a baseline: its footprint is measured.
  ClientId c = b.add("c", 4 * GiB);
  REQUIRE(b.granted(b.attach(c, {{1, 16 * GiB, 512 * MiB}}, kUnknown, false)));
  b.use(c, 0, 512 * MiB);
  b.footprint(c, 0, 14 * GiB - 1 * GiB, 512 * MiB, false);
  CHECK(b.broker.find_job({1000, "c"})->devices.at(0).overhead == 512 * MiB);
}

TEST_CASE("broker: a footprint from a client's word is capped at what its job could have been granted") {
  // A client that claims the device is full right after its context cannot book more than its
  // limit allows, nor take memory the device does not have available.
  for (bool limited : {true, false}) {
    CAPTURE(limited);
    Bench b;
    ClientId other = b.add("other", 6 * GiB);
    REQUIRE(b.granted(b.attach(other, {{1, 16 * GiB, 0}}, 16 * GiB, false)));
    ClientId liar = b.add("liar", limited ? 4 * GiB : kNoLimit);
    REQUIRE(b.granted(b.attach(liar, {{1, 16 * GiB, 512 * MiB}}, 16 * GiB, false)));
    REQUIRE(b.broker.devices().at(0).outside_known);
    b.use(liar, 0, 512 * MiB);
    b.footprint(liar, 0, 0, 0, false);
    const JobDevice& jd = b.broker.find_job({1000, "liar"})->devices.at(0);
    if (limited) {
      CHECK(jd.overhead == 4 * GiB - 512 * MiB);  // its limit minus its grant
      CHECK(std::max(jd.reserved, jd.granted) == 4 * GiB);
    } else {
      CHECK(jd.overhead == 16 * GiB - 6 * GiB - 512 * MiB);  // what was available
    }
    CHECK(b.broker.devices().at(0).committed <= 16 * GiB);
    // The other job's reservation stands.
    CHECK(b.broker.find_job({1000, "other"})->devices.at(0).reserved == 6 * GiB);
  }
}

TEST_CASE("broker: a footprint for a slot not attached, or from a resumed client, is ignored") {
  Bench b;
  ClientId a = b.add("a");
  b.footprint(a, 3, 1 * GiB, 0);  // nothing attached
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 15 * GiB)));
  b.footprint(a, 1, 1 * GiB, 0);  // another slot
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).overhead == 0);
  ClientId r = b.add("r");
  ResumeEntry e = resumed(1, 16 * GiB, 512 * MiB);
  b.broker.resume(r, std::vector<ResumeEntry>{e}, b.now);
  b.collect();
  b.footprint(r, 0, 1 * GiB, 512 * MiB);  // its context is older than this colocd: no baseline
  CHECK(b.broker.find_job({1000, "r"})->devices.at(0).overhead == 0);
}


TEST_CASE("broker: a footprint from a client's word never takes its user past the per-user cap") {
  // The estimate is the client's word: it books no more than the job could have been granted,
  // and a grant never passes the user's cap (--max-per-user).
  BrokerConfig cfg = Bench::no_headroom();
  cfg.max_per_user = 8 * GiB;
  Bench b(cfg);
  ClientId liar = b.add("liar");
  REQUIRE(b.granted(b.attach(liar, {{1, 80 * GiB, 512 * MiB}}, 80 * GiB, false)));
  REQUIRE(b.broker.devices().at(0).outside_known);
  b.use(liar, 0, 512 * MiB);
  b.footprint(liar, 0, 0, 512 * MiB, false);  // "the device is full right after my context"
  CHECK(b.broker.user_committed(1000) <= 8 * GiB);
  CHECK(b.broker.find_job({1000, "liar"})->devices.at(0).overhead > 0);
  // Another user's job is admitted next to it as if the lie had not been told beyond the cap.
  ClientId honest = b.add("honest", 6 * GiB, Priority::kNormal, OnFull::kWait, 2000);
  CHECK(b.granted(b.attach(honest, {{1, 80 * GiB, 512 * MiB}}, kUnknown, false)));
}

TEST_CASE("broker: a driver overhead booked before a restart is booked again from the resumed ledger, within its limit") {
  Bench b;
  ClientId a = b.add("a", 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 16 * GiB, 512 * MiB}}, 15 * GiB)));
  b.use(a, 0, 512 * MiB);
  b.footprint(a, 0, 13 * GiB, 512 * MiB);
  // colocd writes what it books on the control page: the ledger a re-registration sends.
  CHECK(b.pages.at(a).control->slots[0].overhead.load() == 1536 * MiB);

  Bench r;  // the restarted daemon
  ClientId ra = r.add("a", 4 * GiB);
  ResumeEntry e;
  e.uuid = gpu(1);
  e.capacity = 16 * GiB;
  e.physical_free = 13 * GiB;
  e.in_use = 512 * MiB;
  e.grant = 512 * MiB;
  e.limit = 4 * GiB;
  e.overhead = 1536 * MiB;
  r.broker.resume(ra, std::vector<ResumeEntry>{e}, r.now);
  r.collect();
  const Job& job = *r.broker.find_job({1000, "a"});
  CHECK(job.devices.at(0).overhead == 1536 * MiB);
  CHECK(r.broker.find_client(ra)->slots[0].overhead_estimated);
  CHECK(r.pages.at(ra).control->slots[0].overhead.load() == 1536 * MiB);
  // Inside the limit at once: 4 GiB - 1.5 GiB leaves 2.5 GiB to grow to.
  CHECK(r.refused(r.grow(ra, 0, 2 * GiB + 512 * MiB + 1), Reason::kOwnLimit));
  // The driver's own figure, when one comes, replaces it.
  r.broker.set_overhead(ra, 0, 1 * GiB, r.now);
  r.collect();
  CHECK(job.devices.at(0).overhead == 1 * GiB);

  // A ledger claiming more than the device shows used, or than its limit leaves, is cut.
  Bench l;
  ClientId la = l.add("liar", 4 * GiB);
  e.overhead = 12 * GiB;
  l.broker.resume(la, std::vector<ResumeEntry>{e}, l.now);
  l.collect();
  // The device shows 3 GiB used, 512 MiB of it the ledger's: at most 2.5 GiB more.
  CHECK(l.broker.find_job({1000, "liar"})->devices.at(0).overhead == 2 * GiB + 512 * MiB);
  Bench l2;  // no figure of the device: its limit bounds it (4 GiB - its 512 MiB grant)
  ClientId lb = l2.add("liar", 4 * GiB);
  e.physical_free = kUnknown;
  l2.broker.resume(lb, std::vector<ResumeEntry>{e}, l2.now);
  l2.collect();
  CHECK(l2.broker.find_job({1000, "liar"})->devices.at(0).overhead == 3 * GiB + 512 * MiB);
}

TEST_CASE("broker: a resumed ledger's driver overhead never takes its user past the per-user cap, nor its job past the room it was given") {
  // The overhead in a resumed ledger is the client's word, as a grant request is.
  ResumeEntry e;
  e.uuid = gpu(1);
  e.capacity = 80 * GiB;
  e.physical_free = kUnknown;  // no figure of the device: nothing but the clamps bounds it
  e.in_use = 512 * MiB;
  e.grant = 512 * MiB;
  e.limit = kNoLimit;
  e.overhead = 70 * GiB;
  BrokerConfig cfg = Bench::no_headroom();
  cfg.max_per_user = 8 * GiB;
  Bench u(cfg);
  ClientId liar = u.add("liar");
  u.broker.resume(liar, std::vector<ResumeEntry>{e}, u.now);
  u.collect();
  CHECK(u.broker.user_committed(1000) <= 8 * GiB);
  CHECK(u.broker.find_job({1000, "liar"})->devices.at(0).overhead == 8 * GiB - 512 * MiB);

  // Outside the restart hold, another job's commitment leaves it only what is available.
  Bench r;
  ClientId other = r.add("other", 60 * GiB, Priority::kNormal, OnFull::kWait, 2000);
  REQUIRE(r.granted(r.attach(other, {{1, 80 * GiB, 512 * MiB}}, 80 * GiB, false)));
  ClientId late = r.add("late");
  r.broker.resume(late, std::vector<ResumeEntry>{e}, r.now);
  r.collect();
  const Device& d = r.broker.devices().at(0);
  CHECK(r.broker.find_job({1000, "late"})->devices.at(0).overhead == 20 * GiB - 512 * MiB);
  CHECK(d.committed <= d.capacity);
}

TEST_CASE("broker: a just-resumed process's ledger is its resumed in-use until it has copied its counters") {
  // The driver's per-process figure is reconciled against ledger_in_use: right after a
  // re-registration the new stats page still reads 0, and the whole figure is not overhead.
  Bench b;
  ClientId a = b.add("a", 8 * GiB);
  ResumeEntry e = resumed(1, 16 * GiB, 3 * GiB + 512 * MiB);
  e.limit = 8 * GiB;
  b.broker.resume(a, std::vector<ResumeEntry>{e}, b.now);
  b.collect();
  const Client& c = *b.broker.find_client(a);
  // Not copied yet: its claim is the resumed in-use (the floor), not the new page's 0.
  CHECK(c.stats->slots[0].in_use.load() == 0);
  CHECK(b.broker.client_in_use(c, 0) == 3 * GiB + 512 * MiB);
  CHECK(b.broker.ledger_in_use(c, 0) == 3 * GiB + 512 * MiB);
  CHECK(reconcile_overhead(true, 3 * GiB + 512 * MiB, b.broker.ledger_in_use(c, 0)) == 0);
  // Copied, and its first request made: the stats page is the ledger again.
  b.use(a, 0, 1 * GiB);
  b.grow(a, 0, 4 * GiB);
  CHECK(b.broker.ledger_in_use(c, 0) == 1 * GiB);
}

}  // TEST_SUITE
