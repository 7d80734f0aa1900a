// interpose/driver.h — the real driver: loading libcuda.so.1 and calling its entry points.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// libcuda.so.1 is opened with dlopen(RTLD_NOW | RTLD_GLOBAL) on first need (the first hook that
// must call it, from any thread, before or after our constructor), and every entry point of
// hooks.def is resolved on that handle with the real dlsym. Loading takes no lock of ours: racing
// threads do the same idempotent work and store the same values, so a thread that holds the
// loader's lock (a library constructor calling cuInit) can never deadlock against one of ours.
#pragma once

#include "hook_table.h"

namespace coloc::interpose::driver {

/// Loads the driver if needed. True when it is usable. False when libcuda.so.1 cannot be loaded,
/// or when called again on a thread that is loading it (libcuda's constructor calling a hook).
bool ensure();

/// True once the driver is loaded (one acquire load).
bool ready();

/// True when libcuda.so.1 could not be loaded.
bool missing();

/// For the dlsym filter: when the process has already loaded libcuda.so.1, attaches to it without
/// loading anything and returns true. Does not read options or log.
bool attach_if_loaded();

/// libcuda's handle, as dlopen returns it (the same handle for every dlopen of it), or null.
void* handle();

/// True when `addr` lies inside libcuda's mapped segments.
bool contains(const void* addr);

/// What a hook returns when it cannot reach the real entry point `id`:
/// CUDA_ERROR_STUB_LIBRARY when libcuda.so.1 cannot be loaded (what the toolkit's stub driver
/// returns, i.e. what a program sees on a machine without a driver); CUDA_ERROR_NOT_INITIALIZED
/// while the driver is being loaded on this thread; CUDA_ERROR_NOT_SUPPORTED (logged once) when the
/// driver does not export `id`.
CUresult unavailable(Fn id);

}  // namespace coloc::interpose::driver

namespace coloc::interpose {

/// Calls the real driver entry point `id` with `a...`, loading the driver on first need.
template <Fn id, class... A>
inline CUresult call(A... a) {
  auto fn = real<id>();
  if (!fn) [[unlikely]] {
    if (!driver::ensure() || !(fn = real<id>())) return driver::unavailable(id);
  }
  return fn(a...);
}

}  // namespace coloc::interpose
