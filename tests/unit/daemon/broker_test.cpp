// The memory broker's decisions, with a fake clock and pages in ordinary memory.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <set>

#include "broker/overhead.h"
#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;


TEST_SUITE("daemon") {

TEST_CASE("broker: grants move in grant steps and stay within the limit") {
  Bench b;
  ClientId a = b.add("a", 1 * GiB);
  uint32_t s = b.attach(a, {{1, 80 * GiB, 500 * MiB}});
  REQUIRE(b.granted(s));
  CHECK(b.reply(s)->slots.at(0).slot == 0);
  CHECK(b.grant(a, 0) == 512 * MiB);  // 500 MiB rounded up to 64 MiB steps
  CHECK(b.limit_word(a, 0) == 1 * GiB);
  CHECK(b.pages.at(a).control->slots[0].attached.load() == 1);
  // admission held the declared footprint
  CHECK(b.broker.devices().at(0).committed == 1 * GiB);

  uint32_t g = b.grow(a, 0, 512 * MiB + 1);
  REQUIRE(b.granted(g));
  CHECK(b.grant(a, 0) == 576 * MiB);
  g = b.grow(a, 0, 1 * GiB - 1);
  REQUIRE(b.granted(g));
  CHECK(b.grant(a, 0) == 1 * GiB);  // capped by the limit, not rounded past it
}

TEST_CASE("broker: own-limit failure is immediate, even when the device is full and the job waits") {
  Bench b;
  ClientId big = b.add("big");
  b.attach(big, {{1, 10 * GiB, 10 * GiB}});
  ClientId a = b.add("a", 2 * GiB, Priority::kNormal, OnFull::kWait);
  uint32_t s = b.attach(a, {{1, 10 * GiB, 0}});
  CHECK(b.pending(s));  // no room for its 2 GiB reservation: it waits for admission
  b.remove(big);
  REQUIRE(b.granted(s));
  uint32_t g = b.grow(a, 0, 2 * GiB + 1);
  CHECK(b.refused(g, Reason::kOwnLimit));
  CHECK(b.reply(g)->waited == 0);
  CHECK(b.count(Event::Kind::kRefused, Reason::kOwnLimit) == 1);
}

TEST_CASE("broker: admission holds a job that does not fit and releases it when another exits") {
  Bench b;
  ClientId a = b.add("a", 50 * GiB);
  uint32_t sa = b.attach(a, {{1, 80 * GiB, 1 * GiB}});
  REQUIRE(b.granted(sa));
  ClientId c = b.add("c", 40 * GiB);
  uint32_t sc = b.attach(c, {{1, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(sc));
  CHECK(b.grant(c, 0) == 0);
  CHECK(b.count(Event::Kind::kWaitBegin) == 1);
  b.advance(3 * kSec);
  CHECK(b.pending(sc));
  b.remove(a);
  REQUIRE(b.granted(sc));
  CHECK(b.reply(sc)->waited == 3 * kSec);
  CHECK(b.grant(c, 0) == 1 * GiB);
  CHECK(b.broker.devices().at(0).committed == 40 * GiB);
}

TEST_CASE("broker: a job's anchor keeps the job and its reservation between its processes; its death releases it") {
  Bench b;
  ClientId anchor = b.add("a", 50 * GiB, Priority::kNormal, OnFull::kWait, 1000, 0, true);
  ClientId step1 = b.add("a");
  REQUIRE(b.granted(b.attach(step1, {{1, 80 * GiB, 1 * GiB}})));
  ClientId other = b.add("c", 40 * GiB);
  uint32_t so = b.attach(other, {{1, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(so));
  REQUIRE(b.broker.set_limit(b.broker.find_client(anchor)->job, 45 * GiB, b.now));
  b.collect();
  b.remove(step1);  // between the steps: the job stays, with its reservation and its limit
  CHECK(b.pending(so));
  CHECK(b.count(Event::Kind::kJobEnded) == 0);
  const Job* job = b.broker.find_job({1000, "a"});
  REQUIRE(job);
  CHECK(job->limit == 45 * GiB);
  CHECK(job->devices.at(0).reserved == 45 * GiB);
  CHECK(job->devices.at(0).clients == 0);
  CHECK(b.broker.devices().at(0).committed == 45 * GiB);
  // The next step is admitted at once, within the reservation, under the job's limit.
  ClientId step2 = b.add("a", 50 * GiB);
  REQUIRE(b.granted(b.attach(step2, {{1, 80 * GiB, 1 * GiB}})));
  CHECK(b.limit_word(step2, 0) == 45 * GiB);
  CHECK(b.count(Event::Kind::kAdmitted) == 1);
  b.remove(step2);
  CHECK(b.pending(so));
  // The anchor goes (coloc run ended or was killed): the job ends, the other job is admitted.
  b.remove(anchor);
  CHECK(b.count(Event::Kind::kJobEnded) == 1);
  CHECK(b.granted(so));
  CHECK(b.broker.devices().at(0).committed == 40 * GiB);
}

TEST_CASE("broker: when a job's anchor dies first, its devices without a process are released at once") {
  Bench b;
  ClientId anchor = b.add("a", 50 * GiB, Priority::kNormal, OnFull::kWait, 1000, 0, true);
  ClientId p0 = b.add("a");
  ClientId p1 = b.add("a");
  REQUIRE(b.granted(b.attach(p0, {{1, 80 * GiB, 1 * GiB}})));
  REQUIRE(b.granted(b.attach(p1, {{2, 80 * GiB, 1 * GiB}})));
  b.remove(p0);
  CHECK(b.broker.devices().at(0).committed == 50 * GiB);  // kept for the job's next process
  b.remove(anchor);
  CHECK(b.broker.devices().at(0).committed == 0);
  CHECK(b.broker.devices().at(1).committed == 50 * GiB);  // p1 still runs there
  CHECK(b.count(Event::Kind::kJobEnded) == 0);
  b.remove(p1);
  CHECK(b.count(Event::Kind::kJobEnded) == 1);
}

TEST_CASE("broker: admission releases in priority, then FIFO order") {
  // Strict order (backfill off): nothing takes memory while a request ahead of it waits. With
  // EASY backfill (the default) `be` goes ahead of them all: broker_backfill_test.cpp.
  for (const bool easy : {false, true}) {
    CAPTURE(easy);
    BrokerConfig cfg = Bench::no_headroom();
    cfg.backfill = easy ? backfill::Mode::kEasy : backfill::Mode::kOff;
    Bench b(cfg);
    ClientId hog = b.add("hog", 70 * GiB);
    b.attach(hog, {{1, 80 * GiB, 0}});
    ClientId n1 = b.add("n1", 30 * GiB);
    uint32_t s1 = b.attach(n1, {{1, 80 * GiB, 0}});
    b.advance(1);
    ClientId n2 = b.add("n2", 30 * GiB);
    uint32_t s2 = b.attach(n2, {{1, 80 * GiB, 0}});
    b.advance(1);
    ClientId hi = b.add("hi", 30 * GiB, Priority::kHigh);
    uint32_t sh = b.attach(hi, {{1, 80 * GiB, 0}});
    b.advance(1);
    ClientId be = b.add("be", 5 * GiB, Priority::kBestEffort);
    uint32_t sb = b.attach(be, {{1, 80 * GiB, 0}});
    // 10 GiB are free: the best-effort job would fit. In strict order it must not overtake the ones
    // ahead of it; with backfill it goes ahead, since the head (`hi`, 30) finds 50 GiB beyond its
    // need once `hog` ends.
    CHECK(b.pending(s1));
    CHECK(b.pending(s2));
    CHECK(b.pending(sh));
    CHECK(b.pending(sb) == !easy);
    b.remove(hog);  // 80 GiB free: high (30) first, then n1 (30); n2 (30) does not fit; be (strict) waits behind it
    CHECK(b.granted(sh));
    CHECK(b.granted(s1));
    CHECK(b.pending(s2));
    CHECK(b.pending(sb) == !easy);
    size_t ih = 0, i1 = 0;
    for (size_t i = 0; i < b.replies.size(); ++i) {
      if (b.replies[i].seq == sh) ih = i;
      if (b.replies[i].seq == s1) i1 = i;
    }
    CHECK(ih < i1);
    b.remove(hi);
    CHECK(b.granted(s2));
    CHECK(b.granted(sb));
  }
}

TEST_CASE("broker: a job on several devices is admitted on all of them or none") {
  Bench b;
  ClientId x = b.add("x", 60 * GiB);
  b.attach(x, {{2, 80 * GiB, 0}});  // device 2 is busy, device 1 is empty
  ClientId m = b.add("multi", 40 * GiB);
  uint32_t s = b.attach(m, {{1, 80 * GiB, 1 * GiB}, {2, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(s));
  // Nothing is held on device 1 while it waits for device 2.
  CHECK(b.broker.devices().at(*b.broker.find_device(gpu(1))).committed == 0);
  b.remove(x);
  REQUIRE(b.granted(s));
  REQUIRE(b.reply(s)->slots.size() == 2);
  CHECK(b.reply(s)->slots[0].slot == 0);
  CHECK(b.reply(s)->slots[1].slot == 1);
  for (uint8_t n : {1, 2}) CHECK(b.broker.devices().at(*b.broker.find_device(gpu(n))).committed == 40 * GiB);
}

TEST_CASE("broker: growth waits, then succeeds when memory frees") {
  Bench b;
  ClientId a = b.add("a");
  ClientId c = b.add("c");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 6 * GiB}})));
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 3 * GiB}})));
  b.use(a, 0, 6 * GiB);
  b.use(c, 0, 3 * GiB);
  uint32_t g = b.grow(c, 0, 5 * GiB);
  CHECK(b.pending(g));
  b.advance(2 * kSec);
  b.use(a, 0, 2 * GiB);
  b.broker.shrink(a, 0, 2 * GiB, b.now);
  b.collect();
  REQUIRE(b.granted(g));
  CHECK(b.reply(g)->waited == 2 * kSec);
  CHECK(b.grant(c, 0) == 5 * GiB);
  CHECK(b.grant(a, 0) == 2 * GiB);
  CHECK(b.count(Event::Kind::kWaitEnd) == 1);
}

