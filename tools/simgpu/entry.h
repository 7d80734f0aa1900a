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
  return p == Phase::deinitialized ? CUDA_ERROR_DEINITIALIZED : CUDA_ERROR_NOT_INITIALIZED;
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

/// Entry of a call that needs an initialized driver.
template <class F>
CUresult enter(CallCounter& calls, F&& body) noexcept {
  if (g_count_calls.load(std::memory_order_relaxed)) calls.hit();
  Phase p = g_phase.load(std::memory_order_acquire);
  if (p != Phase::ready) [[unlikely]]
    return phase_error(p);
  return guarded(body);
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
