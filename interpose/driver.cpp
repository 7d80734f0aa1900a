// interpose/driver.cpp — see driver.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "driver.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "dlsym_entry.h"
#include "glibc_compat.h"
#include "log.h"
#include "runtime.h"

namespace coloc::interpose {

constinit std::atomic<void*> g_real[kFnCount] = {};

namespace driver {

namespace {

enum State : int { unloaded = 0, loaded = 1, absent = 2 };
constinit std::atomic<int> g_state{unloaded};
constinit std::atomic<void*> g_handle{nullptr};
constinit std::atomic<uintptr_t> g_lo{0}, g_hi{0};
constinit std::atomic<bool> g_warned_missing[kFnCount] = {};
__thread bool tl_loading __attribute__((tls_model("initial-exec"))) = false;

struct RangeQuery {
  const link_map* lm;
  uintptr_t lo, hi;
};

int find_range(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<RangeQuery*>(data);
  if (info->dlpi_addr != q->lm->l_addr || !info->dlpi_name || !q->lm->l_name ||
      std::strcmp(info->dlpi_name, q->lm->l_name) != 0)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + ph.p_vaddr, b = a + ph.p_memsz;
    if (q->lo == 0 || a < q->lo) q->lo = a;
    if (b > q->hi) q->hi = b;
  }
  return 1;
}

// Resolves every entry point on `h` and publishes the driver as loaded. Idempotent; allocation-free
// apart from what glibc does for a symbol it cannot find (then the error is consumed).
void attach(void* h) {
  bool any_missing = false;
  for (unsigned i = 0; i < kFnCount; ++i) {
    void* p = real_dlsym(h, kFnName[i]);
    if (!p) any_missing = true;
    g_real[i].store(p, std::memory_order_relaxed);
  }
  if (any_missing) dlerror();  // consume our own lookup errors: the host's dlerror() stays its own
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
    RangeQuery q{lm, 0, 0};
    dl_iterate_phdr(find_range, &q);
    g_lo.store(q.lo, std::memory_order_relaxed);
    g_hi.store(q.hi, std::memory_order_relaxed);
  }
  g_handle.store(h, std::memory_order_relaxed);
  g_state.store(loaded, std::memory_order_release);
}

}  // namespace

bool ready() { return g_state.load(std::memory_order_acquire) == loaded; }
bool missing() { return g_state.load(std::memory_order_acquire) == absent; }
void* handle() { return g_handle.load(std::memory_order_acquire); }

bool contains(const void* addr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  return a >= g_lo.load(std::memory_order_relaxed) && a < g_hi.load(std::memory_order_relaxed);
}

bool ensure() {
  int s = g_state.load(std::memory_order_acquire);
  if (s == loaded) return true;
  if (s == absent || tl_loading) return false;
  tl_loading = true;
  runtime::ensure("first driver call");
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h) {
    attach(h);
    logf(LogLevel::debug, "libcuda.so.1 loaded");
  } else {
    const char* why = dlerror();  // consumes the error we caused
    int expected = unloaded;
    if (g_state.compare_exchange_strong(expected, absent, std::memory_order_acq_rel))
      logf(LogLevel::warn, "cannot load libcuda.so.1 (%s): CUDA calls return CUDA_ERROR_STUB_LIBRARY",
           why ? why : "unknown error");
  }
  tl_loading = false;
  return ready();
}

bool attach_if_loaded() {
  if (ready()) return true;
  if (tl_loading) return false;
  tl_loading = true;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h) attach(h);
  else dlerror();  // not loaded: consume the error
  tl_loading = false;
  return h != nullptr;
}

CUresult unavailable(Fn id) {
  if (missing()) return CUDA_ERROR_STUB_LIBRARY;
  if (!ready()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!g_warned_missing[index(id)].exchange(true, std::memory_order_relaxed))
    logf(LogLevel::warn, "the driver does not export %s: returning CUDA_ERROR_NOT_SUPPORTED", kFnName[index(id)]);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace driver
}  // namespace coloc::interpose