TEST_CASE("broker: --on-full fail refuses at once; a request that can never fit is refused even with wait") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 8 * GiB}})));
  ClientId f = b.add("f", kNoLimit, Priority::kNormal, OnFull::kFail);
  REQUIRE(b.granted(b.attach(f, {{1, 10 * GiB, 1 * GiB}})));
  uint32_t g = b.grow(f, 0, 3 * GiB);
  CHECK(b.refused(g, Reason::kDeviceFull));
  ClientId w = b.add("w");
  uint32_t s = b.attach(w, {{1, 10 * GiB, 0}});
  REQUIRE(b.granted(s));
  uint32_t huge = b.grow(w, 0, 11 * GiB);
  CHECK(b.refused(huge, Reason::kDeviceFull));
}

TEST_CASE("broker: a wait ends with a timeout, and a cancel ends it at once") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 9 * GiB}})));
  ClientId c = b.add("c");
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 0}})));
  ClientId d = b.add("d");
  REQUIRE(b.granted(b.attach(d, {{1, 10 * GiB, 0}})));
  uint32_t g1 = b.grow(c, 0, 2 * GiB);
  CHECK(b.pending(g1));
  CHECK(b.broker.next_deadline() == b.now + 300 * kSec);  // the default COLOC_WAIT_TIMEOUT
  b.advance(299 * kSec);
  CHECK(b.pending(g1));
  uint32_t g2 = b.grow(d, 0, 2 * GiB);
  b.advance(1 * kSec);
  CHECK(b.refused(g1, Reason::kTimeout));
  CHECK(b.reply(g1)->waited == 300 * kSec);
  CHECK(b.pending(g2));
  b.broker.cancel(d, g2, b.now);
  b.collect();
  CHECK(b.refused(g2, Reason::kCancelled));
  b.broker.cancel(d, g2, b.now);  // a second cancel is a no-op
  b.collect();
  CHECK(b.broker.waiters().empty());
}

TEST_CASE("broker: deadlock breaking fails the lowest-priority, youngest job") {
  SUBCASE("among equal priorities, the youngest") {
    Bench b;
    ClientId old_job = b.add("old", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 100);
    ClientId young = b.add("young", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 300);
    ClientId mid = b.add("mid", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 200);
    for (ClientId id : {old_job, young, mid}) REQUIRE(b.granted(b.attach(id, {{1, 9 * GiB, 3 * GiB}})));
    uint32_t g_old = b.grow(old_job, 0, 4 * GiB);
    uint32_t g_young = b.grow(young, 0, 4 * GiB);
    CHECK(b.pending(g_old));
    CHECK(b.pending(g_young));
    CHECK(b.count(Event::Kind::kRefused, Reason::kDeadlockBroken) == 0);  // mid can still free memory
    uint32_t g_mid = b.grow(mid, 0, 4 * GiB);
    CHECK(b.refused(g_young, Reason::kDeadlockBroken));
    CHECK(b.pending(g_old));
    CHECK(b.pending(g_mid));
    CHECK(b.count(Event::Kind::kRefused, Reason::kDeadlockBroken) == 1);
    b.remove(young);  // the victim gives up and exits: the others get its memory
    CHECK(b.granted(g_old));
    CHECK(b.granted(g_mid));
  }
  SUBCASE("lower priority loses before age counts") {
    Bench b;
    ClientId be_old = b.add("be", kNoLimit, Priority::kBestEffort, OnFull::kWait, 1000, 100);
    ClientId hi_young = b.add("hi", kNoLimit, Priority::kHigh, OnFull::kWait, 1000, 900);
    ClientId n_young = b.add("n", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 800);
    for (ClientId id : {be_old, hi_young, n_young}) REQUIRE(b.granted(b.attach(id, {{1, 9 * GiB, 3 * GiB}})));
    uint32_t g1 = b.grow(hi_young, 0, 4 * GiB);
    uint32_t g2 = b.grow(n_young, 0, 4 * GiB);
    uint32_t g3 = b.grow(be_old, 0, 4 * GiB);
    CHECK(b.refused(g3, Reason::kDeadlockBroken));
    CHECK(b.pending(g1));
    CHECK(b.pending(g2));
  }
  SUBCASE("coloc jobs that need more than the memory used outside coloc could give are a deadlock") {
    Bench b;
    ClientId a = b.add("a", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 100);
    ClientId c = b.add("c", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 200);
    // 10 GiB device, 1 GiB used outside coloc, 4 GiB granted to each job.
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}}, 9 * GiB)));
    REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 4 * GiB}}, 9 * GiB)));
    REQUIRE(b.broker.devices().at(0).outside == 1 * GiB);
    uint32_t ga = b.grow(a, 0, 7 * GiB);  // 3 GiB more: even with the outside 1 GiB gone, 2 GiB short
    CHECK(b.pending(ga));
    uint32_t gc = b.grow(c, 0, 7 * GiB);
    CHECK(b.refused(gc, Reason::kDeadlockBroken));  // the younger one
    CHECK(b.pending(ga));
  }
}

