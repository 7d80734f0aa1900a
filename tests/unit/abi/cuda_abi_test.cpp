// Checks include/coloc/cuda_abi.h against the installed CUDA toolkit: cudaTypedefs.h (which
// names every ABI of an entry point by the version that introduced it) and the stub libcuda.so
// (which exports every symbol the real driver exports).
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <algorithm>
#include <set>
#include <sstream>
#include <string>

#include "coloc/cuda_abi.h"

using coloc::AbiStream;
using coloc::kAbiTable;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// (name, version, stream) triples named by PFN_ typedefs in cudaTypedefs.h.
std::set<std::tuple<std::string, int, AbiStream>> typedef_abis() {
  std::string text = slurp(std::string(COLOC_CUDA_HOME) + "/include/cudaTypedefs.h");
  REQUIRE_MESSAGE(!text.empty(), "cannot read cudaTypedefs.h under " COLOC_CUDA_HOME);
  std::set<std::tuple<std::string, int, AbiStream>> out;
  std::regex re(R"(PFN_(cu[A-Za-z0-9]+)_v(\d+)(_pt[sd][sz])?\))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace((*it)[1].str(), std::stoi((*it)[2].str()), (*it)[3].matched ? AbiStream::per_thread : AbiStream::legacy);
  return out;
}
}  // namespace

TEST_SUITE("abi") {
TEST_CASE("every row names a PFN typedef of cudaTypedefs.h") {
  auto abis = typedef_abis();
  for (const auto& r : kAbiTable) {
    CAPTURE(r.name);
    CAPTURE(r.version);
    if (std::string(r.name) == "cuGraphInstantiate" && r.version == 12000) continue;  // cuda.h alias
    CHECK(abis.count({r.name, r.version, r.stream}) == 1);
  }
}

TEST_CASE("every PFN version of a listed entry point is in the table") {
  std::set<std::string> names;
  for (const auto& r : kAbiTable) names.insert(r.name);
  std::set<std::tuple<std::string, int, AbiStream>> rows;
  for (const auto& r : kAbiTable) rows.emplace(r.name, r.version, r.stream);
  for (const auto& [name, version, stream] : typedef_abis()) {
    if (!names.count(name)) continue;
    CAPTURE(name);
    CAPTURE(version);
    CHECK(rows.count({name, version, stream}) == 1);
  }
}

TEST_CASE("every symbol is exported by the toolkit's stub driver") {
  std::string stub = std::string(COLOC_CUDA_HOME) + "/lib64/stubs/libcuda.so";
  void* h = dlopen(stub.c_str(), RTLD_LAZY | RTLD_LOCAL);
  REQUIRE_MESSAGE(h != nullptr, "cannot load " << stub);
  for (const auto& r : kAbiTable) {
    CAPTURE(r.symbol);
    CHECK(dlsym(h, r.symbol) != nullptr);
  }
  dlclose(h);
}

TEST_CASE("legacy ABIs of one entry point are numbered in version order") {
  std::map<std::string, std::vector<const coloc::AbiRow*>> by_name;
  for (const auto& r : kAbiTable)
    if (r.stream == AbiStream::legacy && std::string(r.name) != "cuGraphInstantiate") by_name[r.name].push_back(&r);
  for (auto& [name, rows] : by_name) {
    std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->version < b->version; });
    for (size_t i = 0; i < rows.size(); ++i) {
      std::string expect = i == 0 ? name : name + "_v" + std::to_string(i + 1);
      CHECK(rows[i]->symbol == expect);
    }
  }
}

TEST_CASE("resolution picks what the driver picks") {
  const coloc::AbiRow* row = nullptr;
  auto sym = [&](const char* n, int v, bool pt) -> std::string {
    row = nullptr;
    return coloc::abi_resolve(n, v, pt, &row) == coloc::AbiLookup::found ? row->symbol : "<none>";
  };
  CHECK(sym("cuMemAlloc", 3020, false) == "cuMemAlloc_v2");
  CHECK(sym("cuMemAlloc", 3010, false) == "cuMemAlloc");
  CHECK(sym("cuMemAlloc", 12000, true) == "cuMemAlloc_v2");  // no per-thread variant exists
  CHECK(sym("cuLaunchKernel", 12000, false) == "cuLaunchKernel");
  CHECK(sym("cuLaunchKernel", 12000, true) == "cuLaunchKernel_ptsz");
  CHECK(sym("cuMemcpyHtoD", 13000, true) == "cuMemcpyHtoD_v2_ptds");
  CHECK(sym("cuCtxCreate", 12000, false) == "cuCtxCreate_v3");
  CHECK(sym("cuCtxCreate", 13000, false) == "cuCtxCreate_v4");
  CHECK(sym("cuCtxGetDevice", 12000, false) == "cuCtxGetDevice");
  CHECK(sym("cuCtxGetDevice", 13000, false) == "cuCtxGetDevice_v2");
  CHECK(sym("cuEventElapsedTime", 13000, false) == "cuEventElapsedTime_v2");
  CHECK(sym("cuGraphInstantiate", 12000, false) == "cuGraphInstantiateWithFlags");
  CHECK(sym("cuGraphInstantiate", 11000, false) == "cuGraphInstantiate_v2");
  CHECK(sym("cuStreamBeginCapture", 12000, true) == "cuStreamBeginCapture_v2_ptsz");
  CHECK(sym("cuGetProcAddress", 12000, false) == "cuGetProcAddress_v2");
  CHECK(coloc::abi_resolve("cuMemAllocAsync", 11000, false, &row) == coloc::AbiLookup::version_not_sufficient);
  CHECK(coloc::abi_resolve("cuNoSuchThing", 13000, false, &row) == coloc::AbiLookup::not_found);
}
}
