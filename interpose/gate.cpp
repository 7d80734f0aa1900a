// interpose/gate.cpp — see gate.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "gate.h"

#include <pthread.h>

#include <array>

#include <cstdlib>

#include "glibc_compat.h"

namespace coloc::interpose {

__thread ThreadCalls* tl_calls = nullptr;

namespace {

constinit std::atomic<ThreadCalls*> g_blocks{nullptr};
// Counts of threads that could not get a block (out of memory) land here, shared: relaxed
// read-modify-write keeps it race-free, if not exact under contention.
constinit ThreadCalls g_fallback{};
pthread_key_t g_key;
constinit pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
constinit bool g_have_key = false;

void release_block(void* p) {
  // Thread exit: the block goes back to the pool with its counts.
  static_cast<ThreadCalls*>(p)->owned.store(false, std::memory_order_release);
}

void make_key() { g_have_key = pthread_key_create(&g_key, release_block) == 0; }

ThreadCalls* adopt_or_allocate() {
  for (ThreadCalls* b = g_blocks.load(std::memory_order_acquire); b; b = b->next.load(std::memory_order_acquire)) {
    bool expected = false;
    if (!b->owned.load(std::memory_order_relaxed) &&
        b->owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      return b;
  }
  auto* b = static_cast<ThreadCalls*>(std::calloc(1, sizeof(ThreadCalls)));  // all counters zero
  if (!b) return nullptr;
  b->owned.store(true, std::memory_order_relaxed);
  ThreadCalls* head = g_blocks.load(std::memory_order_relaxed);
  do {
    b->next.store(head, std::memory_order_relaxed);
  } while (!g_blocks.compare_exchange_weak(head, b, std::memory_order_release, std::memory_order_relaxed));
  return b;
}

}  // namespace

ThreadCalls* thread_calls_slow() {
  pthread_once(&g_key_once, make_key);
  ThreadCalls* b = adopt_or_allocate();
  if (!b) {
    tl_calls = &g_fallback;
    return &g_fallback;
  }
  if (g_have_key) pthread_setspecific(g_key, b);  // returns the block at thread exit
  tl_calls = b;
  return b;
}

uint64_t total_calls(Fn id) {
  uint64_t sum = g_fallback.calls[index(id)].load(std::memory_order_relaxed);
  for (ThreadCalls* b = g_blocks.load(std::memory_order_acquire); b; b = b->next.load(std::memory_order_acquire))
    sum += b->calls[index(id)].load(std::memory_order_relaxed);
  return sum;
}

namespace {
constexpr unsigned kLaunchHookCount = [] {
  unsigned n = 0;
  for (unsigned i = 0; i < kHookCount; ++i) n += kPolicy[i] == Policy::launch || kPolicy[i] == Policy::graph_launch;
  return n;
}();
constexpr auto kLaunchHooks = [] {
  std::array<uint16_t, kLaunchHookCount> a{};
  unsigned n = 0;
  for (unsigned i = 0; i < kHookCount; ++i)
    if (kPolicy[i] == Policy::launch || kPolicy[i] == Policy::graph_launch) a[n++] = uint16_t(i);
  return a;
}();
}  // namespace

uint64_t thread_launches() {
  const ThreadCalls* t = tl_calls;
  if (!t) return 0;
  uint64_t sum = 0;
  for (uint16_t i : kLaunchHooks) sum += t->calls[i].load(std::memory_order_relaxed);
  return sum;
}

uint64_t total_launches() {
  uint64_t sum = 0;
  for (unsigned i = 0; i < kHookCount; ++i)
    if (kPolicy[i] == Policy::launch || kPolicy[i] == Policy::graph_launch) sum += total_calls(Fn(i));
  return sum;
}

void reset_calls_in_child() {
  for (ThreadCalls* b = g_blocks.load(std::memory_order_acquire); b; b = b->next.load(std::memory_order_acquire)) {
    for (auto& c : b->calls) c.store(0, std::memory_order_relaxed);
    b->owned.store(b == tl_calls, std::memory_order_relaxed);
  }
  for (auto& c : g_fallback.calls) c.store(0, std::memory_order_relaxed);
}

}  // namespace coloc::interpose
