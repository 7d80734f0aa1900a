// daemon/compute/share_window.h — `coloc status`' GPU SHARE: the share of the last 10 s that each
// job's work ran on a timesliced device, from the device time its clients' stats pages count
// (TrackStats::busy_ns): each job's device time, the union of its processes' busy intervals
// (compute/device_time.h), which never exceeds the wall time, so shares on a device add up to at
// most about 1 (each over its own job's window).
//
// Pure: the caller feeds it a sample per (job, device) on its sampling timer, with the device's
// policy then; no clock of its own. A device's window starts afresh when its policy changes (what
// ran under the previous policy is no share of this one's: under `priority` some jobs' work is
// tracked as an upper bound, and shares from then could add up to more than 100%), and a job's
// when its device time goes back (a process left, and its counts with it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "broker/types.h"
#include "compute/compute_policy.h"

namespace coloc::compute {

class ShareWindow {
 public:
  using Key = std::pair<broker::JobSerial, broker::Uuid>;
  /// The window: 10 s (status' GPU SHARE is "the share of the last 10 s").
  static constexpr broker::Nanos kWindow = 10'000'000'000;

  /// One sampling round at `now` (ns): `busy` holds each (job, device) with tracked clients and
  /// its device time so far (ns); `policy_of` gives a device's policy now. Pairs not in `busy` are
  /// forgotten.
  template <class PolicyOf>
  void sample(broker::Nanos now, const std::map<Key, uint64_t>& busy, PolicyOf&& policy_of) {
    std::set<broker::Uuid> changed;
    for (const auto& [key, b] : busy) {
      const PolicySettings p = policy_of(key.second);
      auto [it, fresh] = policy_.try_emplace(key.second, p);
      if (!fresh && !(it->second == p)) {
        changed.insert(key.second);
        it->second = p;
      }
    }
    for (const auto& [key, b] : busy) add(key, now, b, changed.count(key.second) > 0);
    for (auto it = history_.begin(); it != history_.end();) it = busy.count(it->first) ? std::next(it) : history_.erase(it);
  }

  /// The share of the window (or of the job's time on the device since the window started, if
  /// shorter) that `job`'s work ran on `dev`, 0..1; NaN when not known: fewer than two samples since
  /// the window started, or the device's policy `now_policy` is not the one it was sampled under
  /// (changed since the last sample).
  double share(broker::JobSerial job, const broker::Uuid& dev, const PolicySettings& now_policy) const;

 private:
  void add(const Key& key, broker::Nanos now, uint64_t busy, bool restart);

  std::map<Key, std::deque<std::pair<broker::Nanos, uint64_t>>> history_;  ///< (time, busy ns), oldest first
  std::map<broker::Uuid, PolicySettings> policy_;  ///< each device's policy at its last sample
};

}  // namespace coloc::compute
