// Driver API: the stream-ordered copies and memsets beyond api_copy.cpp's — cuMemcpyAsync (unified
// addressing), cuMemcpyPeerAsync, cuMemcpy2DAsync_v2, cuMemcpy3DAsync_v2, cuMemcpy3DPeerAsync,
// cuMemsetD16Async and cuMemsetD2D8/16/32Async, each with _ptsz (batches: api_copy_batch.cpp).
//
// Host and device memory simgpu knows are really copied, when the stream reaches the copy (device
// ranges are checked at submission and again when it runs, like every copy). CUDA arrays as
// operands are CUDA_ERROR_NOT_SUPPORTED. The 32-bit first ABIs (cuMemcpy2DAsync, cuMemcpy3DAsync,
// cuMemcpyDtoDAsync) stay unimplemented.
#include "copy_async.h"

#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace simgpu {

bool device_space(uintptr_t p) {
  Driver& drv = Driver::get();
  for (const auto& dev : drv.devices)
    if (dev->memory.contains(p)) return true;
  return drv.managed->contains(p) || drv.vmm->contains(p);
}

CUresult classify_pointer(uintptr_t p, size_t span, bool* device) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *device = device_space(p);
  if (*device && span && !Driver::get().device_range_addressable(p, span)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult submit_copy(Stream& s, CopyWork w) {
  const size_t dst_span = strided_span(w.bytes, w.height, w.depth, w.dst_pitch, w.dst_layer);
  const size_t src_span = strided_span(w.bytes, w.height, w.depth, w.src_pitch, w.src_layer);
  if (dst_span == 0) return CUDA_SUCCESS;
  Driver& drv = Driver::get();
  if (!w.dst || !w.src) return CUDA_ERROR_INVALID_VALUE;
  if (w.dst_device && !drv.device_range_addressable(w.dst, dst_span)) return CUDA_ERROR_INVALID_VALUE;
  if (w.src_device && !drv.device_range_addressable(w.src, src_span)) return CUDA_ERROR_INVALID_VALUE;
  return s.ctx->submit(s, std::move(w));
}

}  // namespace simgpu

namespace {

// A context argument of a peer copy: live, else CUDA_ERROR_INVALID_CONTEXT.
bool live_context(CUcontext c) { return g_contexts.get(c) != nullptr; }

// One operand of a 2D/3D copy, as CUDA_MEMCPY2D / 3D / 3D_PEER describe it.
struct Operand {
  unsigned type;  // CUmemorytype
  const void* host;
  CUdeviceptr device;
  size_t x, y, z, pitch, height;
};

// The address of the operand's first byte and whether it is device memory.
CUresult locate(const Operand& o, size_t width, size_t rows, size_t depth, uintptr_t* p, bool* device) {
  uintptr_t base;
  switch (o.type) {
    case CU_MEMORYTYPE_HOST: base = reinterpret_cast<uintptr_t>(o.host); *device = false; break;
    case CU_MEMORYTYPE_DEVICE: base = uintptr_t(o.device); *device = true; break;
    case CU_MEMORYTYPE_UNIFIED: base = uintptr_t(o.device); *device = device_space(base); break;
    case CU_MEMORYTYPE_ARRAY: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (!base) return CUDA_ERROR_INVALID_VALUE;
  if ((rows > 1 || depth > 1) && o.pitch < width + o.x) return CUDA_ERROR_INVALID_VALUE;
  if (depth > 1 && o.height < rows + o.y) return CUDA_ERROR_INVALID_VALUE;
  *p = base + o.z * o.pitch * o.height + o.y * o.pitch + o.x;
  return CUDA_SUCCESS;
}

CUresult copy_strided(const Operand& src, const Operand& dst, size_t width, size_t height, size_t depth,
                      CUstream h, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  CopyWork w;
  if (CUresult rc = locate(src, width, height, depth, &w.src, &w.src_device); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = locate(dst, width, height, depth, &w.dst, &w.dst_device); rc != CUDA_SUCCESS) return rc;
  w.bytes = width;
  w.height = height;
  w.depth = depth;
  w.src_pitch = src.pitch;
  w.dst_pitch = dst.pitch;
  w.src_layer = src.pitch * src.height;
  w.dst_layer = dst.pitch * dst.height;
  return submit_copy(*s, std::move(w));
}

CUresult copy_2d(const CUDA_MEMCPY2D* c, CUstream h, bool per_thread) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  Operand src{unsigned(raw(c->srcMemoryType)), c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0};
  Operand dst{unsigned(raw(c->dstMemoryType)), c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0};
  return copy_strided(src, dst, c->WidthInBytes, c->Height, 1, h, per_thread);
}

CUresult copy_3d(const CUDA_MEMCPY3D* c, CUstream h, bool per_thread) {
  if (!c || c->reserved0 || c->reserved1 || c->srcLOD || c->dstLOD) return CUDA_ERROR_INVALID_VALUE;
  Operand src{unsigned(raw(c->srcMemoryType)), c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
              c->srcHeight};
  Operand dst{unsigned(raw(c->dstMemoryType)), c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
              c->dstHeight};
  return copy_strided(src, dst, c->WidthInBytes, c->Height, c->Depth, h, per_thread);
}

CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER* c, CUstream h, bool per_thread) {
  if (!c || c->srcLOD || c->dstLOD) return CUDA_ERROR_INVALID_VALUE;
  if ((raw(c->srcMemoryType) != CU_MEMORYTYPE_ARRAY && !live_context(c->srcContext)) ||
      (raw(c->dstMemoryType) != CU_MEMORYTYPE_ARRAY && !live_context(c->dstContext)))
    return CUDA_ERROR_INVALID_CONTEXT;
  Operand src{unsigned(raw(c->srcMemoryType)), c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
              c->srcHeight};
  Operand dst{unsigned(raw(c->dstMemoryType)), c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
              c->dstHeight};
  return copy_strided(src, dst, c->WidthInBytes, c->Height, c->Depth, h, per_thread);
}

