// daemon/compute/compute_policy.h — the decisions the compute scheduler delegates: whether a
// device is shared exclusively, whose turn comes next, how long a turn lasts, and how much work a
// holder may keep in flight.
//
// Lifecycle: the Scheduler owns one policy object per device (made by make_policy from the
// device's PolicySettings when `coloc policy` sets it, or at start from the saved settings) and
// replaces it when the settings change (a controller's state then starts afresh). It calls it
// only on the daemon's loop thread, from inside its own methods. No policy does I/O or reads a
// clock: every call that needs the time gets `now`, so decisions are reproducible with a fake
// clock. The turn-taking policies (share, timeslice) keep no state at all (the scheduler keeps
// every job's virtual time); a *controlling* policy (priority: controls() is true) keeps the state
// of its device's feedback loop, which only control() advances.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "broker/types.h"
#include "coloc/pages.h"
#include "coloc/protocol.h"

namespace coloc::compute {

using broker::JobSerial;
using broker::Nanos;

/// A device's compute policy as `coloc policy` sets it (and colocd saves, by UUID).
struct PolicySettings {
  proto::PolicyMode mode = proto::PolicyMode::kShare;
  Nanos quantum = Nanos(proto::kDefaultQuantumMs) * 1'000'000;  ///< timeslice: one quantum (ns)
  /// priority: the high-priority jobs' target slowdown against solo (percent,
  /// proto::kMinTargetPct..kMaxTargetPct)
  uint32_t target_pct = proto::kDefaultTargetPct;
  bool operator==(const PolicySettings&) const = default;
};

/// "share", "timeslice", "priority".
const char* mode_name(proto::PolicyMode m);

/// A job that wants the device, as the policy sees it.
struct TurnCandidate {
  JobSerial job = 0;
  uint32_t weight = proto::kDefaultWeight;  ///< coloc set --weight, 1..100
  Nanos vtime = 0;     ///< the job's virtual time: device time held, divided by its weight (ns)
  uint64_t order = 0;  ///< arrival number: smaller came first
};

/// What a job shows on a device, summed over its processes there (their stats pages). The
/// scheduler trusts it only to end the job's own turn sooner, never to take another's; a
/// controller trusts a high-priority job's figures only to throttle others for it, which that
/// job's priority (granted by colocd, not claimed) already entitles it to.
struct Usage {
  bool present = false;   ///< some process of the job is attached to the device with tracking
  bool wants = false;     ///< a launch of the job waits at the gate there now
  bool drained = false;   ///< every launch the job made there has completed (marks done, no tail)
  Nanos last_activity = 0;  ///< CLOCK_MONOTONIC ns of its last launch or gate wait there
  uint64_t busy_ns = 0;   ///< device time of its completed work there (host-stamped)
  uint64_t launches = 0;  ///< launches it made there in kWindow (tracked), since its processes began
  uint64_t completed = 0; ///< marks of its work there that completed (TrackStats::marks_done, summed)
  /// Some process of the job there is stopped (SIGSTOP, Ctrl-Z, a debugger, a scheduler's
  /// suspend: /proc/PID/stat state 'T' or 't'), as the engine last read it (its sampling timer).
  bool stopped = false;
};

/// A job on a device under a controlling policy, at one tick.
struct DeviceJob {
  JobSerial job = 0;
  proto::Priority priority = proto::Priority::kNormal;
  Usage usage;
};

/// What a controlling policy wants for one job's launches on its device.
struct GateWish {
  JobSerial job = 0;
  pages::GateState state = pages::GateState::kRun;  ///< kRun, kWindow or kTimeslice (held)
  Nanos window = 0;  ///< in kWindow: the in-flight window (ns of device time; 0 = no bound)
};

/// What a controlling policy shows of itself (coloc policy --json, the benchmark, tests).
struct ControlView {
  bool active = false;     ///< high-priority and other jobs share the device: the loop runs
  bool probing = false;    ///< the others are held to measure the high jobs' solo speed
  double allow = 0;        ///< the throttled jobs' share of the high jobs' idle gaps, 0.05..1.25
  double slowdown = 0;     ///< the worst high job's smoothed slowdown against its baseline (0.05 = 5%)
  double target = 0;       ///< the target slowdown (fraction)
  uint64_t probes = 0;     ///< baselines taken by holding the others
  uint32_t stalled = 0;    ///< high jobs stalled now (stopped, or no completion for a grace): away for the gates
  Nanos window = 0;        ///< the throttled jobs' in-flight window while they run (ns)
};

class ComputePolicy {
 public:
  virtual ~ComputePolicy() = default;

