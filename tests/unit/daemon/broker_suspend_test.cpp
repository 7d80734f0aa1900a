// The Broker's books of a suspension (issue 29; broker.h, "Suspension"): a suspended job's memory
// leaves the device's books, its restore is a queued request that new admissions of its priority or
// lower do not pass, its parked requests freeze, and a failed restore is never retried. A fake
// clock, no processes.
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;
namespace proto = coloc::proto;

namespace {

/// A job of priority `prio` with its process `pid`, admitted on gpu 1 (80 GiB) with `mem` reserved
/// and `use` bytes granted; the driver lists the process with `use` + 1 GiB (its context).
ClientId running(Bench& b, const std::string& job, int32_t pid, Bytes mem, Priority prio, Bytes use) {
  b.next_pid = pid;
  ClientId id = b.add(job, mem, prio);
  REQUIRE(b.granted(b.attach(id, {{1, 80 * GiB, use}})));
  b.use(id, 0, use);
  return id;
}

JobSerial serial(const Bench& b, const std::string& job) { return b.broker.find_job({1000, job})->serial; }
const Job& job(const Bench& b, const std::string& name) { return *b.broker.find_job({1000, name}); }

/// Suspends `name` as the engine does: begin, the helper's success, end.
void suspend(Bench& b, const std::string& name) {
  REQUIRE(b.broker.begin_suspend(serial(b, name), b.now));
  b.broker.end_suspend(serial(b, name), true, b.now);
  b.collect();
}

const Broker::QueueEntry* entry_of(const Bench& b, const std::string& name, std::vector<Broker::QueueEntry>& q) {
  q = b.broker.queue(0, b.now);
  for (const auto& e : q)
    if (e.waiter->job == serial(b, name)) return &e;
  return nullptr;
}

}  // namespace

