#include "broker/preempt.h"

#include <algorithm>
#include <tuple>

namespace coloc::broker {

const char* preempt_mode_name(PreemptMode m) {
  switch (m) {
    case PreemptMode::kOff: return "off";
    case PreemptMode::kBestEffort: return "best-effort";
    case PreemptMode::kNormal: return "normal";
  }
  return "off";
}

bool parse_preempt_mode(const std::string& text, PreemptMode* out) {
  for (PreemptMode m : {PreemptMode::kOff, PreemptMode::kBestEffort, PreemptMode::kNormal})
    if (text == preempt_mode_name(m)) {
      *out = m;
      return true;
    }
  return false;
}

namespace {

Bytes sat_add(Bytes a, Bytes b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

bool eligible(const SuspendCandidate& c, PreemptMode mode, Nanos now, Nanos min_run) {
  if (!c.suspendable || c.device_bytes == 0) return false;
  const bool low = c.priority == Priority::kBestEffort || (mode == PreemptMode::kNormal && c.priority == Priority::kNormal);
  return low && now >= c.started && now - c.started >= min_run;
}

// The key a set is ranked by: fewer jobs, then fewer device bytes, then the youngest (its oldest
// member started latest), then the serials.
struct Rank {
  size_t count;
  Bytes device;
  Nanos oldest_start;
  std::vector<JobSerial> serials;
  bool better_than(const Rank& o) const {
    return std::tie(count, device) < std::tie(o.count, o.device) ||
           (count == o.count && device == o.device &&
            (oldest_start > o.oldest_start || (oldest_start == o.oldest_start && serials < o.serials)));
  }
};

}  // namespace

VictimChoice choose_victims(const std::vector<SuspendCandidate>& candidates, Bytes need, PreemptMode mode, Nanos now,
                            Nanos min_run, Bytes host_room) {
  VictimChoice out;
  if (mode == PreemptMode::kOff) {
    out.why = NoVictims::kPolicyOff;
    return out;
  }
  std::vector<const SuspendCandidate*> pool;
  for (const auto& c : candidates)
    if (eligible(c, mode, now, min_run)) pool.push_back(&c);
  if (pool.empty()) {
    out.why = NoVictims::kNoCandidate;
    return out;
  }
  Bytes all = 0;
  for (const auto* c : pool) all = sat_add(all, c->device_bytes);
  if (all < need) {
    out.why = NoVictims::kNotEnough;
    return out;
  }
  // Largest first: the smallest set size that can free `need` is where the top k first do.
  std::sort(pool.begin(), pool.end(), [](const SuspendCandidate* a, const SuspendCandidate* b) {
    return std::tie(b->device_bytes, a->job) < std::tie(a->device_bytes, b->job);
  });
  std::vector<const SuspendCandidate*> best;
  Rank best_rank{SIZE_MAX, 0, 0, {}};
  auto consider = [&](const std::vector<const SuspendCandidate*>& set) {
    Bytes device = 0, host = 0;
    Nanos oldest = kNever;
    std::vector<JobSerial> serials;
    for (const auto* c : set) {
      device = sat_add(device, c->device_bytes);
      host = sat_add(host, c->host_bytes);
      oldest = std::min(oldest, c->started);
      serials.push_back(c->job);
    }
    if (device < need || host > host_room) return;
    std::sort(serials.begin(), serials.end());
    Rank r{set.size(), device, oldest, serials};
    if (best.empty() || r.better_than(best_rank)) {
      best = set;
      best_rank = r;
    }
  };
  const size_t n = pool.size();
  if (n <= kMaxExactCandidates) {
    // Every subset, by increasing size; stop after the first size that has a set that fits.
    for (size_t k = 1; k <= n && best.empty(); ++k) {
      std::vector<bool> pick(n, false);
      std::fill(pick.begin(), pick.begin() + long(k), true);
      do {
        std::vector<const SuspendCandidate*> set;
        for (size_t i = 0; i < n; ++i)
          if (pick[i]) set.push_back(pool[i]);
        consider(set);
      } while (std::prev_permutation(pick.begin(), pick.end()));
    }
  } else {
    std::vector<const SuspendCandidate*> set;
    Bytes device = 0;
    for (const auto* c : pool) {
      if (device >= need) break;
      set.push_back(c);
      device = sat_add(device, c->device_bytes);
    }
    consider(set);
  }
  if (best.empty()) {
    out.why = NoVictims::kHostMemory;
    return out;
  }
  for (const auto& c : candidates)
    if (std::find(best.begin(), best.end(), &c) != best.end()) {
      out.jobs.push_back(c.job);
      out.device_bytes = sat_add(out.device_bytes, c.device_bytes);
      out.host_bytes = sat_add(out.host_bytes, c.host_bytes);
    }
  return out;
}

}  // namespace coloc::broker
