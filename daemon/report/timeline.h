// daemon/report/timeline.h — a job's bytes in use on one device over time, bounded in size.
//
// Samples arrive in time order. Only changes are stored. When the store reaches twice the
// output bound, neighbouring points are merged in pairs, keeping the larger value (so the peak
// survives every merge), and points closer than the new spacing are merged as they arrive.
// points() returns at most `max_points` points, merging once more if needed. Memory per
// timeline is O(max_points) whatever the job's length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace coloc::report {

struct TimelinePoint {
  uint64_t t_ns;   ///< since the job started
  uint64_t bytes;  ///< bytes in use (the maximum over the span the point stands for)
};

class Timeline {
 public:
  /// `max_points` >= 2: the most points points() returns (the report uses 500).
  explicit Timeline(size_t max_points = 500);

  /// Records `bytes` at `t_ns` (non-decreasing). Repeats of the last value are not stored.
  void add(uint64_t t_ns, uint64_t bytes);
  /// At most max_points points in time order, the last one at the latest time seen.
  std::vector<TimelinePoint> points() const;
  /// The largest value ever added.
  uint64_t peak() const { return peak_; }
  size_t stored() const { return points_.size(); }

  /// The whole internal state (stored points, spacing, last sample, peak) as JSON, so a restarted
  /// daemon continues the same curve. At most 2 * max_points points: O(max_points) bytes.
  nlohmann::json state() const;
  /// Replaces this timeline with a state() document. On bad input (wrong types, points out of
  /// time order or beyond 2 * max_points) returns false with `error` naming the problem and
  /// leaves the timeline unchanged.
  bool restore(const nlohmann::json& state, std::string* error);

 private:
  static std::vector<TimelinePoint> halve(const std::vector<TimelinePoint>& in);
  size_t max_points_;
  uint64_t spacing_ns_ = 0;  ///< points closer than this to the previous one merge into it
  std::vector<TimelinePoint> points_;
  TimelinePoint last_seen_{0, 0};
  bool any_ = false;
  uint64_t peak_ = 0;
};

}  // namespace coloc::report
