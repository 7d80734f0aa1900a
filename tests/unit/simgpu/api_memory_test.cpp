// What each kind of allocation costs the simulated device, to the byte, as cuMemGetInfo shows it.
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "sim.h"

using namespace simtest;

TEST_SUITE("simgpu") {
TEST_CASE("memory: cuMemAlloc charges its size rounded up to 512 bytes; cuMemFree gives it back") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUdeviceptr p1, p2, p3;
  REQUIRE(a.cuMemAlloc_v2(&p1, 1) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 512);
  REQUIRE(a.cuMemAlloc_v2(&p2, 513) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 512 - 1024);
  REQUIRE(a.cuMemAlloc_v2(&p3, 3 * MiB) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 1536 - 3 * MiB);
  CHECK(p1 % 512 == 0);
  CHECK(p3 % (2 * MiB) == 0);  // large allocations are 2 MiB-aligned
  REQUIRE(a.cuMemFree_v2(p2) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFree_v2(p1) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFree_v2(p3) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);
  size_t free = 0, total = 0;
  REQUIRE(a.cuMemGetInfo_v2(&free, &total) == CUDA_SUCCESS);
  CHECK(total == kDevice0);
}

TEST_CASE("memory: the device fills up, and a full device says CUDA_ERROR_OUT_OF_MEMORY") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUdeviceptr big, more;
  REQUIRE(a.cuMemAlloc_v2(&big, before) == CUDA_SUCCESS);  // everything that is left
  CHECK(s.free_bytes() == 0);
  CHECK(a.cuMemAlloc_v2(&more, 1) == CUDA_ERROR_OUT_OF_MEMORY);
  CUcontext c;
  CHECK(a.cuCtxCreate_v2(&c, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);  // a context needs room too
  REQUIRE(a.cuMemFree_v2(big) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);
}

TEST_CASE("memory: pitch, managed memory and arrays") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUdeviceptr p;
  size_t pitch = 0;
  REQUIRE(a.cuMemAllocPitch_v2(&p, &pitch, 100, 3, 4) == CUDA_SUCCESS);
  CHECK(pitch == 512);
  CHECK(s.free_bytes() == before - 3 * 512);
  std::vector<char> row(100, 'x');
  CHECK(a.cuMemcpyHtoD_v2(p + 2 * pitch, row.data(), row.size()) == CUDA_SUCCESS);  // the last row is usable
  REQUIRE(a.cuMemFree_v2(p) == CUDA_SUCCESS);

  CUdeviceptr m;
  REQUIRE(a.cuMemAllocManaged(&m, 64 * MiB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);  // host memory until a device touches it
  std::memset(reinterpret_cast<void*>(m), 1, 4096);  // the host may use it directly
  CHECK(a.cuMemsetD8_v2(m, 2, 64 * MiB) == CUDA_SUCCESS);
  CHECK(reinterpret_cast<unsigned char*>(m)[4095] == 2);
  REQUIRE(a.cuMemFree_v2(m) == CUDA_SUCCESS);

  CUarray arr;
  CUDA_ARRAY_DESCRIPTOR d2{100, 100, CU_AD_FORMAT_FLOAT, 1};  // 40000 bytes -> 40448
  REQUIRE(a.cuArrayCreate_v2(&arr, &d2) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 40448);
  CUarray arr3;
  CUDA_ARRAY3D_DESCRIPTOR d3{64, 64, 64, CU_AD_FORMAT_HALF, 2, 0};  // 1 MiB
  REQUIRE(a.cuArray3DCreate_v2(&arr3, &d3) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 40448 - MiB);
  CUmipmappedArray mip;
  CUDA_ARRAY3D_DESCRIPTOR dm{256, 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};  // 256², 128², ..., 1² texels of 4 B
  CHECK(a.cuMipmappedArrayCreate(&mip, &dm, 10) == CUDA_ERROR_INVALID_VALUE);  // at most 9 levels
  REQUIRE(a.cuMipmappedArrayCreate(&mip, &dm, 9) == CUDA_SUCCESS);
  uint64_t texels = 0;
  for (uint64_t e = 256; e >= 1; e /= 2) texels += e * e;
  CHECK(s.free_bytes() == before - 40448 - MiB - ((texels * 4 + 511) / 512 * 512));
  CHECK(a.cuArrayDestroy(CUarray(mip)) == CUDA_ERROR_INVALID_HANDLE);  // not an array
  REQUIRE(a.cuMipmappedArrayDestroy(mip) == CUDA_SUCCESS);
  REQUIRE(a.cuArrayDestroy(arr3) == CUDA_SUCCESS);
  REQUIRE(a.cuArrayDestroy(arr) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);
}

