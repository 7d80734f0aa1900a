// simgpu/entry.h — what every exported entry point does first: count the call (only when
// SIMGPU_CALLS is set), refuse it when the driver is not initialized (or this is a forked child of
// a process that initialized it), and make sure no C++ exception crosses the C ABI.
//
//   CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
//     static constinit CallCounter calls{__func__};
//     return enter(calls, [&] { return memory::alloc(dptr, bytes); });
//   }
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "cuda_api.h"

namespace simgpu {

/// Where the driver is in its life, process-wide.
enum class Phase : int {
  uninitialized,  ///< cuInit not called yet
  ready,          ///< cuInit succeeded
  failed,         ///< cuInit failed; it keeps failing with the same error
  deinitialized,  ///< the process is exiting; calls get CUDA_ERROR_DEINITIALIZED
  forked,         ///< a fork child of a process that had initialized the driver
  lost,           ///< a checkpoint or restore failed (CU_PROCESS_STATE_FAILED): CUDA_ERROR_ILLEGAL_STATE
};

inline constinit std::atomic<Phase> g_phase{Phase::uninitialized};
/// SIMGPU_CALLS is set: entry points count their calls.
inline constinit std::atomic<bool> g_count_calls{false};

/// Calls of one exported entry point. Constant-initialized (no guard on the hot path); links
/// itself into the process-wide list on its first call.
struct CallCounter {
  const char* const name;
  std::atomic<uint64_t> count{0};
  CallCounter* next = nullptr;

  constexpr explicit CallCounter(const char* n) : name(n) {}
  void hit() {
    if (count.fetch_add(1, std::memory_order_relaxed) == 0) publish();
  }

 private:
  void publish();
};

/// The integer a caller passed as an enum (a parameter or a struct field). C callers may pass
/// values outside the enum's range, and loading one as the enum type is undefined behaviour in
/// C++: read its bytes instead, and only ever compare the integer.
template <class E>
std::underlying_type_t<E> raw(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

/// Writes {"symbol": count, ...} for every counted entry point to `path` ("%p" in it becomes the
/// pid). Returns false if the file cannot be written.
bool write_call_counts(const char* path);

/// The error a call gets in phase `p` (not ready).
inline CUresult phase_error(Phase p) {
  return p == Phase::deinitialized ? CUDA_ERROR_DEINITIALIZED
         : p == Phase::lost        ? CUDA_ERROR_ILLEGAL_STATE
                                   : CUDA_ERROR_NOT_INITIALIZED;
}

// ---- the API gate: cuCheckpointProcessLock blocks the process's further calls ----
//
// Each call that needs the driver counts itself in one of kGateStripes counters while it runs
// (the stripe chosen from its stack address, so threads rarely share a cache line, and a call
// decrements the counter it incremented). The restore thread closes the gate (g_gate_closed = 1),
// then waits until every counter is 0: no call is inside the driver any more, and calls arriving
// later wait in gate_wait() until it opens. Both sides use sequentially consistent operations, so
// a call either sees the gate closed or is counted by the closer (Dekker's argument).

inline constexpr int kGateStripes = 16;
struct alignas(64) GateStripe {
  std::atomic<uint32_t> inside{0};
};
inline constinit GateStripe g_gate[kGateStripes];
/// 1 while the process is locked (futex word, process-private).
inline constinit std::atomic<uint32_t> g_gate_closed{0};

/// Blocks while the gate is closed (checkpoint.cpp).
void gate_wait();

inline GateStripe& gate_stripe() {
  const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return g_gate[((sp >> 20) ^ (sp >> 24)) % kGateStripes];
}

/// Runs `body`, turning an escaping exception into a CUresult.
template <class F>
CUresult guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

/// Entry of a call that needs an initialized driver; it waits while the process is locked.
template <class F>
CUresult enter(CallCounter& calls, F&& body) noexcept {
  if (g_count_calls.load(std::memory_order_relaxed)) calls.hit();
  GateStripe& stripe = gate_stripe();
  for (;;) {
    Phase p = g_phase.load(std::memory_order_acquire);
    if (p != Phase::ready) [[unlikely]]
      return phase_error(p);
    stripe.inside.fetch_add(1, std::memory_order_seq_cst);
    if (!g_gate_closed.load(std::memory_order_seq_cst)) [[likely]]
      break;
    stripe.inside.fetch_sub(1, std::memory_order_seq_cst);
    gate_wait();
  }
  CUresult rc = guarded(body);
  stripe.inside.fetch_sub(1, std::memory_order_release);
  return rc;
}

/// Entry of a call that also works before cuInit (cuInit itself, cuDriverGetVersion,
/// cuGetProcAddress): refused only in a forked child or while the process exits.
template <class F>
CUresult enter_early(CallCounter& calls, F&& body) noexcept {
  if (g_count_calls.load(std::memory_order_relaxed)) calls.hit();
  Phase p = g_phase.load(std::memory_order_acquire);
  if (p == Phase::forked || p == Phase::deinitialized) [[unlikely]]
    return phase_error(p);
  return guarded(body);
}

/// Entry of a pure function (cuGetErrorName, cuGetErrorString): never refused.
template <class F>
CUresult enter_pure(CallCounter& calls, F&& body) noexcept {
  if (g_count_calls.load(std::memory_order_relaxed)) calls.hit();
  return guarded(body);
}

}  // namespace simgpu
