// GPU SHARE's window (daemon/compute/share_window.h), on a fake clock: a job's share of the last
// 10 s, a process that leaves, and a policy change, which starts the window afresh.
#include <doctest/doctest.h>

#include <cmath>

#include "compute/share_window.h"

using namespace coloc;
using compute::PolicySettings;
using compute::ShareWindow;

namespace {

constexpr broker::Nanos kMs = 1'000'000;

broker::Uuid dev() {
  broker::Uuid u;
  u.bytes[0] = 7;
  return u;
}

PolicySettings mode(proto::PolicyMode m) {
  PolicySettings p;
  p.mode = m;
  return p;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("share window: a job's share of the last 10 s, forgotten when its device time goes back") {
  ShareWindow w;
  const PolicySettings ts = mode(proto::PolicyMode::kTimeslice);
  auto policy = [&](const broker::Uuid&) { return ts; };
  CHECK(std::isnan(w.share(1, dev(), ts)));
  w.sample(0, {{{1, dev()}, 0}}, policy);
  CHECK(std::isnan(w.share(1, dev(), ts)));  // one sample: no interval yet
  w.sample(100 * kMs, {{{1, dev()}, 60 * kMs}}, policy);
  CHECK(w.share(1, dev(), ts) == doctest::Approx(0.6));
  // 20 s later, at 25% since: the first 10 s are out of the window.
  for (int i = 2; i <= 200; ++i) w.sample(broker::Nanos(i) * 100 * kMs, {{{1, dev()}, 60 * kMs + broker::Nanos(i - 1) * 25 * kMs}}, policy);
  CHECK(w.share(1, dev(), ts) == doctest::Approx(0.25).epsilon(0.01));
  // A process left: the job's device time went back. Its window starts again.
  w.sample(20'100 * kMs, {{{1, dev()}, 5 * kMs}}, policy);
  CHECK(std::isnan(w.share(1, dev(), ts)));
  // Gone from the samples: forgotten.
  w.sample(20'200 * kMs, {}, policy);
  CHECK(std::isnan(w.share(1, dev(), ts)));
}

TEST_CASE("share window: a policy change starts every job's window on the device afresh") {
  ShareWindow w;
  PolicySettings now = mode(proto::PolicyMode::kPriority);
  auto policy = [&](const broker::Uuid&) { return now; };
  // Under priority two jobs' tracked work overlaps: 70% + 40%.
  for (int i = 0; i <= 50; ++i)
    w.sample(broker::Nanos(i) * 100 * kMs, {{{1, dev()}, broker::Nanos(i) * 70 * kMs}, {{2, dev()}, broker::Nanos(i) * 40 * kMs}},
             policy);
  // Switched to timeslice: until the next sample nothing is shown (the samples are another
  // policy's), and from then only what ran under timeslice counts: 50% + 50%.
  now = mode(proto::PolicyMode::kTimeslice);
  CHECK(std::isnan(w.share(1, dev(), now)));
  CHECK(std::isnan(w.share(2, dev(), now)));
  const broker::Nanos t0 = 5'000 * kMs, b1 = 50 * 70 * kMs, b2 = 50 * 40 * kMs;
  for (int i = 1; i <= 30; ++i)
    w.sample(t0 + broker::Nanos(i) * 100 * kMs,
             {{{1, dev()}, b1 + broker::Nanos(i) * 50 * kMs}, {{2, dev()}, b2 + broker::Nanos(i) * 50 * kMs}}, policy);
  const double sum = w.share(1, dev(), now) + w.share(2, dev(), now);
  CHECK(sum == doctest::Approx(1.0).epsilon(0.01));  // the old window had them at 1.1 and falling for 10 s
  // A new quantum is a policy change too.
  PolicySettings q = now;
  q.quantum = 50 * kMs;
  CHECK(std::isnan(w.share(1, dev(), q)));
}

}  // TEST_SUITE
