// estimator/history.cpp — the history rule (history.h), compiled into libcolocest.
#include "estimator/history.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace coloc::est {

uint64_t percentile(std::span<const uint64_t> values, double p) {
  if (values.empty()) return 0;
  std::vector<uint64_t> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  p = std::clamp(p, 0.0, 100.0);
  size_t rank = size_t(std::ceil(p / 100.0 * double(v.size())));
  if (rank == 0) rank = 1;
  if (rank > v.size()) rank = v.size();
  return v[rank - 1];
}

std::optional<uint64_t> history_estimate(std::span<const PastRun> runs) {
  if (runs.empty()) return std::nullopt;
  std::vector<uint64_t> clean;
  uint64_t floor = 0;
  for (const PastRun& r : runs) {
    if (r.failed) floor = std::max(floor, r.peak);
    else clean.push_back(r.peak);
  }
  const uint64_t base = std::max(percentile(clean, kHistoryPercentile), floor);
  const long double scaled = std::ceil((long double)base * (1.0L + (long double)kHistoryMargin));
  if (scaled >= (long double)std::numeric_limits<uint64_t>::max()) return std::numeric_limits<uint64_t>::max();
  return uint64_t(scaled);
}

}  // namespace coloc::est