// ---- waiting for memory used outside coloc ---------------------------------------------------------

TEST_CASE("broker: a job alone on a device, short only of memory used outside coloc, waits instead of a deadlock") {
  // The tester's case: 40 GiB device, default headroom (2%), 26 GiB held by processes not under
  // coloc; a job without --mem grows to ~17.6 GiB.
  Bench b{BrokerConfig{}};
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 40 * GiB, 1 * GiB}}, 14 * GiB)));
  REQUIRE(b.broker.devices().at(0).outside == 26 * GiB);
  b.use(a, 0, 1 * GiB);
  REQUIRE(b.granted(b.grow(a, 0, 8 * GiB)));
  b.use(a, 0, 8 * GiB);
  REQUIRE(b.broker.devices().at(0).outside == 26 * GiB);
  const Bytes need = 17 * GiB + 600 * MiB;  // past the 13.2 GiB usable now
  SUBCASE("served as soon as the device shows the outside memory freed (the engine's NVML read)") {
    uint32_t g = b.grow(a, 0, need, 6 * GiB);
    CHECK(b.pending(g));
    CHECK(b.count(Event::Kind::kRefused, Reason::kDeadlockBroken) == 0);
    CHECK(b.broker.waiters().size() == 1);
    b.advance(10 * kSec);
    CHECK(b.pending(g));
    // One of the two outside processes exits: 13 GiB of the 26 go.
    b.broker.refresh_outside(0, 40 * GiB - 8 * GiB - 13 * GiB, b.now);
    b.collect();
    CHECK(b.broker.devices().at(0).outside == 13 * GiB);
    CHECK(b.granted(g));  // 40 - 0.8 headroom - 13 outside = 26.2 GiB usable >= 17.6 GiB
    CHECK(b.grant(a, 0) >= need);
    CHECK(b.count(Event::Kind::kRefused) == 0);
  }
  SUBCASE("a refresh that frees too little keeps it waiting; the rest frees it") {
    uint32_t g = b.grow(a, 0, 30 * GiB, 6 * GiB);  // 30 GiB: fits only once nearly all outside use is gone
    CHECK(b.pending(g));
    b.broker.refresh_outside(0, 40 * GiB - 8 * GiB - 13 * GiB, b.now);  // 13 GiB outside left
    b.collect();
    CHECK(b.pending(g));
    CHECK(b.count(Event::Kind::kRefused) == 0);
    b.broker.refresh_outside(0, 40 * GiB - 8 * GiB, b.now);  // nothing outside
    b.collect();
    CHECK(b.granted(g));
  }
  SUBCASE("when the outside memory never frees, the wait ends with its timeout, not a deadlock") {
    uint32_t g = b.grow(a, 0, need, 6 * GiB);
    CHECK(b.pending(g));
    b.advance(299 * kSec);
    CHECK(b.pending(g));
    b.advance(1 * kSec);  // COLOC_WAIT_TIMEOUT's default: 300 s
    CHECK(b.refused(g, Reason::kTimeout));
    CHECK(b.count(Event::Kind::kRefused, Reason::kDeadlockBroken) == 0);
  }
}

TEST_CASE("broker: several coloc jobs parked behind memory used outside coloc wait; the first in line is served when it frees") {
  Bench b;
  ClientId a = b.add("a", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 100);
  ClientId c = b.add("c", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 200);
  // 10 GiB device, 4 GiB used outside coloc, 3 GiB granted to each job: nothing available.
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 3 * GiB}}, 6 * GiB)));
  b.use(a, 0, 3 * GiB);
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 3 * GiB}}, 3 * GiB)));
  b.use(c, 0, 3 * GiB);
  REQUIRE(b.broker.devices().at(0).outside == 4 * GiB);
  uint32_t ga = b.grow(a, 0, 5 * GiB);  // 2 GiB more: fits once the outside use is gone
  uint32_t gc = b.grow(c, 0, 5 * GiB);  // every job on the device is parked, but not on each other
  CHECK(b.pending(ga));
  CHECK(b.pending(gc));
  CHECK(b.count(Event::Kind::kRefused) == 0);
  b.broker.refresh_outside(0, 4 * GiB, b.now);  // the outside process exits
  b.collect();
  CHECK(b.granted(ga));
  CHECK(b.granted(gc));
}

// ---- a late resume ----------------------------------------------------------------------------------

TEST_CASE("broker: a job resuming after the grace cannot over-commit the device a newcomer was admitted into") {
  Bench b;
  // colocd restarted; the job "late" (--mem 25 GiB, 12 GiB in use) missed the resume grace (its
  // processes were stopped). The device shows its 12 GiB used, so they count as outside coloc.
  ClientId fresh = b.add("fresh", 25 * GiB);
  REQUIRE(b.granted(b.attach(fresh, {{1, 40 * GiB, 1 * GiB}}, 28 * GiB)));
  REQUIRE(b.broker.devices().at(0).outside == 12 * GiB);
  REQUIRE(b.broker.devices().at(0).committed == 25 * GiB);
  ClientId late = b.add("late", 25 * GiB);
  ResumeEntry e{gpu(1), 40 * GiB, 28 * GiB, 12 * GiB, 12 * GiB + 64 * MiB, 25 * GiB};
  b.broker.resume(late, std::span(&e, 1), b.now);
  b.collect();
  const Device& d = b.broker.devices().at(0);
  CHECK(d.outside == 0);  // its memory is coloc's again
  CHECK(b.grant(late, 0) == 12 * GiB + 64 * MiB);  // what it holds is kept
  const JobDevice& jd = b.broker.find_job({1000, "late"})->devices.at(0);
  CHECK(jd.reserved == 15 * GiB);  // what was left for it, not its 25 GiB
  CHECK(b.pages.at(late).control->slots[0].reservation.load() == 15 * GiB);
  CHECK(d.committed == 40 * GiB);
  CHECK(d.committed <= b.broker.usable(0));
  // Beyond what was left it is an ordinary grower: it waits, the newcomer's reservation stays.
  b.use(late, 0, 12 * GiB);
  uint32_t g = b.grow(late, 0, 16 * GiB);
  CHECK(b.pending(g));
  CHECK(b.granted(b.grow(fresh, 0, 20 * GiB)));  // within its own reservation
}

