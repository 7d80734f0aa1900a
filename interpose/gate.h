// interpose/gate.h — the launch gate and the per-thread call counters.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Fast path of every launch: one relaxed load of the gate summary on the control page, and one
// increment of a counter in this thread's own block. Nothing is written to a cache line another
// thread writes. Each thread's block is allocated at its first hook call and registered in a
// lock-free list; at thread exit the block is handed to the next new thread (its counts stay:
// only sums are ever read). total_calls() sums every block.
#pragma once

#include <atomic>
#include <cstdint>
#include <tuple>

#include "broker.h"
#include "driver.h"
#include "hook_table.h"

namespace coloc::interpose {

/// One thread's call counters (one writer: the owning thread).
struct ThreadCalls {
  std::atomic<uint64_t> calls[kHookCount];
  std::atomic<ThreadCalls*> next;   ///< registry link (push-only)
  std::atomic<bool> owned;          ///< a live thread uses it
};

extern __thread ThreadCalls* tl_calls __attribute__((tls_model("initial-exec")));

/// This thread's block, allocating or adopting one on first use. Never null.
ThreadCalls* thread_calls_slow();

/// Counts one call of hook `id` on this thread.
inline void count_call(Fn id) {
  ThreadCalls* t = tl_calls;
  if (!t) [[unlikely]] t = thread_calls_slow();
  std::atomic<uint64_t>& c = t->calls[index(id)];
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

/// Launches of one entry point on one thread between two Broker::flush_launches calls.
inline constexpr uint64_t kLaunchFlushEvery = 4096;

/// Counts one launch of hook `id` on this thread; every kLaunchFlushEvery, lets the broker add the
/// launches to the stats page. The same cost as count_call but for one predictable branch.
inline void count_launch(Fn id) {
  ThreadCalls* t = tl_calls;
  if (!t) [[unlikely]] t = thread_calls_slow();
  std::atomic<uint64_t>& c = t->calls[index(id)];
  uint64_t n = c.load(std::memory_order_relaxed) + 1;
  c.store(n, std::memory_order_relaxed);
  if ((n & (kLaunchFlushEvery - 1)) == 0) [[unlikely]] broker().flush_launches();
}

/// Launches so far in this process, every launch entry point and thread summed.
uint64_t total_launches();

/// Launches so far by the calling thread (its own counters: no other thread's cache line is read).
uint64_t thread_launches();

/// The stream argument of launch entry point `id` called with `args`.
template <Fn id, class... A>
inline CUstream launch_stream(const A&... args) {
  auto t = std::forward_as_tuple(args...);
  if constexpr (id == Fn::cuLaunchKernelEx || id == Fn::cuLaunchKernelEx_ptsz) {
    const CUlaunchConfig* c = std::get<0>(t);
    return c ? c->hStream : nullptr;
  } else if constexpr (id == Fn::cuGraphLaunch || id == Fn::cuGraphLaunch_ptsz) {
    return std::get<1>(t);
  } else if constexpr (id == Fn::cuLaunch || id == Fn::cuLaunchGrid) {
    return nullptr;  // the legacy default stream
  } else if constexpr (id == Fn::cuLaunchGridAsync) {
    return std::get<3>(t);
  } else if constexpr (id == Fn::cuLaunchCooperativeKernelMultiDevice) {
    // One launch per device, each on its own stream: the gate sees the first entry's stream.
    const CUDA_LAUNCH_PARAMS* list = std::get<0>(t);
    return list && std::get<1>(t) > 0 ? list[0].hStream : nullptr;
  } else {  // cuLaunchKernel, cuLaunchCooperativeKernel (and _ptsz): hStream is the ninth
    return std::get<8>(t);
  }
}
/// Whether `id` is a per-thread-default-stream (_ptsz) entry point.
template <Fn id>
inline constexpr bool per_thread_launch = id == Fn::cuLaunchKernel_ptsz || id == Fn::cuLaunchKernelEx_ptsz ||
                                          id == Fn::cuLaunchCooperativeKernel_ptsz || id == Fn::cuGraphLaunch_ptsz;

/// The gate summary when it is not RUN (a launch must see the broker first), else 0.
inline uint32_t gate_closed() { return control().gate.load(std::memory_order_relaxed); }

/// Waits at the launch gate when the control page says so (never in state RUN): the launch of
/// entry point `id` with its arguments `args` (its stream picks the device and says whether it
/// is capturing; only read off the fast path).
template <Fn id, class... A>
inline GateTicket gate_pass(const A&... args) {
  if (uint32_t state = gate_closed(); state != uint32_t(pages::GateState::kRun)) [[unlikely]]
    return broker().gate_wait(state, launch_stream<id>(args...), per_thread_launch<id>);
  return {};
}

/// After the driver call of a launch that passed the gate with ticket `t`: lets the broker track
/// it (kWindow) when the ticket says so.
template <Fn id, class... A>
inline void gate_after(const GateTicket& t, CUresult rc, const A&... args) {
  if (t.track) [[unlikely]]
    broker().launched(t, launch_stream<id>(args...), per_thread_launch<id>, rc);
}

/// The fast path of a plain launch hook: counts the launch of `id` on this thread and returns the
/// driver's entry point when nothing else is to be done (a block exists, no flush is due, the
/// gate summary is RUN, the driver is loaded), so the hook tail-calls it; otherwise counts
/// nothing and returns null (launch_slow does it all). So the hook calls no function of ours on
/// the fast path and keeps no argument alive.
template <Fn id>
inline auto launch_fast() -> decltype(real<id>()) {
  ThreadCalls* t = tl_calls;
  if (!t) [[unlikely]] return nullptr;
  std::atomic<uint64_t>& c = t->calls[index(id)];
  const uint64_t n = c.load(std::memory_order_relaxed) + 1;
  if ((n & (kLaunchFlushEvery - 1)) == 0) [[unlikely]] return nullptr;
  if (gate_closed() != uint32_t(pages::GateState::kRun)) [[unlikely]] return nullptr;
  auto fn = real<id>();
  if (fn) [[likely]] c.store(n, std::memory_order_relaxed);
  return fn;
}

/// The rest of a plain launch hook, out of line: counts (allocating the thread's block, flushing
/// the counts when due), waits at the gate, calls the driver, then tracks the launch (kWindow).
template <Fn id, class... A>
[[gnu::noinline, gnu::cold]] CUresult launch_slow(A... args) {
  count_launch(id);
  const GateTicket t = gate_pass<id>(args...);
  const CUresult rc = call<id>(args...);
  gate_after<id>(t, rc, args...);
  return rc;
}

/// Calls of hook `id` so far in this process, summed over all threads (live and exited).
uint64_t total_calls(Fn id);

/// After fork, in the child: zeroes every block and keeps only the calling thread's.
void reset_calls_in_child();

}  // namespace coloc::interpose
