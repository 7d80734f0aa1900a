// A null CUDA driver for interpose_bench (built as build/bench/nulldriver/libcuda.so.1): every entry
// point the benchmark uses succeeds at once, so timing a program against it with and without
// libcoloc.so preloaded isolates what the hooks themselves cost, free of a simulated driver's own
// cost and noise. Never used for anything but timing.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NULL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
int g_ctx_storage, g_mod_storage, g_fn_storage;
CUcontext g_ctx = reinterpret_cast<CUcontext>(&g_ctx_storage);
std::atomic<unsigned long long> g_next{0x100000};
}  // namespace

NULL_EXPORT CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
NULL_EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice) {
  std::memset(u->bytes, 0x42, sizeof u->bytes);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = 80ull << 30;
  return CUDA_SUCCESS;
}
// Exported (so the interposer does not log its absence) but unable to say: physical free memory
// unknown, which colocd accepts.
NULL_EXPORT CUresult cuMemGetInfo_v2(size_t*, size_t*) { return CUDA_ERROR_NOT_SUPPORTED; }
NULL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = g_ctx;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuCtxGetCurrent(CUcontext* c) {
  *c = g_ctx;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuCtxGetDevice(CUdevice* d) {
  *d = 0;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuModuleLoadData(CUmodule* m, const void*) {
  *m = reinterpret_cast<CUmodule>(&g_mod_storage);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char*) {
  *f = reinterpret_cast<CUfunction>(&g_fn_storage);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**) {
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t) {
  *p = g_next.fetch_add(4096, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuMemFree_v2(CUdeviceptr) { return CUDA_SUCCESS; }
// Stream-ordered allocation from one pool that never holds a reserve.
int g_pool_storage;
NULL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t, CUstream) {
  *p = g_next.fetch_add(4096, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr, CUstream) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice) {
  *pool = reinterpret_cast<CUmemoryPool>(&g_pool_storage);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, void* value) {
  *static_cast<cuuint64_t*>(value) = 0;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp*,
                                                   CUmemAllocationGranularity_flags) {
  *g = 2 << 20;
  return CUDA_SUCCESS;
}

// What the completion tracker of libcoloc.so calls while its gate is kWindow (the holder of a
// timeslice, interpose/tracker.h): a mark is an event recorded after a launch and waited for on the
// tracker's thread. Here every event is complete at once (a device that keeps up with its queue),
// so a launch never waits for the in-flight window. Marks recorded are counted and written at exit
// to $NULLDRIVER_CALLS ({"cuEventRecord": N}) when it is set.
namespace {
int g_event_storage;
std::atomic<unsigned long long> g_records{0};
struct WriteCounts {
  ~WriteCounts() {
    const char* path = std::getenv("NULLDRIVER_CALLS");
    if (!path) return;
    if (FILE* f = std::fopen(path, "w")) {
      std::fprintf(f, "{\"cuEventRecord\": %llu}\n", g_records.load());
      std::fclose(f);
    }
  }
} g_write_counts;
}  // namespace
NULL_EXPORT CUresult cuEventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(&g_event_storage);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuEventRecord(CUevent, CUstream) {
  g_records.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuEventDestroy_v2(CUevent) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* s) {
  *s = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream, CUstreamCaptureStatus* s) {
  *s = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuStreamGetCtx(CUstream, CUcontext* c) {
  *c = g_ctx;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  *mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return CUDA_SUCCESS;
}
NULL_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext) { return CUDA_SUCCESS; }
NULL_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* c) {
  if (c) *c = g_ctx;
  return CUDA_SUCCESS;
}