TEST_CASE("memory: a block freed behind queued work is reused at once on its own stream, not on another") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUmemoryPool pool;
  REQUIRE(a.cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  auto reserved = [&] {
    cuuint64_t v = 0;
    REQUIRE(a.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS);
    return uint64_t(v);
  };
  CUstream st, other;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamCreate(&other, 0) == CUDA_SUCCESS);
  CUfunction spin = s.kernel("coloc_spin");
  unsigned long long ns = 200'000'000;  // 200 ms of queued work: the free waits behind it
  void* params[] = {&ns};
  CUdeviceptr p, q, r;
  REQUIRE(a.cuMemAllocAsync(&p, 3 * MiB, st) == CUDA_SUCCESS);
  REQUIRE(a.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, st, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(p, st) == CUDA_SUCCESS);
  CHECK(reserved() == 4 * MiB);
  REQUIRE(a.cuMemAllocAsync(&q, 3 * MiB, other) == CUDA_SUCCESS);  // another stream: a new chunk
  CHECK(q != p);
  CHECK(reserved() == 8 * MiB);
  REQUIRE(a.cuMemAllocAsync(&r, 2 * MiB, st) == CUDA_SUCCESS);  // its own stream: the freed block
  CHECK(r == p);
  CHECK(reserved() == 8 * MiB);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);  // the queued free ran: r stays live
  CHECK(a.cuMemsetD8_v2(r, 1, 2 * MiB) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(r, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(q, other) == CUDA_SUCCESS);
  REQUIRE(a.cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(reserved() == 0);
  cuuint64_t reset = 0;  // the default pool outlives this test: leave its high-water marks as found
  REQUIRE(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &reset) == CUDA_SUCCESS);
  REQUIRE(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &reset) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(other) == CUDA_SUCCESS);
}

