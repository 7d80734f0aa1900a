// daemon/compute/priority_policy.h — the `priority` compute policy: high-priority jobs run
// unthrottled; normal and best-effort jobs on the same device use the high jobs' idle gaps, as
// much as a feedback loop allows while every high job's slowdown against its own solo speed stays
// under the target (`coloc policy DEV priority --target-slowdown 5%`).
//
// What it measures (the feedback). A high job's gate is kWindow with no bound, so its process
// tracks completions (interpose/tracker.h) and the daemon sees, at every 1 ms tick, whether it
// has work in flight and how many launches it made. A training loop synchronizes every
// iteration, so its launches run at most one iteration ahead of its completions: its launch rate
// between two *iteration boundaries* (the ticks at which it went from idle to busy) is its rate
// of completed work, without the quantization error of cutting a window mid-iteration. A job
// that never idles has no boundaries: its rate over the whole window is used instead.
//
// The baseline (its solo rate) is taken by holding the others (kTimeslice) for a *probe*: at
// least kMinProbe and kProbeIters iterations, at most kMaxProbe. Probes happen when contention
// begins, once more kSettleProbe after a high job's first baseline (its warm-up may be in the
// first), every kProbeEvery while some high job is active (so the others lose kMaxProbe /
// kProbeEvery of their time to periodic probes: 0.5–2 s every 60 s, 1–3%), and when the rate
// drifts (at most one such probe per kDriftProbeHold, 5 s): a high job whose iteration period
// changed by more than kPhaseChange (evaluation, checkpointing, a new phase change its solo
// speed), one that had no baseline (it was idle through the probe) and is active now, or one
// whose slowdown stays far over the target although the others are throttled to the floor. A
// rate measured while others ran that beats the baseline proves the baseline low: it is raised
// at once, without a probe.
//
// The actuator. Others run only while every high job is idle, and only for `allow` of the gap a
// high job's idle gaps have lasted (EWMA): their gate opens (kWindow) when the last high job
// goes idle and closes (kTimeslice) early enough that what they have in flight (their window,
// at most kMaxWindow) completes before the high job is expected back; a job whose launches (their
// device time, from its completions) would not complete before then gets no opening in that gap.
// A high job idle for much longer than its gaps (it left the device for a while: data loading, a
// checkpoint, a pause) is *away*: the others run until it is busy again, and the loop ticks every
// kAwayTickNs instead of every kTickNs. The others may get nothing: a high job that never idles,
// or whose gaps are shorter than one of their launches, leaves them none.
//
// The loop. Every rate window (kMinRateWindow, or kRateIters iterations of the slowest high
// job, at most kMaxRateWindow) the worst high job's slowdown is smoothed (EWMA, kSmoothing) and
// compared with the target, with a dead band below it:
//   - over the target (or the raw window over kRawFactor times it): allow ×= kDecrease (×=
//     kGentleDecrease when only slightly over), and no increase for kHoldWindows windows;
//   - under target − band: allow grows, ×kSlowStart until the first decrease (TGS's slow start),
//     then +kStep per window, up to kMaxAllow (above 1 the others' last window may still be in
//     flight when a high job returns: allowed while the target holds);
//   - in the band: unchanged.
// Compared with TGS's rate control (AIMD on a token rate: 3% dead band, ×1.5 slow start, −8% on
// a violation, restart at 9% deviation; Wu et al., NSDI'23), the differences are: the feedback is
// completed work at iteration boundaries, not launches; the input is smoothed; a decrease is
// followed by a hold-down; the actuator shapes *when* the others run (in the high jobs' gaps)
// rather than only how much, so a well-tuned allow costs the high job almost nothing.
//
// A stalled high job. A high job whose processes are stopped (Usage::stopped: SIGSTOP, Ctrl-Z, a
// debugger, Slurm's suspend), or that has had work outstanding for kStallNs without a completion,
// is *stalled*: its tracker cannot report a drain (a stopped process's tracker does not run, a
// hung kernel never completes), so were it taken as busy it would hold the others throttled for as
// long as it stays so. A stalled job counts as away for the others' gates (they run while every
// high job is away or stalled), and its measurement windows say nothing of its rate (a probe does
// not wait for it; a window with a stall in it is not compared with the baseline). It stays
// stalled until it completes work again (a completion, or a drain), whatever its state says.
//
// Several high jobs: the gaps are the times all of them are idle, and the target holds for each
// (the worst one drives the loop). Without a high job nobody is throttled; without others the
// high jobs are not even tracked.
//
// Pure: no I/O, no clock (control() takes `now`). Single-threaded (the scheduler's tick).
#pragma once

#include <deque>
#include <map>

#include "compute/compute_policy.h"

namespace coloc::compute {

/// Not exclusive and without turns, as share is; what it adds is the control loop.
class PriorityPolicy final : public SharePolicy {
 public:
  /// `target_pct`: the high jobs' target slowdown, proto::kMinTargetPct..kMaxTargetPct (clamped).
  explicit PriorityPolicy(uint32_t target_pct);

