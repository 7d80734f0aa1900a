// interpose/tracker.h — completion tracking: what work of this process is in flight on each
// device, learned from events it records after its launches (pages.h, "Completion tracking and
// the in-flight window").
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Used only while a device's gate is kWindow (the holder of a timeslice; under the priority policy,
// the high-priority jobs and the throttled ones while they run), so a job that is never gated pays
// nothing: no thread, no event, no lock.
//
// Marks. After a launch in kWindow, the launching thread records a *mark* (an event from a pool,
// made with CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) on the launch's stream when one is
// due: at the first launch of a burst (a launch onto a stream with no mark in flight and no
// launch without a mark), when kMarkEvery launches went without one, when the work without one is estimated at a quarter of the
// window, or while the slow start's allowance is near (below). Never one per launch. The record
// runs on the launching thread because a `_ptsz` launch on stream 0 goes to that thread's
// per-thread default stream (cuEventRecord on CU_STREAM_PER_THREAD there), with the thread's
// capture mode exchanged to RELAXED around it. A launch into a capturing stream is never tracked
// (it passes the gate without a ticket), and nothing is recorded on a capturing stream.
//
// The tracker thread (coloc-track, started at the first mark) waits for the oldest mark with
// cuEventSynchronize under CU_STREAM_CAPTURE_MODE_RELAXED, so its waits never fail or invalidate
// another thread's GLOBAL-mode capture. A completion is stamped on the host when the thread sees
// it: the device time of a mark's work is from max(the previous completion on the device, its
// first launch) to that stamp (an upper bound, exact when the device runs only this job, as under
// the timeslice policy). When a device's gate closes for a handover, the thread marks the streams
// that still have launches with no mark after them (an explicit stream directly; the legacy and
// per-thread default streams through one mark on the legacy stream, which follows all work of the
// context's blocking streams), so the daemon can see the drain; a stream that is capturing then is
// left unmarked (the daemon's grace covers it). It does the same for an open window without a
// bound (a high-priority job under the priority policy) whenever it has no mark left to wait for,
// so a job that stops launching shows drained as soon as its work completes (the priority policy
// sees the high job's idle gaps by it).
//
// The bound (over_window; the pure rules are WindowBound, window_bound.h). A launch in kWindow
// waits while the slot's work in flight (launches made, less those covered by completed marks) is
// at or over the window by any of three rules, each of which holds from the job's first launch:
//   - Slow start. Before a completion has said what a launch costs, one launch may be in flight;
//     each completion adds the launches it covered, so the allowance doubles per round trip of
//     the work in flight (1, 2, 4 ...: TCP's slow start) and the queue grows only as fast as
//     completions prove it drains. (Doubling per completion grew it to hundreds on a run of 20 us
//     kernels before the first 20 ms kernel among them had completed, and they all queued behind
//     it: the mixed-duration test overlapped the other job at its first handover.) A job's first burst can no longer queue more than its first
//     launch's worth before the tracker has seen one complete (it used to be 64 launches: 320 ms of
//     5 ms kernels, which no handover could take back).
//   - The learned cost. In flight x the cost per launch must stay within the window. The cost is
//     learned per completion as a high estimate: it rises at once to a higher observation and
//     falls only once per 100 ms of the job's device time, a quarter of the way to that span's
//     highest observation (an EWMA would let a phase of long kernels after short ones overrun the
//     window by their ratio until it caught up; a fall per completion let real training's runs of
//     cheap kernels bring it to tens of µs, and a whole iteration with its long kernels then fit
//     a 12.5 ms window: coloc-train --pattern async --kernels 250, ~100 ms of device time).
//   - The age of the oldest unfinished work. While a mark is in flight, the device has been on
//     the slot's oldest unfinished work since max(the last completion, that mark's first launch);
//     once that is longer than the window, nothing more goes until a completion, whatever the
//     estimate says. This is what holds for mixed durations: a long kernel after many short ones
//     (or a graph whose nodes are long) can overrun by what was queued before its age passed the
//     window, and the queue stops growing from then on; the completion then raises the learned
//     cost to it at once. A cost per stream would not help one stream of mixed kernels, and a cost
//     per CUgraphExec or per function would need the launch's identity here; the age needs only
//     what the tracker already has, and bounds any mix. (A graph launch counts as one launch: the
//     cost it teaches is its own.)
// Staleness: a job whose work on the device had all completed, and that launched nothing and saw
// nothing complete for WindowBound::kStaleNs (1 s), starts over (slow start, no learned cost) at
// its next launch (why 1 s: window_bound.h). The same rules serve every window: the timeslice
// holder's (a quarter of the quantum) and the priority policy's small windows of a throttled job,
// whose first burst once a high job goes idle is bounded the same way. The wait itself is the
// gate's (daemon_broker.cpp: a window wait lasts at most max(4 windows, 50 ms), and nothing waits
// while no mark is in flight that could wake it).
//
// The launching thread's cost (docs/performance.md). A launch that passes an open window and is
// due for no mark takes no pthread mutex and calls no driver function of the tracker's: one short
// spin lock (rec_mu_) in over_window and one in launched, the stream's record found through a
// per-thread cache, and the clock read only at the first launch after a mark (or for the age rule,
// with CLOCK_MONOTONIC_COARSE where its resolution is within a quarter of the window). The pthread
// mutex (mu_) serializes what calls the driver: marks, the event pool, the ring, forget_context.
//
// Published per slot in the stats page's TrackStats: marks, marks_done, busy_ns, launches, tail
// (streams with unmarked launches), last_launch_ns (stored at the first launch after a mark and
// at every mark, so it is never older than a launch that no mark covers: the daemon's idle test
// needs a drained job's last launch, which the mark covering it carries).
//
// Limits: a launch on a 65th stream while 64 others have work unmarked or in flight gets a mark of
// its own. A stream found capturing at a handover keeps its tail (so the daemon waits, at most its
// grace) and is tried again at the tracker's next wake. The work of a destroyed stream or context
// is given up: counted done, not waited for.
#pragma once

