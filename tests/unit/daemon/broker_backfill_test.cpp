// The Broker's queue with EASY backfill (issue 28; the rule itself: backfill_test.cpp): which
// admission goes ahead of the head of a device's queue, the head's start protected, the overrun
// that stops backfill, admission waits without a timeout. A fake clock, no processes.
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;
namespace proto = coloc::proto;

namespace {

/// An Attach of gpu 1 (80 GiB) asking `request` bytes at once, with what its run history says:
/// its footprint `estimate` (0 = none) and its time from admission to end `run` (0 = not known).
uint32_t attach_known(Bench& b, ClientId id, Bytes request, Bytes estimate = 0, Nanos run = 0) {
  AttachRequest r{gpu(1), 80 * GiB, kUnknown, request, true};
  r.estimate = estimate;
  r.run = run;
  uint32_t seq = b.next_seq++;
  b.broker.attach(id, seq, std::vector<AttachRequest>{r}, b.now);
  b.collect();
  return seq;
}

BrokerConfig with_headroom(backfill::Mode mode) {
  BrokerConfig c;  // 2% headroom: 78.4 GiB usable of 80
  c.backfill = mode;
  return c;
}

/// The first two jobs: `train` (--mem 20GiB, admitted, its end not known) and `finetune`
/// (--mem 70GiB, waiting behind it); returns their clients and finetune's Attach seq.
std::tuple<ClientId, ClientId, uint32_t> train_then_finetune(Bench& b) {
  ClientId train = b.add("train", 20 * GiB);
  REQUIRE(b.granted(attach_known(b, train, 0)));
  ClientId finetune = b.add("finetune", 70 * GiB);
  const uint32_t sf = attach_known(b, finetune, 0);
  return {train, finetune, sf};
}

/// `long` (40 GiB, ends in 100 s), `head` (60 GiB, waiting: its shadow time is +100 s) and
/// `quick` (30 GiB from history, expected to end in 90 s, backfilled into the head's extra);
/// returns their clients and the head's Attach seq.
std::tuple<ClientId, ClientId, uint32_t, ClientId> long_head_quick(Bench& b) {
  ClientId lng = b.add("long", 40 * GiB);
  REQUIRE(b.granted(attach_known(b, lng, 0, 0, 100 * kSec)));
  ClientId head = b.add("head", 60 * GiB);
  const uint32_t sh = attach_known(b, head, 0);
  ClientId quick = b.add("quick");
  REQUIRE(b.granted(attach_known(b, quick, 0, 30 * GiB, 90 * kSec)));
  return {lng, head, sh, quick};
}

const JobDevice& standing(const Bench& b, const std::string& job) {
  return b.broker.find_job({1000, job})->devices.at(0);
}

}  // namespace

TEST_CASE("backfill in the broker: the issue's three jobs: a small job goes ahead of a big one waiting for a job of unknown end, which still starts when that ends") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  const auto [train, finetune, sf] = train_then_finetune(b);
  CHECK(b.pending(sf));
  ClientId notebook = b.add("notebook", 2 * GiB, Priority::kBestEffort);
  const uint32_t sn = attach_known(b, notebook, 0);
  CHECK(b.granted(sn));  // 8.4 GiB will be left when `train` ends: 2 of them are `notebook`'s
  CHECK(standing(b, "notebook").backfilled);
  CHECK(standing(b, "notebook").backfill_verdict == backfill::Verdict::kInExtra);
  // One that would take more than the extra waits its turn.
  ClientId big = b.add("big", 10 * GiB, Priority::kBestEffort);
  const uint32_t sb = attach_known(b, big, 0);
  CHECK(b.pending(sb));
  b.remove(train);
  CHECK(b.granted(sf));  // the head starts as soon as `train` ends
  CHECK(b.pending(sb));  // 78.4 - 2 - 70 = 6.4 GiB: not for 10
  b.remove(notebook);
  CHECK(b.pending(sb));  // 8.4
  b.remove(finetune);
  CHECK(b.granted(sb));
}

