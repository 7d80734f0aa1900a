// Driver API: copies and memsets, synchronous (_v2, _v2_ptds) and stream-ordered (Async).
//
// A synchronous call first waits for the work already queued in the current context (the legacy
// default stream waits for every blocking stream, and simgpu's streams share one queue), then
// copies on the calling thread. Device ranges must lie inside live allocations:
// CUDA_ERROR_INVALID_VALUE otherwise, which catches a use after free.
#include <cstring>

#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

struct Copy {
  uintptr_t dst, src;
  size_t bytes;
  bool dst_device, src_device;
};

CUresult check(const Copy& c) {
  Driver& drv = Driver::get();
  if (!c.dst || !c.src) return CUDA_ERROR_INVALID_VALUE;
  if (c.dst_device && !drv.device_range_addressable(c.dst, c.bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (c.src_device && !drv.device_range_addressable(c.src, c.bytes)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult copy_sync(const Copy& c) {
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (c.bytes == 0) return CUDA_SUCCESS;
  if (CUresult rc = check(c); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = ctx->synchronize(); rc != CUDA_SUCCESS) return rc;
  std::memmove(reinterpret_cast<void*>(c.dst), reinterpret_cast<const void*>(c.src), c.bytes);
  return CUDA_SUCCESS;
}

CUresult copy_async(const Copy& c, CUstream hStream, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(hStream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (c.bytes == 0) return CUDA_SUCCESS;
  if (CUresult rc = check(c); rc != CUDA_SUCCESS) return rc;
  return s->ctx->submit(*s, CopyWork{c.dst, c.src, c.bytes, c.dst_device, c.src_device});
}

CUresult check_memset(uintptr_t dst, unsigned element, size_t count) {
  if (dst % element) return CUDA_ERROR_INVALID_VALUE;
  if (count > SIZE_MAX / element || !Driver::get().device_range_addressable(dst, count * element)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult memset_sync(CUdeviceptr dst, uint32_t value, unsigned element, size_t count) {
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (count == 0) return CUDA_SUCCESS;
  if (CUresult rc = check_memset(uintptr_t(dst), element, count); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = ctx->synchronize(); rc != CUDA_SUCCESS) return rc;
  fill_memory(uintptr_t(dst), value, element, count);
  return CUDA_SUCCESS;
}

CUresult memset_async(CUdeviceptr dst, uint32_t value, unsigned element, size_t count, CUstream hStream,
                      bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(hStream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (count == 0) return CUDA_SUCCESS;
  if (CUresult rc = check_memset(uintptr_t(dst), element, count); rc != CUDA_SUCCESS) return rc;
  return s->ctx->submit(*s, MemsetWork{uintptr_t(dst), value, uint8_t(element), count});
}

Copy htod(CUdeviceptr dst, const void* src, size_t n) { return {uintptr_t(dst), reinterpret_cast<uintptr_t>(src), n, true, false}; }
Copy dtoh(void* dst, CUdeviceptr src, size_t n) { return {reinterpret_cast<uintptr_t>(dst), uintptr_t(src), n, false, true}; }
Copy dtod(CUdeviceptr dst, CUdeviceptr src, size_t n) { return {uintptr_t(dst), uintptr_t(src), n, true, true}; }

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(htod(dstDevice, srcHost, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(htod(dstDevice, srcHost, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(dtoh(dstHost, srcDevice, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(dtoh(dstHost, srcDevice, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(dtod(dstDevice, srcDevice, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_sync(dtod(dstDevice, srcDevice, ByteCount)); });
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(htod(dstDevice, srcHost, ByteCount), hStream, false); });
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                           CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(htod(dstDevice, srcHost, ByteCount), hStream, true); });
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(dtoh(dstHost, srcDevice, ByteCount), hStream, false); });
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(dtoh(dstHost, srcDevice, ByteCount), hStream, true); });
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(dtod(dstDevice, srcDevice, ByteCount), hStream, false); });
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_async(dtod(dstDevice, srcDevice, ByteCount), hStream, true); });
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_sync(dstDevice, uc, 1, N); });
}

CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_sync(dstDevice, uc, 1, N); });
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_sync(dstDevice, ui, 4, N); });
}

CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_sync(dstDevice, ui, 4, N); });
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_async(dstDevice, uc, 1, N, hStream, false); });
}

CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_async(dstDevice, uc, 1, N, hStream, true); });
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_async(dstDevice, ui, 4, N, hStream, false); });
}

CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_async(dstDevice, ui, 4, N, hStream, true); });
}

}  // extern "C"
