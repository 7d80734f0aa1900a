// interpose/tracker.cpp — completion tracking (tracker.h).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "tracker.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>
#include <mutex>

#include "broker.h"
#include "glibc_compat.h"
#include "quiet_thread.h"
#include "log.h"
#include "no_destroy.h"

namespace coloc::interpose {

namespace {

constexpr int kSlotCount = kMaxDevices;
// The thread calls into the driver (a real one uses more stack than simgpu); as the link thread.
#if defined(COLOC_SANITIZED)
constexpr size_t kTrackerStack = 4u << 20;
#else
constexpr size_t kTrackerStack = 256u << 10;
#endif
static_assert(Tracker::kStreams == 64, "StreamRec masks are 64-bit");


bool default_stream(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

// Shared or private, as its waiters wait (the two keys differ, even on private memory).
void futex_wake(const std::atomic<uint32_t>& w, bool shared) {
  ::syscall(SYS_futex, const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(&w)),
            shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

/// Exchanges this thread's capture mode to RELAXED for its lifetime (when the driver has the call).
class RelaxedCapture {
 public:
  RelaxedCapture() {
    mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
    ok_ = call<Fn::cuThreadExchangeStreamCaptureMode>(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCapture() {
    if (ok_) call<Fn::cuThreadExchangeStreamCaptureMode>(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  CUstreamCaptureMode mode_;
  bool ok_ = false;
};

/// Makes `ctx` current for the scope when it is not already.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx) {
    CUcontext cur = nullptr;
    if (ctx && call<Fn::cuCtxGetCurrent>(&cur) == CUDA_SUCCESS && cur != ctx)
      pushed_ = call<Fn::cuCtxPushCurrent_v2>(ctx) == CUDA_SUCCESS;
  }
  ~ScopedContext() {
    CUcontext popped = nullptr;
    if (pushed_) call<Fn::cuCtxPopCurrent_v2>(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  bool pushed_ = false;
};

bool capturing(CUstream s, bool per_thread) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = per_thread ? call<Fn::cuStreamIsCapturing_ptsz>(s, &cs) : call<Fn::cuStreamIsCapturing>(s, &cs);
  return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || (r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE);
}

}  // namespace

constinit NoDestroy<Tracker> g_tracker;

Tracker& tracker() { return g_tracker.value; }

// ---- the launching threads ------------------------------------------------------------------------

namespace {

/// This thread's last stream record (a hint: checked against the record's identity under rec_mu_).
/// Its address is the thread's identity for its per-thread default stream.
constinit thread_local int t_last_rec = -1;

uintptr_t this_thread() { return reinterpret_cast<uintptr_t>(&t_last_rec); }

/// The resolution of CLOCK_MONOTONIC_COARSE (ns), asked once (a race asks twice: the same answer;
/// no function-local static, whose guard would pull newer glibc symbols in); UINT64_MAX when it
/// has none.
constinit std::atomic<uint64_t> g_coarse_res{0};
uint64_t coarse_resolution() {
  uint64_t res = g_coarse_res.load(std::memory_order_relaxed);
  if (res) [[likely]] return res;
  timespec r{};
  res = ::clock_getres(CLOCK_MONOTONIC_COARSE, &r) == 0 ? uint64_t(r.tv_sec) * 1000000000ull + uint64_t(r.tv_nsec)
                                                        : uint64_t(UINT64_MAX);
  if (res == 0) res = 1;
  g_coarse_res.store(res, std::memory_order_relaxed);
  return res;
}

/// The clock for the age rule of a window of `window_ns`: the coarse clock (a few ns, no fence)
/// when its resolution is within a quarter of the window, else CLOCK_MONOTONIC. The coarse clock
/// lags by less than its resolution, so the age it gives is short by at most that: the rule holds
/// within a quarter window more.
uint64_t age_clock_ns(uint64_t window_ns) {
  if (coarse_resolution() <= window_ns / 4) {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  }
  return monotonic_ns();
}

}  // namespace

int Tracker::stream_locked(int slot, CUstream stream, bool per_thread, CUcontext ctx, uintptr_t thread) {
  const int hint = t_last_rec;
  if (hint >= 0 && hint < kStreams) {
    const StreamRec& r = streams_[hint];
    if (r.used && r.stream == stream && r.ctx == ctx && r.per_thread == per_thread && r.thread == thread &&
        r.slot == slot)
      return hint;
  }
  int free_rec = -1, idle = -1;
  for (int i = 0; i < kStreams; ++i) {
    StreamRec& r = streams_[i];
    if (!r.used) {
      if (free_rec < 0) free_rec = i;
      continue;
    }
    if (r.stream == stream && r.ctx == ctx && r.per_thread == per_thread && r.thread == thread) {
      t_last_rec = i;
      return i;
    }
    if (idle < 0 && r.pending == 0 && r.launched == r.marked) idle = i;
  }
  int i = free_rec >= 0 ? free_rec : idle;
  if (i < 0) return -1;
  StreamRec& r = streams_[i];
  r = StreamRec{};
  r.stream = stream;
  r.ctx = ctx;
  r.thread = thread;
  r.slot = slot;
  r.per_thread = per_thread;
  r.legacy = !per_thread && (stream == nullptr || stream == CU_STREAM_LEGACY);
  r.used = true;
  t_last_rec = i;
  return i;
}

CUevent Tracker::take_event_locked(CUcontext ctx) {
  for (int i = pooled_ - 1; i >= 0; --i)
    if (pool_[i].ctx == ctx) {
      CUevent ev = pool_[i].ev;
      pool_[i] = pool_[--pooled_];
      return ev;
    }
  CUevent ev = nullptr;
  ScopedContext sc(ctx);
  if (call<Fn::cuEventCreate>(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS) return nullptr;
  return ev;
}

void Tracker::give_event_locked(CUcontext ctx, CUevent ev) {
  if (!ev) return;
  if (pooled_ < kMarks) {
    pool_[pooled_++] = {ctx, ev};
    return;
  }
  call<Fn::cuEventDestroy_v2>(ev);
}

void Tracker::publish_tail_locked(int slot) { stats().track[slot].tail.store(tails_[slot], std::memory_order_release); }

void Tracker::set_marked_locked(StreamRec& r, uint64_t upto) {
  if (upto <= r.marked) return;
  if (upto > r.launched) upto = r.launched;
  r.marked = upto;
  if (r.launched == r.marked && r.slot >= 0 && r.slot < kSlotCount && tails_[r.slot]) --tails_[r.slot];
}

bool Tracker::record_locked(int slot, CUcontext ctx, CUstream record_on, uint64_t mask, bool exchange_mode,
                            uint64_t extra) {
  if (count_ >= kMarks) return false;
  // What the mark will cover: the launches counted now, all of them made before the record below
  // (a launch is counted after its driver call). Launches counted meanwhile stay unmarked.
  uint64_t upto[kStreams];
  uint64_t covered = extra;
  {
    SpinLock g(rec_mu_);
    for (int i = 0; i < kStreams; ++i) {
      if (!(mask >> i & 1)) continue;
      upto[i] = streams_[i].launched;
      covered += upto[i] - streams_[i].marked;
    }
  }
  if (covered == 0) return true;  // another thread's mark took them meanwhile
  CUevent ev = take_event_locked(ctx);
  if (!ev) return false;
  CUresult rc;
  {
    ScopedContext sc(ctx);
    if (exchange_mode) {
      RelaxedCapture relaxed;
      rc = call<Fn::cuEventRecord>(ev, record_on);
    } else {
      rc = call<Fn::cuEventRecord>(ev, record_on);
    }
  }
  if (rc != CUDA_SUCCESS) {
    // Not pooled again: an event of a destroyed context would fail every record after it (a new
    // context can reuse the old one's handle).
    call<Fn::cuEventDestroy_v2>(ev);
    return false;
  }
  const uint64_t now = monotonic_ns();
  Mark& m = ring_[(head_ + count_) % kMarks];
  m = Mark{ev, ctx, slot, mask, extra, 0};
  {
    SpinLock g(rec_mu_);
    uint64_t first = UINT64_MAX;
    for (int i = 0; i < kStreams; ++i) {
      if (!(mask >> i & 1)) continue;
      StreamRec& r = streams_[i];
      if (upto[i] > r.marked) {
        m.launches += upto[i] - r.marked;
        first = r.first_unmarked_ns < first ? r.first_unmarked_ns : first;
      }
      set_marked_locked(r, upto[i]);
      if (r.launched > r.marked) r.first_unmarked_ns = now;  // counted after the snapshot: made by now
      ++r.pending;
    }
    m.first_ns = first == UINT64_MAX ? now : first;
    SlotTrack& st = slots_[slot];
    if (st.pending++ == 0) st.busy_since_ns = m.first_ns > st.last_done_ns ? m.first_ns : st.last_done_ns;
    pages::TrackStats& ts = stats().track[slot];
    ts.last_launch_ns.store(now, std::memory_order_relaxed);  // no older than any launch it covers
    ts.marks.fetch_add(1, std::memory_order_release);
    publish_tail_locked(slot);
  }
  ++count_;
  start_thread_locked();
  wake_seq_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) futex_wake(wake_seq_, false);
  return true;
}

void Tracker::launched(int slot, CUstream stream, bool per_thread, CUresult rc, CUcontext ctx) {
  if (slot < 0 || slot >= kSlotCount || rc != CUDA_SUCCESS) return;
  // The stream's identity: its handle, or the default stream it stands for.
  const bool dflt = default_stream(stream);
  const bool pts = dflt && (stream == CU_STREAM_PER_THREAD || (per_thread && stream == nullptr));
  if (!ctx) {
    if (dflt) call<Fn::cuCtxGetCurrent>(&ctx);
    else call<Fn::cuStreamGetCtx>(stream, &ctx);
  }
  const CUstream key = pts ? CU_STREAM_PER_THREAD : dflt ? CU_STREAM_LEGACY : stream;
  if (!used_.load(std::memory_order_relaxed)) used_.store(true, std::memory_order_relaxed);
  const uint64_t window = control().compute[slot].window_ns.load(std::memory_order_relaxed);
  pages::TrackStats& ts = stats().track[slot];
  int i;
  bool due = false;
  {
    SpinLock g(rec_mu_);
    SlotTrack& st = slots_[slot];
    ts.launches.store(ts.launches.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // (writers hold rec_mu_)
    i = stream_locked(slot, key, pts, ctx, pts ? this_thread() : 0);
    const bool idle = st.pending == 0 && st.launched == st.done;  // nothing of the slot's in flight before this launch
    ++st.launched;
    if (i >= 0) {
      StreamRec& r = streams_[i];
      if (r.launched == r.marked) {  // the first launch after a mark: the clock, the tail
        const uint64_t now = monotonic_ns();
        st.bound.launch(now, idle);
        r.first_unmarked_ns = now;
        ++tails_[slot];
        publish_tail_locked(slot);
        ts.last_launch_ns.store(now, std::memory_order_relaxed);
      }
      ++r.launched;
      const uint64_t unmarked = r.launched - r.marked;
      const uint64_t inflight = st.launched - st.done;
      const uint64_t per = st.bound.per_launch_ns;
      // (A window without a bound has no allowance to grow: no marks for it.)
      due = (r.pending == 0 && unmarked == 1) || unmarked >= kMarkEvery ||
            (window && (st.bound.near_allowance(inflight) || (per && unmarked * per >= window / 4)));
    }
  }
  if (i >= 0 && !due) return;
  std::lock_guard<Mutex> g(mu_);
  if (i < 0) {
    // Every stream record is busy: this launch gets a mark of its own now (a rare case; its cost
    // is one event record). When even that fails it is let go: counted done at once, so the
    // window's estimate does not keep it forever, and left out of the drain.
    if (!record_locked(slot, ctx, key, 0, true, 1)) {
      SpinLock r(rec_mu_);
      ++slots_[slot].done;
    }
    return;
  }
  record_locked(slot, ctx, key, uint64_t(1) << i, true);  // (failed: the tail stays published)
}

bool Tracker::over_window(int slot, uint64_t window_ns) {
  if (slot < 0 || slot >= kSlotCount || window_ns == 0) return false;
  uint64_t busy_since;
  {
    SpinLock g(rec_mu_);
    const SlotTrack& st = slots_[slot];
    if (st.pending == 0) return false;  // nothing would wake a waiter
    const uint64_t inflight = st.launched > st.done ? st.launched - st.done : 0;
    if (st.bound.over(inflight, 0, 0, window_ns)) return true;
    if (inflight == 0) return false;
    busy_since = st.busy_since_ns;
  }
  return WindowBound::aged(busy_since, age_clock_ns(window_ns), window_ns);
}

void Tracker::after_fork_child() {
  mu_.reinit_in_child();
  for (StreamRec& r : streams_) r = StreamRec{};
  head_ = count_ = 0;
  rec_mu_.reinit_in_child();
  for (SlotTrack& s : slots_) s = SlotTrack{};
  for (uint32_t& t : tails_) t = 0;
  pooled_ = 0;  // the parent's events (the child cannot use CUDA)
  thread_started_.store(false, std::memory_order_relaxed);
  syncing_ = nullptr;
  used_.store(false, std::memory_order_relaxed);
  sleeping_.store(0, std::memory_order_relaxed);
}

// ---- the tracker thread -----------------------------------------------------------------------------

void Tracker::start_thread_locked() {
  if (thread_started_.load(std::memory_order_relaxed)) return;
  thread_started_.store(true, std::memory_order_relaxed);
  // The thread takes none of the application's signals.
  if (start_quiet_thread(&Tracker::thread_main, this, kTrackerStack) != 0) {
    thread_started_.store(false, std::memory_order_relaxed);  // tried again at the next mark; the window is not enforced meanwhile
    return;
  }
}

void* Tracker::thread_main(void* self) {
  prctl(PR_SET_NAME, "coloc-track", 0, 0, 0);
  static_cast<Tracker*>(self)->run();
  return nullptr;
}

void Tracker::abandon_locked(int i) {
  StreamRec& r = streams_[i];
  if (r.slot >= 0 && r.slot < kSlotCount) slots_[r.slot].done += r.launched - r.marked;
  set_marked_locked(r, r.launched);
}

void Tracker::nudge() {
  if (!thread_started_.load(std::memory_order_relaxed)) return;  // (without the lock: a missed nudge costs one slice)
  wake_seq_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) futex_wake(wake_seq_, false);
}

void Tracker::forget_context(CUcontext ctx) {
  if (!ctx || !used_.load(std::memory_order_relaxed)) return;
  std::unique_lock<Mutex> g(mu_);
  for (int i = pooled_ - 1; i >= 0; --i)
    if (pool_[i].ctx == ctx) {
      call<Fn::cuEventDestroy_v2>(pool_[i].ev);
      pool_[i] = pool_[--pooled_];
    }
  // Its marks in flight: their events go with the context; the thread skips them (done).
  for (int k = 0; k < count_; ++k) {
    Mark& m = ring_[(head_ + k) % kMarks];
    if (m.ctx == ctx) m.ev = nullptr;
  }
  {
    SpinLock r(rec_mu_);
    for (int i = 0; i < kStreams; ++i)
      if (streams_[i].used && streams_[i].ctx == ctx) {
        abandon_locked(i);
        if (streams_[i].pending == 0) streams_[i].used = false;
      }
    for (int slot = 0; slot < kSlotCount; ++slot) publish_tail_locked(slot);
  }
  // The thread may be waiting on one of its events right now: the application's destroy waits
  // until it is done (no call of ours may use a context after it is destroyed).
  while (syncing_ == ctx) {
    const uint32_t seq = done_seq_.load(std::memory_order_acquire);
    g.unlock();
    timespec slice{0, 10 * 1000000L};
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&done_seq_), FUTEX_WAIT, seq, &slice, nullptr, 0);
    g.lock();
  }
}

bool Tracker::mark_tails() {
  std::lock_guard<Mutex> g(mu_);
  bool any = false;
  for (int slot = 0; slot < kSlotCount; ++slot) {
    // A closed gate: the daemon waits for the drain. An open window without a bound (window 0:
    // a high-priority job under the priority policy, whose idle gaps the daemon watches): called
    // only when no mark is in flight at all, so the tail is the work the daemon cannot see
    // complete; marked now, the job shows drained within a completion of going idle, at the cost
    // of at most one mark per completion round (the launching thread would mark its next launch
    // anyway: no mark is pending). A bounded window (a timeslice's holder, a throttled job) is
    // left to the handover, as before. Untracked (kRun): nothing to mark.
    const uint32_t state = control().gates[slot].state.load(std::memory_order_acquire);
    if (state == uint32_t(pages::GateState::kRun)) continue;
    if (state == uint32_t(pages::GateState::kWindow) && control().compute[slot].window_ns.load(std::memory_order_relaxed) != 0)
      continue;
    // Explicit streams one by one; the default streams of a context together, on its legacy stream.
    // (Under mu_ no other mark is recorded, so a record with unmarked launches keeps them, and its
    // identity, until this loop marks it; its fields are read under rec_mu_ all the same.)
    uint64_t defaults_by_ctx = 0, explicit_mask = 0;
    CUcontext dctx = nullptr;
    struct Pick {
      CUstream stream;
      CUcontext ctx;
    } picks[kStreams];
    {
      SpinLock r(rec_mu_);
      for (int i = 0; i < kStreams; ++i) {
        const StreamRec& rec = streams_[i];
        if (!rec.used || rec.slot != slot || rec.launched == rec.marked) continue;
        if (rec.legacy || rec.per_thread) {
          if (!dctx) dctx = rec.ctx;
          if (rec.ctx == dctx) defaults_by_ctx |= uint64_t(1) << i;
          continue;
        }
        explicit_mask |= uint64_t(1) << i;
        picks[i] = {rec.stream, rec.ctx};
      }
    }
    for (int i = 0; i < kStreams; ++i) {
      if (!(explicit_mask >> i & 1)) continue;
      // Capturing now: tried again at the next wake (a gate change, a nudge, or the slice);
      // meanwhile the tail holds the drain, so the daemon waits (at most its grace).
      if (capturing(picks[i].stream, false)) continue;
      if (record_locked(slot, picks[i].ctx, picks[i].stream, uint64_t(1) << i, false)) {
        any = true;
      } else {  // the stream (or its context) is gone: so is the work it held
        SpinLock r(rec_mu_);
        abandon_locked(i);
        publish_tail_locked(slot);
      }
    }
    if (defaults_by_ctx) {
      ScopedContext sc(dctx);
      if (capturing(CU_STREAM_LEGACY, false)) continue;  // as above: later
      if (record_locked(slot, dctx, CU_STREAM_LEGACY, defaults_by_ctx, false)) {
        any = true;
      } else {
        SpinLock r(rec_mu_);
        for (int i = 0; i < kStreams; ++i)
          if (defaults_by_ctx >> i & 1) abandon_locked(i);
        publish_tail_locked(slot);
      }
    }
  }
  return any;
}

void Tracker::run() {
  // This thread's waits must never fail, nor invalidate, another thread's GLOBAL-mode capture.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  call<Fn::cuThreadExchangeStreamCaptureMode>(&mode);
  uint32_t seen_gate = control().gate_seq.load(std::memory_order_acquire);
  for (;;) {
    Mark m;
    bool have = false;
    {
      std::lock_guard<Mutex> g(mu_);
      if (count_ > 0) {
        m = ring_[head_];
        have = true;
      }
    }
    if (have) {
      if (m.ev) {
        {
          std::lock_guard<Mutex> g(mu_);
          m = ring_[head_];  // forget_context may have taken its event meanwhile
          syncing_ = m.ev ? m.ctx : nullptr;
        }
        if (m.ev) {
          ScopedContext sc(m.ctx);
          call<Fn::cuEventSynchronize>(m.ev);  // an error counts as done
        }
      }
      const uint64_t now = monotonic_ns();
      std::lock_guard<Mutex> g(mu_);
      syncing_ = nullptr;
      if (!ring_[head_].ev) m.ev = nullptr;  // its context was destroyed meanwhile: so was the event
      head_ = (head_ + 1) % kMarks;
      --count_;
      uint64_t busy;
      {
        SpinLock r(rec_mu_);
        SlotTrack& st = slots_[m.slot];
        if (st.pending) --st.pending;
        const uint64_t start = m.first_ns > st.last_done_ns ? m.first_ns : st.last_done_ns;
        busy = now > start ? now - start : 0;
        st.last_done_ns = now;
        // The slot's next mark in flight: its work began by now at the latest (the device ran this one's until now).
        st.busy_since_ns = st.pending ? now : 0;
        st.done += m.launches;
        if (st.done > st.launched) st.done = st.launched;
        st.bound.completed(now, m.launches, busy);
        for (int i = 0; i < kStreams; ++i)
          if ((m.streams >> i & 1) && streams_[i].pending) --streams_[i].pending;
      }
      if (m.ev) give_event_locked(m.ctx, m.ev);
      pages::TrackStats& ts = stats().track[m.slot];
      // The interval's end first, then its length (pages.h: StatsPage::busy_until); an older page
      // has no busy_until (the daemon reads it only from layout 7).
      if (stats().layout_version >= pages::kBusyLayout) stats().busy_until[m.slot].store(now, std::memory_order_relaxed);
      ts.busy_ns.fetch_add(busy, std::memory_order_release);
      ts.marks_done.fetch_add(1, std::memory_order_release);
      done_seq_.fetch_add(1, std::memory_order_release);
      futex_wake(done_seq_, true);  // window waiters wait with SignalWindow::wait_futex (shared)
      continue;
    }
    if (mark_tails()) continue;
    // Nothing in flight: sleep until a mark is queued or a gate changes.
    const uint32_t w = wake_seq_.load(std::memory_order_seq_cst);
    sleeping_.store(1, std::memory_order_seq_cst);
    bool empty;
    {
      std::lock_guard<Mutex> g(mu_);
      empty = count_ == 0;
    }
    const uint32_t gs = control().gate_seq.load(std::memory_order_acquire);
    if (empty && gs == seen_gate) {
      struct futex_waitv {
        uint64_t val, uaddr;
        uint32_t flags, reserved;
      } v[2] = {{w, uint64_t(uintptr_t(&wake_seq_)), 2 /* FUTEX2_SIZE_U32 */ | 128 /* FUTEX2_PRIVATE */, 0},
                {gs, uint64_t(uintptr_t(&control().gate_seq)), 2, 0}};
      timespec ts;
      ::clock_gettime(CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += 100 * 1000000L;  // the slice: a gate change the daemon did not wake still gets seen
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
      }
#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
      long rc = ::syscall(SYS_futex_waitv, v, 2, 0, &ts, CLOCK_MONOTONIC);
      if (rc < 0 && errno == ENOSYS) {  // before Linux 5.16: the mark word alone, in the slice (a
        // launch that starts to wait at a closed gate nudges it: nudge())
        timespec rel{0, 100 * 1000000L};
        ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&wake_seq_), FUTEX_WAIT_PRIVATE, w, &rel, nullptr, 0);
      }
    }
    seen_gate = gs;
    sleeping_.store(0, std::memory_order_relaxed);
  }
}

}  // namespace coloc::interpose
