// A per-device cap (COLOC_MEM_LIMIT_<n>, AttachRequest::cap): the job's limit on the device, and
// its reservation there, are the smaller of its limit and the cap of the process that admitted it.
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;

TEST_SUITE("daemon") {

TEST_CASE("broker: a cap below the job's limit is its limit and its reservation on that device") {
  Bench b;
  ClientId a = b.add("a", 10 * GiB);
  REQUIRE(b.granted(b.attach_capped(a, 1, 80 * GiB, 512 * MiB, 4 * GiB)));
  const Job& job = *b.broker.find_job({1000, "a"});
  CHECK(job.limit == 10 * GiB);
  CHECK(job.devices.at(0).reserved == 4 * GiB);
  CHECK(b.broker.limit_on(job, 0) == 4 * GiB);
  CHECK(b.limit_word(a, 0) == 4 * GiB);
  CHECK(b.broker.devices().at(0).committed == 4 * GiB);
  CHECK(b.granted(b.grow(a, 0, 4 * GiB)));
  CHECK(b.refused(b.grow(a, 0, 4 * GiB + 1), Reason::kOwnLimit));
  // On another device without a cap, the job's own limit.
  REQUIRE(b.granted(b.attach(a, {{2, 80 * GiB, 512 * MiB}})));
  CHECK(job.devices.at(1).reserved == 10 * GiB);
  CHECK(b.limit_word(a, 1) == 10 * GiB);
  // A cap above the limit changes nothing.
  ClientId c = b.add("c", 2 * GiB);
  REQUIRE(b.granted(b.attach_capped(c, 1, 80 * GiB, 512 * MiB, 8 * GiB)));
  CHECK(b.broker.find_job({1000, "c"})->devices.at(0).reserved == 2 * GiB);
}

TEST_CASE("broker: a cap without a job limit reserves the cap") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach_capped(a, 1, 16 * GiB, 512 * MiB, 6 * GiB)));
  CHECK(b.broker.find_job({1000, "a"})->devices.at(0).reserved == 6 * GiB);
  // A job that does not fit next to it waits for admission.
  ClientId big = b.add("big", 12 * GiB);
  uint32_t s = b.attach(big, {{1, 16 * GiB, 512 * MiB}});
  CHECK(b.pending(s));
  b.remove(a);
  CHECK(b.granted(s));
}

TEST_CASE("broker: the admitting process's cap holds for the job on the device; later processes' caps are their own") {
  Bench b;
  ClientId p1 = b.add("j", 10 * GiB);
  REQUIRE(b.granted(b.attach_capped(p1, 1, 80 * GiB, 512 * MiB, 4 * GiB)));
  ClientId p2 = b.add("j", 10 * GiB);
  REQUIRE(b.granted(b.attach_capped(p2, 1, 80 * GiB, 512 * MiB, kNoLimit)));
  CHECK(b.limit_word(p2, 0) == 4 * GiB);
  // The job's grants on the device stay within the cap, whichever process asks.
  CHECK(b.granted(b.grow(p2, 0, 3 * GiB)));
  b.use(p2, 0, 3 * GiB);
  CHECK(b.refused(b.grow(p1, 0, 1536 * MiB), Reason::kOwnLimit));
  // Once the job has left the device, the next admission's cap is the one that counts.
  b.remove(p1);
  b.remove(p2);
  ClientId p3 = b.add("j", 10 * GiB);
  REQUIRE(b.granted(b.attach_capped(p3, 1, 80 * GiB, 512 * MiB, 6 * GiB)));
  CHECK(b.broker.find_job({1000, "j"})->devices.at(0).reserved == 6 * GiB);
}

TEST_CASE("broker: coloc set moves the job's limit under the cap, never above it") {
  Bench b;
  ClientId a = b.add("a", 10 * GiB);
  REQUIRE(b.granted(b.attach_capped(a, 1, 80 * GiB, 512 * MiB, 4 * GiB)));
  const Job* job = b.broker.find_job({1000, "a"});
  REQUIRE(b.broker.set_limit(job->serial, 20 * GiB, b.now));
  b.collect();
  CHECK(b.limit_word(a, 0) == 4 * GiB);
  CHECK(job->devices.at(0).reserved == 4 * GiB);
  REQUIRE(b.broker.set_limit(job->serial, 3 * GiB, b.now));
  b.collect();
  CHECK(b.limit_word(a, 0) == 3 * GiB);
  CHECK(job->devices.at(0).reserved == 3 * GiB);
}

TEST_CASE("broker: a resumed ledger keeps its cap, and a limit that was only the cap does not lower the job's") {
  Bench b;
  ClientId a = b.add("a", 10 * GiB);
  ResumeEntry e = resumed(1, 80 * GiB, 1 * GiB);
  e.limit = 4 * GiB;  // what its control page showed: the cap
  e.cap = 4 * GiB;
  b.broker.resume(a, std::vector<ResumeEntry>{e}, b.now);
  b.collect();
  const Job& job = *b.broker.find_job({1000, "a"});
  CHECK(job.limit == 10 * GiB);
  CHECK(b.broker.limit_on(job, 0) == 4 * GiB);
  CHECK(job.devices.at(0).reserved == 4 * GiB);
  CHECK(b.limit_word(a, 0) == 4 * GiB);
  // A limit below the job's and the cap (a live lowering this daemon has no saved state of)
  // holds on the device.
  Bench b2;
  ClientId c = b2.add("c", 10 * GiB);
  e.limit = 3 * GiB;
  b2.broker.resume(c, std::vector<ResumeEntry>{e}, b2.now);
  b2.collect();
  const Job& jc = *b2.broker.find_job({1000, "c"});
  CHECK(b2.broker.limit_on(jc, 0) == 3 * GiB);
  CHECK(jc.devices.at(0).reserved == 3 * GiB);
  CHECK(b2.limit_word(c, 0) == 3 * GiB);
}