TEST_CASE("memory: pools charge reserved memory, keep freed blocks until trimmed") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUmemoryPool pool;
  REQUIRE(a.cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS);
  CUmemoryPool current;
  REQUIRE(a.cuDeviceGetMemPool(&current, 0) == CUDA_SUCCESS);
  CHECK(current == pool);
  auto attr = [&](CUmemPool_attribute at) {
    cuuint64_t v = 0;
    REQUIRE(a.cuMemPoolGetAttribute(pool, at, &v) == CUDA_SUCCESS);
    return uint64_t(v);
  };
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  CUdeviceptr p, q;
  REQUIRE(a.cuMemAllocAsync(&p, MiB, st) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == MiB);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MiB);
  CHECK(s.free_bytes() == before - 2 * MiB);
  CHECK(a.cuMemsetD8_v2(p, 1, MiB) == CUDA_SUCCESS);  // pool memory is device memory
  REQUIRE(a.cuMemFreeAsync(p, st) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MiB);  // still reserved
  CHECK(s.free_bytes() == before - 2 * MiB);
  REQUIRE(a.cuMemAllocAsync(&q, 512 * 1024, st) == CUDA_SUCCESS);  // reuses the freed chunk
  CHECK(q == p);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MiB);
  REQUIRE(a.cuMemFreeAsync(q, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);  // trims to the release threshold (0)
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 2 * MiB);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == MiB);
  CHECK(s.free_bytes() == before);

  cuuint64_t threshold = 8 * MiB;
  REQUIRE(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS);
  REQUIRE(a.cuMemAllocAsync(&p, 3 * MiB, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(p, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * MiB);  // under the threshold: kept
  REQUIRE(a.cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  threshold = 0;
  REQUIRE(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) == CUDA_SUCCESS);
  cuuint64_t reset = 0, one = 1;
  CHECK(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &reset) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0);
  CHECK(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reset) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemPoolDestroy(pool) == CUDA_ERROR_INVALID_VALUE);  // the default pool stays

  // An explicit pool; destroying it gives everything back.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool mine;
  REQUIRE(a.cuMemPoolCreate(&mine, &props) == CUDA_SUCCESS);
  props.location.id = 5;
  CUmemoryPool bad;
  CHECK(a.cuMemPoolCreate(&bad, &props) == CUDA_ERROR_INVALID_DEVICE);
  REQUIRE(a.cuMemAllocFromPoolAsync(&p, 5 * MiB, mine, st) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 6 * MiB);
  CHECK(a.cuMemAllocFromPoolAsync(&q, MiB, CUmemoryPool(uintptr_t(0xbad0)), st) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuMemFree_v2(p) == CUDA_SUCCESS);  // cuMemFree takes pool memory back too
  CHECK(a.cuMemFree_v2(p) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuMemAllocFromPoolAsync(&p, 5 * MiB, mine, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemPoolDestroy(mine) == CUDA_SUCCESS);
  CHECK(a.cuMemPoolTrimTo(mine, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(s.free_bytes() == before);
  REQUIRE(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

TEST_CASE("memory: VMM charges at cuMemCreate, maps memfd-backed pages, frees when released and unmapped") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t gran = 0;
  REQUIRE(a.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == CUDA_SUCCESS);
  CHECK(gran == 2 * MiB);
  CHECK(a.cuMemGetAllocationGranularity(&gran, &prop, CUmemAllocationGranularity_flags(7)) == CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h;
  REQUIRE(a.cuMemCreate(&h, 4 * MiB, &prop, 0) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 4 * MiB);

  CUdeviceptr va;
  REQUIRE(a.cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 4 * MiB);  // address space costs nothing
  CHECK(a.cuMemMap(va + MiB, 2 * MiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);        // misaligned
  CHECK(a.cuMemMap(va, 6 * MiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);              // past the handle
  CHECK(a.cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);    // past the reservation
  REQUIRE(a.cuMemMap(va, 4 * MiB, 0, h, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuMemMap(va + 4 * MiB, 2 * MiB, 2 * MiB, h, 0) == CUDA_SUCCESS);  // the same memory again
  CHECK(a.cuMemMap(va, 2 * MiB, 0, h, 0) == CUDA_ERROR_INVALID_VALUE);        // already mapped
  std::vector<char> host(16, 'v');
  CHECK(a.cuMemcpyHtoD_v2(va, host.data(), 16) == CUDA_ERROR_INVALID_VALUE);  // no access yet
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  REQUIRE(a.cuMemSetAccess(va, 6 * MiB, &access, 1) == CUDA_SUCCESS);
  CHECK(a.cuMemSetAccess(va, 8 * MiB, &access, 1) == CUDA_ERROR_INVALID_VALUE);  // not all mapped
  REQUIRE(a.cuMemcpyHtoD_v2(va + 2 * MiB, host.data(), 16) == CUDA_SUCCESS);
  std::vector<char> back(16, 0);
  REQUIRE(a.cuMemcpyDtoH_v2(back.data(), va + 4 * MiB, 16) == CUDA_SUCCESS);  // the second mapping sees it
  CHECK(back == host);
  CHECK(a.cuMemsetD8_v2(va + 4 * MiB - 8, 0, 16) == CUDA_SUCCESS);  // contiguous mappings form one range

  CHECK(a.cuMemAddressFree(va, 8 * MiB) == CUDA_ERROR_INVALID_VALUE);  // still mapped
  REQUIRE(a.cuMemRelease(h) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - 4 * MiB);  // still mapped: still there
  CHECK(a.cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemUnmap(va, 3 * MiB) == CUDA_ERROR_INVALID_VALUE);  // splits a mapping
  REQUIRE(a.cuMemUnmap(va, 6 * MiB) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);
  CHECK(a.cuMemcpyHtoD_v2(va, host.data(), 16) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuMemAddressFree(va, 4 * MiB) == CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  REQUIRE(a.cuMemAddressFree(va, 8 * MiB) == CUDA_SUCCESS);

  prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  REQUIRE(a.cuMemCreate(&h, 2 * MiB, &prop, 0) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before);  // host-located: no device memory
  REQUIRE(a.cuMemRelease(h) == CUDA_SUCCESS);
}

TEST_CASE("memory: destroying a context frees what it allocated") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  CUcontext c;
  REQUIRE(a.cuCtxCreate_v2(&c, 0, 0) == CUDA_SUCCESS);
  CUdeviceptr p;
  REQUIRE(a.cuMemAlloc_v2(&p, 100 * MiB) == CUDA_SUCCESS);
  CUarray arr;
  CUDA_ARRAY_DESCRIPTOR d{1024, 1024, CU_AD_FORMAT_FLOAT, 1};
  REQUIRE(a.cuArrayCreate_v2(&arr, &d) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == before - kContextBytes - 100 * MiB - 4 * MiB);
  REQUIRE(a.cuCtxDestroy_v2(c) == CUDA_SUCCESS);
  s.use_primary();
  CHECK(s.free_bytes() == before);
  CHECK(a.cuMemFree_v2(p) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuArrayDestroy(arr) == CUDA_ERROR_INVALID_HANDLE);
}
}

TEST_SUITE("simgpu") {
TEST_CASE("memory: many threads allocating and freeing keep the books exact") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  const uint64_t before = s.free_bytes();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (a.cuCtxSetCurrent(s.primary) != CUDA_SUCCESS) ++failures;
      std::mt19937 rng{static_cast<unsigned>(t)};
      std::vector<CUdeviceptr> live;
      for (int i = 0; i < 1500; ++i) {
        if (!live.empty() && rng() % 2) {
          size_t k = rng() % live.size();
          if (a.cuMemFree_v2(live[k]) != CUDA_SUCCESS) ++failures;
          live.erase(live.begin() + long(k));
          continue;
        }
        CUdeviceptr p;
        size_t bytes = 1 + rng() % (4 << 20);
        if (a.cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
          ++failures;
          continue;
        }
        if (a.cuMemsetD8_v2(p, uint8_t(t), std::min<size_t>(bytes, 4096)) != CUDA_SUCCESS) ++failures;
        live.push_back(p);
      }
      for (CUdeviceptr p : live)
        if (a.cuMemFree_v2(p) != CUDA_SUCCESS) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(s.free_bytes() == before);
}
}
