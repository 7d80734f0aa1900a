// Broker: reservations of jobs without a declared limit (issue 12). Precedence --mem over history
// over the online prediction; a history estimate is the reservation at admission; a prediction
// raises a reservation only when the whole raise fits now, else it is kept (and said why); a
// prediction never lowers one, and never fails anything.
#include <doctest/doctest.h>

#include "broker_fixture.h"

using namespace coloc::broker;
using namespace coloc::broker::test;

namespace {

/// The job of client `id` and its books on device 0.
const Job& job_of(Bench& b, ClientId id) { return b.broker.jobs().at(b.broker.find_client(id)->job); }
const JobDevice& dev0(Bench& b, ClientId id) { return job_of(b, id).devices.at(0); }

/// An Attach of gpu 0 (capacity `cap`) carrying a history estimate.
uint32_t attach_known(Bench& b, ClientId id, Bytes cap, Bytes request, Bytes estimate) {
  AttachRequest r{gpu(0), cap, kUnknown, request, true};
  r.estimate = estimate;
  uint32_t seq = b.next_seq++;
  b.broker.attach(id, seq, std::vector<AttachRequest>{r}, b.now);
  b.collect();
  return seq;
}

}  // namespace

TEST_SUITE("broker") {

TEST_CASE("estimate: history is the reservation at admission, and a newcomer that does not fit beside it waits") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(attach_known(b, a, 16 * GiB, 512 * MiB, 10 * GiB)));
  CHECK(dev0(b, a).reserved == 10 * GiB);
  CHECK(dev0(b, a).source == Footprint::kHistory);
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 10 * GiB);
  ClientId c = b.add("c");
  const uint32_t s = attach_known(b, c, 16 * GiB, 512 * MiB, 10 * GiB);
  CHECK(b.pending(s));  // 10 + 10 > 16: admitted only when a is done
  b.remove(a);
  CHECK(b.granted(s));
  CHECK(dev0(b, c).source == Footprint::kHistory);
}

TEST_CASE("estimate: a declared limit outranks history and the prediction") {
  Bench b;
  ClientId a = b.add("a", 6 * GiB);
  REQUIRE(b.granted(attach_known(b, a, 16 * GiB, 512 * MiB, 10 * GiB)));
  CHECK(dev0(b, a).reserved == 6 * GiB);
  CHECK(dev0(b, a).source == Footprint::kMem);
  ReservationChange ch;
  REQUIRE(b.broker.set_prediction(job_of(b, a).serial, 0, 9 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kUnchanged);
  CHECK(dev0(b, a).reserved == 6 * GiB);
  CHECK(dev0(b, a).predicted == 9 * GiB);  // kept for the books and the report
}

TEST_CASE("estimate: history outranks a lower prediction; a higher one raises it (this run needs more)") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(attach_known(b, a, 16 * GiB, 512 * MiB, 6 * GiB)));
  ReservationChange ch;
  REQUIRE(b.broker.set_prediction(job_of(b, a).serial, 0, 5 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kUnchanged);
  CHECK(dev0(b, a).reserved == 6 * GiB);
  CHECK(dev0(b, a).source == Footprint::kHistory);
  // The same command now needs more (its history was of a smaller run): raised, never lowered.
  REQUIRE(b.broker.set_prediction(job_of(b, a).serial, 0, 9 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kRaised);
  CHECK(dev0(b, a).reserved == 9 * GiB);
  CHECK(dev0(b, a).source == Footprint::kOnline);
}

TEST_CASE("estimate: the prediction raises a reservation that fits, never lowers it, and is kept when it does not fit") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{0, 16 * GiB, 512 * MiB}})));
  CHECK(dev0(b, a).source == Footprint::kNone);
  CHECK(dev0(b, a).reserved == 0);
  const JobSerial ja = job_of(b, a).serial;
  ReservationChange ch;
  REQUIRE(b.broker.set_prediction(ja, 0, 8 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kRaised);
  CHECK(dev0(b, a).reserved == 8 * GiB);
  CHECK(dev0(b, a).source == Footprint::kOnline);
  CHECK(b.pages.at(a).control->slots[0].reservation.load() == 8 * GiB);
  // Lower: unchanged (the job will need its peak again).
  REQUIRE(b.broker.set_prediction(ja, 0, 5 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kUnchanged);
  CHECK(dev0(b, a).reserved == 8 * GiB);
  // Another job takes most of the rest; a higher prediction no longer fits: kept, said why.
  ClientId o = b.add("other", 7 * GiB);
  REQUIRE(b.granted(b.attach(o, {{0, 16 * GiB, 512 * MiB}})));
  REQUIRE(b.broker.set_prediction(ja, 0, 12 * GiB, b.now, &ch));
  CHECK(ch.outcome == ReservationChange::kKeptNoRoom);
  CHECK(ch.wanted == 12 * GiB);
  CHECK(ch.available == 1 * GiB);
  CHECK(dev0(b, a).reserved == 8 * GiB);
  CHECK(dev0(b, a).predicted == 12 * GiB);
  CHECK(b.broker.audit() == "");
}

TEST_CASE("estimate: memory the job freed between iterations is not handed to a newcomer") {
  Bench b;
  ClientId a = b.add("a");
  REQUIRE(b.granted(b.attach(a, {{0, 16 * GiB, 512 * MiB}})));
  b.use(a, 0, 512 * MiB);
  REQUIRE(b.granted(b.grow(a, 0, 10 * GiB)));  // its peak
  b.use(a, 0, 10 * GiB);
  REQUIRE(b.broker.set_prediction(job_of(b, a).serial, 0, 10 * GiB, b.now));
  // Between iterations it frees, and its surplus grant goes back.
  b.use(a, 0, 2 * GiB);
  b.broker.shrink(a, 0, 2 * GiB, b.now);
  b.collect();
  CHECK(b.grant(a, 0) < 10 * GiB);
  // A newcomer that would need that memory waits; the job grows back to its peak at once.
  ClientId c = b.add("c", 8 * GiB);
  const uint32_t s = b.attach(c, {{0, 16 * GiB, 512 * MiB}});
  CHECK(b.pending(s));
  CHECK(b.granted(b.grow(a, 0, 10 * GiB)));
}

TEST_CASE("estimate: a prediction for a job or device not admitted is refused") {
  Bench b;
  ClientId a = b.add("a");
  CHECK_FALSE(b.broker.set_prediction(job_of(b, a).serial, 0, GiB, b.now));
  CHECK_FALSE(b.broker.set_prediction(987654, 0, GiB, b.now));
}

}  // TEST_SUITE
