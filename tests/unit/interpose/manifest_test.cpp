// Unit tests of the hook manifest (interpose/hooks.def, as interpose/hook_table.h sees it), checked
// against the driver ABI table (include/coloc/cuda_abi.h, itself checked against cudaTypedefs.h
// and the toolkit's stub libcuda.so by tests/unit/abi).
#include "interpose/hook_table.h"

#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>

#include "coloc/cuda_abi.h"

using namespace coloc::interpose;

TEST_SUITE("interpose") {

TEST_CASE("manifest: every hook is a driver export of a known ABI") {
  std::set<std::string> names;
  for (unsigned i = 0; i < kHookCount; ++i) {
    CAPTURE(kFnName[i]);
    CHECK(names.insert(kFnName[i]).second);  // no hook twice
    CHECK(coloc::abi_row_for_symbol(kFnName[i]) != nullptr);
  }
  for (unsigned i = kHookCount; i < kFnCount; ++i) {
    CAPTURE(kFnName[i]);
    CHECK(names.insert(kFnName[i]).second);  // a driver call is not also a hook
  }
}

TEST_CASE("manifest: every ABI of a hooked entry point is hooked (no path around the limit)") {
  std::set<std::string> hooked;
  for (unsigned i = 0; i < kHookCount; ++i) hooked.insert(coloc::abi_row_for_symbol(kFnName[i])->name);
  for (const coloc::AbiRow& r : coloc::kAbiTable) {
    if (!hooked.count(r.name)) continue;
    CAPTURE(r.symbol);
    CHECK(find_hook(r.symbol) >= 0);
  }
}

TEST_CASE("manifest: a per-thread variant has its legacy twin's policy") {
  for (unsigned i = 0; i < kHookCount; ++i) {
    std::string n = kFnName[i];
    if (!n.ends_with("_ptsz")) continue;
    int twin = find_hook(n.substr(0, n.size() - 5).c_str());
    CAPTURE(n);
    REQUIRE(twin >= 0);
    CHECK(kPolicy[twin] == kPolicy[i]);
  }
}

TEST_CASE("manifest: find_hook finds exactly the hooks") {
  for (unsigned i = 0; i < kHookCount; ++i) CHECK(find_hook(kFnName[i]) == int(i));
  for (unsigned i = 1; i < kHookCount; ++i) CHECK(kHooksByName[i - 1].name < kHooksByName[i].name);
  for (const char* n : {"", "c", "cu", "cuMemAlloc_v", "cuMemAlloc_v22", "cuMemAlloc_v2 ", "cuModuleLoadData",
                        "dlsym", "cuMemAllocX", "zz"})
    CHECK(find_hook(n) == -1);
  CHECK(find_hook(nullptr) == -1);
}

TEST_CASE("manifest: launches are gated, allocations charged") {
  CHECK(kPolicy[index(Fn::cuLaunchKernel)] == Policy::launch);
  CHECK(kPolicy[index(Fn::cuGraphLaunch_ptsz)] == Policy::graph_launch);  // charge first, then the gate
  CHECK(kPolicy[index(Fn::cuMemAlloc_v2)] == Policy::alloc);
  CHECK(kPolicy[index(Fn::cuMemFree_v2)] == Policy::release);
  CHECK(kPolicy[index(Fn::cuDevicePrimaryCtxRetain)] == Policy::context);
  CHECK(kPolicy[index(Fn::cuGetProcAddress_v2)] == Policy::resolve);
}

TEST_CASE("manifest: legacy and multi-device launches are gated launches") {
  for (Fn f : {Fn::cuLaunch, Fn::cuLaunchGrid, Fn::cuLaunchGridAsync, Fn::cuLaunchCooperativeKernelMultiDevice})
    CHECK(kPolicy[index(f)] == Policy::launch);
}

TEST_CASE("manifest: every ABI of every stream-ordered copy and memset passes the copy gate") {
  const std::set<std::string> copies{"cuMemcpyAsync",      "cuMemcpyHtoDAsync",    "cuMemcpyDtoHAsync",
                                     "cuMemcpyDtoDAsync",  "cuMemcpyPeerAsync",    "cuMemcpy2DAsync",
                                     "cuMemcpy3DAsync",    "cuMemcpy3DPeerAsync",  "cuMemcpyBatchAsync",
                                     "cuMemcpy3DBatchAsync", "cuMemsetD8Async",    "cuMemsetD16Async",
                                     "cuMemsetD32Async",   "cuMemsetD2D8Async",    "cuMemsetD2D16Async",
                                     "cuMemsetD2D32Async"};
  std::set<std::string> seen;
  unsigned per_thread = 0;
  for (const coloc::AbiRow& r : coloc::kAbiTable) {
    if (!copies.count(r.name)) continue;
    CAPTURE(r.symbol);
    seen.insert(r.name);
    int h = find_hook(r.symbol);
    REQUIRE(h >= 0);
    CHECK(kPolicy[h] == Policy::copy);
    if (r.stream == coloc::AbiStream::per_thread) ++per_thread;
  }
  CHECK(seen == copies);  // cuda_abi.h lists each of them
  CHECK(per_thread == 18);
  for (unsigned i = 0; i < kHookCount; ++i)
    if (kPolicy[i] == Policy::copy) CHECK(copies.count(coloc::abi_row_for_symbol(kFnName[i])->name) == 1);
}

}  // TEST_SUITE
