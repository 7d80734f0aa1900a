// Broker: a job's declared estimate (Register v10: COLOC_MEM_ESTIMATE, `coloc run
// --estimate-from`). Precedence --mem over history over the declared estimate over the online
// prediction: the estimate is the reservation at a first admission when the job has neither a
// limit nor history there; a higher stable prediction raises it as it raises a history one; a
// restart restores it like one; the report names it "estimate".
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;

namespace {

const Job& job_of(Bench& b, ClientId id) { return b.broker.jobs().at(b.broker.find_client(id)->job); }
const JobDevice& dev0(Bench& b, ClientId id) { return job_of(b, id).devices.at(0); }

/// A client of job `job` declaring `estimate` bytes per device (0 = none).
ClientId add_estimated(Bench& b, const std::string& job, Bytes estimate, Bytes limit = kNoLimit, bool anchor = false) {
  ClientSpec s;
  s.uid = 1000;
  s.pid = 4242;
  s.job_id = job;
  s.limit = limit;
  s.estimate = estimate;
  s.anchor = anchor;
  s.age = b.now;
  Bench::Pages p;
  ClientId id = b.broker.add_client(s, p.control.get(), p.stats.get(), b.now);
  b.pages.emplace(id, std::move(p));
  b.collect();
  return id;
}

/// An Attach of gpu 0 (capacity `cap`), with the job's history estimate there (0 = none).
uint32_t attach0(Bench& b, ClientId id, Bytes cap, Bytes history = 0) {
  AttachRequest r{gpu(0), cap, kUnknown, 512 * MiB, true};
  r.estimate = history;
  uint32_t seq = b.next_seq++;
  b.broker.attach(id, seq, std::vector<AttachRequest>{r}, b.now);
  b.collect();
  return seq;
}

}  // namespace

TEST_SUITE("broker") {

TEST_CASE("declared estimate: the reservation at admission, and a newcomer that does not fit beside it waits") {
  Bench b;
  ClientId a = add_estimated(b, "a", 10 * GiB);
  CHECK(job_of(b, a).estimate == 10 * GiB);
  CHECK(job_of(b, a).limit == kNoLimit);  // an estimate is not a limit
  REQUIRE(b.granted(attach0(b, a, 16 * GiB)));
  CHECK(dev0(b, a).reserved == 10 * GiB);
  CHECK(dev0(b, a).source == Footprint::kEstimate);
  CHECK(std::string(footprint_name(dev0(b, a).source)) == "estimate");
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 10 * GiB);
  CHECK(b.limit_word(a, 0) == kNoLimit);
  ClientId c = add_estimated(b, "c", 10 * GiB);
  const uint32_t s = attach0(b, c, 16 * GiB);
  CHECK(b.pending(s));  // 10 + 10 > 16: admitted once a is done
  b.remove(a);
  CHECK(b.granted(s));
  CHECK(dev0(b, c).source == Footprint::kEstimate);
  CHECK(b.broker.audit() == "");
}

TEST_CASE("declared estimate: --mem over history over the estimate over nothing") {
  Bench b;
  SUBCASE("a declared limit wins") {
    ClientId a = add_estimated(b, "a", 10 * GiB, 6 * GiB);
    REQUIRE(b.granted(attach0(b, a, 16 * GiB, 8 * GiB)));
    CHECK(dev0(b, a).reserved == 6 * GiB);
    CHECK(dev0(b, a).source == Footprint::kMem);
  }
  SUBCASE("history wins over the estimate, lower or higher") {
    ClientId a = add_estimated(b, "a", 10 * GiB);
    REQUIRE(b.granted(attach0(b, a, 16 * GiB, 4 * GiB)));
    CHECK(dev0(b, a).reserved == 4 * GiB);
    CHECK(dev0(b, a).source == Footprint::kHistory);
    ClientId c = add_estimated(b, "c", 2 * GiB);
    REQUIRE(b.granted(attach0(b, c, 16 * GiB, 5 * GiB)));
    CHECK(dev0(b, c).reserved == 5 * GiB);
    CHECK(dev0(b, c).source == Footprint::kHistory);
  }
  SUBCASE("the estimate, within capacity - headroom") {
    BrokerConfig cfg = Bench::no_headroom();
    cfg.headroom_bytes = 1 * GiB;
    Bench h(cfg);
    ClientId a = add_estimated(h, "a", 40 * GiB);
    REQUIRE(h.granted(attach0(h, a, 16 * GiB)));
    CHECK(dev0(h, a).reserved == 15 * GiB);
    CHECK(dev0(h, a).source == Footprint::kEstimate);
  }
  SUBCASE("nothing declared, nothing known: no reservation") {
    ClientId a = add_estimated(b, "a", 0);
    REQUIRE(b.granted(attach0(b, a, 16 * GiB)));
    CHECK(dev0(b, a).reserved == 0);
    CHECK(dev0(b, a).source == Footprint::kNone);
  }
}

