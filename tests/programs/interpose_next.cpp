// interpose_next — the dlsym test program. Linked against libinterpose_next_a.so then
// libinterpose_next_b.so (both define coloc_test_symbol), not against libcuda. Prints one JSON line:
//   next_from_a       what dlsym(RTLD_NEXT, "coloc_test_symbol") from library A calls (2 = B's)
//   default           what dlsym(RTLD_DEFAULT, "coloc_test_symbol") calls (1 = A's)
//   cu_next_before    where dlsym(RTLD_NEXT, "cuMemAlloc_v2") from A points before libcuda is loaded
//   cu_next_after     ... after dlopen("libcuda.so.1")
//   cu_handle         where dlsym(libcuda, "cuMemAlloc_v2") points
//   unhooked_handle   where dlsym(libcuda, "cuModuleLoadData") points (not hooked)
//   missing           dlsym(libcuda, "coloc_no_such_symbol") is null and dlerror() says why
// A location is {"export": symbol, "library": file} from dladdr, or null.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

extern "C" int coloc_test_symbol();
extern "C" void* coloc_test_next(const char* name);

namespace {

nlohmann::json where(void* p) {
  Dl_info info{};
  if (!p || !dladdr(p, &info)) return nullptr;
  const char* lib = info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
  return {{"export", info.dli_sname ? info.dli_sname : ""},
          {"library", lib ? lib + 1 : (info.dli_fname ? info.dli_fname : "")}};
}

}  // namespace

int main() {
  nlohmann::ordered_json out;
  using Fn = int (*)();
  auto next = reinterpret_cast<Fn>(coloc_test_next("coloc_test_symbol"));
  out["next_from_a"] = next ? next() : 0;
  auto def = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "coloc_test_symbol"));
  out["default"] = def ? def() : 0;
  out["direct"] = coloc_test_symbol();
  out["cu_next_before"] = where(coloc_test_next("cuMemAlloc_v2"));
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  out["dlopen"] = h != nullptr;
  out["cu_next_after"] = where(coloc_test_next("cuMemAlloc_v2"));
  out["cu_handle"] = where(h ? dlsym(h, "cuMemAlloc_v2") : nullptr);
  out["unhooked_handle"] = where(h ? dlsym(h, "cuModuleLoadData") : nullptr);
  dlerror();
  void* missing = h ? dlsym(h, "coloc_no_such_symbol") : nullptr;
  const char* err = dlerror();
  out["missing"] = missing == nullptr && err != nullptr;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