TEST_CASE("broker: a device read between a resume and the client's copy of its counters does not take its memory for outside use") {
  Bench b;
  b.broker.hold_until(b.now + 5 * kSec);
  ClientId a = b.add("a", 20 * GiB);
  ClientId c = b.add("c", 19 * GiB);
  ResumeEntry ea{gpu(1), 40 * GiB, 25 * GiB, 15 * GiB, 15 * GiB, 20 * GiB};
  b.broker.resume(a, std::span(&ea, 1), b.now);
  b.collect();
  // a's new stats page is still empty; the engine reads the device: 15 GiB used, all of it a's.
  b.broker.refresh_outside(0, 25 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
  // c comes back: it finds its whole reservation (20 + 19 <= 40).
  ResumeEntry ec{gpu(1), 40 * GiB, 25 * GiB, 0, 64 * MiB, 19 * GiB};
  b.broker.resume(c, std::span(&ec, 1), b.now);
  b.collect();
  CHECK(b.broker.find_job({1000, "c"})->devices.at(0).reserved == 19 * GiB);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).reserved == 20 * GiB);
}

TEST_CASE("broker: a late resume whose memory in use the books never saw keeps it, and the over-commit shows") {
  Bench b;
  ClientId fresh = b.add("fresh", 30 * GiB);
  REQUIRE(b.granted(b.attach(fresh, {{1, 40 * GiB, 1 * GiB}})));  // no physical figure: nothing seen outside
  ClientId late = b.add("late", 25 * GiB);
  ResumeEntry e{gpu(1), 40 * GiB, kUnknown, 12 * GiB, 12 * GiB, 25 * GiB};
  b.broker.resume(late, std::span(&e, 1), b.now);
  b.collect();
  CHECK(b.grant(late, 0) == 12 * GiB);  // really in use: cannot be taken away
  CHECK(b.broker.find_job({1000, "late"})->devices.at(0).reserved == 12 * GiB);  // no more than that
  CHECK(b.broker.devices().at(0).committed == 42 * GiB);
  CHECK(b.broker.devices().at(0).committed > b.broker.usable(0));  // what status flags as over-committed
  ClientId other = b.add("other", 1 * GiB);
  CHECK(b.pending(b.attach(other, {{1, 40 * GiB, 0}})));  // nothing more is given out
}

// ---- raising a limit ----------------------------------------------------------------------------------

TEST_CASE("broker: raising a limit raises the reservation when the larger footprint fits now") {
  Bench b;
  ClientId a = b.add("a", 4 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
  JobSerial ja = b.broker.find_job({1000, "a"})->serial;
  std::vector<ReservationChange> ch;
  REQUIRE(b.broker.set_limit(ja, 9 * GiB, b.now, &ch));
  b.collect();
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].outcome == ReservationChange::kRaised);
  CHECK(ch[0].before == 4 * GiB);
  CHECK(ch[0].after == 9 * GiB);
  CHECK(b.limit_word(a, 0) == 9 * GiB);
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 9 * GiB);
  CHECK(b.broker.devices().at(0).committed == 9 * GiB);
  ClientId c = b.add("c", 5 * GiB);
  CHECK(b.pending(b.attach(c, {{1, 10 * GiB, 0}})));  // 9 + 5 > 10
  CHECK(b.granted(b.grow(a, 0, 9 * GiB)));            // within its reservation: never waits
  // Lowering lowers it.
  ch.clear();
  b.use(a, 0, 2 * GiB);
  REQUIRE(b.broker.set_limit(ja, 3 * GiB, b.now, &ch));
  b.collect();
  CHECK(ch.at(0).outcome == ReservationChange::kLowered);
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).reserved == 3 * GiB);
}

TEST_CASE("broker: raising a limit keeps the reservation when the larger footprint does not fit") {
  SUBCASE("too little available") {
    Bench b;
    ClientId a = b.add("a", 4 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
    ClientId c = b.add("c", 5 * GiB);
    REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 0}})));
    std::vector<ReservationChange> ch;
    REQUIRE(b.broker.set_limit(b.broker.find_job({1000, "a"})->serial, 9 * GiB, b.now, &ch));
    b.collect();
    CHECK(ch.at(0).outcome == ReservationChange::kKeptNoRoom);
    CHECK(ch.at(0).after == 4 * GiB);
    CHECK(ch.at(0).available == 1 * GiB);
    CHECK(b.limit_word(a, 0) == 9 * GiB);
    CHECK(b.broker.devices().at(0).committed == 9 * GiB);
    CHECK(b.pending(b.grow(a, 0, 6 * GiB)));  // beyond its reservation it competes like anyone else
  }
  SUBCASE("another job's request waits for the memory") {
    Bench b;
    ClientId a = b.add("a", 4 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
    ClientId c = b.add("c", 7 * GiB);
    uint32_t sc = b.attach(c, {{1, 10 * GiB, 0}});
    REQUIRE(b.pending(sc));
    std::vector<ReservationChange> ch;
    REQUIRE(b.broker.set_limit(b.broker.find_job({1000, "a"})->serial, 5 * GiB, b.now, &ch));
    b.collect();
    CHECK(ch.at(0).outcome == ReservationChange::kKeptOthersWait);
    CHECK(b.broker.devices().at(0).committed == 4 * GiB);
  }
  SUBCASE("setting a limit on a job without one is a lowering: no reservation appears") {
    Bench b;
    ClientId a = b.add("a");
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
    std::vector<ReservationChange> ch;
    REQUIRE(b.broker.set_limit(b.broker.find_job({1000, "a"})->serial, 5 * GiB, b.now, &ch));
    CHECK(ch.at(0).outcome == ReservationChange::kUnchanged);
    CHECK(b.broker.devices().at(0).committed == 1 * GiB);
  }
}

TEST_CASE("broker: memory used outside coloc counts against the device (physical free is the truth)") {
  Bench b;
  ClientId a = b.add("a");
  // 10 GiB device, 3 GiB free: 7 GiB used by someone else.
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}}, 3 * GiB)));
  CHECK(b.broker.devices().at(0).outside == 7 * GiB);
  b.use(a, 0, 1 * GiB);
  ClientId c = b.add("c");
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 1 * GiB}}, 2 * GiB)));
  uint32_t g = b.grow(c, 0, 2 * GiB + 1, 2 * GiB);  // 1 + 1 coloc + 7 outside; asks past the device
  CHECK(b.pending(g));
  // A client's figure for a device colocd reads itself changes nothing: it asks for a reading.
  b.use(c, 0, 1 * GiB);
  b.grow(a, 0, 512 * MiB, 8 * GiB);  // "8 GiB free"
  CHECK(b.broker.devices().at(0).outside == 7 * GiB);
  CHECK(b.pending(g));
  CHECK(b.broker.take_short_devices() == std::vector<uint32_t>{0});
  // The outside process exits: the next reading shows it, and the waiter is served.
  b.broker.refresh_outside(0, 8 * GiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
  CHECK(b.granted(g));
}

