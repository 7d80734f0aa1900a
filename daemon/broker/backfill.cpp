#include "broker/backfill.h"

#include <algorithm>
#include <vector>

#include "broker/arith.h"

namespace coloc::broker::backfill {

const char* mode_name(Mode m) { return m == Mode::kOff ? "off" : "easy"; }

bool parse_mode(std::string_view text, Mode* out) {
  if (text == "off") *out = Mode::kOff;
  else if (text == "easy") *out = Mode::kEasy;
  else return false;
  return true;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kBeforeShadow: return "before-shadow";
    case Verdict::kInExtra: return "in-extra";
    case Verdict::kNoFootprint: return "no-footprint";
    case Verdict::kWouldDelay: break;
  }
  return "would-delay";
}

Shadow shadow(Bytes available, Bytes need, std::span<const Holder> holders, Nanos now) {
  if (need <= available) return {now, available - need};
  std::vector<Holder> known;
  std::vector<Bytes> unknown;
  for (const Holder& h : holders) {
    if (h.commitment == 0) continue;
    if (h.end == kNever || h.end <= now) unknown.push_back(h.commitment);
    else known.push_back(h);
  }
  std::sort(known.begin(), known.end(), [](const Holder& a, const Holder& b) { return a.end < b.end; });
  // Rule 1: the known ends in order (jobs ending at the same moment together).
  Bytes free = available;
  for (size_t i = 0; i < known.size();) {
    const Nanos t = known[i].end;
    while (i < known.size() && known[i].end == t) free = sat_add(free, known[i++].commitment);
    if (free >= need) return {t, free - need};
  }
  // Rule 2: the head fits only once some jobs of unknown end have ended too. The moment it first
  // fits, some prefix of the known ends (in their order) and some subset of the unknown ones have
  // ended; the least overshoot over every such set is what it can count on finding beyond its need.
  if (unknown.empty() || unknown.size() > kMaxUnknownHolders) return {kNever, 0};
  std::vector<Bytes> sums{0};
  sums.reserve(size_t(1) << unknown.size());
  for (Bytes u : unknown) {
    const size_t n = sums.size();
    for (size_t i = 0; i < n; ++i) sums.push_back(sat_add(sums[i], u));
  }
  std::sort(sums.begin(), sums.end());
  bool fits = false;
  Bytes least = 0;
  Bytes prefix = available;
  for (size_t k = 0; k <= known.size(); ++k) {
    if (k > 0) prefix = sat_add(prefix, known[k - 1].commitment);
    const Bytes target = sat_sub(need, prefix);  // > 0: rule 1 found no prefix that suffices alone
    auto it = std::lower_bound(sums.begin(), sums.end(), target);
    if (it == sums.end()) continue;
    const Bytes over = sat_sub(sat_add(prefix, *it), need);
    if (!fits || over < least) least = over;
    fits = true;
  }
  // !fits: even with every job ended it would not fit (it waits for memory used outside coloc).
  return {kNever, fits ? least : 0};
}

std::vector<Nanos> project(Bytes available, std::span<const Holder> holders, std::span<const Queued> queue, Nanos now) {
  std::vector<Nanos> start(queue.size(), kNever);
  // Ends to come, soonest last (popped from the back).
  std::vector<Holder> ends;
  for (const Holder& h : holders)
    if (h.commitment > 0 && h.end != kNever && h.end > now) ends.push_back(h);
  auto soonest_last = [](const Holder& a, const Holder& b) { return a.end > b.end; };
  std::sort(ends.begin(), ends.end(), soonest_last);
  Nanos t = now;
  Bytes free = available;
  for (size_t i = 0; i < queue.size();) {
    if (queue[i].need <= free) {
      start[i] = t;
      free -= queue[i].need;
      if (queue[i].run > 0 && queue[i].need > 0) {
        ends.push_back({queue[i].need, sat_add(t, queue[i].run)});
        std::sort(ends.begin(), ends.end(), soonest_last);
      }
      ++i;
      continue;
    }
    if (ends.empty()) break;  // it waits for an end that is not known: so does everyone behind it
    t = ends.back().end;
    while (!ends.empty() && ends.back().end == t) {
      free = sat_add(free, ends.back().commitment);
      ends.pop_back();
    }
  }
  return start;
}

Verdict decide(const Shadow& s, const Candidate& c, Nanos now) {
  if (!c.footprint) return Verdict::kNoFootprint;
  if (s.at != kNever && c.run > 0 && sat_add(now, c.run) <= s.at) return Verdict::kBeforeShadow;
  if (c.need <= s.extra) return Verdict::kInExtra;
  return Verdict::kWouldDelay;
}

}  // namespace coloc::broker::backfill