TEST_CASE("backfill in the broker: with backfill off, nothing goes ahead of a request waiting on the device (today's order)") {
  Bench b(with_headroom(backfill::Mode::kOff));
  const auto [train, finetune, sf] = train_then_finetune(b);
  ClientId notebook = b.add("notebook", 2 * GiB, Priority::kBestEffort);
  const uint32_t sn = attach_known(b, notebook, 0);
  CHECK(b.pending(sf));
  CHECK(b.pending(sn));
  b.remove(train);
  CHECK(b.granted(sf));
  CHECK(b.granted(sn));
}

TEST_CASE("backfill in the broker: a job expected to end by the head's shadow time goes ahead whatever its size; one that would end after it does not") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  // `long` holds 40 GiB and is expected to end in 100 s; the head needs 60: its shadow time is +100 s.
  ClientId lng = b.add("long", 40 * GiB);
  REQUIRE(b.granted(attach_known(b, lng, 0, 0, 100 * kSec)));
  ClientId head = b.add("head", 60 * GiB);
  const uint32_t sh = attach_known(b, head, 0);
  CHECK(b.pending(sh));
  // 38.4 available now, 18.4 extra at the shadow time.
  ClientId late = b.add("late");
  const uint32_t sl = attach_known(b, late, 0, 30 * GiB, 150 * kSec);  // from history: 30 GiB, 150 s
  CHECK(b.pending(sl));
  ClientId quick = b.add("quick");
  const uint32_t sq = attach_known(b, quick, 0, 30 * GiB, 90 * kSec);  // 30 GiB, 90 s
  CHECK(b.granted(sq));
  CHECK(standing(b, "quick").backfill_verdict == backfill::Verdict::kBeforeShadow);
  CHECK(standing(b, "quick").expected_end == b.now + 90 * kSec);
  CHECK(b.broker.devices()[0].promise.shadow == b.now + 100 * kSec);
  // Once both end, as predicted, the head starts: its start was not delayed.
  b.advance(90 * kSec);
  b.remove(quick);
  CHECK(b.pending(sh));
  b.advance(10 * kSec);
  b.remove(lng);
  CHECK(b.granted(sh));
  CHECK(b.pending(sl));  // 78.4 - 60 = 18.4: not for 30
}

TEST_CASE("backfill in the broker: a job without a known footprint is never backfilled, however small") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  const auto [train, finetune, sf] = train_then_finetune(b);
  ClientId tiny = b.add("tiny");  // no --mem, no history, no estimate: it reserves nothing
  const uint32_t st = attach_known(b, tiny, 512 * MiB);
  CHECK(b.pending(sf));
  CHECK(b.pending(st));
  b.remove(train);
  CHECK(b.granted(sf));
  CHECK(b.granted(st));
}

TEST_CASE("backfill in the broker: a backfilled job that runs past its expected end stops all backfill on the device until the head starts") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  auto [lng, head, sh, quick] = long_head_quick(b);
  // `long` ends on time, `quick` does not: the head waits past its shadow time.
  b.advance(100 * kSec);
  b.remove(lng);
  CHECK(b.pending(sh));
  ClientId small = b.add("small", 1 * GiB);
  const uint32_t s1 = attach_known(b, small, 0);
  CHECK(b.granted(s1));  // +100 s is not past the promise yet: 1 GiB fits in the 18.4 extra
  b.advance(1);
  ClientId small2 = b.add("small2", 1 * GiB);
  const uint32_t s2 = attach_known(b, small2, 0);
  CHECK(b.pending(s2));  // overrun: nothing more goes ahead of this head
  b.advance(50 * kSec);
  b.remove(small);
  CHECK(b.pending(s2));
  b.remove(quick);  // the head starts...
  CHECK(b.granted(sh));
  CHECK(b.granted(s2));  // ...and the queue moves again
}

