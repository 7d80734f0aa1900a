// coloc/cuda_abi.h — which exported driver symbol `cuGetProcAddress(name, cudaVersion, flags)`
// returns, for the driver entry points coloc and simgpu care about.
//
// Source: the CUDA 13.0 toolkit's cudaTypedefs.h, which names every ABI of an entry point by the
// CUDA version that introduced it (PFN_cuMemAlloc_v3020, PFN_cuLaunchKernel_v7000_ptsz), and the
// driver's own export names (cuMemAlloc_v2, cuLaunchKernel_ptsz). The n-th ABI of `cuX` is exported
// as `cuX` (n = 1) or `cuX_vN`; per-thread variants append `_ptsz` (stream-taking calls) or `_ptds`
// (synchronous copies and memsets) to the symbol of the ABI they belong to. The one exception is
// cuGraphInstantiate, which cuda.h maps to cuGraphInstantiateWithFlags from CUDA 12.0.
// tests/unit/abi/cuda_abi_test.cpp checks this table against cudaTypedefs.h and the stub
// libcuda.so of the installed toolkit: every PFN version of a listed entry point is here, and every
// symbol here is exported by the driver.
//
// Resolution rule (what the real driver does, and what simgpu and the interposer's fallback do):
// among the rows for `name` whose version <= cudaVersion, take the newest legacy-stream row; if
// the caller passed CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM and a per-thread row with
// version <= cudaVersion exists, take the newest such row instead.
#pragma once

#include <cstring>

