// interpose/dlsym_filter.cpp — the decision behind our dlsym (see dlsym_entry.h).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was. This file in particular runs inside every dlsym of the process, even
// before any constructor: no logging, no allocation, no options, no sanitizer instrumentation
// (interpose/module.mk builds it with -fno-sanitize=all), and nothing that could call dlsym.
#include "dlsym_entry.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include "driver.h"
#include "glibc_compat.h"
#include "hook_table.h"

extern "C" {
constinit std::atomic<void*> coloc_real_dlsym{nullptr};
// Linker-provided bounds of libcoloc.so's own image.
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));
}

namespace coloc::interpose {

namespace {

__thread bool tl_in_filter __attribute__((tls_model("initial-exec"))) = false;

bool glibc_at_least_2_34() {
  const char* v = gnu_get_libc_version();  // a static string such as "2.36"
  int major = 0, minor = 0;
  while (*v >= '0' && *v <= '9') major = major * 10 + (*v++ - '0');
  if (*v == '.') ++v;
  while (*v >= '0' && *v <= '9') minor = minor * 10 + (*v++ - '0');
  return major > 2 || (major == 2 && minor >= 34);
}

bool inside_us(const void* p) { return p >= __ehdr_start && p < _end; }

void* decide(void* handle, int hook, void* caller) {
  // No libcuda in the process: nothing to redirect, whatever glibc answers stays the answer.
  if (!driver::ready() && !driver::attach_if_loaded()) return nullptr;
  if (driver::contains(caller) || inside_us(caller)) return nullptr;
  if (handle == RTLD_NEXT || handle == driver::handle()) return g_hook_addr[hook];
  return nullptr;
}

}  // namespace

void* resolve_real_dlsym() {
  void* f = coloc_real_dlsym.load(std::memory_order_acquire);
  if (f) return f;
  // Ask only for a version this glibc has: a failed dlvsym would allocate its error message.
  if (glibc_at_least_2_34()) f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!f) f = dlvsym(RTLD_NEXT, "dlsym", COLOC_GLIBC_BASE_VERSION);
  if (f) coloc_real_dlsym.store(f, std::memory_order_release);
  return f;
}

}  // namespace coloc::interpose

extern "C" void* coloc_dlsym_filter(void* handle, const char* name, void* caller) {
  using namespace coloc::interpose;
  if (!coloc_real_dlsym.load(std::memory_order_relaxed)) resolve_real_dlsym();
  if (!name || name[0] != 'c' || name[1] != 'u' || handle == RTLD_DEFAULT) return nullptr;
  int hook = find_hook(name);
  if (hook < 0 || tl_in_filter) return nullptr;
  tl_in_filter = true;
  void* answer = decide(handle, hook, caller);
  tl_in_filter = false;
  return answer;
}
