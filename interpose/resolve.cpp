// interpose/resolve.cpp — the handlers of the resolve policy (hooks.def): cuGetProcAddress and
// cuGetProcAddress_v2 answer with our hooks wherever the driver's answer is an entry point we hook.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The real resolver runs first, with the caller's cudaVersion and flags, so the ABI (_v2, _v3) and
// the default-stream variant (_ptsz) are exactly what the driver chose. Its answer is then mapped
// back to our hook by identity (the driver's exported function -> the hook of the same name). A
// driver may answer with an internal entry point instead of its export; then the answer is mapped
// by name, version and flags with the rule of include/coloc/cuda_abi.h (from cudaTypedefs.h), and
// that is logged once. Anything we do not hook is returned untouched. cuGetProcAddress* itself is
// hooked, so a caller that resolves the resolver gets ours.
#include "coloc/cuda_abi.h"
#include "driver.h"
#include "handlers.h"
#include "log.h"

namespace coloc::interpose {

namespace {

constinit std::atomic<bool> g_logged_fallback{false};

void* to_hook(const char* symbol, void* p, int cuda_version, cuuint64_t flags) {
  for (unsigned i = 0; i < kHookCount; ++i)
    if (g_real[i].load(std::memory_order_acquire) == p || g_hook_addr[i] == p) return g_hook_addr[i];
  const AbiRow* row = nullptr;
  bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (abi_resolve(symbol, cuda_version, per_thread, &row) != AbiLookup::found) return p;
  int hook = find_hook(row->symbol);
  if (hook < 0 || !g_real[hook].load(std::memory_order_acquire)) return p;
  if (!g_logged_fallback.exchange(true, std::memory_order_relaxed))
    logf(LogLevel::info,
         "cuGetProcAddress(\"%s\", %d, %llu) gave an entry point that is not the driver's export; "
         "using the hook of %s (cudaTypedefs.h rule; logged once)",
         symbol, cuda_version, (unsigned long long)flags, row->symbol);
  return g_hook_addr[hook];
}

}  // namespace

namespace resolve {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  CUresult r = call<Fn::cuGetProcAddress>(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = to_hook(symbol, *pfn, cudaVersion, flags);
  return r;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  CUresult r = call<Fn::cuGetProcAddress_v2>(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = to_hook(symbol, *pfn, cudaVersion, flags);
  return r;
}

}  // namespace resolve

}  // namespace coloc::interpose