TEST_CASE("declared estimate: the anchor's holds for the job's processes; else the first client that declares one") {
  Bench b;
  // coloc run's anchor registers first with the estimate; its command's process joins the job.
  add_estimated(b, "run", 7 * GiB, kNoLimit, true);
  ClientId p = add_estimated(b, "run", 0);
  REQUIRE(b.granted(attach0(b, p, 16 * GiB)));
  CHECK(dev0(b, p).reserved == 7 * GiB);
  CHECK(dev0(b, p).source == Footprint::kEstimate);
  // A job whose first process declared none takes a later one's; a third does not change it.
  ClientId q1 = add_estimated(b, "late", 0);
  ClientId q2 = add_estimated(b, "late", 3 * GiB);
  add_estimated(b, "late", 5 * GiB);
  CHECK(job_of(b, q1).estimate == 3 * GiB);
  REQUIRE(b.granted(attach0(b, q2, 16 * GiB)));
  CHECK(dev0(b, q2).reserved == 3 * GiB);
}

TEST_CASE("declared estimate: a higher stable prediction raises it, a lower one does not, one that does not fit is kept") {
  Bench b;
  ClientId a = add_estimated(b, "a", 6 * GiB);
  REQUIRE(b.granted(attach0(b, a, 16 * GiB)));
  const JobSerial ja = job_of(b, a).serial;
  ReservationChange ch;
  REQUIRE(b.broker.set_prediction(ja, 0, 5 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kUnchanged);
  CHECK(dev0(b, a).reserved == 6 * GiB);
  CHECK(dev0(b, a).source == Footprint::kEstimate);
  CHECK(dev0(b, a).predicted == 5 * GiB);
  // The estimate was low for this run: its prediction raises it (not a declared limit).
  REQUIRE(b.broker.set_prediction(ja, 0, 8 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kRaised);
  CHECK(dev0(b, a).reserved == 8 * GiB);
  CHECK(dev0(b, a).source == Footprint::kOnline);
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 8 * GiB);
  // Another job takes the rest: a still higher prediction does not fit and is kept.
  ClientId o = b.add("other", 7 * GiB);
  REQUIRE(b.granted(b.attach(o, {{0, 16 * GiB, 512 * MiB}})));
  REQUIRE(b.broker.set_prediction(ja, 0, 12 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kKeptNoRoom);
  CHECK(dev0(b, a).reserved == 8 * GiB);
  CHECK(b.broker.audit() == "");
}

TEST_CASE("declared estimate: a reservation from it is restored after a restart, unless a limit holds") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(attach0(b, a, 16 * GiB)));  // resumed: no reservation yet
  ReservationChange ch;
  REQUIRE(b.broker.restore_reservation(job_of(b, a).serial, 0, 9 * GiB, Footprint::kEstimate, &ch));
  CHECK(ch.outcome == ReservationChange::kRaised);
  CHECK(dev0(b, a).reserved == 9 * GiB);
  CHECK(dev0(b, a).source == Footprint::kEstimate);
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 9 * GiB);
  ClientId m = b.add("m", 2 * GiB);
  REQUIRE(b.granted(attach0(b, m, 16 * GiB)));
  REQUIRE(b.broker.restore_reservation(job_of(b, m).serial, 0, 5 * GiB, Footprint::kEstimate, &ch));
  CHECK(ch.outcome == ReservationChange::kUnchanged);
  CHECK(dev0(b, m).source == Footprint::kMem);
  CHECK(b.broker.audit() == "");
}

}  // TEST_SUITE
