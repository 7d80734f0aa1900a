// interpose/dlsym_entry.h — our dlsym: an assembly entry (dlsym_entry.S) that asks a C++ filter
// whether to answer with a hook, and otherwise tail-jumps to glibc's dlsym so that glibc sees the
// original caller's return address.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was. The filter runs inside every dlsym call of the process, including the
// sanitizer runtimes' and malloc replacements' own early lookups: it never logs, never allocates
// (except, once, the driver attach below), is not instrumented by sanitizers, and is guarded
// against recursion.
//
// Why the tail jump: glibc's dlsym uses its caller's return address to resolve RTLD_NEXT ("the next
// object after the caller") and to scope RTLD_DEFAULT. A wrapper that called glibc's dlsym itself
// would make every RTLD_NEXT lookup in the process relative to libcoloc.so.
//
// The filter returns our hook only for a name we hook, looked up
//   - in libcuda's handle, or with RTLD_NEXT while libcuda is loaded (the paths around LD_PRELOAD:
//     cudart's dlopen("libcuda.so.1") + dlsym(handle, "cuGetProcAddress_v2"));
//   - by a caller outside libcuda: libcuda's lookups in its own handle get libcuda's answer (a
//     driver's cuGetProcAddress may be built on dlsym; redirecting it back into our hooks recursed
//     forever in a peer project).
// RTLD_DEFAULT lookups pass through: the global scope already finds our exports first.
#pragma once

#include <atomic>

extern "C" {
/// glibc's dlsym, once resolved (dlsym_entry.S jumps through it).
extern std::atomic<void*> coloc_real_dlsym;
/// Our hook for (handle, name) as called from `caller` (a return address), or null to pass through.
void* coloc_dlsym_filter(void* handle, const char* name, void* caller);
}

namespace coloc::interpose {

/// Resolves glibc's dlsym with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), falling back to the
/// architecture's base version, and stores it in coloc_real_dlsym. Allocation-free. Idempotent.
void* resolve_real_dlsym();

/// glibc's dlsym(h, name), for explicit handles (not RTLD_NEXT / RTLD_DEFAULT, whose answer would
/// be relative to libcoloc.so).
inline void* real_dlsym(void* h, const char* name) {
  using Dlsym = void* (*)(void*, const char*);
  void* f = coloc_real_dlsym.load(std::memory_order_acquire);
  if (!f) f = resolve_real_dlsym();
  return f ? reinterpret_cast<Dlsym>(f)(h, name) : nullptr;
}

}  // namespace coloc::interpose