TEST_CASE("broker: a driver OOM inside a grant is counted; without a reading of its own, colocd believes only what the job can show missing") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}})));
  b.use(a, 0, 3 * GiB);
  // "512 MiB free" would mean 6.5 GiB used outside coloc; the job holds 1 GiB of grant unused,
  // and its 1 GiB request failed inside it: that much it can show.
  b.broker.driver_oom(a, 0, 1 * GiB, 3 * GiB, 512 * MiB, b.now);
  b.collect();
  CHECK(b.broker.devices().at(0).driver_ooms == 1);
  CHECK(b.count(Event::Kind::kDriverOom) == 1);
  CHECK(b.broker.devices().at(0).outside == 2 * GiB);
  CHECK(b.broker.take_short_devices().empty());  // no reading to ask for
}

TEST_CASE("broker: a driver OOM on a device colocd reads itself asks for a reading and changes nothing else") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}}, 10 * GiB)));
  b.use(a, 0, 3 * GiB);
  b.broker.driver_oom(a, 0, 1 * GiB, 3 * GiB, 0, b.now);  // "nothing free"
  b.collect();
  CHECK(b.broker.devices().at(0).driver_ooms == 1);
  CHECK(b.broker.devices().at(0).outside == 0);
  CHECK(b.broker.take_short_devices() == std::vector<uint32_t>{0});
}

TEST_CASE("broker: shrink never goes below what is in use (the fast-path race is closed)") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}})));
  b.use(a, 0, 1 * GiB + 1);  // an allocation raced with the shrink
  b.broker.shrink(a, 0, 0, b.now);
  b.collect();
  CHECK(b.grant(a, 0) == 1 * GiB + 64 * MiB);
  b.use(a, 0, 0);
  b.broker.shrink(a, 0, 0, b.now);
  b.collect();
  CHECK(b.grant(a, 0) == 0);
  b.broker.shrink(a, 7, 0, b.now);  // not attached: ignored
  b.collect();
}

TEST_CASE("broker: lowering a limit refuses growth and kills nothing; it frees the reservation") {
  Bench b;
  ClientId a = b.add("a", 8 * GiB);
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}})));
  b.use(a, 0, 3 * GiB);
  ClientId c = b.add("c", 5 * GiB);
  uint32_t sc = b.attach(c, {{1, 10 * GiB, 0}});
  CHECK(b.pending(sc));
  JobSerial ja = b.broker.find_job({1000, "a"})->serial;
  REQUIRE(b.broker.set_limit(ja, 2 * GiB, b.now));
  b.collect();
  CHECK(b.limit_word(a, 0) == 2 * GiB);
  CHECK(b.grant(a, 0) == 3 * GiB);  // trimmed to its use, not below: nothing is taken away
  CHECK(b.granted(sc));             // a now commits 3 GiB (its use) instead of 8: c's 5 GiB fit
  CHECK(b.refused(b.grow(a, 0, 3 * GiB + 1), Reason::kOwnLimit));
  CHECK_FALSE(b.broker.set_limit(999, GiB, b.now));
}

TEST_CASE("broker: a priority change reorders the queue and shows on the control page") {
  Bench b;
  ClientId hog = b.add("hog", 10 * GiB);
  b.attach(hog, {{1, 10 * GiB, 0}});
  ClientId x = b.add("x", 6 * GiB);
  uint32_t sx = b.attach(x, {{1, 10 * GiB, 0}});
  ClientId y = b.add("y", 6 * GiB);
  uint32_t sy = b.attach(y, {{1, 10 * GiB, 0}});
  REQUIRE(b.broker.set_priority(b.broker.find_job({1000, "y"})->serial, Priority::kHigh, b.now));
  b.collect();
  CHECK(b.pages.at(y).control->priority.load() == uint32_t(Priority::kHigh));
  b.remove(hog);
  CHECK(b.granted(sy));
  CHECK(b.pending(sx));
}

TEST_CASE("broker: the per-user cap") {
  BrokerConfig cfg = Bench::no_headroom();
  cfg.max_per_user = 6 * GiB;
  Bench b(cfg);
  ClientId a = b.add("a", 4 * GiB, Priority::kNormal, OnFull::kWait, 1000);
  REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
  ClientId c = b.add("c", 4 * GiB, Priority::kNormal, OnFull::kWait, 1000);
  uint32_t sc = b.attach(c, {{2, 80 * GiB, 0}});
  CHECK(b.pending(sc));  // the same user would hold 8 GiB
  ClientId other = b.add("o", 4 * GiB, Priority::kNormal, OnFull::kWait, 2000);
  CHECK(b.granted(b.attach(other, {{2, 80 * GiB, 0}})));  // another user is not held up by it
  ClientId f = b.add("f", 7 * GiB, Priority::kNormal, OnFull::kWait, 1000);
  CHECK(b.refused(b.attach(f, {{3, 80 * GiB, 0}}), Reason::kUserCap));  // can never fit the cap
  b.remove(a);
  CHECK(b.granted(sc));
}

TEST_CASE("broker: processes of one job share its reservation and limit") {
  Bench b;
  ClientId p1 = b.add("ddp", 4 * GiB);
  REQUIRE(b.granted(b.attach(p1, {{1, 10 * GiB, 1 * GiB}})));
  ClientId p2 = b.add("ddp", 4 * GiB);
  REQUIRE(b.granted(b.attach(p2, {{1, 10 * GiB, 1 * GiB}})));
  CHECK(b.broker.jobs().size() == 1);
  CHECK(b.broker.devices().at(0).committed == 4 * GiB);  // one reservation, not two
  b.use(p1, 0, 512 * MiB);
  b.use(p2, 0, 1 * GiB);
  // p2 wants 3 GiB: p1 holds 1 GiB of grant but uses 512 MiB; its surplus is taken back.
  uint32_t g = b.grow(p2, 0, 3 * GiB + 512 * MiB);
  REQUIRE(b.granted(g));
  CHECK(b.grant(p1, 0) == 512 * MiB);
  b.use(p2, 0, 3 * GiB + 512 * MiB);  // p2's allocation lands
  CHECK(b.refused(b.grow(p1, 0, 1 * GiB), Reason::kOwnLimit));
  b.remove(p1);
  CHECK(b.broker.jobs().size() == 1);
  b.remove(p2);
  CHECK(b.broker.jobs().empty());
  CHECK(b.count(Event::Kind::kJobEnded) == 1);
  CHECK(b.broker.devices().at(0).committed == 0);
}

TEST_CASE("broker: a client cannot flood the queue") {
  Bench b;
  ClientId hog = b.add("hog");
  REQUIRE(b.granted(b.attach(hog, {{1, 10 * GiB, 9 * GiB}})));
  ClientId c = b.add("c");
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 0}})));
  std::vector<uint32_t> seqs;
  for (size_t i = 0; i < Broker::kMaxParkedPerClient + 5; ++i) seqs.push_back(b.grow(c, 0, 2 * GiB));
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (i < Broker::kMaxParkedPerClient) CHECK(b.pending(seqs[i]));
    else CHECK(b.refused(seqs[i], Reason::kBadRequest));
  }
  CHECK(b.broker.waiters().size() == Broker::kMaxParkedPerClient);
}