TEST_SUITE("broker") {

TEST_CASE("suspension: a high job gets the memory a suspended job held, and the restore waits until it is free again") {
  Bench b;
  running(b, "be1", 101, 36 * GiB, Priority::kBestEffort, 20 * GiB);
  running(b, "be2", 102, 36 * GiB, Priority::kBestEffort, 20 * GiB);
  b.processes({{101, 21 * GiB}, {102, 21 * GiB}});
  ClientId high = b.add("high", 40 * GiB, Priority::kHigh);
  const uint32_t sh = b.attach(high, {{1, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(sh));  // 8 GiB available of 80

  REQUIRE(b.broker.begin_suspend(serial(b, "be1"), b.now));
  CHECK(!b.broker.begin_suspend(serial(b, "be1"), b.now));  // one suspension at a time
  CHECK(b.pending(sh));  // the books are as they were while the helper checkpoints
  CHECK(b.broker.devices()[0].committed == 72 * GiB);
  b.broker.end_suspend(serial(b, "be1"), true, b.now);
  b.collect();
  CHECK(b.granted(sh));
  CHECK(job(b, "be1").suspension == Suspension::kSuspended);
  CHECK(b.broker.devices()[0].committed == 76 * GiB);  // be2's 36 and high's 40; be1's 36 left
  CHECK(b.broker.in_use(0) == 20 * GiB);               // be1's claim counts nothing
  // What it needs back: the driver's figure for its process before the checkpoint (21 GiB; its
  // reservation of 36 is not a need).
  CHECK(b.broker.restore_need(job(b, "be1"), 0) == 21 * GiB);
  CHECK(b.broker.take_restores().empty());

  // A newcomer of the same priority does not pass the queued restore, even where it would fit.
  ClientId be3 = b.add("be3", kNoLimit, Priority::kBestEffort);
  const uint32_t s3 = b.attach(be3, {{1, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(s3));
  std::vector<Broker::QueueEntry> q;
  const auto* e3 = entry_of(b, "be3", q);
  REQUIRE(e3);
  CHECK(e3->reason == proto::WaitReason::kQueue);
  CHECK(e3->blocker == serial(b, "be1"));

  b.remove(high);  // the high job ends: the restore is admitted, its need reserved
  CHECK(b.broker.take_restores() == std::vector<JobSerial>{serial(b, "be1")});
  CHECK(job(b, "be1").suspension == Suspension::kRestoring);
  CHECK(job(b, "be1").devices.at(0).reserved == 21 * GiB);
  b.broker.end_restore(serial(b, "be1"), true, b.now);
  b.collect();
  CHECK(job(b, "be1").suspension == Suspension::kNone);
  // Its grants and driver overhead (the driver's 21 GiB less its ledger's 20) as they were; its
  // reservation stays at the need while another job waits there (it grows by ordinary grants).
  CHECK(job(b, "be1").devices.at(0).granted == 21 * GiB);
  CHECK(job(b, "be1").devices.at(0).reserved == 21 * GiB);
  CHECK(b.broker.in_use(0) == 40 * GiB);
  CHECK(b.granted(s3));  // then the newcomer
}

TEST_CASE("suspension: a suspended job's requests freeze (no timeout runs) and are served after its restore") {
  Bench b;
  ClientId be = running(b, "be", 101, kNoLimit, Priority::kBestEffort, 10 * GiB);
  running(b, "other", 102, 60 * GiB, Priority::kNormal, 1 * GiB);
  b.processes({{101, 11 * GiB}, {102, 2 * GiB}});
  suspend(b, "be");
  // A thread of the locked process asked for more: it waits, frozen, past its wait timeout (300 s).
  const uint32_t sg = b.grow(be, 0, 12 * GiB);
  CHECK(b.pending(sg));
  std::vector<Broker::QueueEntry> q;
  const auto* e = entry_of(b, "be", q);
  REQUIRE(e);
  CHECK(e->reason == proto::WaitReason::kSuspended);
  b.advance(1000 * kSec);
  CHECK(b.pending(sg));
  // Its restore was admitted at once (the room is there): the growth is served after it.
  CHECK(b.broker.take_restores() == std::vector<JobSerial>{serial(b, "be")});
  b.broker.end_restore(serial(b, "be"), true, b.now);
  b.collect();
  CHECK(b.granted(sg));
  CHECK(b.grant(be, 0) >= 12 * GiB);
}

TEST_CASE("suspension: a failed checkpoint changes nothing; a failed restore releases its room and is not retried") {
  Bench b;
  running(b, "be", 101, 30 * GiB, Priority::kBestEffort, 5 * GiB);
  REQUIRE(b.broker.begin_suspend(serial(b, "be"), b.now));
  b.broker.end_suspend(serial(b, "be"), false, b.now);
  b.collect();
  CHECK(job(b, "be").suspension == Suspension::kNone);
  CHECK(b.broker.devices()[0].committed == 30 * GiB);

  suspend(b, "be");  // its restore fits at once: admitted in the same pass
  CHECK(b.broker.take_restores() == std::vector<JobSerial>{serial(b, "be")});
  CHECK(b.broker.devices()[0].committed == 5 * GiB);  // its need (its grant: no driver list here)
  b.broker.end_restore(serial(b, "be"), false, b.now);
  b.collect();
  CHECK(job(b, "be").suspension == Suspension::kLost);
  CHECK(b.broker.devices()[0].committed == 0);
  b.advance(10 * kSec);
  CHECK(b.broker.take_restores().empty());
}

TEST_CASE("suspension: a process that ends while suspended takes its books and its restore request with it") {
  Bench b;
  ClientId be = running(b, "be", 101, 30 * GiB, Priority::kBestEffort, 5 * GiB);
  running(b, "big", 102, 40 * GiB, Priority::kHigh, 1 * GiB);
  ClientId high = b.add("high", 40 * GiB, Priority::kHigh);
  const uint32_t sh = b.attach(high, {{1, 80 * GiB, 1 * GiB}});
  CHECK(b.pending(sh));
  suspend(b, "be");
  CHECK(b.granted(sh));  // 80 - 40 - 40: nothing left for the restore (5 GiB)
  CHECK(b.broker.take_restores().empty());
  ClientId other = b.add("other", 1 * GiB, Priority::kBestEffort);
  const uint32_t so = b.attach(other, {{1, 80 * GiB, 64 * MiB}});
  CHECK(b.pending(so));  // behind be's restore
  b.remove(be);
  CHECK(b.broker.find_job({1000, "be"}) == nullptr);
  CHECK(b.broker.take_restores().empty());
  CHECK(b.pending(so));  // still no room
  b.remove(high);
  CHECK(b.granted(so));
}

TEST_CASE("suspension: a request of a higher priority waiting on the device goes before a restore") {
  Bench b;
  running(b, "be", 101, 30 * GiB, Priority::kBestEffort, 5 * GiB);
  ClientId n1 = running(b, "n1", 102, 40 * GiB, Priority::kNormal, 1 * GiB);
  ClientId n2 = b.add("n2", 42 * GiB, Priority::kNormal);
  const uint32_t s2 = b.attach(n2, {{1, 80 * GiB, 1 * GiB}});
  suspend(b, "be");
  CHECK(b.pending(s2));  // 40 available of the 42 it reserves
  // be's restore (5 GiB) would fit, but n2 (normal, above best-effort) waits there first.
  CHECK(b.broker.take_restores().empty());
  b.remove(n1);
  CHECK(b.granted(s2));
  CHECK(b.broker.take_restores() == std::vector<JobSerial>{serial(b, "be")});
}

TEST_CASE("suspension: a held suspension (coloc suspend) is not restored for room alone, and holds nothing up") {
  Bench b;
  running(b, "be", 101, 30 * GiB, Priority::kBestEffort, 5 * GiB);
  REQUIRE(b.broker.begin_suspend(serial(b, "be"), b.now, true));
  b.broker.end_suspend(serial(b, "be"), true, b.now);
  b.collect();
  CHECK(b.broker.take_restores().empty());  // the room is there; it waits for coloc resume
  ClientId other = b.add("other", 10 * GiB, Priority::kBestEffort);
  CHECK(b.granted(b.attach(other, {{1, 80 * GiB, 1 * GiB}})));  // not behind a held restore
  CHECK(b.broker.release_restore(serial(b, "be"), b.now));
  CHECK(b.broker.take_restores() == std::vector<JobSerial>{serial(b, "be")});
  CHECK(!b.broker.release_restore(serial(b, "be"), b.now));  // restoring: nothing to release
}

}  // TEST_SUITE