  /// A short name for logs and status ("share", "timeslice").
  virtual const char* name() const = 0;

  /// Whether only one job's work may run on the device at a time (jobs take turns). When false
  /// the scheduler leaves every gate open (RUN) and only observes.
  virtual bool exclusive() const = 0;

  /// Called when a turn is to be given, to sort the jobs that want the device. True when `a`
  /// must go before `b`; a strict weak ordering.
  virtual bool before(const TurnCandidate& a, const TurnCandidate& b) const = 0;

  /// The length of a turn of a job of `weight` (ns, > 0). The holder keeps the device past it
  /// only while nobody else wants it.
  virtual Nanos turn(uint32_t weight) const = 0;

  /// What a turn that held the device for `held` ns adds to the job's virtual time.
  virtual Nanos charge(Nanos held, uint32_t weight) const = 0;

  /// The in-flight window of the holder: estimated device time (ns) it may keep queued (0 = no
  /// bound). Bounds how long a handover waits for the holder's queue to drain.
  virtual Nanos window() const = 0;

  /// How long past the end of its turn a holder may take to drain before the next job's gate
  /// opens anyway (ns).
  virtual Nanos grace() const = 0;

  // ---- controlling policies (not exclusive; they set each job's gate by feedback) ----
  /// Whether the policy sets gates itself through control().
  virtual bool controls() const { return false; }
  /// One step of the control loop at `now` (monotonic ns, never decreasing) with the jobs on the
  /// device (attached with tracking); returns a wish per job given (jobs not given run freely).
  virtual std::vector<GateWish> control(Nanos /*now*/, const std::vector<DeviceJob>& /*jobs*/) { return {}; }
  /// When control() wants to run next (kNever: only when something changes).
  virtual Nanos next_control(Nanos /*now*/) const { return broker::kNever; }
  /// The loop's state, for people and tests.
  virtual ControlView view() const { return {}; }
};

/// share: no gating; the device is shared as the driver shares it. (The priority policy builds
/// on it: not exclusive, no turns, plus a control loop.)
class SharePolicy : public ComputePolicy {
 public:
  const char* name() const override { return "share"; }
  bool exclusive() const override { return false; }
  bool before(const TurnCandidate& a, const TurnCandidate& b) const override { return a.order < b.order; }
  Nanos turn(uint32_t) const override { return 0; }
  Nanos charge(Nanos, uint32_t) const override { return 0; }
  Nanos window() const override { return 0; }
  Nanos grace() const override { return 0; }
};

/// timeslice: exclusive turns of `weight` quanta each, in order of virtual time (the job that has
/// held the device least for its weight goes first; ties by arrival). A turn of weight × quantum
/// charges the same virtual time whatever the weight, so over a round a job of weight W holds the
/// device W times as long as a job of weight 1 (weighted round robin; stride scheduling,
/// Waldspurger & Weihl 1995, with the turn as the stride's unit).
class TimeslicePolicy final : public ComputePolicy {
 public:
  explicit TimeslicePolicy(Nanos quantum) : quantum_(quantum > 0 ? quantum : 1) {}
  const char* name() const override { return "timeslice"; }
  bool exclusive() const override { return true; }
  bool before(const TurnCandidate& a, const TurnCandidate& b) const override {
    return a.vtime != b.vtime ? a.vtime < b.vtime : a.order < b.order;
  }
  Nanos turn(uint32_t weight) const override { return quantum_ * Nanos(weight ? weight : 1); }
  Nanos charge(Nanos held, uint32_t weight) const override { return held / Nanos(weight ? weight : 1); }
  /// A quarter of the quantum: a handover then waits for at most about that much queued work
  /// (nvshare's unbounded queue made its handovers take seconds; a quarter keeps the device
  /// busy between the holder's submissions while bounding the handover to 25 ms at 100 ms).
  Nanos window() const override { return quantum_ / 4; }
  /// One quantum past the turn's end (the quantum + grace: a stuck kernel loses the
  /// device after at most two quanta).
  Nanos grace() const override { return quantum_; }

 private:
  Nanos quantum_;
};

/// The policy for `s` (never null).
std::unique_ptr<ComputePolicy> make_policy(const PolicySettings& s);

}  // namespace coloc::compute
