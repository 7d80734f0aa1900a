// simgpu's entry points validate what coloc and its tests rely on: NULL out-pointers, bad and
// destroyed handles, no current context, zero and huge sizes, ranges outside allocations. Each
// returns the documented CUresult and never crashes.
#include <thread>

#include "sim.h"

using namespace simtest;

namespace {
// Runs `f` on a thread that has no current context.
template <class F>
void without_context(F f) {
  std::thread t(f);
  t.join();
}
void* garbage() { return reinterpret_cast<void*>(uintptr_t(0xdead0000)); }
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("api: NULL out-pointers are CUDA_ERROR_INVALID_VALUE") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUstream stream;
  REQUIRE(a.cuStreamCreate(&stream, 0) == CUDA_SUCCESS);
  CUmemoryPool pool;
  REQUIRE(a.cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  size_t n = 0;
  CUdeviceptr p = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};

  CHECK(a.cuDriverGetVersion(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGet(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetCount(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetName(nullptr, 64, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetUuid_v2(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceTotalMem_v2(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceComputeCapability(nullptr, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDevicePrimaryCtxRetain(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDevicePrimaryCtxGetState(0, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxCreate_v2(nullptr, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxCreate_v4(nullptr, nullptr, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxGetCurrent(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxPushCurrent_v2(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxDestroy_v2(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxGetDevice(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxGetApiVersion(nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAlloc_v2(nullptr, 1024) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocPitch_v2(nullptr, &n, 64, 64, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocPitch_v2(&p, nullptr, 64, 64, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocManaged(nullptr, 1024, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemGetInfo_v2(nullptr, &n) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemGetInfo_v2(&n, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocAsync(nullptr, 1024, stream) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolCreate(nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetDefaultMemPool(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetMemPool(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemCreate(nullptr, 2 * MiB, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h;
  CHECK(a.cuMemCreate(&h, 2 * MiB, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAddressReserve(nullptr, 2 * MiB, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemGetAllocationGranularity(nullptr, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemGetAllocationGranularity(&n, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemSetAccess(0, 2 * MiB, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuArrayCreate_v2(nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuArray3DCreate_v2(nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMipmappedArrayCreate(nullptr, nullptr, 1) == CUDA_ERROR_INVALID_VALUE);
  CUmodule m;
  CHECK(a.cuModuleLoadData(nullptr, s.fatbin.data()) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuModuleLoadData(&m, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuModuleLoadDataEx(&m, s.fatbin.data(), 2, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuModuleLoadData(&m, s.fatbin.data()) == CUDA_SUCCESS);
  CUfunction f;
  CHECK(a.cuModuleGetFunction(nullptr, m, "coloc_spin") == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuModuleGetFunction(&f, m, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernelEx(nullptr, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuStreamCreate(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuStreamGetCtx(stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuStreamGetCtx_v2(stream, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuStreamIsCapturing(stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuStreamEndCapture(stream, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuEventCreate(nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CUevent e1, e2;
  REQUIRE(a.cuEventCreate(&e1, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventCreate(&e2, 0) == CUDA_SUCCESS);
  CHECK(a.cuEventElapsedTime_v2(nullptr, e1, e2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGraphInstantiateWithFlags(nullptr, nullptr, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGetErrorName(CUDA_SUCCESS, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGetErrorString(CUDA_SUCCESS, nullptr) == CUDA_ERROR_INVALID_VALUE);
  void* fn;
  CHECK(a.cuGetProcAddress_v2(nullptr, &fn, 12000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGetProcAddress_v2("cuInit", nullptr, 12000, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGetProcAddress_v1(nullptr, &fn, 12000, 0) == CUDA_ERROR_INVALID_VALUE);

  CHECK(a.cuEventDestroy_v2(e1) == CUDA_SUCCESS);
  CHECK(a.cuEventDestroy_v2(e2) == CUDA_SUCCESS);
  CHECK(a.cuModuleUnload(m) == CUDA_SUCCESS);
  CHECK(a.cuStreamDestroy_v2(stream) == CUDA_SUCCESS);
}

TEST_CASE("api: garbage and destroyed handles") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CHECK(a.cuCtxSetCurrent(CUcontext(garbage())) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuCtxPushCurrent_v2(CUcontext(garbage())) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuCtxDestroy_v2(CUcontext(garbage())) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuCtxSynchronize_v2(CUcontext(garbage())) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuStreamSynchronize(CUstream(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuStreamQuery(CUstream(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuStreamDestroy_v2(CUstream(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuEventRecord(CUevent(garbage()), nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuEventQuery(CUevent(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuEventSynchronize(CUevent(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CUfunction f;
  CHECK(a.cuModuleGetFunction(&f, CUmodule(garbage()), "coloc_spin") == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuModuleUnload(CUmodule(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuLaunchKernel(CUfunction(garbage()), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) ==
        CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuMemPoolDestroy(CUmemoryPool(garbage())) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolTrimTo(CUmemoryPool(garbage()), 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemRelease(CUmemGenericAllocationHandle(0xdead0000)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuArrayDestroy(CUarray(garbage())) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuGraphLaunch(CUgraphExec(garbage()), nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGraphDestroy(CUgraph(garbage())) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemFree_v2(CUdeviceptr(0xdead0000)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemFree_v2(0) == CUDA_ERROR_INVALID_VALUE);

  // Destroyed handles stay invalid.
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
  CHECK(a.cuStreamSynchronize(st) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_ERROR_INVALID_HANDLE);
  CUevent ev;
  REQUIRE(a.cuEventCreate(&ev, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventDestroy_v2(ev) == CUDA_SUCCESS);
  CHECK(a.cuEventRecord(ev, nullptr) == CUDA_ERROR_INVALID_HANDLE);
  CUdeviceptr p;
  REQUIRE(a.cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
  CHECK(a.cuMemFree_v2(p + 512) == CUDA_ERROR_INVALID_VALUE);  // not the start of an allocation
  REQUIRE(a.cuMemFree_v2(p) == CUDA_SUCCESS);
  CHECK(a.cuMemFree_v2(p) == CUDA_ERROR_INVALID_VALUE);  // double free
  CUarray arr;
  CUDA_ARRAY_DESCRIPTOR d{16, 16, CU_AD_FORMAT_FLOAT, 1};
  REQUIRE(a.cuArrayCreate_v2(&arr, &d) == CUDA_SUCCESS);
  REQUIRE(a.cuArrayDestroy(arr) == CUDA_SUCCESS);
  CHECK(a.cuArrayDestroy(arr) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(a.cuMipmappedArrayDestroy(CUmipmappedArray(garbage())) == CUDA_ERROR_INVALID_HANDLE);

  CUcontext ctx;
  REQUIRE(a.cuCtxCreate_v2(&ctx, 0, 1) == CUDA_SUCCESS);
  CUmodule m;
  REQUIRE(a.cuModuleLoadData(&m, s.fatbin.data()) == CUDA_SUCCESS);
  REQUIRE(a.cuModuleGetFunction(&f, m, "coloc_spin") == CUDA_SUCCESS);
  REQUIRE(a.cuCtxDestroy_v2(ctx) == CUDA_SUCCESS);
  CHECK(a.cuCtxSetCurrent(ctx) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuCtxDestroy_v2(ctx) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(a.cuModuleGetFunction(&f, m, "coloc_spin") == CUDA_ERROR_INVALID_HANDLE);  // went with its context
  CHECK(a.cuCtxDestroy_v2(s.primary) == CUDA_ERROR_INVALID_CONTEXT);  // primary: Release/Reset only
}

TEST_CASE("api: calls that need a current context say so") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUdeviceptr p;
  REQUIRE(a.cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
  CUfunction spin = s.kernel("coloc_spin");
  without_context([&] {
    CUdeviceptr q;
    size_t free, total;
    CUmodule m;
    CUstream st;
    CUevent ev;
    CUdevice dev;
    char buf[16];
    unsigned long long ns = 1000;
    void* params[] = {&ns};
    CHECK(a.cuMemAlloc_v2(&q, 4096) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuMemFree_v2(p) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuMemGetInfo_v2(&free, &total) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuCtxSynchronize() == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuCtxGetDevice(&dev) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuCtxPopCurrent_v2(nullptr) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuModuleLoadData(&m, s.fatbin.data()) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuStreamCreate(&st, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuEventCreate(&ev, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuStreamSynchronize(nullptr) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuMemcpyHtoD_v2(p, buf, sizeof buf) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(a.cuMemsetD8_v2(p, 0, 16) == CUDA_ERROR_INVALID_CONTEXT);
    CUcontext none = reinterpret_cast<CUcontext>(1);
    CHECK(a.cuCtxGetCurrent(&none) == CUDA_SUCCESS);
    CHECK(none == nullptr);
    // Calls about devices need no context.
    int count = 0;
    CHECK(a.cuDeviceGetCount(&count) == CUDA_SUCCESS);
    CHECK(count == 2);
  });
  CHECK(a.cuMemFree_v2(p) == CUDA_SUCCESS);
}

TEST_CASE("api: zero, huge and out-of-range sizes") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUdeviceptr p;
  size_t pitch;
  CHECK(a.cuMemAlloc_v2(&p, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAlloc_v2(&p, 1ull << 63) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuMemAlloc_v2(&p, SIZE_MAX) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuMemAlloc_v2(&p, kDevice0 + 1) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuMemAllocPitch_v2(&p, &pitch, 0, 16, 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocPitch_v2(&p, &pitch, 16, 16, 3) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocPitch_v2(&p, &pitch, SIZE_MAX / 2, SIZE_MAX / 2, 4) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocManaged(&p, 4096, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocAsync(&p, 0, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAllocAsync(&p, 1ull << 62, nullptr) == CUDA_ERROR_OUT_OF_MEMORY);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle h;
  CHECK(a.cuMemCreate(&h, 0, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemCreate(&h, 3 * MiB, &prop, 0) == CUDA_ERROR_INVALID_VALUE);  // not a multiple of 2 MiB
  CHECK(a.cuMemCreate(&h, 64 * GiB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuMemAddressReserve(&p, 3 * MiB, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAddressReserve(&p, 2 * MiB, 3, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY_DESCRIPTOR d{0, 16, CU_AD_FORMAT_FLOAT, 1};
  CUarray arr;
  CHECK(a.cuArrayCreate_v2(&arr, &d) == CUDA_ERROR_INVALID_VALUE);
  d = {16, 16, CU_AD_FORMAT_FLOAT, 3};
  CHECK(a.cuArrayCreate_v2(&arr, &d) == CUDA_ERROR_INVALID_VALUE);
  d = {size_t(1) << 40, size_t(1) << 40, CU_AD_FORMAT_FLOAT, 4};
  CHECK(a.cuArrayCreate_v2(&arr, &d) == CUDA_ERROR_OUT_OF_MEMORY);

  // Copies and sets must stay inside one live allocation.
  REQUIRE(a.cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
  std::vector<char> host(8192, 1);
  CHECK(a.cuMemcpyHtoD_v2(p, host.data(), 4096) == CUDA_SUCCESS);
  CHECK(a.cuMemcpyHtoD_v2(p, host.data(), 4097) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemcpyHtoD_v2(p + 4000, host.data(), 200) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemcpyHtoD_v2(p, nullptr, 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemcpyDtoH_v2(host.data(), p - 16, 32) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemcpyDtoH_v2(host.data(), p, 0) == CUDA_SUCCESS);
  CHECK(a.cuMemcpyDtoD_v2(p, p + 2048, 2048) == CUDA_SUCCESS);
  CHECK(a.cuMemcpyDtoD_v2(p, p + 2048, 2049) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemsetD8_v2(p, 7, 4096) == CUDA_SUCCESS);
  CHECK(a.cuMemsetD8_v2(p, 7, 4097) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemsetD32_v2(p, 7, 1024) == CUDA_SUCCESS);
  CHECK(a.cuMemsetD32_v2(p, 7, 1025) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemsetD32_v2(p + 2, 7, 4) == CUDA_ERROR_INVALID_VALUE);  // misaligned
  CHECK(a.cuMemsetD32_v2(p, 7, SIZE_MAX / 2) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemcpyHtoDAsync_v2(p, host.data(), 4097, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemsetD32Async(p, 0, 1025, nullptr) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuMemFree_v2(p) == CUDA_SUCCESS);
  CHECK(a.cuMemcpyHtoD_v2(p, host.data(), 16) == CUDA_ERROR_INVALID_VALUE);  // use after free
  CHECK(a.cuMemsetD8_v2(p, 0, 16) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("api: devices, attributes and flags") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUdevice d;
  CHECK(a.cuDeviceGet(&d, 2) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(a.cuDeviceGet(&d, -1) == CUDA_ERROR_INVALID_DEVICE);
  REQUIRE(a.cuDeviceGet(&d, 1) == CUDA_SUCCESS);
  CHECK(d == 1);
  char name[8];
  REQUIRE(a.cuDeviceGetName(name, sizeof name, 1) == CUDA_SUCCESS);
  CHECK(std::string(name) == "Sim1");
  REQUIRE(a.cuDeviceGetName(name, 3, 0) == CUDA_SUCCESS);  // truncated, still terminated
  CHECK(std::string(name) == "Si");
  CHECK(a.cuDeviceGetName(name, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetName(name, 8, 5) == CUDA_ERROR_INVALID_DEVICE);
  size_t total;
  REQUIRE(a.cuDeviceTotalMem_v2(&total, 1) == CUDA_SUCCESS);
  CHECK(total == kDevice1);
  CHECK(a.cuDeviceTotalMem_v2(&total, 9) == CUDA_ERROR_INVALID_DEVICE);
  int v = 0, major = 0, minor = 0;
  REQUIRE(a.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0) == CUDA_SUCCESS);
  CHECK(v == 132);
  REQUIRE(a.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == CUDA_SUCCESS);
  CHECK(v == 9);
  REQUIRE(a.cuDeviceComputeCapability(&major, &minor, 1) == CUDA_SUCCESS);
  CHECK(major == 9);
  CHECK(minor == 0);
  CHECK(a.cuDeviceGetAttribute(&v, CUdevice_attribute(0), 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 4) == CUDA_ERROR_INVALID_DEVICE);
  CUuuid u0, u1;
  REQUIRE(a.cuDeviceGetUuid_v2(&u0, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuDeviceGetUuid_v2(&u1, 1) == CUDA_SUCCESS);
  CHECK(std::memcmp(u0.bytes, u1.bytes, sizeof u0.bytes) != 0);
  CUcontext c;
  CHECK(a.cuCtxCreate_v2(&c, 0x100, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuCtxCreate_v2(&c, 0, 7) == CUDA_ERROR_INVALID_DEVICE);
  CUstream st;
  CHECK(a.cuStreamCreate(&st, 0x4) == CUDA_ERROR_INVALID_VALUE);
  CUevent ev;
  CHECK(a.cuEventCreate(&ev, 0x40) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuEventCreate(&ev, CU_EVENT_INTERPROCESS) == CUDA_ERROR_INVALID_VALUE);  // needs DISABLE_TIMING
  CHECK(a.cuInit(1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuInit(0) == CUDA_SUCCESS);  // again: fine
  int version = 0;
  REQUIRE(a.cuDriverGetVersion(&version) == CUDA_SUCCESS);
  CHECK(version == CUDA_VERSION);
}

TEST_CASE("api: the context stack") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUcontext c1, c2, top;
  REQUIRE(a.cuCtxCreate_v4(&c1, nullptr, 0, 0) == CUDA_SUCCESS);  // pushed
  CHECK(s.free_bytes() == before - kContextBytes);                 // a context costs device memory
  REQUIRE(a.cuCtxCreate_v2(&c2, 0, 1) == CUDA_SUCCESS);
  CUdevice d;
  REQUIRE(a.cuCtxGetDevice(&d) == CUDA_SUCCESS);
  CHECK(d == 1);
  REQUIRE(a.cuCtxGetDevice_v2(&d, c1) == CUDA_SUCCESS);
  CHECK(d == 0);
  unsigned version = 0;
  REQUIRE(a.cuCtxGetApiVersion(nullptr, &version) == CUDA_SUCCESS);
  CHECK(version == 3020);
  REQUIRE(a.cuCtxPopCurrent_v2(&top) == CUDA_SUCCESS);
  CHECK(top == c2);
  REQUIRE(a.cuCtxGetCurrent(&top) == CUDA_SUCCESS);
  CHECK(top == c1);
  REQUIRE(a.cuCtxPushCurrent_v2(c2) == CUDA_SUCCESS);
  REQUIRE(a.cuCtxSetCurrent(c1) == CUDA_SUCCESS);  // replaces the top
  REQUIRE(a.cuCtxPopCurrent_v2(&top) == CUDA_SUCCESS);
  CHECK(top == c1);
  REQUIRE(a.cuCtxGetCurrent(&top) == CUDA_SUCCESS);
  CHECK(top == c1);  // c1 was under c2 (replaced) too
  REQUIRE(a.cuCtxDestroy_v2(c2) == CUDA_SUCCESS);
  REQUIRE(a.cuCtxDestroy_v2(c1) == CUDA_SUCCESS);
  REQUIRE(a.cuCtxSetCurrent(s.primary) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);
  unsigned flags = 0;
  int active = 0;
  REQUIRE(a.cuDevicePrimaryCtxGetState(0, &flags, &active) == CUDA_SUCCESS);
  CHECK(active == 1);
  REQUIRE(a.cuDevicePrimaryCtxGetState(1, &flags, &active) == CUDA_SUCCESS);
  CHECK(active == 0);
  CHECK(a.cuDevicePrimaryCtxRelease_v2(1) == CUDA_ERROR_INVALID_CONTEXT);  // never retained
}
}