TEST_CASE("broker: bad requests are refused without harm") {
  Bench b;
  ClientId a = b.add("a");
  CHECK(b.refused(b.grow(a, 0, GiB), Reason::kBadRequest));  // not attached
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 0}})));
  CHECK(b.refused(b.attach(a, {{1, 10 * GiB, 0}}), Reason::kBadRequest));  // attached twice
  CHECK(b.refused(b.grow(a, 15, GiB), Reason::kBadRequest));
}

TEST_CASE("broker: re-registration rebuilds the books, and the restart hold keeps new jobs out") {
  Bench b;
  b.broker.hold_until(b.now + 5 * kSec);
  // A new job that arrives first must not take memory the resuming jobs hold.
  ClientId fresh = b.add("fresh", 6 * GiB);
  uint32_t sf = b.attach(fresh, {{1, 10 * GiB, 0}});
  CHECK(b.pending(sf));
  ClientId old_job = b.add("old", 6 * GiB);
  ResumeEntry e{gpu(1), 10 * GiB, 5 * GiB, 3 * GiB, 3 * GiB + 64 * MiB, 6 * GiB};
  b.broker.resume(old_job, std::span(&e, 1), b.now);
  b.collect();
  CHECK(b.grant(old_job, 0) == 3 * GiB + 64 * MiB);
  CHECK(b.broker.devices().at(0).committed == 6 * GiB);
  // Before the client copied its counters, a shrink cannot go below the ledger's in-use.
  CHECK(b.pages.at(old_job).control->slots[0].attached.load() == 1);
  b.broker.end_hold(b.now);
  b.collect();
  CHECK(b.pending(sf));  // 6 + 6 > 10: it waits for the old job, as it should
  b.remove(old_job);
  CHECK(b.granted(sf));
}

TEST_CASE("broker: a resumed ledger cannot claim more than the device shows") {
  Bench b;
  ClientId liar = b.add("liar");
  ResumeEntry e{gpu(1), 10 * GiB, 8 * GiB, 9 * GiB, 9 * GiB, kNoLimit};  // only 2 GiB are used at all
  b.broker.resume(liar, std::span(&e, 1), b.now);
  b.collect();
  CHECK(b.grant(liar, 0) == 9 * GiB);  // its grant is kept (it had it) ...
  CHECK(b.broker.devices().at(0).ledger_mismatches == 1);  // ... but the claim is logged
  CHECK(b.pages.at(liar).control->slots[0].grant.load() == 9 * GiB);
}

TEST_CASE("broker: the grant invariant holds under random operation sequences") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    BrokerConfig cfg;
    cfg.headroom_fraction = 0.05;
    if (seed % 3 == 0) cfg.max_per_user = 20 * GiB;
    Bench b(cfg);
    std::mt19937_64 rng(seed);
    auto pick = [&](uint64_t n) { return rng() % n; };
    std::vector<ClientId> live;
    for (int step = 0; step < 400; ++step) {
      std::vector<Bytes> before;
      for (size_t d = 0; d < b.broker.devices().size(); ++d) before.push_back(b.broker.devices()[d].committed);
      switch (pick(9)) {
        case 0: {  // a new process
          Bytes limit = pick(3) == 0 ? kNoLimit : (1 + pick(30)) * GiB;
          std::string job = "j" + std::to_string(pick(12));
          live.push_back(b.add(job, limit, Priority(pick(3)), OnFull(pick(2)), uint32_t(1000 + pick(3)), 1 + pick(1000)));
          break;
        }
        case 1:
        case 2:
          if (!live.empty()) {
            ClientId id = live[pick(live.size())];
            b.attach(id, {{uint8_t(1 + pick(3)), 40 * GiB, pick(4) * GiB}}, pick(2) ? kUnknown : (30 + pick(10)) * GiB);
          }
          break;
        case 3:
        case 4:
          if (!live.empty()) {
            ClientId id = live[pick(live.size())];
            uint32_t slot = uint32_t(pick(2));
            if (b.broker.find_client(id)->slots[slot].attached) {
              b.use(id, slot, std::min(b.grant(id, slot), pick(8) * GiB));
              b.grow(id, slot, b.grant(id, slot) + 1 + pick(8) * GiB);
            }
          }
          break;
        case 5:
          if (!live.empty()) {
            ClientId id = live[pick(live.size())];
            uint32_t slot = uint32_t(pick(2));
            if (b.broker.find_client(id)->slots[slot].attached) {
              b.use(id, slot, pick(2) * GiB);
              b.broker.shrink(id, slot, pick(3) * GiB, b.now);
              b.collect();
            }
          }
          break;
        case 6:
          if (!live.empty()) {
            size_t i = pick(live.size());
            b.remove(live[i]);
            live.erase(live.begin() + ptrdiff_t(i));
          }
          break;
        case 7:
          b.advance(pick(200) * kSec);
          break;
        case 8:
          if (!b.broker.jobs().empty()) {
            auto it = b.broker.jobs().begin();
            std::advance(it, ptrdiff_t(pick(b.broker.jobs().size())));
            if (pick(2)) b.broker.set_limit(it->first, (1 + pick(30)) * GiB, b.now);
            else b.broker.set_priority(it->first, Priority(pick(3)), b.now);
            b.collect();
          }
          break;
      }
      // The invariant: nothing is ever granted into over-commitment. (A device can only be over
      // committed when memory outside coloc grew, and then its commitments never grow.)
      for (size_t d = 0; d < b.broker.devices().size(); ++d) {
        Bytes committed = b.broker.devices()[d].committed;
        Bytes before_d = d < before.size() ? before[d] : 0;
        INFO("device " << d << " step " << step);
        CHECK((committed <= b.broker.usable(uint32_t(d)) || committed <= before_d));
      }
      if (cfg.max_per_user)
        for (auto& [serial, job] : b.broker.jobs()) CHECK(b.broker.user_committed(job.key.uid) <= *cfg.max_per_user);
      // Every grant stays within its job's limit.
      for (auto& [serial, job] : b.broker.jobs())
        for (auto& [dev, jd] : job.devices)
          if (job.limit != kNoLimit) CHECK((jd.granted <= job.limit || jd.granted <= b.broker.in_use(dev) + 64 * MiB * 4));
    }
    // Everyone leaves: the books are empty.
    for (ClientId id : live) b.remove(id);
    for (auto& d : b.broker.devices()) CHECK(d.committed == 0);
    CHECK(b.broker.jobs().empty());
    CHECK(b.broker.waiters().empty());
    // Every request got exactly one reply.
    std::set<uint32_t> seqs;
    for (auto& r : b.replies) CHECK(seqs.insert(r.seq).second);
  }
}

// ---- the policy's order and victim (PriorityFifoPolicy on its own) ---------------------------------

