// estimator/history.h: the admission estimate from a fingerprint's past runs (nearest-rank p95 of
// the clean runs, raised by any failed run's peak, plus the margin) and the percentile helper.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../../../estimator/history.h"

using coloc::est::history_estimate;
using coloc::est::kHistoryMargin;
using coloc::est::PastRun;
using coloc::est::percentile;

namespace {
constexpr uint64_t GiB = 1ull << 30;
uint64_t with_margin(uint64_t b) { return uint64_t(std::ceil((long double)b * (1.0L + (long double)kHistoryMargin))); }
}  // namespace

TEST_SUITE("estimator") {

TEST_CASE("history rule: percentile is nearest-rank, any order, 0 for none") {
  CHECK(percentile(std::vector<uint64_t>{}, 95) == 0);
  CHECK(percentile(std::vector<uint64_t>{7}, 50) == 7);
  CHECK(percentile(std::vector<uint64_t>{7}, 95) == 7);
  std::vector<uint64_t> v;
  for (uint64_t i = 20; i >= 1; --i) v.push_back(i);  // 1..20, reversed
  CHECK(percentile(v, 95) == 19);  // ceil(0.95 * 20) = 19th
  CHECK(percentile(v, 50) == 10);
  CHECK(percentile(v, 100) == 20);
  CHECK(percentile(v, 0) == 1);
  CHECK(percentile(std::vector<uint64_t>{1, 2, 3, 4}, 50) == 2);
  CHECK(percentile(std::vector<uint64_t>{1, 2, 3, 4}, 95) == 4);  // ceil(3.8) = 4th
}

TEST_CASE("history rule: no runs, no estimate; a clean run's peak plus the margin") {
  CHECK_FALSE(history_estimate({}).has_value());
  std::vector<PastRun> one{{10 * GiB, false}};
  REQUIRE(history_estimate(one).has_value());
  CHECK(*history_estimate(one) == with_margin(10 * GiB));
  CHECK(*history_estimate(one) > 10 * GiB);
  CHECK(*history_estimate(one) <= 10 * GiB + 10 * GiB / 10);  // the margin is small
}

TEST_CASE("history rule: a high percentile, not the last run, and one outlier of 20 is dropped") {
  std::vector<PastRun> runs;
  for (int i = 0; i < 19; ++i) runs.push_back({uint64_t(10 + i % 3) * GiB, false});  // 10..12 GiB
  runs.push_back({40 * GiB, false});  // one outlier
  CHECK(*history_estimate(runs) == with_margin(12 * GiB));
  // The last run being small does not pull the estimate down.
  runs.push_back({1 * GiB, false});
  CHECK(*history_estimate(runs) >= with_margin(12 * GiB));
}

TEST_CASE("history rule: failed runs (OOM, killed) only raise the estimate") {
  std::vector<PastRun> clean{{20 * GiB, false}, {20 * GiB, false}, {21 * GiB, false}};
  const uint64_t base = *history_estimate(clean);
  CHECK(base == with_margin(21 * GiB));
  // A failed run with a small peak (killed early) does not lower it.
  std::vector<PastRun> with_small = clean;
  with_small.push_back({1 * GiB, true});
  CHECK(*history_estimate(with_small) == base);
  // One that got further than every clean run raises it: its peak is a lower bound.
  std::vector<PastRun> with_big = clean;
  with_big.push_back({30 * GiB, true});
  CHECK(*history_estimate(with_big) == with_margin(30 * GiB));
  // Failed runs only: the largest of them.
  std::vector<PastRun> failed{{5 * GiB, true}, {8 * GiB, true}};
  CHECK(*history_estimate(failed) == with_margin(8 * GiB));
}

TEST_CASE("history rule: saturates instead of wrapping") {
  std::vector<PastRun> huge{{std::numeric_limits<uint64_t>::max() - 1, false}};
  CHECK(*history_estimate(huge) == std::numeric_limits<uint64_t>::max());
}

}  // TEST_SUITE