CUresult copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (n == 0) return CUDA_SUCCESS;
  CopyWork w;
  w.dst = uintptr_t(dst);
  w.src = uintptr_t(src);
  w.bytes = n;
  if (CUresult rc = classify_pointer(w.dst, n, &w.dst_device); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = classify_pointer(w.src, n, &w.src_device); rc != CUDA_SUCCESS) return rc;
  return submit_copy(*s, std::move(w));
}

CUresult copy_peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream h,
                   bool per_thread) {
  if (!live_context(dst_ctx) || !live_context(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (n == 0) return CUDA_SUCCESS;
  CopyWork w;
  w.dst = uintptr_t(dst);
  w.src = uintptr_t(src);
  w.bytes = n;
  w.dst_device = w.src_device = true;
  return submit_copy(*s, std::move(w));
}

// cuMemsetD16Async (height 1) and cuMemsetD2D8/16/32Async: `width` elements in each of `height`
// rows `pitch` bytes apart; the address (and, for 2D, the pitch) aligned to the element.
CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned element, size_t width, size_t height,
                   CUstream h, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (uintptr_t(dst) % element || (height > 1 && (pitch % element || pitch < width * element)))
    return CUDA_ERROR_INVALID_VALUE;
  if (width > SIZE_MAX / element) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && (height - 1) > (SIZE_MAX - width * element) / pitch) return CUDA_ERROR_INVALID_VALUE;
  const size_t span = strided_span(width * element, height, 1, pitch, 0);
  if (!Driver::get().device_range_addressable(uintptr_t(dst), span)) return CUDA_ERROR_INVALID_VALUE;
  return s->ctx->submit(*s, MemsetWork{uintptr_t(dst), value, uint8_t(element), width, height, pitch});
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_unified(dst, src, ByteCount, hStream, false); });
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_unified(dst, src, ByteCount, hStream, true); });
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, false); });
}

CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                        CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, true); });
}

CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_2d(pCopy, hStream, false); });
}

CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_2d(pCopy, hStream, true); });
}

CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_3d(pCopy, hStream, false); });
}

CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_3d(pCopy, hStream, true); });
}

CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_3d_peer(pCopy, hStream, false); });
}

CUresult CUDAAPI cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return copy_3d_peer(pCopy, hStream, true); });
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_2d(dstDevice, 0, us, 2, N, 1, hStream, false); });
}

CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return memset_2d(dstDevice, 0, us, 2, N, 1, hStream, true); });
}

#define SIMGPU_MEMSET_2D(name, type, element, per_thread)                                                    \
  CUresult CUDAAPI name(CUdeviceptr dstDevice, size_t dstPitch, type v, size_t Width, size_t Height,         \
                        CUstream hStream) {                                                                  \
    static constinit CallCounter calls{__func__};                                                            \
    return enter(calls, [&] { return memset_2d(dstDevice, dstPitch, v, element, Width, Height, hStream, per_thread); }); \
  }
SIMGPU_MEMSET_2D(cuMemsetD2D8Async, unsigned char, 1, false)
SIMGPU_MEMSET_2D(cuMemsetD2D8Async_ptsz, unsigned char, 1, true)
SIMGPU_MEMSET_2D(cuMemsetD2D16Async, unsigned short, 2, false)
SIMGPU_MEMSET_2D(cuMemsetD2D16Async_ptsz, unsigned short, 2, true)
SIMGPU_MEMSET_2D(cuMemsetD2D32Async, unsigned int, 4, false)
SIMGPU_MEMSET_2D(cuMemsetD2D32Async_ptsz, unsigned int, 4, true)
#undef SIMGPU_MEMSET_2D

}  // extern "C"