TEST_CASE("backfill in the broker: the queue's state saved before a restart holds after it: expected ends, and the promise to a late head") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  auto [lng, head, sh, quick] = long_head_quick(b);
  const auto promise = b.broker.promise_of(0);
  REQUIRE(promise.has_value());
  CHECK(promise->first == JobKey{1000, "head"});
  CHECK(promise->second == b.now + 100 * kSec);
  const Nanos quick_end = standing(b, "quick").expected_end;
  CHECK(quick_end == b.now + 90 * kSec);
  // A new broker (colocd restarted): the same jobs come back (the head's request is a new one),
  // and the engine restores what it saved.
  Bench a(with_headroom(backfill::Mode::kEasy));
  a.now = b.now;
  ClientId lng2 = a.add("long", 40 * GiB);
  REQUIRE(a.granted(attach_known(a, lng2, 0)));
  ClientId quick2 = a.add("quick");
  REQUIRE(a.granted(attach_known(a, quick2, 0, 30 * GiB)));
  CHECK(a.broker.restore_queue_state(a.broker.find_job({1000, "quick"})->serial, 0, quick_end, true));
  CHECK(standing(a, "quick").backfilled);
  CHECK(standing(a, "quick").expected_end == quick_end);
  CHECK_FALSE(a.broker.restore_queue_state(a.broker.find_job({1000, "quick"})->serial, 5, quick_end, true));  // no such device
  a.broker.restore_promise(0, promise->first, promise->second);
  ClientId head2 = a.add("head", 60 * GiB);
  const uint32_t sh2 = attach_known(a, head2, 0);
  CHECK(a.pending(sh2));
  // Past the shadow time the head waits on: nothing more goes ahead of it...
  a.advance(100 * kSec + 1);
  a.remove(lng2);
  ClientId small = a.add("small", 1 * GiB);
  const uint32_t s1 = attach_known(a, small, 0);
  CHECK(a.pending(s1));
  a.remove(quick2);  // ...until it starts
  CHECK(a.granted(sh2));
  CHECK(a.granted(s1));
  (void)sh;
  (void)quick;
}

TEST_CASE("backfill in the broker: nothing goes ahead of a running job's parked growth on the device") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  ClientId run = b.add("run");
  REQUIRE(b.granted(attach_known(b, run, 60 * GiB)));
  const uint32_t g = b.grow(run, 0, 75 * GiB);  // 18.4 GiB more: 78.4 - 60
  REQUIRE(b.granted(g));
  ClientId other = b.add("other");
  REQUIRE(b.granted(attach_known(b, other, 1 * GiB)));
  const uint32_t g2 = b.grow(run, 0, 78 * GiB);  // does not fit: parks
  CHECK(b.pending(g2));
  ClientId small = b.add("small", 1 * GiB, Priority::kBestEffort);
  const uint32_t ss = attach_known(b, small, 0);
  CHECK(b.pending(ss));
  b.remove(other);
  CHECK(b.granted(g2));
}

TEST_CASE("backfill in the broker: a backfilled job's growth beyond its footprint waits behind the head") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  const auto [train, finetune, sf] = train_then_finetune(b);
  ClientId nb = b.add("nb");  // its history says 2 GiB; it declares no limit, so it may grow past it
  REQUIRE(b.granted(attach_known(b, nb, 0, 2 * GiB)));
  const uint32_t g = b.grow(nb, 0, 4 * GiB);  // 2 beyond its footprint, with 56.4 GiB available
  CHECK(b.pending(g));
  b.remove(train);
  CHECK(b.granted(sf));
  CHECK(b.granted(g));  // 78.4 - 70 - 2 = 6.4: room for 2 more after the head
}

TEST_CASE("backfill in the broker: a job that would fail when the device is full is backfilled instead of refused") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  ClientId train = b.add("train", 20 * GiB);
  REQUIRE(b.granted(attach_known(b, train, 0)));
  ClientId finetune = b.add("finetune", 70 * GiB);
  attach_known(b, finetune, 0);
  ClientId nb = b.add("nb", 2 * GiB, Priority::kNormal, OnFull::kFail);
  CHECK(b.granted(attach_known(b, nb, 0)));
  ClientId nb2 = b.add("nb2", 10 * GiB, Priority::kNormal, OnFull::kFail);
  CHECK(b.refused(attach_known(b, nb2, 0), Reason::kDeviceFull));
}

