// Driver API: initialization, version, devices, errors, and entry-point lookup.
#include <dlfcn.h>

#include <cstring>

#include "coloc/cuda_abi.h"
#include "driver.h"
#include "entry.h"
#include "errors.h"

// Every driver export simgpu does not implement is an alias of this function (generated from the
// toolkit's stub libcuda.so at build time): it returns CUDA_ERROR_NOT_SUPPORTED.
extern "C" __attribute__((visibility("hidden"))) CUresult simgpu_not_supported(void);
static_assert(CUDA_ERROR_NOT_SUPPORTED == 801, "gen_not_supported.sh hard-codes 801");

using namespace simgpu;

namespace {

// Device properties of the simulated GPU: an H100 SXM (compute capability 9.0, 132 SMs), as
// NVIDIA's H100 datasheet and CUDA's occupancy tables give them. Attributes not listed read 0.
int attribute_value(unsigned attr, const DeviceState& dev) {
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;  // kHz
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x10 + dev.physical;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;  // kHz
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
  }
}

// simgpu's own handle, for dlsym(): what a real driver does when it resolves entry points.
struct Self {
  void* handle = nullptr;
  void* base = nullptr;  // where simgpu is loaded
};
const Self& self() {
  static const Self s = [] {
    Self me;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&simgpu_not_supported), &info) && info.dli_fname) {
      me.handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
      me.base = info.dli_fbase;
    }
    return me;
  }();
  return s;
}

// The entry point simgpu exports as `name`, or null. dlsym() on a library's handle also searches
// its dependencies (libc exports cuserid), so the symbol must be simgpu's own.
void* own_symbol(const char* name) {
  const Self& me = self();
  void* f = me.handle ? dlsym(me.handle, name) : nullptr;
  Dl_info info{};
  if (!f || !dladdr(f, &info) || info.dli_fbase != me.base) return nullptr;
  return f == reinterpret_cast<void*>(&simgpu_not_supported) ? nullptr : f;
}

CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (flags & ~cuuint64_t(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  if (cuda_version > CUDA_VERSION) return CUDA_ERROR_INVALID_VALUE;  // newer than this driver

  const bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const coloc::AbiRow* row = nullptr;
  const char* name = nullptr;
  switch (coloc::abi_resolve(symbol, cuda_version, per_thread, &row)) {
    case coloc::AbiLookup::found:
      name = row->symbol;
      break;
    case coloc::AbiLookup::version_not_sufficient:
      if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    case coloc::AbiLookup::not_found:
      // An entry point the table does not list is exported under its own name; a versioned
      // export name ("cuMemAlloc_v2") is not an entry point name.
      if (coloc::abi_row_for_symbol(symbol)) return CUDA_ERROR_NOT_FOUND;
      name = symbol;
      break;
  }
  void* f = own_symbol(name);
  if (!f) return CUDA_ERROR_NOT_FOUND;  // not exported, or exported but not implemented
  *pfn = f;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult device_uuid_of(CUuuid* uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  DeviceState* d = Driver::get().device(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::memcpy(uuid->bytes, d->uuid.data(), sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) {
  static constinit CallCounter calls{__func__};
  return enter_early(calls, [&] { return Driver::get().init(Flags); });
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  static constinit CallCounter calls{__func__};
  return enter_early(calls, [&] {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!Driver::get().device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = int(Driver::get().devices.size());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    size_t n = std::min(size_t(len) - 1, d->spec.name.size());
    std::memcpy(name, d->spec.name.data(), n);
    name[n] = '\0';
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return device_uuid_of(uuid, dev); });
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return device_uuid_of(uuid, dev); });
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = d->spec.bytes;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    const auto attr = raw(attrib);
    if (!pi || attr == 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    *pi = attribute_value(attr, *d);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    *major = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *d);
    *minor = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *d);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  static constinit CallCounter calls{__func__};
  return enter_pure(calls, [&] {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorInfo* e = find_error(raw(error));
    *pStr = e ? e->name : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  static constinit CallCounter calls{__func__};
  return enter_pure(calls, [&] {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorInfo* e = find_error(raw(error));
    *pStr = e ? e->description : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  static constinit CallCounter calls{__func__};
  return enter_early(calls, [&] { return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr); });
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  static constinit CallCounter calls{__func__};
  return enter_early(calls, [&] { return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus); });
}

CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  static constinit CallCounter calls{__func__};
  return enter_early(calls, [&] {
    (void)pExportTableId;
    if (ppExportTable) *ppExportTable = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
  });
}

}  // extern "C"
