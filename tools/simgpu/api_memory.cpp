// Driver API: cuMemAlloc and friends, memory information, arrays.
#include <algorithm>
#include <bit>

#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// Places `bytes` (> 0) of device memory of `ctx`'s device, charging `charge` bytes.
CUresult allocate(Context* ctx, uint64_t bytes, uint64_t charge, CUdeviceptr* dptr) {
  Driver& drv = Driver::get();
  DeviceState& dev = ctx->device;
  if (bytes == 0 || charge == 0 || charge > dev.spec.bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!drv.shared->charge(dev.physical, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.size = bytes;
  a.charged = charge;
  a.context = ctx->id;
  auto p = dev.memory.allocate(a);
  if (!p) {
    drv.shared->uncharge(dev.physical, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = CUdeviceptr(*p);
  return CUDA_SUCCESS;
}

// Bytes of one element of an array format; 0 for formats simgpu does not size.
uint64_t format_bytes(unsigned f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

// Bytes of a width × height × depth array (a 0 height or depth counts as 1); 0 on overflow.
// CUDA_ERROR_INVALID_VALUE for a zero width, an unknown format or a channel count not 1, 2 or 4.
CUresult array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned format, unsigned channels, uint64_t* out) {
  const uint64_t element = format_bytes(format);
  if (w == 0 || element == 0 || (channels != 1 && channels != 2 && channels != 4)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t b = element * channels;
  if (__builtin_mul_overflow(b, w, &b) || __builtin_mul_overflow(b, std::max<uint64_t>(h, 1), &b) ||
      __builtin_mul_overflow(b, std::max<uint64_t>(d, 1), &b))
    b = 0;
  *out = b;
  return CUDA_SUCCESS;
}

// Charges an array of `bytes` (rounded to 512) on the current context's device.
CUresult create_array(uint64_t bytes, bool mipmapped, void** handle) {
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t charge = round_up(bytes, kAllocGranule);
  DeviceState& dev = ctx->device;
  if (charge == 0 || charge > dev.spec.bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& drv = Driver::get();
  if (!drv.shared->charge(dev.physical, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  ArrayObject* a = g_arrays.create(&dev, ctx->id, charge, mipmapped);
  if (!a) {
    drv.shared->uncharge(dev.physical, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = a;
  return CUDA_SUCCESS;
}

CUresult destroy_array(const void* handle, bool mipmapped) {
  ArrayObject* a = g_arrays.get(handle);
  if (!a || a->mipmapped != mipmapped) return CUDA_ERROR_INVALID_HANDLE;
  Driver::get().shared->uncharge(a->device->physical, a->bytes);
  g_arrays.destroy(a);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    const uint64_t bytes = round_up(bytesize, kAllocGranule);
    return allocate(ctx, bytes, bytes, dptr);
  });
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    const uint64_t pitch = round_up(WidthInBytes, kAllocGranule);
    uint64_t bytes;
    if (pitch == 0 || __builtin_mul_overflow(pitch, uint64_t(Height), &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = allocate(ctx, bytes, bytes, dptr);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
  });
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    Allocation a;
    a.size = round_up(bytesize, kAllocGranule);
    a.context = ctx->id;
    a.kind = AllocKind::managed;
    auto p = a.size ? Driver::get().managed->allocate(a) : std::nullopt;
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = CUdeviceptr(*p);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
    if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
    return Driver::get().free_device_memory(uintptr_t(dptr));
  });
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    MemInfo m = Driver::get().shared->meminfo(ctx->device.physical);
    *total = m.capacity;
    *free = m.capacity - std::min(m.used, m.capacity);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pHandle || !pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY_DESCRIPTOR& d = *pAllocateArray;
    uint64_t bytes;
    if (CUresult rc = array_bytes(d.Width, d.Height, 1, raw(d.Format), d.NumChannels, &bytes); rc != CUDA_SUCCESS) return rc;
    void* h;
    CUresult rc = create_array(bytes, false, &h);
    if (rc == CUDA_SUCCESS) *pHandle = static_cast<CUarray>(h);
    return rc;
  });
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pHandle || !pAllocateArray) return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR& d = *pAllocateArray;
    uint64_t bytes;
    if (CUresult rc = array_bytes(d.Width, d.Height, d.Depth, raw(d.Format), d.NumChannels, &bytes); rc != CUDA_SUCCESS)
      return rc;
    void* h;
    CUresult rc = create_array(bytes, false, &h);
    if (rc == CUDA_SUCCESS) *pHandle = static_cast<CUarray>(h);
    return rc;
  });
}

CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return destroy_array(hArray, false); });
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                        unsigned int numMipmapLevels) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR& d = *pMipmappedArrayDesc;
    // Level l has each extent halved l times (at least 1); there are at most log2(largest)+1.
    const uint64_t largest = std::max({uint64_t(d.Width), uint64_t(d.Height), uint64_t(d.Depth)});
    if (largest == 0 || numMipmapLevels > unsigned(std::bit_width(largest))) return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = 0;
    for (unsigned l = 0; l < numMipmapLevels; ++l) {
      auto level = [&](uint64_t extent) { return extent == 0 ? 0 : std::max<uint64_t>(extent >> l, 1); };
      uint64_t bytes;
      if (CUresult rc = array_bytes(level(d.Width), level(d.Height), level(d.Depth), raw(d.Format), d.NumChannels, &bytes);
          rc != CUDA_SUCCESS)
        return rc;
      if (bytes == 0 || __builtin_add_overflow(total, bytes, &total)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void* h;
    CUresult rc = create_array(total, true, &h);
    if (rc == CUDA_SUCCESS) *pHandle = static_cast<CUmipmappedArray>(h);
    return rc;
  });
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return destroy_array(hMipmappedArray, true); });
}

}  // extern "C"
