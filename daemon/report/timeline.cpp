#include "report/timeline.h"

#include <algorithm>
#include <cassert>

namespace coloc::report {

Timeline::Timeline(size_t max_points) : max_points_(max_points) { assert(max_points_ >= 2); }

std::vector<TimelinePoint> Timeline::halve(const std::vector<TimelinePoint>& in) {
  std::vector<TimelinePoint> out;
  out.reserve(in.size() / 2 + 1);
  for (size_t i = 0; i < in.size(); i += 2) {
    TimelinePoint p = in[i];
    if (i + 1 < in.size()) p.bytes = std::max(p.bytes, in[i + 1].bytes);
    out.push_back(p);
  }
  return out;
}

void Timeline::add(uint64_t t_ns, uint64_t bytes) {
  if (any_ && t_ns < last_seen_.t_ns) t_ns = last_seen_.t_ns;  // never go back in time
  peak_ = std::max(peak_, bytes);
  bool repeat = any_ && bytes == last_seen_.bytes;
  last_seen_ = {t_ns, bytes};
  any_ = true;
  if (repeat) return;
  if (!points_.empty() && t_ns - points_.back().t_ns < spacing_ns_) {
    points_.back().bytes = std::max(points_.back().bytes, bytes);
    return;
  }
  points_.push_back({t_ns, bytes});
  if (points_.size() >= 2 * max_points_) {
    points_ = halve(points_);
    uint64_t span = points_.back().t_ns - points_.front().t_ns;
    spacing_ns_ = std::max<uint64_t>(spacing_ns_ * 2, span / max_points_);
  }
}

std::vector<TimelinePoint> Timeline::points() const {
  std::vector<TimelinePoint> out = points_;
  // Close the curve at the last time seen with the value then.
  if (any_ && (out.empty() || out.back().t_ns < last_seen_.t_ns)) out.push_back(last_seen_);
  while (out.size() > max_points_) {
    TimelinePoint last = out.back();
    out.pop_back();
    out = halve(out);
    if (out.size() + 1 > max_points_) {
      out.back().bytes = std::max(out.back().bytes, last.bytes);
      out.back().t_ns = last.t_ns;
    } else {
      out.push_back(last);
    }
  }
  return out;
}

}  // namespace coloc::report
