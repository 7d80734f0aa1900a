#include "compute/priority_policy.h"

#include <algorithm>
#include <cmath>

namespace coloc::compute {

// Why each constant has its value (priority_policy.h describes the loop):
//   kTickNs 1 ms: the daemon sees a high job go busy within a tick; others' work in flight then
//     is at most their window, so a missed prediction costs the high job about a window.
//   kMinRateWindow 1 s / kRateIters 20 / kMaxRateWindow 4 s: a rate over 20 iterations between
//     boundaries has a quantization error under 1/20 of an iteration's jitter; 1 s keeps the loop
//     fast for short iterations (convergence within the 10 s is 2-6 windows), 4 s bounds
//     it for long ones (a job of 1 s iterations is measured over 4 of them: noisier, still usable).
//   kMinProbe 0.5 s / kProbeIters 10 / kMaxProbe 2 s / kProbeEvery 60 s: a baseline over 10
//     iterations, at most 2 s; the others then lose at most 2 s of every 60 (3%), usually 0.5 s
//     (under 1%). Drift re-probes are at most one per kDriftProbeHold (5 s).
//   kSettleProbe 5 s: a high job's first baseline may still hold its warm-up (the first probe
//     comes when contention begins, often at the job's own start); one more probe 5 s later costs
//     the others 0.5 s once per contention and removes that bias (measured: a 2% low baseline
//     from one slow first iteration let a 6.6% slowdown read as 4.5%).
//   kPhaseChange 25%: iteration periods of a steady training job vary by a few percent; a change
//     of a quarter is a new phase (evaluation, a different sequence length), not jitter.
//   kStartAllow 0.5, kMinAllow 0.05: start in the middle of the range (two slow-start steps to
//     1.0, two decreases to 0.25); never quite zero, so the loop still sees the effect of its
//     actuator. (The others may still get nothing: a gap too short for one of their launches,
//     or a high job that never idles, opens no gate.)
//   kDecrease 0.7: one violation takes back what two slow-start steps or six additive steps gave
//     (TGS's -8% needs many windows to undo an overshoot; ours acts in gaps, so overshoot costs).
//   kGentleDecrease 0.9: a slight violation (smoothed at most 1.5× the target, no window over
//     twice it), as when the level just below the ceiling drifts over, needs a slight correction:
//     one step or two of kStep, not the cut a new competitor's overshoot needs (TGS: −8%).
//   kSlowStart 1.5: TGS's factor, until the first violation.
//   kMaxAllow 1.25: at 1.0 the others' gate closes one window before the high job is due, so
//     their last window has drained when it returns: safe, but the bench measured the high job
//     at 1-2% slowdown there with the target at 5%, and the guard cost the others a quarter of
//     short gaps. Above 1.0 the close moves up to the high job's expected return (at 1.125 with
//     the window at an eighth of the gap), and the loop, not the guard, keeps the target.
//   kStep 0.05: after the first violation, 1/20 of the range per window, up to just below the
//     level that last violated (the ceiling), which is explored again only every kCeilingWindows
//     windows: AIMD's sawtooth becomes a rare, small probe instead of a sustained oscillation.
//   kSmoothing 0.5: the decision sees half the last window and half the history: one noisy window
//     cannot cause a decrease alone unless it is over kRawFactor (3) times the target, which a new
//     competitor's overshoot is (unthrottled sharing slows a job by tens of percent) and the
//     bench's window-to-window noise on a loaded 2-core machine (up to ~10%) is not. Reset after
//     every change, so a decision never averages two different actuator levels.
//   kHoldWindows 2: after a decrease, two windows without an increase: the first shows the new
//     level, the second confirms it (the hold-down).
//   band: the dead band below the target, target / 2 (2.5 points at 5%): TGS uses 3%.
//   kFaster 3%: a throttled rate that beats the baseline by more than the noise twice in a row
//     proves the baseline low: it is raised at once (no probe).
//   kMinWindow 0.25 ms / kMaxWindow 2 ms: the others' in-flight window is an eighth of the high
//     jobs' shortest gap times allow, within these bounds: enough queued work to cover a refill
//     (a completion's wake-up and a launch, 0.1-0.3 ms on a loaded host), little enough to drain
//     before the high job returns; the gate closes a window before the expected return, so each
//     millisecond of window is a millisecond of every gap the others lose (a quarter of the gap
//     cost mix A's 7.5 ms gaps a quarter of their use in the bench).
//   kUnknownGap 2 ms: before any gap was measured, the others get a short opening only.
//   kAwayMin 20 ms: a high job idle for over twice its usual gap (and at least 20 ms) has left
//     the device for a while: the others run until it is back.
//   kMaxGap 1 s: longer idle spells are pauses, not the gaps of an iteration.
//   kStallNs 1 s: a high job's tracker marks its work at least every kMarkEvery (32) launches and
//     at each burst's start (interpose/tracker.h), so a job that runs sees a completion every few
//     kernels; a second with work outstanding and none completed is a stopped or hung job, not a
//     long iteration (a kernel that alone runs over 1 s lets the others in beside it until it
//     completes: a slowdown for the high job, never a freeze of the device).
namespace {
constexpr int kCeilingWindows = 10;
constexpr int kStuckWindows = 3;

Nanos ewma(Nanos old, Nanos sample) { return old ? (old * 3 + sample) / 4 : sample; }
}  // namespace

PriorityPolicy::PriorityPolicy(uint32_t target_pct) {
  const uint32_t pct = std::clamp<uint32_t>(target_pct, proto::kMinTargetPct, proto::kMaxTargetPct);
  target_ = pct / 100.0;
  band_ = target_ / 2;
}

double PriorityPolicy::rate(const High& h, Nanos now, uint64_t launches_now) {
  const Nanos span = now > h.start.at ? now - h.start.at : 0;
  if (h.bounds.size() >= 2) {
    const Boundary& a = h.bounds.front();
    const Boundary& b = h.bounds.back();
    if (b.at > a.at && b.at - a.at >= span / 2 && b.launches >= a.launches)
      return double(b.launches - a.launches) * 1e9 / double(b.at - a.at);
  }
  if (span == 0 || launches_now <= h.start.launches) return -1;
  return double(launches_now - h.start.launches) * 1e9 / double(span);
}

Nanos PriorityPolicy::rate_window() const {
  Nanos w = kMinRateWindow;
  for (const auto& [job, h] : highs_) w = std::max(w, h.period * kRateIters);
  return std::min(w, kMaxRateWindow);
}

Nanos PriorityPolicy::be_window() const {
  Nanos gap = 0;
  for (const auto& [job, h] : highs_)
    if (h.gap) gap = gap ? std::min(gap, h.gap) : h.gap;
  if (!gap) return kMinWindow;
  return std::clamp(Nanos(allow_ * double(gap) / 8), kMinWindow, kMaxWindow);
}

void PriorityPolicy::begin_measure(Nanos now) {
  measure_start_ = now;
  for (auto& [job, h] : highs_) {
    h.start = {now, h.launches};
    h.bounds.clear();
    h.stalled_window = h.stalled;
  }
}

void PriorityPolicy::begin_probe(Nanos now) {
  phase_ = Phase::kProbe;
  ++probes_;
  begin_measure(now);
}

bool PriorityPolicy::away(const High& h, Nanos now) {
  if (h.stalled) return true;
  const Nanos gap = h.gap ? h.gap : kUnknownGap;
  return !h.busy && now > h.idle_since && now - h.idle_since > std::max(kAwayMin, 2 * gap);
}

bool PriorityPolicy::all_stalled() const {
  for (const auto& [job, h] : highs_)
    if (!h.stalled) return false;
  return !highs_.empty();
}

bool PriorityPolicy::all_away(Nanos now) const {
  for (const auto& [job, h] : highs_)
    if (!away(h, now)) return false;
  return true;
}

Nanos PriorityPolicy::close_at(Nanos now) const {
  if (phase_ != Phase::kControl) return 0;
  const Nanos w = be_window();
  Nanos close = broker::kNever;
  for (const auto& [job, h] : highs_) {
    if (away(h, now)) continue;  // no bound from it (idle long, or stalled)
    if (h.busy) return 0;
    const Nanos gap = h.gap ? h.gap : kUnknownGap;
    const Nanos use = Nanos(allow_ * double(gap));
    close = std::min(close, h.idle_since + (use > w ? use - w : 0));
  }
  return close;
}

void PriorityPolicy::end_window(Nanos now) {
  double worst = -1;
  bool any = false, phase_change = false;
  bool unmeasured = false;  // a high job with no baseline that is active now
  for (auto& [job, h] : highs_) {
    if (h.stalled_window) continue;  // stopped or hung for part of the window: no rate of it
    const double r = rate(h, now, h.launches);
    unmeasured |= h.base <= 0 && r > 0;
    if (h.base_period && h.period &&
        std::fabs(double(h.period) - double(h.base_period)) > kPhaseChange * double(h.base_period))
      phase_change = true;
    if (r < 0 || h.base <= 0) continue;  // away all window, or no baseline: nothing to say
    if (r > h.base * (1 + kFaster)) {
      if (++h.faster >= 2) {  // the baseline was low: what it does while throttled is a floor
        h.base = r;
        h.base_period = h.period;
        h.faster = 0;
      }
    } else {
      h.faster = 0;
    }
    worst = std::max(worst, 1 - r / h.base);
    any = true;
  }
  const bool may_drift_probe = !have_drift_probe_ || now - last_drift_probe_ >= kDriftProbeHold;
  if ((phase_change || unmeasured) && may_drift_probe) {
    have_drift_probe_ = true;
    last_drift_probe_ = now;
    begin_probe(now);
    return;
  }
  if (!any) {
    begin_measure(now);
    return;
  }
  smoothed_ = have_smoothed_ ? kSmoothing * smoothed_ + (1 - kSmoothing) * worst : worst;
  have_smoothed_ = true;
  shown_ = smoothed_;
  if (smoothed_ > target_ || worst > kRawFactor * target_) {
    // Far over the target with the others already at the floor: the slowdown is not theirs (the
    // high job itself got slower). A new baseline, unless one was just taken.
    if (allow_ <= kMinAllow && smoothed_ > 2 * target_) {
      if (++stuck_ >= kStuckWindows && may_drift_probe) {
        stuck_ = 0;
        have_drift_probe_ = true;
        last_drift_probe_ = now;
        begin_probe(now);
        return;
      }
    } else {
      stuck_ = 0;
    }
    if (allow_ > kMinAllow) {
      ceiling_ = allow_;
      const bool slight = smoothed_ <= 1.5 * target_ && worst <= 2 * target_;  // (worst: one window)
      allow_ = std::max(kMinAllow, allow_ * (slight ? kGentleDecrease : kDecrease));
      have_smoothed_ = false;
    }
    slow_start_ = false;
    hold_ = kHoldWindows;
    at_ceiling_ = 0;
  } else if (smoothed_ < target_ - band_) {
    stuck_ = 0;
    if (hold_ > 0) {
      --hold_;
    } else {
      // Up to just below the level that last violated; that level itself is tried again only
      // after kCeilingWindows quiet windows there.
      const double cap = slow_start_ ? kMaxAllow : std::max(kMinAllow, ceiling_ - kStep);
      double next = slow_start_ ? allow_ * kSlowStart : allow_ + kStep;
      if (allow_ >= cap - 1e-9) {
        if (++at_ceiling_ >= kCeilingWindows) {
          at_ceiling_ = 0;
          ceiling_ = std::min(kMaxAllow, ceiling_ + kStep);
          next = std::min(kMaxAllow, allow_ + kStep);
        } else {
          next = allow_;
        }
      } else {
        next = std::min(next, cap);
      }
      if (next != allow_) {
        allow_ = std::min(kMaxAllow, next);
        have_smoothed_ = false;
      }
    }
  } else {
    stuck_ = 0;
    if (hold_ > 0) --hold_;
  }
  begin_measure(now);
}

std::vector<GateWish> PriorityPolicy::control(Nanos now, const std::vector<DeviceJob>& jobs) {
  std::vector<const DeviceJob*> hi, lo;
  for (const DeviceJob& j : jobs) (j.priority == proto::Priority::kHigh ? hi : lo).push_back(&j);
  std::vector<GateWish> out;
  if (hi.empty() || lo.empty()) {
    // Nobody to protect, or nobody to throttle: every gate open, no tracking, no loop. The next
    // contention starts afresh with a probe.
    phase_ = Phase::kFree;
    highs_.clear();
    allow_ = kStartAllow;
    ceiling_ = kMaxAllow;
    slow_start_ = true;
    hold_ = stuck_ = at_ceiling_ = 0;
    settle_probe_ = 0;
    have_smoothed_ = false;
    shown_ = 0;
    return out;
  }
  // The high jobs: who left, who came, who went busy or idle this tick.
  for (auto it = highs_.begin(); it != highs_.end();) {
    bool there = false;
    for (const DeviceJob* j : hi) there |= j->job == it->first;
    it = there ? std::next(it) : highs_.erase(it);
  }
  bool newcomer = false;
  for (const DeviceJob* j : hi) {
    auto [it, fresh] = highs_.try_emplace(j->job);
    High& h = it->second;
    const Usage& u = j->usage;
    // Stalled: stopped, or work outstanding for kStallNs without a completion; until it completes
    // work again (priority_policy.h).
    const bool progress = u.drained || u.completed != h.completed || fresh;
    if (progress) h.progress_at = now;
    h.completed = u.completed;
    h.stalled = u.stopped || (h.stalled && !progress) || (!u.drained && now - h.progress_at >= kStallNs);
    h.stalled_window |= h.stalled;
    if (fresh) {
      newcomer = true;
      h.launches = u.launches;
      h.busy = !u.drained;
      h.idle_since = now;
      h.start = {now, u.launches};
      continue;
    }
    const bool busy = !u.drained || u.launches != h.launches;
    if (busy && !h.busy) {  // an iteration boundary (the launches before this tick's burst)
      if (now - h.idle_since <= kMaxGap) h.gap = ewma(h.gap, now - h.idle_since);
      if (h.last_start && now - h.last_start <= 2 * kMaxGap) h.period = ewma(h.period, now - h.last_start);
      h.last_start = now;
      h.bounds.push_back({now, h.launches});
    }
    if (!busy && h.busy) h.idle_since = now;
    h.busy = busy;
    h.launches = u.launches;
  }

  switch (phase_) {
    case Phase::kFree:
      begin_probe(now);
      break;
    case Phase::kProbe: {
      if (newcomer) break;  // its own measurement starts with the next probe window
      const Nanos took = now - measure_start_;
      bool enough = took >= kMinProbe;
      for (const auto& [job, h] : highs_)
        enough &= h.stalled || int(h.bounds.size()) > kProbeIters || (h.bounds.empty() && h.busy);
      // Every high job stalled: nothing to measure, and holding the others would hold the device
      // idle (the probe ends now; a job without a baseline is probed once it is back: end_window).
      if (all_stalled()) enough = true;
      if (!enough && took < kMaxProbe) break;
      bool first = false;
      for (auto& [job, h] : highs_) {
        // A job's first iterations on the device are slow (allocations, first launches, cuDNN's
        // autotuning): its first baseline leaves its first iteration out, and a second one is
        // taken kSettleProbe later, when any longer warm-up is over.
        if (h.stalled_window) continue;  // stopped or hung during the probe: no baseline from it
        if (h.baselines == 0 && h.bounds.size() >= 3) h.bounds.pop_front();
        const double r = rate(h, now, h.launches);
        if (r > 0) {
          first |= h.baselines == 0;
          ++h.baselines;
          h.base = r;
          h.base_period = h.period;
        }
        h.faster = 0;
      }
      phase_ = Phase::kControl;
      next_probe_ = now + kProbeEvery;
      settle_probe_ = first ? now + kSettleProbe : settle_probe_;
      have_smoothed_ = false;
      begin_measure(now);
      break;
    }
    case Phase::kControl:
      if (newcomer) {  // a new high job needs its own baseline
        begin_probe(now);
        break;
      }
      if (settle_probe_ && now >= settle_probe_ && !all_away(now)) {
        settle_probe_ = 0;
        begin_probe(now);
        break;
      }
      if (now >= next_probe_) {
        // Not while every high job is away: nothing to measure (it comes when one is back).
        if (!all_away(now)) {
          begin_probe(now);
          break;
        }
      }
      if (now - measure_start_ >= rate_window()) end_window(now);
      break;
  }

  // The others run while every high job is away, or until `close`, and then only a job whose
  // launches fit before it: a launch passes an open window at least once (the client cannot bound
  // a single launch), so a job of long kernels gets no gate it would overrun. A job's device time
  // per launch is what its completions showed (host-stamped: an upper bound); before any, it is
  // taken to fit.
  const bool away_all = phase_ == Phase::kControl && all_away(now);
  const Nanos close = close_at(now);
  const Nanos w = be_window();
  out.reserve(jobs.size());
  for (const DeviceJob* j : hi) out.push_back({j->job, pages::GateState::kWindow, 0});
  for (const DeviceJob* j : lo) {
    const Nanos per_launch = j->usage.launches ? Nanos(j->usage.busy_ns / j->usage.launches) : 0;
    const bool open = away_all || (close != broker::kNever && now + per_launch < close);
    out.push_back(open ? GateWish{j->job, pages::GateState::kWindow, w} : GateWish{j->job, pages::GateState::kTimeslice, 0});
  }
  return out;
}

Nanos PriorityPolicy::next_control(Nanos now) const {
  if (phase_ == Phase::kFree) return broker::kNever;
  // Every high job away (a pause, a long host phase, an idle notebook): the others run; a slower
  // look is enough to see one come back (it then waits at most this long beside their window).
  if (phase_ == Phase::kControl && all_away(now)) return now + kAwayTickNs;
  return now + kTickNs;
}

ControlView PriorityPolicy::view() const {
  ControlView v;
  v.active = phase_ != Phase::kFree;
  v.probing = phase_ == Phase::kProbe;
  v.allow = allow_;
  v.slowdown = shown_;
  v.target = target_;
  v.probes = probes_;
  for (const auto& [job, h] : highs_) v.stalled += h.stalled;
  v.window = v.active ? be_window() : 0;
  return v;
}

}  // namespace coloc::compute
