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

nlohmann::json Timeline::state() const {
  nlohmann::json t = nlohmann::json::array(), b = nlohmann::json::array();
  for (const TimelinePoint& p : points_) {
    t.push_back(p.t_ns);
    b.push_back(p.bytes);
  }
  return {{"t_ns", t}, {"bytes", b}, {"spacing_ns", spacing_ns_}, {"any", any_},
          {"last_t_ns", last_seen_.t_ns}, {"last_bytes", last_seen_.bytes}, {"peak", peak_}};
}

bool Timeline::restore(const nlohmann::json& s, std::string* error) {
  auto u64 = [&](const nlohmann::json& v, uint64_t* out) {
    if (!v.is_number_unsigned()) return false;
    *out = v.get<uint64_t>();
    return true;
  };
  if (!s.is_object() || !s.contains("t_ns") || !s.contains("bytes") || !s["t_ns"].is_array() ||
      !s["bytes"].is_array() || s["t_ns"].size() != s["bytes"].size()) {
    *error = "timeline: t_ns and bytes must be arrays of one length";
    return false;
  }
  if (s["t_ns"].size() >= 2 * max_points_) {
    *error = "timeline: more than " + std::to_string(2 * max_points_ - 1) + " points";
    return false;
  }
  std::vector<TimelinePoint> pts;
  for (size_t i = 0; i < s["t_ns"].size(); ++i) {
    TimelinePoint p{};
    if (!u64(s["t_ns"][i], &p.t_ns) || !u64(s["bytes"][i], &p.bytes) || (!pts.empty() && p.t_ns < pts.back().t_ns)) {
      *error = "timeline: point " + std::to_string(i) + " is not a time-ordered pair of byte counts";
      return false;
    }
    pts.push_back(p);
  }
  uint64_t spacing = 0, last_t = 0, last_b = 0, peak = 0;
  if (!s.contains("spacing_ns") || !u64(s["spacing_ns"], &spacing) || !s.contains("last_t_ns") ||
      !u64(s["last_t_ns"], &last_t) || !s.contains("last_bytes") || !u64(s["last_bytes"], &last_b) ||
      !s.contains("peak") || !u64(s["peak"], &peak) || !s.contains("any") || !s["any"].is_boolean()) {
    *error = "timeline: spacing_ns, last_t_ns, last_bytes, peak (integers) and any (boolean) are required";
    return false;
  }
  if (!pts.empty() && last_t < pts.back().t_ns) {
    *error = "timeline: the last sample is older than the last point";
    return false;
  }
  points_ = std::move(pts);
  spacing_ns_ = spacing;
  last_seen_ = {last_t, last_b};
  any_ = s["any"].get<bool>();
  peak_ = peak;
  for (const TimelinePoint& p : points_) peak_ = std::max(peak_, p.bytes);
  return true;
}

}  // namespace coloc::report
