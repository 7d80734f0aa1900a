// cuGetProcAddress resolves entry points the way the real driver does (versions, per-thread
// default stream), and simgpu exports exactly the driver's symbols.
#include <set>
#include <sstream>

#include "coloc/cuda_abi.h"
#include "sim.h"

using namespace simtest;

namespace {
std::set<std::string> exported(const std::string& lib) {
  auto r = coloc::test::run({"nm", "-D", "--defined-only", lib}, coloc::test::Env());
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  std::set<std::string> out;
  std::istringstream in(r.out);
  std::string addr, type, name;
  while (in >> addr >> type >> name) out.insert(name);
  return out;
}
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("resolver: every entry point at CUDA 12.0 and 13.0, legacy and per-thread, is implemented") {
  Sim& s = sim();
  Api& a = s.api;
  std::set<std::string> names;
  for (const auto& row : coloc::kAbiTable) names.insert(row.name);
  for (const std::string& name : names) {
    for (int version : {12000, 13000}) {
      for (bool pt : {false, true}) {
        CAPTURE(name);
        CAPTURE(version);
        CAPTURE(pt);
        const coloc::AbiRow* row = nullptr;
        if (coloc::abi_resolve(name.c_str(), version, pt, &row) != coloc::AbiLookup::found) continue;
        void* fn = nullptr;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        cuuint64_t flags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        CHECK(a.cuGetProcAddress_v2(name.c_str(), &fn, version, flags, &status) == CUDA_SUCCESS);
        CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);
        CHECK(fn == dlsym(a.lib, row->symbol));  // the very symbol the table names
        void* fn1 = nullptr;
        CHECK(a.cuGetProcAddress_v1(name.c_str(), &fn1, version, flags) == CUDA_SUCCESS);
        CHECK(fn1 == fn);
      }
    }
  }
}

TEST_CASE("resolver: versions, _ptsz and _ptds as the driver picks them") {
  Api& a = sim().api;
  auto resolve = [&](const char* name, int version, cuuint64_t flags) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status;
    CUresult rc = a.cuGetProcAddress_v2(name, &fn, version, flags, &status);
    return rc == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS ? fn : nullptr;
  };
  auto sym = [&](const char* s) { return dlsym(a.lib, s); };
  const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  CHECK(resolve("cuMemAlloc", 12000, 0) == sym("cuMemAlloc_v2"));
  CHECK(resolve("cuLaunchKernel", 12000, 0) == sym("cuLaunchKernel"));
  CHECK(resolve("cuLaunchKernel", 12000, pt) == sym("cuLaunchKernel_ptsz"));
  CHECK(resolve("cuLaunchKernel", 12000, pt | CU_GET_PROC_ADDRESS_LEGACY_STREAM) == sym("cuLaunchKernel_ptsz"));
  CHECK(resolve("cuMemcpyHtoD", 13000, pt) == sym("cuMemcpyHtoD_v2_ptds"));
  CHECK(resolve("cuMemcpyHtoD", 13000, 0) == sym("cuMemcpyHtoD_v2"));
  CHECK(resolve("cuCtxCreate", 12000, 0) == sym("cuCtxCreate_v3"));
  CHECK(resolve("cuCtxCreate", 13000, 0) == sym("cuCtxCreate_v4"));
  CHECK(resolve("cuCtxSynchronize", 12000, 0) == sym("cuCtxSynchronize"));
  CHECK(resolve("cuCtxSynchronize", 13000, 0) == sym("cuCtxSynchronize_v2"));
  CHECK(resolve("cuEventElapsedTime", 13000, 0) == sym("cuEventElapsedTime_v2"));
  CHECK(resolve("cuGraphInstantiate", 12000, 0) == sym("cuGraphInstantiateWithFlags"));
  CHECK(resolve("cuStreamBeginCapture", 12000, pt) == sym("cuStreamBeginCapture_v2_ptsz"));
  CHECK(resolve("cuMemAllocAsync", 12000, pt) == sym("cuMemAllocAsync_ptsz"));
  CHECK(resolve("cuGetProcAddress", 12000, 0) == sym("cuGetProcAddress_v2"));
  CHECK(resolve("cuMemAlloc", 12000, pt) == sym("cuMemAlloc_v2"));  // no per-thread form: the legacy one

  void* fn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CHECK(a.cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(fn == nullptr);
  CHECK(a.cuGetProcAddress_v2("cuNoSuchThing", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(a.cuGetProcAddress_v2("cuMemAlloc_v2", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);  // not a base name
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // Exported by the driver but not implemented by simgpu: not found, never a stub pointer.
  CHECK(a.cuGetProcAddress_v2("cuDeviceGetPCIBusId", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK(a.cuGetProcAddress_v2("cuserid", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);  // libc's, not the driver's
  CHECK(a.cuGetProcAddress_v2("malloc", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(a.cuGetProcAddress_v2("", &fn, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);
  CHECK(a.cuGetProcAddress_v2("cuInit", &fn, 12000, 4, &status) == CUDA_ERROR_INVALID_VALUE);  // unknown flag bit
  CHECK(a.cuGetProcAddress_v2("cuInit", &fn, CUDA_VERSION + 10, 0, &status) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuGetProcAddress_v2("cuInit", &fn, 12000, 0, nullptr) == CUDA_SUCCESS);  // the status is optional

  const void* table = reinterpret_cast<const void*>(1);
  CUuuid id{};
  CHECK(a.cuGetExportTable(&table, &id) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(table == nullptr);
}

TEST_CASE("exports: every driver symbol, only cu* symbols; the rest return CUDA_ERROR_NOT_SUPPORTED") {
  Api& a = sim().api;
  auto mine = exported(coloc::test::build_path("sim/libcuda.so.1"));
  auto driver = exported(std::string(COLOC_CUDA_HOME) + "/lib64/stubs/libcuda.so");
  for (const std::string& s : mine) {
    CAPTURE(s);
    CHECK(s.rfind("cu", 0) == 0);
  }
  for (const std::string& s : driver) {
    CAPTURE(s);
    CHECK(mine.count(s) == 1);
  }
  for (const auto& row : coloc::kAbiTable) CHECK(mine.count(row.symbol) == 1);
  auto pci = a.load<CUresult (*)(char*, int, CUdevice)>("cuDeviceGetPCIBusId");
  char bus[32];
  CHECK(pci(bus, sizeof bus, 0) == CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("errors: names and strings for every CUresult, CUDA_ERROR_INVALID_VALUE for others") {
  Api& a = sim().api;
  const char* s = nullptr;
  REQUIRE(a.cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s) == CUDA_SUCCESS);
  CHECK(std::string(s) == "CUDA_ERROR_OUT_OF_MEMORY");
  REQUIRE(a.cuGetErrorName(CUDA_ERROR_NOT_FOUND, &s) == CUDA_SUCCESS);
  CHECK(std::string(s) == "CUDA_ERROR_NOT_FOUND");
  REQUIRE(a.cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s) == CUDA_SUCCESS);
  CHECK(std::string(s).find("parameters") != std::string::npos);
  REQUIRE(a.cuGetErrorName(CUDA_ERROR_UNKNOWN, &s) == CUDA_SUCCESS);
  CHECK(std::string(s) == "CUDA_ERROR_UNKNOWN");
  CHECK(a.cuGetErrorName(CUresult(12345), &s) == CUDA_ERROR_INVALID_VALUE);
  CHECK(s == nullptr);
  CHECK(a.cuGetErrorString(CUresult(-1), &s) == CUDA_ERROR_INVALID_VALUE);
}
}