TEST_CASE("backfill in the broker: a waiting admission is backfilled when memory frees, not only on arrival") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  ClientId train = b.add("train", 20 * GiB);
  REQUIRE(b.granted(attach_known(b, train, 0)));
  ClientId fill = b.add("fill", 55 * GiB);  // leaves 3.4 available
  REQUIRE(b.granted(attach_known(b, fill, 0)));
  ClientId finetune = b.add("finetune", 70 * GiB);
  const uint32_t sf = attach_known(b, finetune, 0);
  ClientId nb = b.add("nb", 5 * GiB);
  const uint32_t sn = attach_known(b, nb, 0);
  CHECK(b.pending(sf));
  CHECK(b.pending(sn));  // 5 does not fit in 3.4
  b.remove(fill);        // 58.4 available: not enough for the head, but 5 of the 8.4 extra fit
  CHECK(b.pending(sf));
  CHECK(b.granted(sn));
  CHECK(b.reply(sn)->waited == 0);
}

TEST_CASE("backfill in the broker: admissions wait without a timeout unless the job or colocd sets one; growth keeps its timeout") {
  SUBCASE("the default: for ever") {
    Bench b;
    ClientId a = b.add("a", 50 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
    ClientId c = b.add("c", 40 * GiB);
    const uint32_t sc = b.attach(c, {{1, 80 * GiB, 0}});
    CHECK(b.broker.next_deadline() == kNever);
    b.advance(10'000 * kSec);
    CHECK(b.pending(sc));
  }
  SUBCASE("the job's own COLOC_WAIT_TIMEOUT") {
    Bench b;
    ClientId a = b.add("a", 50 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
    ClientSpec s;
    s.uid = 1000;
    s.pid = 99;
    s.job_id = "c";
    s.limit = 40 * GiB;
    s.wait_timeout = 20 * kSec;
    Bench::Pages p;
    const ClientId c = b.broker.add_client(s, p.control.get(), p.stats.get(), b.now);
    b.pages.emplace(c, std::move(p));
    const uint32_t sc = b.attach(c, {{1, 80 * GiB, 0}});
    CHECK(b.broker.next_deadline() == b.now + 20 * kSec);
    b.advance(20 * kSec);
    CHECK(b.refused(sc, Reason::kTimeout));
  }
  SUBCASE("colocd's admission_wait_timeout") {
    BrokerConfig cfg = Bench::no_headroom();
    cfg.admission_wait_timeout = 60 * kSec;
    Bench b(cfg);
    ClientId a = b.add("a", 50 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
    ClientId c = b.add("c", 40 * GiB);
    const uint32_t sc = b.attach(c, {{1, 80 * GiB, 0}});
    b.advance(60 * kSec);
    CHECK(b.refused(sc, Reason::kTimeout));
  }
}

namespace {
/// The reason, position and blocker of job `job`'s request on device 0 (fails when it has none).
Broker::QueueEntry entry_of(const Bench& b, const std::string& job) {
  const Job* j = b.broker.find_job({1000, job});
  REQUIRE(j);
  for (const Broker::QueueEntry& e : b.broker.queue(0, b.now))
    if (e.waiter->job == j->serial) return e;
  FAIL("no request of ", job, " waits");
  return {};
}
JobSerial serial_of(const Bench& b, const std::string& job) { return b.broker.find_job({1000, job})->serial; }
}  // namespace

TEST_CASE("queue: the first in line waits for Resources (what is missing), the others behind it for Priority or Queue, with positions") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  ClientId train = b.add("train", 20 * GiB);
  REQUIRE(b.granted(attach_known(b, train, 0, 0, 100 * kSec)));  // ends in 100 s, by its history
  ClientId hi = b.add("hi", 70 * GiB, Priority::kHigh);
  attach_known(b, hi, 0, 0, 50 * kSec);
  ClientId n1 = b.add("n1", 70 * GiB);
  attach_known(b, n1, 0);
  ClientId be = b.add("be", 60 * GiB, Priority::kBestEffort);
  attach_known(b, be, 0);
  const auto q = b.broker.queue(0, b.now);
  REQUIRE(q.size() == 3);
  Broker::QueueEntry e = entry_of(b, "hi");
  CHECK(e.position == 1);
  CHECK(e.reason == proto::WaitReason::kResources);
  CHECK(e.missing == 70 * GiB - (b.broker.available(0)));
  CHECK(e.start == b.now + 100 * kSec);  // when `train` is expected to end
  e = entry_of(b, "n1");
  CHECK(e.position == 2);
  CHECK(e.reason == proto::WaitReason::kPriority);  // behind a high-priority job...
  CHECK(e.blocker == serial_of(b, "hi"));
  CHECK(e.start == b.now + 150 * kSec);  // ...expected to end 50 s after it starts
  e = entry_of(b, "be");
  CHECK(e.position == 3);
  CHECK(e.reason == proto::WaitReason::kPriority);
  CHECK(e.blocker == serial_of(b, "hi"));
  CHECK(e.start == kNever);  // behind `n1`, whose end is not known
  CHECK(std::string(proto::wait_reason_name(e.reason)) == "Priority");
  // Once `hi` is in, `n1` is first in line and `be` waits behind a job of higher priority still.
  b.remove(train);
  REQUIRE(b.broker.queue(0, b.now).size() == 2);
  CHECK(entry_of(b, "n1").reason == proto::WaitReason::kResources);
  CHECK(entry_of(b, "be").blocker == serial_of(b, "n1"));
}

TEST_CASE("queue: behind a request of the same priority the reason is Queue") {
  Bench b(with_headroom(backfill::Mode::kEasy));
  ClientId train = b.add("train", 20 * GiB);
  REQUIRE(b.granted(attach_known(b, train, 0)));
  ClientId n1 = b.add("n1", 70 * GiB);
  attach_known(b, n1, 0);
  ClientId n2 = b.add("n2", 70 * GiB);
  attach_known(b, n2, 0);
  const Broker::QueueEntry e = entry_of(b, "n2");
  CHECK(e.reason == proto::WaitReason::kQueue);
  CHECK(e.blocker == serial_of(b, "n1"));
  CHECK(e.position == 2);
  CHECK(e.start == kNever);  // `train`'s end is not known
  CHECK(entry_of(b, "n1").start == kNever);
}

TEST_CASE("queue: Outside when memory used outside coloc is what is missing, UserCap, Restart") {
  SUBCASE("outside") {
    Bench b;  // no headroom: 80 GiB usable
    ClientId a = b.add("a", 20 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}}, 80 * GiB)));
    b.broker.refresh_outside(0, 80 * GiB - 30 * GiB, b.now);  // 30 GiB in use outside coloc
    ClientId c = b.add("c", 40 * GiB);
    b.attach(c, {{1, 80 * GiB, 0}});
    Broker::QueueEntry e = entry_of(b, "c");
    CHECK(e.reason == proto::WaitReason::kOutside);  // 30 free, 40 needed: it would fit were the 30 freed
    CHECK(e.missing == 10 * GiB);
    ClientId d = b.add("d", 70 * GiB);
    b.remove(c);
    b.attach(d, {{1, 80 * GiB, 0}});
    CHECK(entry_of(b, "d").reason == proto::WaitReason::kResources);  // 70 > 80 - 20: `a` holds what is missing
  }
  SUBCASE("user cap") {
    BrokerConfig cfg = Bench::no_headroom();
    cfg.max_per_user = 30 * GiB;
    Bench b(cfg);
    ClientId a = b.add("a", 20 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
    ClientId c = b.add("c", 20 * GiB);
    b.attach(c, {{1, 80 * GiB, 0}});
    CHECK(entry_of(b, "c").reason == proto::WaitReason::kUserCap);
    CHECK(entry_of(b, "c").start == kNever);
  }
  SUBCASE("restart") {
    Bench b;
    ClientId a = b.add("a", 20 * GiB);
    REQUIRE(b.granted(b.attach(a, {{1, 80 * GiB, 0}})));
    b.broker.hold_until(b.now + 5 * kSec);
    ClientId c = b.add("c", 20 * GiB);
    b.attach(c, {{1, 80 * GiB, 0}});
    CHECK(entry_of(b, "c").reason == proto::WaitReason::kRestart);
    b.advance(5 * kSec);
    CHECK(b.broker.queue(0, b.now).empty());  // admitted once the hold ends
  }
}
