// interpose/window_bound.h — the in-flight window's bound, as a pure function of what the
// completion tracker learned about a job's launches on one device (tracker.h, "The bound"): a
// slow start from the first launch, a cost per launch learned from completions, its staleness,
// and the age of the oldest unfinished work. No clock, no lock, no driver: the tracker feeds it
// times and counts under its lock (and tests/unit/interpose/window_bound_test.cpp with a fake
// clock).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths.
#pragma once

#include <cstdint>

namespace coloc::interpose {

struct WindowBound {
  /// Launches allowed in flight before any completion: one, so a job's first launch is the only
  /// work it can queue before the tracker has seen what a launch of it costs.
  static constexpr uint64_t kFirstLaunches = 1;
  /// The slow start's ceiling (launches in flight). Past it only the learned cost bounds the
  /// window; 2^20 is reached after 20 round trips and is more launches than any driver queues.
  static constexpr uint64_t kMaxAllowed = uint64_t(1) << 20;
  /// A job whose launches on the device were all complete, and that launched nothing and saw
  /// nothing complete for this long, starts over (slow start, no learned cost): 1 s. A training
  /// loop's gaps between iterations (a host synchronize, data loading: tens to hundreds of ms) and
  /// its waits for the turns of a few other jobs (3 jobs at the default 100 ms quantum wait 200 ms)
  /// keep what it learned; an evaluation pass, a checkpoint or an idle phase is a new phase whose
  /// first launches need not cost what the last ones did. Starting over costs only a few
  /// completions' round trips (the bound doubles per completion).
  static constexpr uint64_t kStaleNs = 1'000'000'000;

  /// How much of the job's device time on the device the learned cost holds before it may fall:
  /// 100 ms (the default quantum). Real training mixes kernels of tens of µs with a few of
  /// milliseconds (coloc-train --pattern async: 5% of its launches are 1–4 ms); a cost that fell
  /// per completion, after a run of cheap ones, let a job queue a whole iteration behind its window
  /// and overrun its turn by it. Per span, a span's work holds its long kernels too.
  static constexpr uint64_t kFallSpanNs = 100'000'000;

  /// Device time per launch (ns): a high estimate, which rises at once to a higher observation and
  /// falls, once per kFallSpanNs of device time, a quarter of the way to that span's highest
  /// observation; 0 = not known.
  uint64_t per_launch_ns = 0;
  /// The span in progress: its device time (ns) and its highest observation (ns per launch).
  uint64_t span_busy_ns = 0;
  uint64_t span_max_ns = 0;
  /// Launches allowed in flight (the slow start: kFirstLaunches, grown by the launches each
  /// completion covers, so it doubles per round trip of the work in flight, as TCP's slow start
  /// does per round trip: growing it faster, say doubling per completion when each mark covers a
  /// launch or two, lets a run of cheap launches raise it to hundreds before the first long kernel
  /// behind them has completed, and those hundreds are then queued behind it unseen).
  uint64_t allowed = kFirstLaunches;
  /// The last launch or completion seen (CLOCK_MONOTONIC ns; 0 = none).
  uint64_t last_active_ns = 0;

  /// A launch at `now` onto a device where nothing of the job's is in flight (`idle`): a learned
  /// cost older than kStaleNs is forgotten.
  void launch(uint64_t now, bool idle) {
    if (idle && last_active_ns && now > last_active_ns && now - last_active_ns > kStaleNs) {
      per_launch_ns = 0;
      span_busy_ns = span_max_ns = 0;
      allowed = kFirstLaunches;
    }
    last_active_ns = now;
  }

  /// A completion at `now` of work of `launches` launches that kept the device busy `busy_ns`.
  void completed(uint64_t now, uint64_t launches, uint64_t busy_ns) {
    if (now > last_active_ns) last_active_ns = now;
    if (launches == 0) return;
    uint64_t per = busy_ns / launches;
    if (per == 0) per = 1;
    if (per >= per_launch_ns) per_launch_ns = per;
    if (per > span_max_ns) span_max_ns = per;
    span_busy_ns += busy_ns;
    if (span_busy_ns >= kFallSpanNs) {
      if (span_max_ns < per_launch_ns) per_launch_ns -= (per_launch_ns - span_max_ns) / 4;
      span_busy_ns = span_max_ns = 0;
    }
    allowed = allowed + launches < kMaxAllowed ? allowed + launches : kMaxAllowed;
  }

  /// Whether `inflight` launches in flight are at or over the window `window_ns` (0: no bound), so
  /// the next launch must wait for a completion: at the slow start's allowance; past the window by
  /// the learned cost; or when the oldest unfinished work has kept the device busy for longer than
  /// the window (`busy_since_ns`, 0 = nothing known; `now`), which no estimate of the launches
  /// behind it can excuse (a long kernel after short ones).
  bool over(uint64_t inflight, uint64_t busy_since_ns, uint64_t now, uint64_t window_ns) const {
    if (window_ns == 0) return false;
    if (inflight >= allowed) return true;
    if (per_launch_ns && inflight > window_ns / per_launch_ns) return true;
    return inflight > 0 && aged(busy_since_ns, now, window_ns);
  }

  /// The age part of over() alone (so a caller reads the clock only when the rest says go).
  static bool aged(uint64_t busy_since_ns, uint64_t now, uint64_t window_ns) {
    return window_ns && busy_since_ns && now > busy_since_ns && now - busy_since_ns > window_ns;
  }

  /// Whether the count bound is near (half the allowance in flight): a mark is then due at once,
  /// so completions come and the slow start grows.
  bool near_allowance(uint64_t inflight) const { return allowed < kMaxAllowed && inflight * 2 >= allowed; }
};

}  // namespace coloc::interpose