TEST_CASE("policy: within a priority, growth and reserving admissions come before admissions that reserve nothing") {
  PriorityFifoPolicy p;
  const WaiterView grow_late{Priority::kNormal, 9, false, false};
  const WaiterView admit_free_early{Priority::kNormal, 1, true, false};   // no --mem: reserves nothing
  const WaiterView admit_reserved_early{Priority::kNormal, 2, true, true};  // --mem: holds its footprint
  CHECK(p.before(grow_late, admit_free_early));
  CHECK_FALSE(p.before(admit_free_early, grow_late));
  // A reserving admission and growth are served in arrival order.
  CHECK(p.before(admit_reserved_early, grow_late));
  CHECK_FALSE(p.before(grow_late, admit_reserved_early));
  CHECK(p.before(admit_reserved_early, admit_free_early));
  // Priority still comes first.
  const WaiterView admit_free_high{Priority::kHigh, 20, true, false};
  CHECK(p.before(admit_free_high, grow_late));
  const WaiterView grow_best_effort{Priority::kBestEffort, 0, false, false};
  CHECK(p.before(admit_free_early, grow_best_effort));
  // Among equals, FIFO; irreflexive.
  CHECK(p.before(WaiterView{Priority::kNormal, 3, false, false}, grow_late));
  CHECK_FALSE(p.before(grow_late, grow_late));
}

TEST_CASE("policy: the deadlock victim is the newest job without progress, not an older running one") {
  PriorityFifoPolicy p;
  SUBCASE("no progress loses before age counts") {
    // The running job's process is younger (started later) but it has been admitted first and has grown.
    std::vector<VictimCandidate> c = {{1, Priority::kNormal, 500, 10, true}, {2, Priority::kNormal, 100, 20, false}};
    CHECK(p.choose_victim(c) == 2);
  }
  SUBCASE("among jobs without progress, the latest admitted") {
    std::vector<VictimCandidate> c = {{1, Priority::kNormal, 100, 30, false}, {2, Priority::kNormal, 900, 20, false},
                                      {3, Priority::kNormal, 50, 10, true}};
    CHECK(p.choose_victim(c) == 1);
  }
  SUBCASE("then the youngest process, then the latest serial") {
    std::vector<VictimCandidate> c = {{1, Priority::kNormal, 100, 10, false}, {2, Priority::kNormal, 300, 10, false},
                                      {3, Priority::kNormal, 300, 10, false}};
    CHECK(p.choose_victim(c) == 3);
  }
  SUBCASE("priority first: a best-effort job that has grown loses to a normal one that has not") {
    std::vector<VictimCandidate> c = {{1, Priority::kBestEffort, 100, 10, true}, {2, Priority::kNormal, 900, 90, false}};
    CHECK(p.choose_victim(c) == 1);
  }
}

TEST_CASE("broker: a running job's growth is not held back by an earlier admission that reserves nothing") {
  Bench b;
  ClientId hog = b.add("hog", 7 * GiB);
  REQUIRE(b.granted(b.attach(hog, {{1, 10 * GiB, 1 * GiB}})));
  ClientId old_job = b.add("old");
  REQUIRE(b.granted(b.attach(old_job, {{1, 10 * GiB, 2 * GiB}})));  // 1 GiB left
  b.use(old_job, 0, 2 * GiB);
  b.advance(1);
  ClientId newcomer = b.add("new");  // no --mem: its admission reserves nothing
  uint32_t sn = b.attach(newcomer, {{1, 10 * GiB, 2 * GiB}});
  CHECK(b.pending(sn));
  b.advance(1);
  // The running job asks for the 1 GiB that is free: served now, although the newcomer waits ahead.
  uint32_t g = b.grow(old_job, 0, 3 * GiB);
  CHECK(b.granted(g));
  CHECK(b.pending(sn));
}

TEST_CASE("broker: when memory frees, a running job's growth is served before a newcomer's admission") {
  Bench b;
  ClientId hog = b.add("hog");
  REQUIRE(b.granted(b.attach(hog, {{1, 10 * GiB, 7 * GiB}})));
  b.use(hog, 0, 7 * GiB);
  ClientId old_job = b.add("old");
  REQUIRE(b.granted(b.attach(old_job, {{1, 10 * GiB, 2 * GiB}})));  // 1 GiB left
  b.use(old_job, 0, 2 * GiB);
  b.advance(1);
  ClientId newcomer = b.add("new");
  uint32_t sn = b.attach(newcomer, {{1, 10 * GiB, 2 * GiB}});  // parks first
  b.advance(1);
  uint32_t g = b.grow(old_job, 0, 4 * GiB);  // needs 2 GiB more: parks second
  CHECK(b.pending(sn));
  CHECK(b.pending(g));
  // 2 GiB free up: room for one of them, and it is the running job's growth.
  b.use(hog, 0, 5 * GiB);
  b.broker.shrink(hog, 0, 5 * GiB, b.now);
  b.collect();
  CHECK(b.granted(g));
  CHECK(b.pending(sn));
  b.remove(hog);
  CHECK(b.granted(sn));
}

TEST_CASE("broker: deadlock breaking spares an older running job and refuses the newest job without progress") {
  Bench b;
  // The running job's process started later than the newcomer's (age 500 vs 100): by process age
  // alone it would be the victim.
  ClientId running = b.add("running", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 500);
  REQUIRE(b.granted(b.attach(running, {{1, 10 * GiB, 2 * GiB}})));
  b.use(running, 0, 2 * GiB);
  REQUIRE(b.granted(b.grow(running, 0, 4 * GiB)));  // it makes progress
  b.use(running, 0, 4 * GiB);
  b.advance(kSec);
  ClientId newcomer = b.add("newcomer", kNoLimit, Priority::kNormal, OnFull::kWait, 1000, 100);
  REQUIRE(b.granted(b.attach(newcomer, {{1, 10 * GiB, 5 * GiB}})));  // 1 GiB left
  b.use(newcomer, 0, 5 * GiB);
  uint32_t g_run = b.grow(running, 0, 6 * GiB);
  CHECK(b.pending(g_run));
  uint32_t g_new = b.grow(newcomer, 0, 7 * GiB);
  CHECK(b.refused(g_new, Reason::kDeadlockBroken));
  CHECK(b.pending(g_run));
  CHECK(b.count(Event::Kind::kRefused, Reason::kDeadlockBroken) == 1);
  b.remove(newcomer);
  CHECK(b.granted(g_run));
}

// ---- the outside estimate -------------------------------------------------------------------------