  const char* name() const override { return "priority"; }

  bool controls() const override { return true; }
  std::vector<GateWish> control(Nanos now, const std::vector<DeviceJob>& jobs) override;
  Nanos next_control(Nanos now) const override;
  ControlView view() const override;

  // ---- constants (each one's reason is at its definition in priority_policy.cpp) ----
  static constexpr Nanos kTickNs = 1'000'000;
  static constexpr Nanos kAwayTickNs = 10'000'000;
  static constexpr Nanos kMinRateWindow = 1'000'000'000;
  static constexpr Nanos kMaxRateWindow = 4'000'000'000;
  static constexpr int kRateIters = 20;
  static constexpr Nanos kMinProbe = 500'000'000;
  static constexpr Nanos kMaxProbe = 2'000'000'000;
  static constexpr int kProbeIters = 10;
  static constexpr Nanos kProbeEvery = 60'000'000'000;
  static constexpr Nanos kDriftProbeHold = 5'000'000'000;
  static constexpr Nanos kSettleProbe = 5'000'000'000;
  static constexpr double kPhaseChange = 0.25;
  static constexpr double kStartAllow = 0.5;
  static constexpr double kMinAllow = 0.05;
  static constexpr double kMaxAllow = 1.25;
  static constexpr double kDecrease = 0.7;
  static constexpr double kGentleDecrease = 0.9;
  static constexpr double kSlowStart = 1.5;
  static constexpr double kStep = 0.05;
  static constexpr double kSmoothing = 0.5;
  static constexpr double kRawFactor = 3.0;
  static constexpr int kHoldWindows = 2;
  static constexpr double kFaster = 0.03;
  static constexpr Nanos kMinWindow = 250'000;
  static constexpr Nanos kMaxWindow = 2'000'000;
  static constexpr Nanos kUnknownGap = 2'000'000;
  static constexpr Nanos kAwayMin = 20'000'000;
  static constexpr Nanos kMaxGap = 1'000'000'000;
  static constexpr Nanos kStallNs = 1'000'000'000;

 private:
  struct Boundary {
    Nanos at = 0;
    uint64_t launches = 0;
  };
  struct High {
    uint64_t launches = 0;     ///< at the last tick
    bool busy = false;
    Nanos idle_since = 0;      ///< when it last went idle (0: not yet seen idle)
    Nanos last_start = 0;      ///< its last idle -> busy boundary
    Nanos gap = 0;             ///< EWMA of its complete idle gaps (0: none seen)
    Nanos period = 0;          ///< EWMA of boundary to boundary (0: none seen)
    Nanos base_period = 0;     ///< its period when the baseline was taken
    double base = 0;           ///< solo rate (launches/s); 0: none yet
    std::deque<Boundary> bounds;  ///< boundaries of the current measurement
    Boundary start;            ///< where the current measurement began
    int faster = 0;            ///< consecutive windows above the baseline
    int baselines = 0;         ///< baselines taken of it
    uint64_t completed = 0;    ///< completions at the last tick
    Nanos progress_at = 0;     ///< its last tick drained or with a new completion
    bool stalled = false;      ///< stopped, or outstanding work without a completion for kStallNs
    bool stalled_window = false;  ///< stalled at some tick of the current measurement
  };
  enum class Phase : uint8_t { kFree, kProbe, kControl };

  /// Rate over [start, now] from its boundaries (or the raw count); -1 when nothing measurable.
  static double rate(const High& h, Nanos now, uint64_t launches_now);
  void begin_measure(Nanos now);
  void begin_probe(Nanos now);
  void end_window(Nanos now);
  Nanos rate_window() const;
  Nanos be_window() const;
  /// Idle for much longer than its gaps (it left the device for a while), or stalled.
  static bool away(const High& h, Nanos now);
  bool all_stalled() const;
  bool all_away(Nanos now) const;
  /// When the others' gate must close (kNever: no high job bounds it; 0: closed now).
  Nanos close_at(Nanos now) const;

  double target_;
  double band_;
  Phase phase_ = Phase::kFree;
  std::map<JobSerial, High> highs_;
  double allow_ = kStartAllow;
  double ceiling_ = kMaxAllow; ///< the level that last violated the target (kMaxAllow: none did)
  int at_ceiling_ = 0;         ///< quiet windows spent just below the ceiling
  bool slow_start_ = true;
  int hold_ = 0;               ///< windows left without an increase
  int stuck_ = 0;              ///< consecutive windows far over the target at the floor
  double smoothed_ = 0;
  bool have_smoothed_ = false;
  double shown_ = 0;           ///< the last smoothed slowdown decided on (view())
  Nanos measure_start_ = 0;    ///< the current window (or probe) began
  Nanos next_probe_ = 0;
  Nanos settle_probe_ = 0;     ///< the second probe after a high job's first baseline (0: none due)
  Nanos last_drift_probe_ = 0;
  bool have_drift_probe_ = false;
  uint64_t probes_ = 0;
};

}  // namespace coloc::compute
