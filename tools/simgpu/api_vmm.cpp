// Driver API: virtual memory management (cuMemCreate, cuMemMap, ...).
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// Where a CUmemAllocationProp puts its memory: *device is the device, or null for host memory.
CUresult check_prop(const CUmemAllocationProp* prop, DeviceState** device) {
  if (!prop || raw(prop->type) != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  switch (raw(prop->location.type)) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      *device = Driver::get().device(prop->location.id);
      return *device ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      *device = nullptr;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

PhysicalMemory* physical(CUmemGenericAllocationHandle h) {
  return g_physical_memory.get(reinterpret_cast<const void*>(uintptr_t(h)));
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!granularity) return CUDA_ERROR_INVALID_VALUE;
    if (raw(option) != CU_MEM_ALLOC_GRANULARITY_MINIMUM && raw(option) != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
      return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d;
    if (CUresult rc = check_prop(prop, &d); rc != CUDA_SUCCESS) return rc;
    *granularity = kLargePage;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!handle || flags != 0 || size == 0 || size % kLargePage) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d;
    if (CUresult rc = check_prop(prop, &d); rc != CUDA_SUCCESS) return rc;
    Driver& drv = Driver::get();
    if (d && (size > d->spec.bytes || !drv.shared->charge(d->physical, size))) return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
    PhysicalMemory* h = nullptr;
    if (fd >= 0 && ftruncate(fd, off_t(size)) == 0) h = g_physical_memory.create(d, size, fd);
    if (!h) {
      if (fd >= 0) ::close(fd);
      if (d) drv.shared->uncharge(d->physical, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = CUmemGenericAllocationHandle(reinterpret_cast<uintptr_t>(h));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    PhysicalMemory* h = physical(handle);
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    return Driver::get().vmm->release(h);
  });
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    (void)addr;  // a hint; simgpu places the range itself
    if (!ptr || flags != 0 || size == 0 || size % kLargePage) return CUDA_ERROR_INVALID_VALUE;
    if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    if (CUresult rc = Driver::get().vmm->reserve(size, alignment, &p); rc != CUDA_SUCCESS) return rc;
    *ptr = CUdeviceptr(p);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return Driver::get().vmm->free(uintptr_t(ptr), size); });
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    PhysicalMemory* h = physical(handle);
    if (!h) return CUDA_ERROR_INVALID_HANDLE;
    return Driver::get().vmm->map(uintptr_t(ptr), size, offset, h);
  });
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return Driver::get().vmm->unmap(uintptr_t(ptr), size); });
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
    bool accessible = false;
    for (size_t i = 0; i < count; ++i) {
      if (raw(desc[i].location.type) != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
      if (!Driver::get().device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
      const auto flags = raw(desc[i].flags);
      if (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
          flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
      accessible = accessible || flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
    }
    return Driver::get().vmm->set_access(uintptr_t(ptr), size, accessible);
  });
}

}  // extern "C"