TEST_CASE("broker: a driver OOM report does not erase a known outside estimate") {
  // 10 GiB device; the books know of 1 GiB used outside coloc, but it has grown to 3 GiB since.
  // The job holds 2 GiB and asks for 6 GiB inside its 8 GiB grant: the driver has 5 GiB free.
  SUBCASE("the client's in-use without the failed request is used, not the stats page's") {
    Bench b;
    ClientId a = b.add("a");
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 8 * GiB}})));  // colocd cannot read this device
    b.use(a, 0, 8 * GiB);  // 2 GiB held, and the 6 GiB the driver refuses, still counted
    b.broker.driver_oom(a, 0, 6 * GiB, 2 * GiB, 5 * GiB, b.now);
    b.collect();
    // 10 - 5 free - 2 held: 3 GiB outside, within the 6 GiB the job can show missing.
    CHECK(b.broker.devices().at(0).outside == 3 * GiB);
  }
  SUBCASE("a client report whose figures add up to more than the device shows claims nothing") {
    Bench b;
    ClientId a = b.add("a");
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 8 * GiB}})));
    b.use(a, 0, 8 * GiB);
    b.broker.driver_oom(a, 0, 6 * GiB, 8 * GiB, 5 * GiB, b.now);  // in-use counting the request
    b.collect();
    CHECK(b.broker.devices().at(0).outside == 0);
    CHECK(b.broker.devices().at(0).ledger_mismatches == 0);  // once: maybe in flight
    b.broker.driver_oom(a, 0, 6 * GiB, 8 * GiB, 5 * GiB, b.now);  // the same ledgers again: wrong
    b.collect();
    CHECK(b.broker.devices().at(0).ledger_mismatches == 1);
  }
  SUBCASE("a reading whose figures add up to more than the device shows keeps the estimate") {
    Bench b;
    ClientId a = b.add("a");
    REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 8 * GiB}}, 9 * GiB)));
    REQUIRE(b.broker.devices().at(0).outside == 1 * GiB);
    b.use(a, 0, 8 * GiB);
    b.broker.refresh_outside(0, 5 * GiB, b.now);  // 5 GiB used, but 8 GiB in use say the ledgers
    CHECK(b.broker.devices().at(0).outside == 1 * GiB);
    CHECK(b.broker.devices().at(0).ledger_mismatches == 0);  // an allocation may be in flight
    b.broker.refresh_outside(0, 5 * GiB, b.now);  // the next reading, the same ledgers: a wrong ledger
    CHECK(b.broker.devices().at(0).outside == 1 * GiB);
    CHECK(b.broker.devices().at(0).ledger_mismatches == 1);
    // The device can still bound it: 512 MiB used in all means at most 512 MiB outside...
    b.broker.refresh_outside(0, 10 * GiB - 512 * MiB, b.now);
    CHECK(b.broker.devices().at(0).outside == 512 * MiB);
    // ...and nothing used means nothing outside.
    b.broker.refresh_outside(0, 10 * GiB, b.now);
    CHECK(b.broker.devices().at(0).outside == 0);
  }
}

TEST_CASE("broker: a stale outside estimate is refreshed by the device's own figure and the waiter is admitted") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
  b.use(a, 0, 1 * GiB);
  REQUIRE(b.granted(b.grow(a, 0, 2 * GiB)));
  b.broker.refresh_outside(0, 3 * GiB, b.now);  // NVML: 6 GiB used outside coloc
  CHECK(b.broker.devices().at(0).outside == 6 * GiB);
  CHECK(b.broker.take_short_devices().empty());
  b.remove(a);  // no coloc client is left to report that the outside memory goes away
  ClientId c = b.add("c", 8 * GiB);
  uint32_t s = b.attach(c, {{1, 10 * GiB, 1 * GiB}});
  CHECK(b.pending(s));
  CHECK(b.broker.take_short_devices() == std::vector<uint32_t>{0});  // the engine re-reads device 0
  CHECK(b.broker.take_short_devices().empty());
  b.broker.refresh_outside(0, 10 * GiB, b.now);  // NVML: the device is empty
  b.collect();
  CHECK(b.broker.devices().at(0).outside == 0);
  CHECK(b.granted(s));
  b.broker.refresh_outside(7, 0, b.now);  // an unknown device is ignored
}

}  // TEST_SUITE

TEST_SUITE("daemon") {

TEST_CASE("broker: ledgers ahead of the device for one reading (allocations in flight) are no mismatch; the ledgers changing between readings is none either") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 4 * GiB}}, 10 * GiB)));
  b.use(a, 0, 2 * GiB + 2 * MiB);               // charged before the driver call...
  b.broker.refresh_outside(0, 8 * GiB, b.now);  // ...read before the driver took it
  b.use(a, 0, 2 * GiB + 4 * MiB);               // the next allocation, in flight too
  b.broker.refresh_outside(0, 8 * GiB - 2 * MiB, b.now);
  b.use(a, 0, 2 * GiB + 4 * MiB);
  b.broker.refresh_outside(0, 8 * GiB - 4 * MiB, b.now);  // caught up: no difference
  CHECK(b.broker.devices().at(0).ledger_mismatches == 0);
  CHECK(b.broker.devices().at(0).outside == 0);
}

TEST_CASE("broker: a refused growth records the in-use it was asked with, however the client's use changed while it waited") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{1, 10 * GiB, 1 * GiB}})));
  b.use(a, 0, 1 * GiB);
  ClientId c = b.add("c", 8 * GiB);
  REQUIRE(b.granted(b.attach(c, {{1, 10 * GiB, 1 * GiB}})));  // reserves 8 GiB: little is left
  // "a" asks for 2 GiB more (need 3 GiB, 1 GiB in use): it waits.
  const uint32_t seq = b.next_seq++;
  b.broker.grow(a, seq, 0, 3 * GiB, kUnknown, b.now, 1 * GiB);
  b.collect();
  REQUIRE(b.pending(seq));
  // Meanwhile other threads of "a" allocate within its grant: its page shows 3 GiB now.
  b.use(a, 0, 3 * GiB);
  b.advance(301 * kSec);  // the wait times out
  REQUIRE(b.refused(seq, Reason::kTimeout));
  const Event* refused = nullptr;
  for (const Event& e : b.events)
    if (e.kind == Event::Kind::kRefused) refused = &e;
  REQUIRE(refused);
  CHECK(refused->bytes == 3 * GiB);
  CHECK(refused->in_use == 1 * GiB);  // so the report's request is the 2 GiB asked, not 0
}

TEST_CASE("broker: a cancelled job leaves the queue and gets nothing that would wait; a growth that fits is still granted") {
  Bench b;
  ClientId big = b.add("big", 70 * GiB);
  REQUIRE(b.granted(b.attach(big, {{1, 80 * GiB, 1 * GiB}})));
  ClientId j = b.add("j");
  REQUIRE(b.granted(b.attach(j, {{1, 80 * GiB, 1 * GiB}})));
  const uint32_t waiting = b.grow(j, 0, 20 * GiB);  // 10 GiB are free: it waits
  REQUIRE(b.pending(waiting));
  CHECK(b.broker.cancel_job(b.broker.find_client(j)->job, b.now) == 1);
  b.collect();
  CHECK(b.refused(waiting, Reason::kJobCancelled));
  // The job may still catch the signal and save its state: what fits now is granted...
  CHECK(b.granted(b.grow(j, 0, 4 * GiB)));
  // ...what would wait is refused at once, and so is any admission, of this process or another.
  CHECK(b.refused(b.grow(j, 0, 20 * GiB), Reason::kJobCancelled));
  CHECK(b.broker.waiters().empty());
  ClientId j2 = b.add("j");
  CHECK(b.refused(b.attach(j2, {{1, 80 * GiB, 1 * GiB}}), Reason::kJobCancelled));
  CHECK(b.broker.waiters().empty());
  // Another job is untouched.
  ClientId k = b.add("k");
  CHECK(b.granted(b.attach(k, {{1, 80 * GiB, 1 * GiB}})));
}

}  // TEST_SUITE
