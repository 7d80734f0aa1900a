// tests/unit/simgpu/sim.h — simgpu loaded into the test process (dlopen of build/sim/libcuda.so.1),
// with its own state directory and two small devices, for unit tests of the driver API. Entry
// points are resolved by their exact export names and typed by cudaTypedefs.h, so a test calls
// precisely the ABI it names.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <stdlib.h>

#include <string>

#include "tests/support/proc.h"

namespace simtest {

inline constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
/// SIMGPU_DEVICES of the in-process driver, and what a context costs there.
inline constexpr const char* kDevices = "Sim0:8GiB,Sim1:4GiB";
inline constexpr uint64_t kDevice0 = 8 * GiB, kDevice1 = 4 * GiB;
inline constexpr uint64_t kContextBytes = 64 * MiB;
/// SIMGPU_KERNEL_NS of the in-process driver.
inline constexpr uint64_t kKernelNs = 1'000'000;

struct Api {
  void* lib = nullptr;
  template <class F>
  F load(const char* symbol) {
    void* p = dlsym(lib, symbol);
    REQUIRE_MESSAGE(p != nullptr, "simgpu does not export " << symbol);
    return reinterpret_cast<F>(p);
  }

  PFN_cuInit_v2000 cuInit;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName;
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid_v2;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem_v2;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
  PFN_cuDeviceComputeCapability_v2000 cuDeviceComputeCapability;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease_v2;
  PFN_cuDevicePrimaryCtxGetState_v7000 cuDevicePrimaryCtxGetState;
  PFN_cuCtxCreate_v3020 cuCtxCreate_v2;
  PFN_cuCtxCreate_v12050 cuCtxCreate_v4;
  PFN_cuCtxDestroy_v4000 cuCtxDestroy_v2;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent_v2;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent_v2;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice;
  PFN_cuCtxGetDevice_v13000 cuCtxGetDevice_v2;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
  PFN_cuCtxSynchronize_v13000 cuCtxSynchronize_v2;
  PFN_cuCtxGetApiVersion_v3020 cuCtxGetApiVersion;
  PFN_cuMemAlloc_v3020 cuMemAlloc_v2;
  PFN_cuMemAllocPitch_v3020 cuMemAllocPitch_v2;
  PFN_cuMemAllocManaged_v6000 cuMemAllocManaged;
  PFN_cuMemFree_v3020 cuMemFree_v2;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo_v2;
  PFN_cuMemAllocAsync_v11020 cuMemAllocAsync;
  PFN_cuMemAllocFromPoolAsync_v11020 cuMemAllocFromPoolAsync;
  PFN_cuMemFreeAsync_v11020 cuMemFreeAsync;
  PFN_cuMemPoolCreate_v11020 cuMemPoolCreate;
  PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy;
  PFN_cuMemPoolTrimTo_v11020 cuMemPoolTrimTo;
  PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute;
  PFN_cuMemPoolSetAttribute_v11020 cuMemPoolSetAttribute;
  PFN_cuDeviceGetDefaultMemPool_v11020 cuDeviceGetDefaultMemPool;
  PFN_cuDeviceGetMemPool_v11020 cuDeviceGetMemPool;
  PFN_cuMemCreate_v10020 cuMemCreate;
  PFN_cuMemRelease_v10020 cuMemRelease;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree;
  PFN_cuMemMap_v10020 cuMemMap;
  PFN_cuMemUnmap_v10020 cuMemUnmap;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD_v2;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH_v2;
  PFN_cuMemcpyDtoD_v3020 cuMemcpyDtoD_v2;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync_v2;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync_v2;
  PFN_cuMemsetD8_v3020 cuMemsetD8_v2;
  PFN_cuMemsetD32_v3020 cuMemsetD32_v2;
  PFN_cuMemsetD32Async_v3020 cuMemsetD32Async;
  PFN_cuArrayCreate_v3020 cuArrayCreate_v2;
  PFN_cuArray3DCreate_v3020 cuArray3DCreate_v2;
  PFN_cuArrayDestroy_v2000 cuArrayDestroy;
  PFN_cuMipmappedArrayCreate_v5000 cuMipmappedArrayCreate;
  PFN_cuMipmappedArrayDestroy_v5000 cuMipmappedArrayDestroy;
  PFN_cuModuleLoadData_v2000 cuModuleLoadData;
  PFN_cuModuleLoadDataEx_v2010 cuModuleLoadDataEx;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
  PFN_cuModuleUnload_v2000 cuModuleUnload;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel;
  PFN_cuLaunchKernel_v7000_ptsz cuLaunchKernel_ptsz;
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx;
  PFN_cuLaunchCooperativeKernel_v9000 cuLaunchCooperativeKernel;
  PFN_cuStreamCreate_v2000 cuStreamCreate;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy_v2;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize;
  PFN_cuStreamSynchronize_v7000_ptsz cuStreamSynchronize_ptsz;
  PFN_cuStreamQuery_v2000 cuStreamQuery;
  PFN_cuStreamGetCtx_v9020 cuStreamGetCtx;
  PFN_cuStreamGetCtx_v12050 cuStreamGetCtx_v2;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent;
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture_v2;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture;
  PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing;
  PFN_cuEventCreate_v2000 cuEventCreate;
  PFN_cuEventRecord_v2000 cuEventRecord;
  PFN_cuEventSynchronize_v2000 cuEventSynchronize;
  PFN_cuEventQuery_v2000 cuEventQuery;
  PFN_cuEventElapsedTime_v12080 cuEventElapsedTime_v2;
  PFN_cuEventDestroy_v4000 cuEventDestroy_v2;
  PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags;
  PFN_cuGraphLaunch_v10000 cuGraphLaunch;
  PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy;
  PFN_cuGraphDestroy_v10000 cuGraphDestroy;
  PFN_cuGetErrorName_v6000 cuGetErrorName;
  PFN_cuGetErrorString_v6000 cuGetErrorString;
  PFN_cuGetProcAddress_v11030 cuGetProcAddress_v1;  // "cuGetProcAddress" (cuda.h maps that name to _v2)
  PFN_cuGetProcAddress_v12000 cuGetProcAddress_v2;
  PFN_cuGetExportTable_v3000 cuGetExportTable;

