// daemon/metrics/exposition.h — what /metrics shows, in the Prometheus text format (version
// 0.0.4), rendered from one snapshot of colocd's state. Pure: a snapshot in, text out.
//
// A snapshot is the status document `coloc status --json` shows (engine/admin.cpp builds both),
// the per-job figures of the jobs' reports that status does not carry (time waited by cause, GPU
// time), and the counters of metrics/counters.h. So the scraped values and `coloc status --json`
// agree field by field. docs/operations.md ("Metrics (Prometheus)") lists every series.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "metrics/counters.h"

namespace coloc::metrics {

/// The causes of a job's waiting time, as the label `cause` names them: memory (a growth parked),
/// admission (a first context parked), and at the launch gate quantum (timeslice: not its turn),
/// window (its work in flight over the window), pause (coloc pause).
inline constexpr std::array<const char*, 5> kWaitCauses = {"memory", "admission", "quantum", "window", "pause"};

/// A job's figures on one device that status does not carry (JobRecorder::totals), in seconds.
struct JobDeviceTotals {
  std::array<double, kWaitCauses.size()> wait_seconds{};  ///< by kWaitCauses
  double gpu_seconds = 0;  ///< device time of its completed work (tracked while timesliced)
};

/// The most outside-coloc processes shown per device (the largest first): cardinality stays bounded.
inline constexpr size_t kMaxOutsideProcesses = 16;

struct Snapshot {
  /// Admin::status(): {daemon, devices, jobs, policies}.
  nlohmann::json status;
  /// By job ("UID:ID", as JobKey::str()), then by device UUID ("GPU-…").
  std::map<std::string, std::map<std::string, JobDeviceTotals>> jobs;
  Values counters;
  /// How long the loop took to build this snapshot (seconds): the time it was away from requests.
  double build_seconds = 0;
};

/// The exposition of `s`: every family with its HELP and TYPE lines, even one without samples
/// (so a scrape lists every family). Fields missing from the status document (an older or newer
/// shape) leave their samples out; null figures (no limit, no prediction yet) too.
std::string render(const Snapshot& s);

/// The families render() writes: (name, type), in order (for the docs' test and the bench).
std::vector<std::pair<std::string, std::string>> families();

/// A label value as the text format writes it: backslash, double quote and newline escaped;
/// control characters and bytes outside ASCII replaced by '?'; cut to `max` bytes.
std::string label_value(const std::string& v, size_t max = 128);

}  // namespace coloc::metrics