#include <atomic>
#include <cstdint>

#include "coloc/pages.h"
#include "driver.h"
#include "mutex.h"
#include "window_bound.h"

namespace coloc::interpose {

class Tracker {
 public:
  constexpr Tracker() = default;

  /// Launches after which a stream gets a mark even when none is otherwise due. The rules that
  /// bound the window mark a stream long before this whenever its launches cost anything (a quarter
  /// of the window's worth, the slow start): this bounds the marks of launches that cost almost
  /// nothing (work that completes as fast as it is launched), and how long a tail can grow unseen.
  static constexpr uint32_t kMarkEvery = 256;
  /// Streams tracked at once (a launch on a 65th stream while all are busy goes unmarked: the
  /// daemon's grace then covers its drain).
  static constexpr int kStreams = 64;
  /// Marks in flight at once.
  static constexpr int kMarks = 256;

  /// After a launch on `slot` (its gate kWindow) into `stream` (`per_thread`: a _ptsz entry
  /// point) that returned `rc`: counts it (when it succeeded) and records a mark when due. `ctx`:
  /// the stream's context as the gate found it (null: asked here).
  void launched(int slot, CUstream stream, bool per_thread, CUresult rc, CUcontext ctx = nullptr);
  /// Whether `slot`'s work in flight is at or over the window `window_ns` (0: no bound) by the
  /// rules of "The bound" above, with a mark in flight that will say when it shrinks. False when
  /// nothing can wake a waiter (no mark in flight): the window is then not enforced.
  bool over_window(int slot, uint64_t window_ns);
  /// The word bumped (and futex-woken) at every completion: a thread over the window waits on it.
  const std::atomic<uint32_t>& done_word() const { return done_seq_; }
  /// A launch began to wait at a closed gate: wakes the tracker thread, so it marks the streams
  /// left unmarked for the handover (without futex_waitv it would see the gate change only at
  /// its next slice).
  void nudge();
  /// Context `ctx` is about to be destroyed (cuCtxDestroy, a primary context's reset or last
  /// release): its pooled events are destroyed, its marks in flight count as done, its streams
  /// are forgotten; waits while the tracker thread is inside a call on one of its events (no call
  /// of ours may use a destroyed context). Nothing when nothing was ever tracked.
  void forget_context(CUcontext ctx);
  /// In a child after fork: forgets everything (the child cannot use the parent's CUDA anyway).
  void after_fork_child();