  void load_all() {
#define SIMTEST_LOAD(name) name = load<decltype(name)>(#name)
    SIMTEST_LOAD(cuInit); SIMTEST_LOAD(cuDriverGetVersion); SIMTEST_LOAD(cuDeviceGet); SIMTEST_LOAD(cuDeviceGetCount);
    SIMTEST_LOAD(cuDeviceGetName); SIMTEST_LOAD(cuDeviceGetUuid_v2); SIMTEST_LOAD(cuDeviceTotalMem_v2);
    SIMTEST_LOAD(cuDeviceGetAttribute); SIMTEST_LOAD(cuDeviceComputeCapability); SIMTEST_LOAD(cuDevicePrimaryCtxRetain);
    SIMTEST_LOAD(cuDevicePrimaryCtxRelease_v2); SIMTEST_LOAD(cuDevicePrimaryCtxGetState); SIMTEST_LOAD(cuCtxCreate_v2);
    SIMTEST_LOAD(cuCtxCreate_v4); SIMTEST_LOAD(cuCtxDestroy_v2); SIMTEST_LOAD(cuCtxGetCurrent); SIMTEST_LOAD(cuCtxSetCurrent);
    SIMTEST_LOAD(cuCtxPushCurrent_v2); SIMTEST_LOAD(cuCtxPopCurrent_v2); SIMTEST_LOAD(cuCtxGetDevice);
    SIMTEST_LOAD(cuCtxGetDevice_v2); SIMTEST_LOAD(cuCtxSynchronize); SIMTEST_LOAD(cuCtxSynchronize_v2);
    SIMTEST_LOAD(cuCtxGetApiVersion); SIMTEST_LOAD(cuMemAlloc_v2); SIMTEST_LOAD(cuMemAllocPitch_v2);
    SIMTEST_LOAD(cuMemAllocManaged); SIMTEST_LOAD(cuMemFree_v2); SIMTEST_LOAD(cuMemGetInfo_v2); SIMTEST_LOAD(cuMemAllocAsync);
    SIMTEST_LOAD(cuMemAllocFromPoolAsync); SIMTEST_LOAD(cuMemFreeAsync); SIMTEST_LOAD(cuMemPoolCreate);
    SIMTEST_LOAD(cuMemPoolDestroy); SIMTEST_LOAD(cuMemPoolTrimTo); SIMTEST_LOAD(cuMemPoolGetAttribute);
    SIMTEST_LOAD(cuMemPoolSetAttribute); SIMTEST_LOAD(cuDeviceGetDefaultMemPool); SIMTEST_LOAD(cuDeviceGetMemPool);
    SIMTEST_LOAD(cuMemCreate); SIMTEST_LOAD(cuMemRelease); SIMTEST_LOAD(cuMemAddressReserve); SIMTEST_LOAD(cuMemAddressFree);
    SIMTEST_LOAD(cuMemMap); SIMTEST_LOAD(cuMemUnmap); SIMTEST_LOAD(cuMemSetAccess); SIMTEST_LOAD(cuMemGetAllocationGranularity);
    SIMTEST_LOAD(cuMemcpyHtoD_v2); SIMTEST_LOAD(cuMemcpyDtoH_v2); SIMTEST_LOAD(cuMemcpyDtoD_v2);
    SIMTEST_LOAD(cuMemcpyHtoDAsync_v2); SIMTEST_LOAD(cuMemcpyDtoHAsync_v2); SIMTEST_LOAD(cuMemsetD8_v2);
    SIMTEST_LOAD(cuMemsetD32_v2); SIMTEST_LOAD(cuMemsetD32Async); SIMTEST_LOAD(cuArrayCreate_v2); SIMTEST_LOAD(cuArray3DCreate_v2);
    SIMTEST_LOAD(cuArrayDestroy); SIMTEST_LOAD(cuMipmappedArrayCreate); SIMTEST_LOAD(cuMipmappedArrayDestroy);
    SIMTEST_LOAD(cuModuleLoadData); SIMTEST_LOAD(cuModuleLoadDataEx); SIMTEST_LOAD(cuModuleGetFunction);
    SIMTEST_LOAD(cuModuleUnload); SIMTEST_LOAD(cuLaunchKernel); SIMTEST_LOAD(cuLaunchKernel_ptsz); SIMTEST_LOAD(cuLaunchKernelEx);
    SIMTEST_LOAD(cuLaunchCooperativeKernel); SIMTEST_LOAD(cuStreamCreate); SIMTEST_LOAD(cuStreamDestroy_v2);
    SIMTEST_LOAD(cuStreamSynchronize); SIMTEST_LOAD(cuStreamSynchronize_ptsz); SIMTEST_LOAD(cuStreamQuery);
    SIMTEST_LOAD(cuStreamGetCtx); SIMTEST_LOAD(cuStreamGetCtx_v2); SIMTEST_LOAD(cuStreamWaitEvent);
    SIMTEST_LOAD(cuStreamBeginCapture_v2); SIMTEST_LOAD(cuStreamEndCapture); SIMTEST_LOAD(cuStreamIsCapturing);
    SIMTEST_LOAD(cuEventCreate); SIMTEST_LOAD(cuEventRecord); SIMTEST_LOAD(cuEventSynchronize); SIMTEST_LOAD(cuEventQuery);
    SIMTEST_LOAD(cuEventElapsedTime_v2); SIMTEST_LOAD(cuEventDestroy_v2); SIMTEST_LOAD(cuGraphInstantiateWithFlags);
    SIMTEST_LOAD(cuGraphLaunch); SIMTEST_LOAD(cuGraphExecDestroy); SIMTEST_LOAD(cuGraphDestroy); SIMTEST_LOAD(cuGetErrorName);
    SIMTEST_LOAD(cuGetErrorString); cuGetProcAddress_v1 = load<PFN_cuGetProcAddress_v11030>("cuGetProcAddress"); SIMTEST_LOAD(cuGetProcAddress_v2);
    SIMTEST_LOAD(cuGetExportTable);
#undef SIMTEST_LOAD
  }
};

/// The in-process driver: loaded and initialized on first use, with device 0's primary context
/// retained. Every test case starts with `Sim& s = sim(); s.use_primary();`.
struct Sim {
  Sim() : dir("simgpu-unit") {
    const std::string lib_path = coloc::test::build_path("sim/libcuda.so.1");
    api.lib = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(api.lib != nullptr, "cannot load " << lib_path << ": " << dlerror());
    api.load_all();
    setenv("SIMGPU_STATE_DIR", (dir / "state").c_str(), 1);
    setenv("SIMGPU_DEVICES", kDevices, 1);
    setenv("SIMGPU_CONTEXT_BYTES", "64MiB", 1);
    setenv("SIMGPU_KERNEL_NS", std::to_string(kKernelNs).c_str(), 1);
    init_rc = api.cuInit(0);
    for (const char* v : {"SIMGPU_STATE_DIR", "SIMGPU_DEVICES", "SIMGPU_CONTEXT_BYTES", "SIMGPU_KERNEL_NS"}) unsetenv(v);
    size_t total = 0;
    REQUIRE(init_rc == CUDA_SUCCESS);
    REQUIRE_MESSAGE((api.cuDeviceTotalMem_v2(&total, 0) == CUDA_SUCCESS && total == kDevice0),
                    "simgpu was initialized in this process with another configuration");
    REQUIRE(api.cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
    fatbin = coloc::test::read_file(coloc::test::build_path("gen/kernels.fatbin"));
    REQUIRE(!fatbin.empty());
  }

  /// Makes device 0's primary context the only one current on this thread.
  void use_primary() {
    CUcontext c;
    while (api.cuCtxPopCurrent_v2(&c) == CUDA_SUCCESS) {
    }
    REQUIRE(api.cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  }
  /// Free bytes of the current context's device.
  uint64_t free_bytes() {
    size_t free = 0, total = 0;
    REQUIRE(api.cuMemGetInfo_v2(&free, &total) == CUDA_SUCCESS);
    return free;
  }
  /// A function of the kernels fatbin, loaded in the current context.
  CUfunction kernel(const char* name) {
    CUmodule m;
    REQUIRE(api.cuModuleLoadData(&m, fatbin.data()) == CUDA_SUCCESS);
    CUfunction f;
    REQUIRE(api.cuModuleGetFunction(&f, m, name) == CUDA_SUCCESS);
    return f;
  }

  coloc::test::TempDir dir;
  Api api;
  CUresult init_rc;
  CUcontext primary = nullptr;
  std::string fatbin;  // build/gen/kernels.fatbin
};

inline Sim& sim() {
  static Sim s;
  return s;
}

}  // namespace simtest
