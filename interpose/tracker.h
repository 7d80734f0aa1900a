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
// made with CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) on the launch's stream when the
// stream has no mark in flight (the first launch of a burst), when kMarkEvery launches went
// without one, or when the work without one is estimated at a quarter of the window. Never one per
// launch. The record runs on the launching thread because a `_ptsz` launch on stream 0 goes to
// that thread's per-thread default stream (cuEventRecord on CU_STREAM_PER_THREAD there), with the
// thread's capture mode exchanged to RELAXED around it. A launch into a capturing stream is never
// tracked (it passes the gate without a ticket), and nothing is recorded on a capturing stream.
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
// Published per slot in the stats page's TrackStats: marks, marks_done, busy_ns, launches, tail
// (streams with unmarked launches), last_launch_ns.
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

namespace coloc::interpose {

class Tracker {
 public:
  constexpr Tracker() = default;

  /// Launches after which a stream gets a mark even while one is in flight.
  static constexpr uint32_t kMarkEvery = 32;
  /// In-flight launches allowed before any completion taught the tracker their device time.
  static constexpr uint64_t kFirstWindowLaunches = 64;
  /// Streams tracked at once (a launch on a 65th stream while all are busy goes unmarked: the
  /// daemon's grace then covers its drain).
  static constexpr int kStreams = 64;
  /// Marks in flight at once.
  static constexpr int kMarks = 256;

  /// After a launch on `slot` (its gate kWindow) into `stream` (`per_thread`: a _ptsz entry
  /// point) that returned `rc`: counts it (when it succeeded) and records a mark when due.
  void launched(int slot, CUstream stream, bool per_thread, CUresult rc);
  /// Whether `slot`'s work in flight is over `window_ns` of estimated device time (0: no
  /// bound), with a mark in flight that will say when it shrinks. False when nothing can wake
  /// a waiter (no mark in flight): the window is then not enforced.
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
    pid_t tid = 0;              ///< the thread, for its per-thread default stream; else 0
    int slot = -1;
    bool per_thread = false;    ///< the per-thread default stream of `tid`
    bool legacy = false;        ///< the legacy default stream of `ctx`
    uint64_t launched = 0;      ///< launches tracked on it
    uint64_t marked = 0;        ///< `launched` when its last mark was recorded
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
    uint64_t done = 0;          ///< of those, covered by completed marks
    uint64_t per_launch_ns = 0; ///< device time per launch (EWMA of completions; 0 = not known)
    uint64_t last_done_ns = 0;  ///< the last completion seen
    uint32_t pending = 0;       ///< marks in flight
  };

  int find_stream(int slot, CUstream stream, bool per_thread, CUcontext ctx, pid_t tid);
  /// Records a mark covering the streams in `mask` (all of one context) on `stream`; the caller
  /// holds mu_. False when none could be recorded (the pool is empty, the driver refused).
  /// `extra`: launches it covers beyond those of the streams in `mask` (a launch without a record).
  bool record_locked(int slot, CUcontext ctx, CUstream record_on, uint64_t mask, bool exchange_mode,
                     uint64_t extra = 0);
  /// Gives up the unmarked launches of streams_[i] (the stream or its context is gone): counted
  /// done (they leave the window's estimate) and no longer in the tail.
  void abandon_locked(int i);
  CUevent take_event_locked(CUcontext ctx);
  void give_event_locked(CUcontext ctx, CUevent ev);
  /// Publishes tails_[slot] as the slot's TrackStats::tail.
  void publish_tail_locked(int slot);
  /// A mark (or giving up) covers r's launches: r leaves its slot's tail.
  void set_marked_locked(StreamRec& r);
  void start_thread_locked();
  static void* thread_main(void* self);
  void run();
  /// The thread's part, when no mark is in flight: marks the unmarked streams of tracked slots
  /// (a closed gate's for the handover; an unbounded window's so an idle job shows drained).
  bool mark_tails();

  Mutex mu_;
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
  bool thread_started_ = false;
  CUcontext syncing_ = nullptr;        ///< the context of the event the thread waits on (under mu_)
  std::atomic<bool> used_{false};      ///< something was ever tracked (forget_context's quick exit)
  std::atomic<uint32_t> wake_seq_{0};  ///< bumped when a mark is queued (the thread waits on it)
  std::atomic<uint32_t> done_seq_{0};  ///< bumped at every completion (window waiters wait on it)
  std::atomic<uint32_t> sleeping_{0};  ///< the thread is about to wait (a queuer must wake it)
};

/// The process's tracker.
Tracker& tracker();

}  // namespace coloc::interpose
