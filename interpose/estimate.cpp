// interpose/estimate.cpp — the online estimate's ring and its thread (see estimate.h).
#include "estimate.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include <atomic>

#include "broker.h"
#include "estimator/online.h"
#include "gate.h"
#include "glibc_compat.h"
#include "quiet_thread.h"

namespace coloc::interpose::estimate {

namespace {

// 8192 events: at 5 ms between drains the thread keeps up with 1.6 million events a second, far
// beyond what a training loop allocates (PyTorch's caching allocator makes a few driver calls per
// iteration; without one, a few thousand per iteration).
constexpr uint64_t kRing = 8192;
constexpr uint64_t kBusy = ~uint64_t(0);
// The thread never calls the driver and keeps its state in globals; sanitizer builds need more.
#if defined(COLOC_SANITIZED)
constexpr size_t kStack = 4u << 20;
#else
constexpr size_t kStack = 128u << 10;
#endif
// Drain every 5 ms while events come (a 10 ms iteration still spans two drains), every 50 ms once
// none came for a second.
constexpr long kBusySleepNs = 5'000'000;
constexpr long kIdleSleepNs = 50'000'000;
constexpr uint64_t kIdleAfterNs = 1'000'000'000;
// A cell claimed but not published for this long is given up (its writer was stopped, e.g. a
// thread killed in the middle): counted as lost, detection restarts.
constexpr uint64_t kStuckNs = 200'000'000;

// One event: `seq` is the cell's seqlock (kBusy while written, then index + 1).
struct alignas(32) Cell {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> head;  // kind (8 bits) | slot (8) | launches (32)
  std::atomic<uint64_t> size;
  std::atomic<uint64_t> in_use;
};

Cell g_ring[kRing];
std::atomic<uint64_t> g_next{0};   // the next index to claim
std::atomic<bool> g_on{false};     // record() records (the thread runs or is starting)
std::atomic<bool> g_started{false};
__thread uint64_t tl_launch_mark __attribute__((tls_model("initial-exec")));

// The consumer's state (the coloc-est thread only).
est::PeriodDetector g_detector;
uint64_t g_tail = 0;
uint64_t g_stuck_since = 0;
uint64_t g_last_event_ns = 0;
uint32_t g_slots_seen = 0;  // bit s: slot s had an event

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Drains what is published; returns the number of events fed to the detector.
uint64_t drain(uint64_t now) {
  const uint64_t next = g_next.load(std::memory_order_acquire);
  uint64_t fed = 0;
  if (next - g_tail > kRing) {  // overwritten before we read them
    g_detector.lost(now);
    g_tail = next - kRing;
  }
  while (g_tail < next) {
    Cell& c = g_ring[g_tail & (kRing - 1)];
    const uint64_t s1 = c.seq.load(std::memory_order_acquire);
    if (s1 != g_tail + 1) {
      if (s1 != kBusy && s1 > g_tail + 1) {  // lapped by the writers
        g_detector.lost(now);
        ++g_tail;
        continue;
      }
      // Not published yet (or still its previous lap's): wait for it, but not for ever.
      if (!g_stuck_since) g_stuck_since = now;
      if (now - g_stuck_since < kStuckNs) break;
      g_detector.lost(now);
      ++g_tail;
      g_stuck_since = 0;
      continue;
    }
    const uint64_t head = c.head.load(std::memory_order_relaxed);
    const uint64_t size = c.size.load(std::memory_order_relaxed);
    const uint64_t in_use = c.in_use.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c.seq.load(std::memory_order_relaxed) != s1) continue;  // torn: read it again
    g_stuck_since = 0;
    ++g_tail;
    est::Event e;
    e.kind = est::EventKind(head >> 56);
    e.slot = uint8_t(head >> 48);
    e.launches = uint32_t(head);
    e.size = size;
    e.in_use = in_use;
    if (e.slot < pages::kSlots) g_slots_seen |= 1u << e.slot;
    g_detector.add(e, now);
    ++fed;
  }
  return fed;
}

// Writes each seen slot's prediction to the stats page when it changed (EstimateStats seqlock).
void publish() {
  pages::StatsPage& page = stats();
  const uint16_t state = uint16_t(g_detector.state());
  const uint16_t confidence = uint16_t(g_detector.confidence_permille());
  const uint64_t period = g_detector.period_ns();
  const uint64_t since = g_detector.stable_since_ns();
  for (uint32_t s = 0; s < pages::kSlots; ++s) {
    if (!(g_slots_seen & (1u << s))) continue;
    pages::EstimateStats& e = page.est[s];
    const uint64_t peak = g_detector.predicted_peak(int(s));
    if (e.state.load(std::memory_order_relaxed) == state && e.confidence.load(std::memory_order_relaxed) == confidence &&
        e.predicted_peak.load(std::memory_order_relaxed) == peak && e.period_ns.load(std::memory_order_relaxed) == period &&
        e.stable_since_ns.load(std::memory_order_relaxed) == since)
      continue;
    const uint32_t q = e.seq.load(std::memory_order_relaxed);
    e.seq.store(q | 1u, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e.state.store(state, std::memory_order_relaxed);
    e.confidence.store(confidence, std::memory_order_relaxed);
    e.predicted_peak.store(peak, std::memory_order_relaxed);
    e.period_ns.store(period, std::memory_order_relaxed);
    e.stable_since_ns.store(since, std::memory_order_relaxed);
    e.seq.store((q | 1u) + 1, std::memory_order_release);
  }
}

void* thread_main(void*) {
  prctl(PR_SET_NAME, "coloc-est", 0, 0, 0);
  for (;;) {
    const uint64_t now = mono_ns();
    if (drain(now) > 0) g_last_event_ns = now;
    publish();
    timespec ts{0, (now - g_last_event_ns < kIdleAfterNs) ? kBusySleepNs : kIdleSleepNs};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  return nullptr;
}

}  // namespace

bool active() { return g_on.load(std::memory_order_relaxed); }

void record(What what, int slot, uint64_t size, uint64_t in_use) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  if (slot < 0 || slot >= int(pages::kSlots)) return;
  const uint64_t launches = thread_launches();
  uint64_t delta = launches - tl_launch_mark;
  tl_launch_mark = launches;
  if (delta > 0xffffffffu) delta = 0xffffffffu;
  const uint64_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  Cell& c = g_ring[i & (kRing - 1)];
  c.seq.store(kBusy, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  c.head.store(uint64_t(what) << 56 | uint64_t(slot) << 48 | delta, std::memory_order_relaxed);
  c.size.store(size, std::memory_order_relaxed);
  c.in_use.store(in_use, std::memory_order_relaxed);
  c.seq.store(i + 1, std::memory_order_release);
}

void start() {
  // Only a daemon that reads the prediction (layout 6) gets one made; asked again at the next
  // admission (a newer colocd may have taken over meanwhile).
  if (stats().layout_version < pages::kEstimateLayout) return;
  if (g_started.exchange(true, std::memory_order_acq_rel)) return;
  g_on.store(true, std::memory_order_relaxed);
  // The thread takes none of the application's signals.
  if (start_quiet_thread(thread_main, nullptr, kStack) != 0)
    g_on.store(false, std::memory_order_relaxed);  // no estimate; nothing else changes
}

void reset_in_child() {
  if (!g_started.load(std::memory_order_relaxed)) return;  // nothing to forget: costs nothing
  g_on.store(false, std::memory_order_relaxed);
  g_started.store(false, std::memory_order_relaxed);
  // The numbering goes on from where the parent was, so the cells' old sequence numbers all read
  // as older than the child's first event: no cell needs clearing.
  g_tail = g_next.load(std::memory_order_relaxed);
  g_detector.reset();
  g_stuck_since = 0;
  g_last_event_ns = 0;
  g_slots_seen = 0;
  tl_launch_mark = 0;
}

}  // namespace coloc::interpose::estimate
