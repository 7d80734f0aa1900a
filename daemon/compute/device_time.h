// daemon/compute/device_time.h — a job's device time on each device: the union of its
// processes' busy intervals, never their sum (issue 27: a job of two processes, each busy ~2 s
// of the same 2 s, was reported 7.45 s; jobs claimed 11.4 s of device time in 8.05 s).
//
// What the clients publish (coloc/pages.h, per slot of a stats page): TrackStats::busy_ns, the
// total length of the process's busy intervals on the device (host-stamped at completions: a
// mark's device time runs from max(the previous completion, its launch) to its completion), and
// (layout 7) StatsPage::busy_until, the end of the interval last added. A process's intervals are
// disjoint and in order, so what it added since the last look, Δ, lies within (the busy_until
// seen then, the busy_until now].
//
// The rule, at each look at one (job, device), with the job's *high-water mark* H (the latest
// end counted so far): the processes with new work are taken in order of busy_until, and each
// adds min(Δ, busy_until − max(H, its previous busy_until)) (nothing when that is negative), then
// H = max(H, busy_until). Two processes busy at the same time count once; processes busy one
// after the other count fully. Every added nanosecond lies in (H, busy_until] before H moves past
// it, so the total never exceeds the wall time from the job's start (`since`) to the last look,
// whatever the clients write: busy_until is taken at most `now`, and a client that lies (huge
// busy_ns, a busy_until in the future) only inflates its own job's figure, up to that bound.
// A page older than layout 7 has no busy_until: its Δ is taken as an interval ending at the look,
// (the last look, now], so such clients together add at most the wall time since the last look.
//
// What the rule gives up: a process whose new work ended before another's high-water mark (its
// intervals interleave with the other's between two looks) is counted only beyond the mark, so a
// job's figure can fall short of the true union by what interleaves within one look's interval
// (colocd looks at every scheduler tick, every 1 ms while a device is contended, and on its
// 100 ms sampling timer), and a completion whose busy_until was stored but not
// yet added at a look is counted, at the next, only beyond the mark. It never counts more.
//
// Pure: no clock (every call takes `now`), no pages; the engine feeds it each client's figures at
// each scheduler tick and on its sampling timer, and a departing client's last figures before it
// forgets it. Single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "broker/types.h"

namespace coloc::compute {

class DeviceTime {
 public:
  using Key = std::pair<broker::JobSerial, broker::Uuid>;
  /// One client's figures on one device, as its stats page shows them now.
  struct Figures {
    uint64_t client = 0;   ///< the client (broker::ClientId): whose previous figures to compare with
    uint64_t busy_ns = 0;  ///< TrackStats::busy_ns (ns)
    /// StatsPage::busy_until (CLOCK_MONOTONIC ns; 0 = none yet); nullopt for a page older than
    /// layout 7 (pages::kBusyLayout)
    std::optional<uint64_t> busy_until;
  };

  /// A look at `now` (monotonic ns, never decreasing for a key) at `key`'s clients `figs` (any
  /// subset: a client not given keeps its previous figures). `since`: the job's start (monotonic
  /// ns), the earliest its work can lie, used when `key` is new.
  void look(broker::Nanos now, const Key& key, const std::vector<Figures>& figs, broker::Nanos since);
  /// The job's device time on the device so far (ns; 0 for a key never looked at). Never
  /// decreases while the key is kept, and never exceeds the last look's `now` minus `since`.
  uint64_t total(const Key& key) const;
  /// Client `client` left: its figures are forgotten (what it added stays in its job's total).
  void forget_client(uint64_t client);
  /// Job `job` ended: its totals are forgotten.
  void forget_job(broker::JobSerial job);

 private:
  struct Client {
    uint64_t busy_ns = 0;
    uint64_t until = 0;
  };
  struct Job {
    uint64_t total = 0;
    broker::Nanos high = 0;       ///< the latest end counted (the high-water mark)
    broker::Nanos last_look = 0;
    std::map<uint64_t, Client> clients;
  };
  std::map<Key, Job> jobs_;
};

}  // namespace coloc::compute