 private:
  struct StreamRec {
    CUstream stream = nullptr;  ///< the handle launched on (CU_STREAM_LEGACY for the legacy stream)
    CUcontext ctx = nullptr;
    uintptr_t thread = 0;       ///< the thread (its per-thread cache's address), for its per-thread default stream; else 0
    int slot = -1;
    bool per_thread = false;    ///< the per-thread default stream of `thread`
    bool legacy = false;        ///< the legacy default stream of `ctx`
    uint64_t launched = 0;      ///< launches tracked on it
    uint64_t marked = 0;        ///< of those, the ones a mark covers (`launched` when its last mark was recorded)
    uint64_t first_unmarked_ns = 0;  ///< when the first launch after that mark was made
    uint32_t pending = 0;       ///< its marks in flight
    bool used = false;
  };
  struct Mark {
    CUevent ev = nullptr;
    CUcontext ctx = nullptr;
    int slot = -1;
    uint64_t streams = 0;       ///< bit i: covers streams_[i]
    uint64_t launches = 0;      ///< launches it covers (device-time estimate per launch)
    uint64_t first_ns = 0;      ///< the first launch it covers was made then (CLOCK_MONOTONIC)
  };
  struct SlotTrack {
    uint64_t launched = 0;      ///< launches tracked
    uint64_t done = 0;          ///< of those, covered by completed marks (or given up)
    uint64_t last_done_ns = 0;  ///< the last completion seen
    uint64_t busy_since_ns = 0; ///< while a mark is in flight: the device has been on the oldest since (else 0)
    uint32_t pending = 0;       ///< marks in flight
    WindowBound bound;          ///< the slow start and the learned cost
  };

  /// The record of a stream (rec_mu_ held): this thread's cached one when it still is that
  /// stream's, else found or made. -1 when all are busy.
  int stream_locked(int slot, CUstream stream, bool per_thread, CUcontext ctx, uintptr_t thread);
  /// Records a mark covering the unmarked launches of the streams in `mask` (all of one context)
  /// on `record_on`; the caller holds mu_ (not rec_mu_). False when none could be recorded (the
  /// pool is empty, the driver refused); true, recording nothing, when nothing is left to cover.
  /// `extra`: launches it covers beyond those of the streams in `mask` (a launch without a record).
  bool record_locked(int slot, CUcontext ctx, CUstream record_on, uint64_t mask, bool exchange_mode,
                     uint64_t extra = 0);
  /// Gives up the unmarked launches of streams_[i] (the stream or its context is gone): counted
  /// done (they leave the window's estimate) and no longer in the tail. rec_mu_ held.
  void abandon_locked(int i);
  CUevent take_event_locked(CUcontext ctx);
  void give_event_locked(CUcontext ctx, CUevent ev);
  /// Publishes tails_[slot] as the slot's TrackStats::tail. rec_mu_ held.
  void publish_tail_locked(int slot);
  /// Marks r's launches up to `upto` as covered: r leaves its slot's tail when that is all of them.
  /// rec_mu_ held.
  void set_marked_locked(StreamRec& r, uint64_t upto);
  void start_thread_locked();
  static void* thread_main(void* self);
  void run();
  /// The thread's part, when no mark is in flight: marks the unmarked streams of tracked slots
  /// (a closed gate's for the handover; an unbounded window's so an idle job shows drained).
  bool mark_tails();

  Mutex mu_;          ///< the ring, the event pool, the thread; taken before rec_mu_, never after
  SpinMutex rec_mu_;  ///< streams_, slots_, tails_ (short sections that never call the driver)
  StreamRec streams_[kStreams];
  Mark ring_[kMarks];
  int head_ = 0, count_ = 0;
  SlotTrack slots_[pages::kSlots];
  uint32_t tails_[pages::kSlots] = {};  ///< per slot: streams with launches no mark follows yet
  struct PooledEvent {
    CUcontext ctx = nullptr;
    CUevent ev = nullptr;
  };
  PooledEvent pool_[kMarks];
  int pooled_ = 0;
  /// The thread was started (written under mu_; nudge() reads it without the lock, so atomic:
  /// a nudge that misses a thread starting just then costs one slice).
  std::atomic<bool> thread_started_{false};
  CUcontext syncing_ = nullptr;        ///< the context of the event the thread waits on (under mu_)
  std::atomic<bool> used_{false};      ///< something was ever tracked (forget_context's quick exit)
  std::atomic<uint32_t> wake_seq_{0};  ///< bumped when a mark is queued (the thread waits on it)
  std::atomic<uint32_t> done_seq_{0};  ///< bumped at every completion (window waiters wait on it)
  std::atomic<uint32_t> sleeping_{0};  ///< the thread is about to wait (a queuer must wake it)
};

/// The process's tracker.
Tracker& tracker();

}  // namespace coloc::interpose