TEST_CASE("broker: after a restart, a process without a cap of its own does not carry another's cap to the job's other devices") {
  // p1 admitted the job on gpu 1 with a 4 GiB cap; p2 (no cap) attached gpu 1 and gpu 2 and saw
  // 4 GiB on gpu 1, 10 GiB on gpu 2. colocd restarts without saved state; p2 re-registers first.
  Bench b;
  ClientId p2 = b.add("j", 10 * GiB);
  ResumeEntry e1, e2;
  e1.uuid = gpu(1);
  e2.uuid = gpu(2);
  for (ResumeEntry* e : {&e1, &e2}) {
    e->capacity = 80 * GiB;
    e->in_use = 1 * GiB;
    e->grant = 1 * GiB;
  }
  e1.limit = 4 * GiB;
  e2.limit = 10 * GiB;
  b.broker.resume(p2, std::vector<ResumeEntry>{e1, e2}, b.now);
  b.collect();
  const Job& job = *b.broker.find_job({1000, "j"});
  CHECK(job.limit == 10 * GiB);
  CHECK(b.broker.limit_on(job, 0) == 4 * GiB);
  CHECK(b.broker.limit_on(job, 1) == 10 * GiB);
  CHECK(job.devices.at(1).reserved == 10 * GiB);
  CHECK(b.limit_word(p2, 1) == 10 * GiB);
}

}  // TEST_SUITE

TEST_SUITE("daemon") {

// Two processes of one job on a device: the one that admitted it had no cap, the other a cap of
// its own below the job's limit. After a restart each resumes: the books must still hold (the
// job's reservation there within its limit there), whichever comes back first.
TEST_CASE("broker: a resumed process's own lower cap is its own: the job's limit there stays, and the books hold") {
  for (bool capped_first : {false, true}) {
    CAPTURE(capped_first);
    Bench b;
    ClientId p1 = b.add("j", 10 * GiB);
    ClientId p2 = b.add("j", 10 * GiB);
    ResumeEntry e = resumed(1, 80 * GiB, 1 * GiB);
    e.limit = 10 * GiB;  // what both control pages showed: the admitting process had no cap
    ResumeEntry capped = e;
    capped.cap = 4 * GiB;
    if (capped_first) {
      b.broker.resume(p2, std::vector<ResumeEntry>{capped}, b.now);
      b.collect();
      b.broker.resume(p1, std::vector<ResumeEntry>{e}, b.now);
    } else {
      b.broker.resume(p1, std::vector<ResumeEntry>{e}, b.now);
      b.collect();
      b.broker.resume(p2, std::vector<ResumeEntry>{capped}, b.now);
    }
    b.collect();  // audits
    const Job& job = *b.broker.find_job({1000, "j"});
    // Before the restart the cap bound p2 alone (the job was admitted there without one): after
    // it, in either order of re-registration, the job's limit there is still its 10 GiB.
    CHECK(b.broker.limit_on(job, 0) == 10 * GiB);
    CHECK(job.devices.at(0).reserved == 10 * GiB);
    CHECK(job.devices.at(0).reserved <= b.broker.limit_on(job, 0));
    CHECK(b.limit_word(p1, 0) == 10 * GiB);
    CHECK(b.limit_word(p2, 0) == 10 * GiB);
    // p1 grows past p2's 4 GiB as it could before the restart.
    CHECK(b.granted(b.grow(p1, 0, 6 * GiB)));
  }
}


// A process without a cap of its own on a device where the job's limit was another process's cap
// saw that cap as its limit there; its ledger (no saved state: the limit is the ledger's word)
// lowers the job's limit. The job's other devices, resumed before, keep their books within it.
TEST_CASE("broker: a resumed process that saw another's cap leaves the job's limit and reservations on its other devices") {
  Bench b;
  ClientId p1 = b.add("j", 10 * GiB);
  ClientId p2 = b.add("j", 10 * GiB);
  ResumeEntry capped;  // p1 admitted the job on gpu 1 with its cap of 4 GiB
  capped.uuid = gpu(1);
  capped.capacity = 80 * GiB;
  capped.in_use = 1 * GiB;
  capped.grant = 1 * GiB;
  capped.limit = 4 * GiB;
  capped.cap = 4 * GiB;
  ResumeEntry other = capped;  // ... and on gpu 2 without one
  other.uuid = gpu(2);
  other.limit = 10 * GiB;
  other.cap = kNoLimit;
  b.broker.resume(p1, std::vector<ResumeEntry>{capped, other}, b.now);
  b.collect();
  ResumeEntry seen = capped;  // p2 on gpu 1, no cap of its own: its page showed 4 GiB
  seen.cap = kNoLimit;
  b.broker.resume(p2, std::vector<ResumeEntry>{seen}, b.now);
  b.collect();  // audits
  const Job& job = *b.broker.find_job({1000, "j"});
  CHECK(job.limit == 10 * GiB);
  CHECK(b.broker.limit_on(job, 0) == 4 * GiB);
  CHECK(b.broker.limit_on(job, 1) == 10 * GiB);
  CHECK(job.devices.at(1).reserved == 10 * GiB);
  CHECK(b.pages.at(p1).control->slots[1].reservation.load() == job.devices.at(1).reserved);
}

}  // TEST_SUITE