namespace coloc {

/// Which default-stream semantics a row implements.
enum class AbiStream : unsigned char { legacy, per_thread };

/// One ABI of one driver entry point.
struct AbiRow {
  const char* name;     ///< unversioned API name, as passed to cuGetProcAddress ("cuMemAlloc")
  int version;          ///< CUDA version that introduced this ABI (3020 = CUDA 3.2)
  AbiStream stream;     ///< legacy or per-thread default stream
  const char* symbol;   ///< exported symbol implementing it ("cuMemAlloc_v2")
};

inline constexpr AbiRow kAbiTable[] = {
    {"cuInit", 2000, AbiStream::legacy, "cuInit"},
    {"cuDriverGetVersion", 2020, AbiStream::legacy, "cuDriverGetVersion"},
    {"cuDeviceGet", 2000, AbiStream::legacy, "cuDeviceGet"},
    {"cuDeviceGetCount", 2000, AbiStream::legacy, "cuDeviceGetCount"},
    {"cuDeviceGetName", 2000, AbiStream::legacy, "cuDeviceGetName"},
    {"cuDeviceGetUuid", 9020, AbiStream::legacy, "cuDeviceGetUuid"},
    {"cuDeviceGetUuid", 11040, AbiStream::legacy, "cuDeviceGetUuid_v2"},
    {"cuDeviceTotalMem", 2000, AbiStream::legacy, "cuDeviceTotalMem"},
    {"cuDeviceTotalMem", 3020, AbiStream::legacy, "cuDeviceTotalMem_v2"},
    {"cuDeviceGetAttribute", 2000, AbiStream::legacy, "cuDeviceGetAttribute"},
    {"cuDeviceComputeCapability", 2000, AbiStream::legacy, "cuDeviceComputeCapability"},
    {"cuDevicePrimaryCtxRetain", 7000, AbiStream::legacy, "cuDevicePrimaryCtxRetain"},
    {"cuDevicePrimaryCtxRelease", 7000, AbiStream::legacy, "cuDevicePrimaryCtxRelease"},
    {"cuDevicePrimaryCtxRelease", 11000, AbiStream::legacy, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset", 7000, AbiStream::legacy, "cuDevicePrimaryCtxReset"},
    {"cuDevicePrimaryCtxReset", 11000, AbiStream::legacy, "cuDevicePrimaryCtxReset_v2"},
    {"cuDevicePrimaryCtxGetState", 7000, AbiStream::legacy, "cuDevicePrimaryCtxGetState"},
    {"cuCtxCreate", 2000, AbiStream::legacy, "cuCtxCreate"},
    {"cuCtxCreate", 3020, AbiStream::legacy, "cuCtxCreate_v2"},
    {"cuCtxCreate", 11040, AbiStream::legacy, "cuCtxCreate_v3"},
    {"cuCtxCreate", 12050, AbiStream::legacy, "cuCtxCreate_v4"},
    {"cuCtxDestroy", 2000, AbiStream::legacy, "cuCtxDestroy"},
    {"cuCtxDestroy", 4000, AbiStream::legacy, "cuCtxDestroy_v2"},
    {"cuCtxGetCurrent", 4000, AbiStream::legacy, "cuCtxGetCurrent"},
    {"cuCtxSetCurrent", 4000, AbiStream::legacy, "cuCtxSetCurrent"},
    {"cuCtxPushCurrent", 2000, AbiStream::legacy, "cuCtxPushCurrent"},
    {"cuCtxPushCurrent", 4000, AbiStream::legacy, "cuCtxPushCurrent_v2"},
    {"cuCtxPopCurrent", 2000, AbiStream::legacy, "cuCtxPopCurrent"},
    {"cuCtxPopCurrent", 4000, AbiStream::legacy, "cuCtxPopCurrent_v2"},
    {"cuCtxGetDevice", 2000, AbiStream::legacy, "cuCtxGetDevice"},
    {"cuCtxGetDevice", 13000, AbiStream::legacy, "cuCtxGetDevice_v2"},
    {"cuCtxSynchronize", 2000, AbiStream::legacy, "cuCtxSynchronize"},
    {"cuCtxSynchronize", 13000, AbiStream::legacy, "cuCtxSynchronize_v2"},
    {"cuCtxGetApiVersion", 3020, AbiStream::legacy, "cuCtxGetApiVersion"},
    {"cuMemAlloc", 2000, AbiStream::legacy, "cuMemAlloc"},
    {"cuMemAlloc", 3020, AbiStream::legacy, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 2000, AbiStream::legacy, "cuMemAllocPitch"},
    {"cuMemAllocPitch", 3020, AbiStream::legacy, "cuMemAllocPitch_v2"},
    {"cuMemAllocManaged", 6000, AbiStream::legacy, "cuMemAllocManaged"},
    {"cuMemFree", 2000, AbiStream::legacy, "cuMemFree"},
    {"cuMemFree", 3020, AbiStream::legacy, "cuMemFree_v2"},
    {"cuMemGetInfo", 2000, AbiStream::legacy, "cuMemGetInfo"},
    {"cuMemGetInfo", 3020, AbiStream::legacy, "cuMemGetInfo_v2"},
    {"cuMemAllocAsync", 11020, AbiStream::legacy, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 11020, AbiStream::per_thread, "cuMemAllocAsync_ptsz"},
    {"cuMemFreeAsync", 11020, AbiStream::legacy, "cuMemFreeAsync"},
    {"cuMemFreeAsync", 11020, AbiStream::per_thread, "cuMemFreeAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, AbiStream::legacy, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 11020, AbiStream::per_thread, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemPoolCreate", 11020, AbiStream::legacy, "cuMemPoolCreate"},
    {"cuMemPoolDestroy", 11020, AbiStream::legacy, "cuMemPoolDestroy"},
    {"cuMemPoolTrimTo", 11020, AbiStream::legacy, "cuMemPoolTrimTo"},
    {"cuMemPoolGetAttribute", 11020, AbiStream::legacy, "cuMemPoolGetAttribute"},
    {"cuMemPoolSetAttribute", 11020, AbiStream::legacy, "cuMemPoolSetAttribute"},
    {"cuDeviceGetDefaultMemPool", 11020, AbiStream::legacy, "cuDeviceGetDefaultMemPool"},
    {"cuDeviceGetMemPool", 11020, AbiStream::legacy, "cuDeviceGetMemPool"},
    {"cuMemCreate", 10020, AbiStream::legacy, "cuMemCreate"},
    {"cuMemRelease", 10020, AbiStream::legacy, "cuMemRelease"},
    {"cuMemAddressReserve", 10020, AbiStream::legacy, "cuMemAddressReserve"},
    {"cuMemAddressFree", 10020, AbiStream::legacy, "cuMemAddressFree"},
    {"cuMemMap", 10020, AbiStream::legacy, "cuMemMap"},
    {"cuMemUnmap", 10020, AbiStream::legacy, "cuMemUnmap"},
    {"cuMemSetAccess", 10020, AbiStream::legacy, "cuMemSetAccess"},
    {"cuMemGetAllocationGranularity", 10020, AbiStream::legacy, "cuMemGetAllocationGranularity"},
    {"cuMemcpyHtoD", 2000, AbiStream::legacy, "cuMemcpyHtoD"},
    {"cuMemcpyHtoD", 3020, AbiStream::legacy, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 7000, AbiStream::per_thread, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoH", 2000, AbiStream::legacy, "cuMemcpyDtoH"},
    {"cuMemcpyDtoH", 3020, AbiStream::legacy, "cuMemcpyDtoH_v2"},
    {"cuMemcpyDtoH", 7000, AbiStream::per_thread, "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpyDtoD", 2000, AbiStream::legacy, "cuMemcpyDtoD"},
    {"cuMemcpyDtoD", 3020, AbiStream::legacy, "cuMemcpyDtoD_v2"},
    {"cuMemcpyDtoD", 7000, AbiStream::per_thread, "cuMemcpyDtoD_v2_ptds"},
    {"cuMemcpyHtoDAsync", 2000, AbiStream::legacy, "cuMemcpyHtoDAsync"},
    {"cuMemcpyHtoDAsync", 3020, AbiStream::legacy, "cuMemcpyHtoDAsync_v2"},
    {"cuMemcpyHtoDAsync", 7000, AbiStream::per_thread, "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoHAsync", 2000, AbiStream::legacy, "cuMemcpyDtoHAsync"},
    {"cuMemcpyDtoHAsync", 3020, AbiStream::legacy, "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyDtoHAsync", 7000, AbiStream::per_thread, "cuMemcpyDtoHAsync_v2_ptsz"},
    {"cuMemcpyDtoDAsync", 3000, AbiStream::legacy, "cuMemcpyDtoDAsync"},
    {"cuMemcpyDtoDAsync", 3020, AbiStream::legacy, "cuMemcpyDtoDAsync_v2"},
    {"cuMemcpyDtoDAsync", 7000, AbiStream::per_thread, "cuMemcpyDtoDAsync_v2_ptsz"},
    {"cuMemcpyAsync", 4000, AbiStream::legacy, "cuMemcpyAsync"},
    {"cuMemcpyAsync", 7000, AbiStream::per_thread, "cuMemcpyAsync_ptsz"},
    {"cuMemcpyPeerAsync", 4000, AbiStream::legacy, "cuMemcpyPeerAsync"},
    {"cuMemcpyPeerAsync", 7000, AbiStream::per_thread, "cuMemcpyPeerAsync_ptsz"},
    {"cuMemcpy2DAsync", 2000, AbiStream::legacy, "cuMemcpy2DAsync"},
    {"cuMemcpy2DAsync", 3020, AbiStream::legacy, "cuMemcpy2DAsync_v2"},
    {"cuMemcpy2DAsync", 7000, AbiStream::per_thread, "cuMemcpy2DAsync_v2_ptsz"},
    {"cuMemcpy3DAsync", 2000, AbiStream::legacy, "cuMemcpy3DAsync"},
    {"cuMemcpy3DAsync", 3020, AbiStream::legacy, "cuMemcpy3DAsync_v2"},
    {"cuMemcpy3DAsync", 7000, AbiStream::per_thread, "cuMemcpy3DAsync_v2_ptsz"},
    {"cuMemcpy3DPeerAsync", 4000, AbiStream::legacy, "cuMemcpy3DPeerAsync"},
    {"cuMemcpy3DPeerAsync", 7000, AbiStream::per_thread, "cuMemcpy3DPeerAsync_ptsz"},
    {"cuMemcpyBatchAsync", 12080, AbiStream::legacy, "cuMemcpyBatchAsync"},
    {"cuMemcpyBatchAsync", 12080, AbiStream::per_thread, "cuMemcpyBatchAsync_ptsz"},
    {"cuMemcpyBatchAsync", 13000, AbiStream::legacy, "cuMemcpyBatchAsync_v2"},
    {"cuMemcpyBatchAsync", 13000, AbiStream::per_thread, "cuMemcpyBatchAsync_v2_ptsz"},
    {"cuMemcpy3DBatchAsync", 12080, AbiStream::legacy, "cuMemcpy3DBatchAsync"},
    {"cuMemcpy3DBatchAsync", 12080, AbiStream::per_thread, "cuMemcpy3DBatchAsync_ptsz"},
    {"cuMemcpy3DBatchAsync", 13000, AbiStream::legacy, "cuMemcpy3DBatchAsync_v2"},
    {"cuMemcpy3DBatchAsync", 13000, AbiStream::per_thread, "cuMemcpy3DBatchAsync_v2_ptsz"},
    {"cuMemsetD8", 2000, AbiStream::legacy, "cuMemsetD8"},
    {"cuMemsetD8", 3020, AbiStream::legacy, "cuMemsetD8_v2"},
    {"cuMemsetD8", 7000, AbiStream::per_thread, "cuMemsetD8_v2_ptds"},
    {"cuMemsetD32", 2000, AbiStream::legacy, "cuMemsetD32"},
    {"cuMemsetD32", 3020, AbiStream::legacy, "cuMemsetD32_v2"},
    {"cuMemsetD32", 7000, AbiStream::per_thread, "cuMemsetD32_v2_ptds"},
    {"cuMemsetD8Async", 3020, AbiStream::legacy, "cuMemsetD8Async"},
    {"cuMemsetD8Async", 7000, AbiStream::per_thread, "cuMemsetD8Async_ptsz"},
    {"cuMemsetD32Async", 3020, AbiStream::legacy, "cuMemsetD32Async"},
    {"cuMemsetD32Async", 7000, AbiStream::per_thread, "cuMemsetD32Async_ptsz"},
    {"cuMemsetD16Async", 3020, AbiStream::legacy, "cuMemsetD16Async"},
    {"cuMemsetD16Async", 7000, AbiStream::per_thread, "cuMemsetD16Async_ptsz"},
    {"cuMemsetD2D8Async", 3020, AbiStream::legacy, "cuMemsetD2D8Async"},
    {"cuMemsetD2D8Async", 7000, AbiStream::per_thread, "cuMemsetD2D8Async_ptsz"},
    {"cuMemsetD2D16Async", 3020, AbiStream::legacy, "cuMemsetD2D16Async"},
    {"cuMemsetD2D16Async", 7000, AbiStream::per_thread, "cuMemsetD2D16Async_ptsz"},
    {"cuMemsetD2D32Async", 3020, AbiStream::legacy, "cuMemsetD2D32Async"},
    {"cuMemsetD2D32Async", 7000, AbiStream::per_thread, "cuMemsetD2D32Async_ptsz"},
    {"cuArrayCreate", 2000, AbiStream::legacy, "cuArrayCreate"},
    {"cuArrayCreate", 3020, AbiStream::legacy, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 2000, AbiStream::legacy, "cuArray3DCreate"},
    {"cuArray3DCreate", 3020, AbiStream::legacy, "cuArray3DCreate_v2"},
    {"cuArrayDestroy", 2000, AbiStream::legacy, "cuArrayDestroy"},
    {"cuMipmappedArrayCreate", 5000, AbiStream::legacy, "cuMipmappedArrayCreate"},
    {"cuMipmappedArrayDestroy", 5000, AbiStream::legacy, "cuMipmappedArrayDestroy"},
    {"cuModuleLoadData", 2000, AbiStream::legacy, "cuModuleLoadData"},
    {"cuModuleLoadDataEx", 2010, AbiStream::legacy, "cuModuleLoadDataEx"},
    {"cuModuleGetFunction", 2000, AbiStream::legacy, "cuModuleGetFunction"},
    {"cuModuleUnload", 2000, AbiStream::legacy, "cuModuleUnload"},
    {"cuLaunchKernel", 4000, AbiStream::legacy, "cuLaunchKernel"},
    {"cuLaunchKernel", 7000, AbiStream::per_thread, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 11060, AbiStream::legacy, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 11060, AbiStream::per_thread, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 9000, AbiStream::legacy, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 9000, AbiStream::per_thread, "cuLaunchCooperativeKernel_ptsz"},
    {"cuLaunchCooperativeKernelMultiDevice", 9000, AbiStream::legacy, "cuLaunchCooperativeKernelMultiDevice"},
    {"cuLaunch", 2000, AbiStream::legacy, "cuLaunch"},
    {"cuLaunchGrid", 2000, AbiStream::legacy, "cuLaunchGrid"},
    {"cuLaunchGridAsync", 2000, AbiStream::legacy, "cuLaunchGridAsync"},
    {"cuFuncSetBlockShape", 2000, AbiStream::legacy, "cuFuncSetBlockShape"},
    {"cuParamSetSize", 2000, AbiStream::legacy, "cuParamSetSize"},
    {"cuParamSeti", 2000, AbiStream::legacy, "cuParamSeti"},
    {"cuParamSetf", 2000, AbiStream::legacy, "cuParamSetf"},
    {"cuParamSetv", 2000, AbiStream::legacy, "cuParamSetv"},
    {"cuStreamCreate", 2000, AbiStream::legacy, "cuStreamCreate"},
    {"cuStreamDestroy", 2000, AbiStream::legacy, "cuStreamDestroy"},
    {"cuStreamDestroy", 4000, AbiStream::legacy, "cuStreamDestroy_v2"},
    {"cuStreamSynchronize", 2000, AbiStream::legacy, "cuStreamSynchronize"},
    {"cuStreamSynchronize", 7000, AbiStream::per_thread, "cuStreamSynchronize_ptsz"},
    {"cuStreamQuery", 2000, AbiStream::legacy, "cuStreamQuery"},
    {"cuStreamQuery", 7000, AbiStream::per_thread, "cuStreamQuery_ptsz"},
    {"cuStreamGetCtx", 9020, AbiStream::legacy, "cuStreamGetCtx"},
    {"cuStreamGetCtx", 12050, AbiStream::legacy, "cuStreamGetCtx_v2"},
    {"cuStreamGetCtx", 9020, AbiStream::per_thread, "cuStreamGetCtx_ptsz"},
    {"cuStreamGetCtx", 12050, AbiStream::per_thread, "cuStreamGetCtx_v2_ptsz"},
    {"cuStreamWaitEvent", 3020, AbiStream::legacy, "cuStreamWaitEvent"},
    {"cuStreamWaitEvent", 7000, AbiStream::per_thread, "cuStreamWaitEvent_ptsz"},
    {"cuEventCreate", 2000, AbiStream::legacy, "cuEventCreate"},
    {"cuEventRecord", 2000, AbiStream::legacy, "cuEventRecord"},
    {"cuEventRecord", 7000, AbiStream::per_thread, "cuEventRecord_ptsz"},
    {"cuEventSynchronize", 2000, AbiStream::legacy, "cuEventSynchronize"},
    {"cuEventQuery", 2000, AbiStream::legacy, "cuEventQuery"},
    {"cuEventElapsedTime", 2000, AbiStream::legacy, "cuEventElapsedTime"},
    {"cuEventElapsedTime", 12080, AbiStream::legacy, "cuEventElapsedTime_v2"},
    {"cuEventDestroy", 2000, AbiStream::legacy, "cuEventDestroy"},
    {"cuEventDestroy", 4000, AbiStream::legacy, "cuEventDestroy_v2"},
    {"cuStreamBeginCapture", 10000, AbiStream::legacy, "cuStreamBeginCapture"},
    {"cuStreamBeginCapture", 10010, AbiStream::legacy, "cuStreamBeginCapture_v2"},
    {"cuStreamBeginCapture", 10000, AbiStream::per_thread, "cuStreamBeginCapture_ptsz"},
    {"cuStreamBeginCapture", 10010, AbiStream::per_thread, "cuStreamBeginCapture_v2_ptsz"},
    {"cuStreamEndCapture", 10000, AbiStream::legacy, "cuStreamEndCapture"},
    {"cuStreamEndCapture", 10000, AbiStream::per_thread, "cuStreamEndCapture_ptsz"},
    {"cuStreamIsCapturing", 10000, AbiStream::legacy, "cuStreamIsCapturing"},
    {"cuStreamIsCapturing", 10000, AbiStream::per_thread, "cuStreamIsCapturing_ptsz"},
    {"cuThreadExchangeStreamCaptureMode", 10010, AbiStream::legacy, "cuThreadExchangeStreamCaptureMode"},
    {"cuGraphInstantiate", 10000, AbiStream::legacy, "cuGraphInstantiate"},
    {"cuGraphInstantiate", 11000, AbiStream::legacy, "cuGraphInstantiate_v2"},
    {"cuGraphInstantiate", 12000, AbiStream::legacy, "cuGraphInstantiateWithFlags"},  // cuda.h: #define cuGraphInstantiate cuGraphInstantiateWithFlags
    {"cuGraphInstantiateWithFlags", 11040, AbiStream::legacy, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithParams", 12000, AbiStream::legacy, "cuGraphInstantiateWithParams"},
    {"cuGraphInstantiateWithParams", 12000, AbiStream::per_thread, "cuGraphInstantiateWithParams_ptsz"},
    {"cuGraphUpload", 11010, AbiStream::legacy, "cuGraphUpload"},
    {"cuGraphUpload", 11010, AbiStream::per_thread, "cuGraphUpload_ptsz"},
    {"cuGraphLaunch", 10000, AbiStream::legacy, "cuGraphLaunch"},
    {"cuGraphLaunch", 10000, AbiStream::per_thread, "cuGraphLaunch_ptsz"},
    {"cuGraphExecDestroy", 10000, AbiStream::legacy, "cuGraphExecDestroy"},
    {"cuGraphDestroy", 10000, AbiStream::legacy, "cuGraphDestroy"},
    {"cuGraphCreate", 10000, AbiStream::legacy, "cuGraphCreate"},
    {"cuGraphAddMemAllocNode", 11040, AbiStream::legacy, "cuGraphAddMemAllocNode"},
    {"cuGraphAddMemFreeNode", 11040, AbiStream::legacy, "cuGraphAddMemFreeNode"},
    {"cuGraphAddNode", 12020, AbiStream::legacy, "cuGraphAddNode"},
    {"cuGraphAddNode", 12030, AbiStream::legacy, "cuGraphAddNode_v2"},
    {"cuStreamBeginCaptureToGraph", 12030, AbiStream::legacy, "cuStreamBeginCaptureToGraph"},
    {"cuStreamBeginCaptureToGraph", 12030, AbiStream::per_thread, "cuStreamBeginCaptureToGraph_ptsz"},
    {"cuDeviceGraphMemTrim", 11040, AbiStream::legacy, "cuDeviceGraphMemTrim"},
    {"cuDeviceGetGraphMemAttribute", 11040, AbiStream::legacy, "cuDeviceGetGraphMemAttribute"},
    {"cuDeviceSetGraphMemAttribute", 11040, AbiStream::legacy, "cuDeviceSetGraphMemAttribute"},
    {"cuGetErrorName", 6000, AbiStream::legacy, "cuGetErrorName"},
    {"cuGetErrorString", 6000, AbiStream::legacy, "cuGetErrorString"},
    {"cuGetProcAddress", 11030, AbiStream::legacy, "cuGetProcAddress"},
    {"cuGetProcAddress", 12000, AbiStream::legacy, "cuGetProcAddress_v2"},
    {"cuGetExportTable", 3000, AbiStream::legacy, "cuGetExportTable"},
};

inline constexpr unsigned kAbiTableSize = sizeof(kAbiTable) / sizeof(kAbiTable[0]);

/// Outcome of abi_resolve().
enum class AbiLookup { found, version_not_sufficient, not_found };

/// Applies the resolution rule above. `per_thread` is true when the caller's flags include
/// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. On `found`, *row points into kAbiTable.
/// O(table size); callers that resolve often should cache.
inline AbiLookup abi_resolve(const char* name, int cuda_version, bool per_thread, const AbiRow** row) {
  const AbiRow* best_legacy = nullptr;
  const AbiRow* best_pt = nullptr;
  bool known = false;
  for (const AbiRow& r : kAbiTable) {
    if (std::strcmp(r.name, name) != 0) continue;
    known = true;
    if (r.version > cuda_version) continue;
    const AbiRow*& best = r.stream == AbiStream::legacy ? best_legacy : best_pt;
    if (!best || r.version > best->version) best = &r;
  }
  const AbiRow* chosen = (per_thread && best_pt) ? best_pt : best_legacy;
  if (chosen) {
    if (row) *row = chosen;
    return AbiLookup::found;
  }
  return known ? AbiLookup::version_not_sufficient : AbiLookup::not_found;
}

/// The row whose exported symbol is `symbol`, or nullptr. Several rows can share a symbol
/// (cuGraphInstantiateWithFlags is both its own entry point and cuGraphInstantiate@12000); the
/// first is returned.
inline const AbiRow* abi_row_for_symbol(const char* symbol) {
  for (const AbiRow& r : kAbiTable)
    if (std::strcmp(r.symbol, symbol) == 0) return &r;
  return nullptr;
}

}  // namespace coloc
