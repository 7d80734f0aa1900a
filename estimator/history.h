// estimator/history.h — the rule that turns a fingerprint's past runs into an admission estimate
// (issue 12, "History"). Header-only and pure: no I/O, no clock; colocd's run history
// (daemon/history/history_store) keeps the runs and calls this.
//
// The rule, exactly:
//   clean   = the peaks of the runs that ended cleanly (any exit status, but neither an OOM nor
//             killed);
//   floor   = the largest peak of a failed run (OOM or killed), 0 when there is none;
//   base    = max(percentile(clean, 95), floor)   (percentile of no values: 0);
//   estimate = ceil(base * (1 + kHistoryMargin)), saturating at UINT64_MAX; none for no runs.
// A failed run's peak is a lower bound of what the job needed (it stopped on its way up), so it
// can only raise the estimate, never lower it: a job that was OOM-killed at 30 GiB after clean
// runs of 20 GiB is next admitted on at least 30 GiB, and a clean run can never be outvoted by
// smaller failed ones. With failed runs only, their largest peak is the estimate's base.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace coloc::est {

/// One past run of a fingerprint, as the admission rule sees it.
struct PastRun {
  uint64_t peak = 0;    ///< bytes: the job's peak on its devices of the fingerprint's model (max)
  bool failed = false;  ///< ended in OOM or was killed: its peak is a lower bound
};

/// The margin added on top of the percentile, as a fraction (5%). Runs of one command in one
/// environment on one device model differ in their peaks by the caching allocator's rounding and
/// fragmentation and by the library workspaces it picks at run time (cuBLAS/cuDNN heuristics):
/// a few percent between runs in the measured peaks (carma-runs.csv repeats). The p95 already
/// covers the spread that was seen; 5% covers a run a little above anything seen, while costing
/// only 5% of the device's room per job (a larger margin defeats the point of packing by history).
inline constexpr double kHistoryMargin = 0.05;

/// The percentile an admission uses (nearest rank): of 20 runs, the second largest.
inline constexpr double kHistoryPercentile = 95.0;

/// The `p`th percentile (0..100) of `values` (any order), nearest-rank: the smallest value such
/// that at least p% of the values are no greater, i.e. sorted[ceil(p/100 * n) - 1] (p = 0: the
/// smallest). 0 for no values. Units are the values' own (bytes for peaks).
uint64_t percentile(std::span<const uint64_t> values, double p);

/// The admission estimate in bytes from a fingerprint's runs (the rule at the top of this file):
/// max(p95 of the clean runs' peaks, the largest failed run's peak) * (1 + kHistoryMargin),
/// rounded up (saturating at 2^64-1); nullopt for no runs.
std::optional<uint64_t> history_estimate(std::span<const PastRun> runs);

}  // namespace coloc::est
