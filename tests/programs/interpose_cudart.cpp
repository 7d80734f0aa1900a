// interpose_cudart — reaches the driver the way cudart does: it is not linked against libcuda; it
// dlopen()s "libcuda.so.1", takes cuGetProcAddress_v2 with dlsym(handle, ...), and resolves every
// other entry point through it, before cuInit. Modes (one JSON line each):
//
//   resolve VERSION FLAGS        for a list of entry points: rc of cuGetProcAddress_v2 and which
//                                export the answer is (dladdr: symbol name and library)
//   run VERSION FLAGS SIZE N     resolve, then cuInit, primary context, cuMemAlloc(SIZE) (rc),
//                                cuMemAlloc(1 MiB) (rc), cuMemGetInfo, N launches of coloc_spin(0)
//                                with cuLaunchKernel, synchronize, free
//   hooks [dlopen]               calls every hook of interpose/hooks.def with zero arguments,
//                                found with dlsym(RTLD_DEFAULT) or, with "dlopen", in
//                                dlopen("libcuda.so.1"); prints each result (the no-driver test)
//
// FLAGS: 0 or "ptsz" (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
#define __CUDA_API_VERSION_INTERNAL 1  // declare every ABI under its own export name
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "coloc/size.h"
#include "tools/workload/kernels.h"

using json = nlohmann::ordered_json;

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "interpose_cudart: %s\n", what.c_str());
  std::exit(2);
}

void* open_driver() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) fail(std::string("dlopen libcuda.so.1: ") + dlerror());
  return h;
}

GetProc resolver(void* h) {
  auto f = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (!f) fail("dlsym(cuGetProcAddress_v2) failed");
  return f;
}

cuuint64_t flags_arg(const char* s) {
  return std::strcmp(s, "ptsz") == 0 ? cuuint64_t(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) : 0;
}

json describe(void* p) {
  json j;
  Dl_info info{};
  if (p && dladdr(p, &info)) {
    j["export"] = info.dli_sname ? info.dli_sname : "";
    const char* lib = info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
    j["library"] = lib ? lib + 1 : (info.dli_fname ? info.dli_fname : "");
  }
  return j;
}

int mode_resolve(int version, cuuint64_t flags) {
  GetProc get = resolver(open_driver());
  static const char* kSymbols[] = {"cuInit", "cuGetProcAddress", "cuMemAlloc", "cuMemFree", "cuMemAllocAsync",
                                   "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuMemGetInfo", "cuLaunchKernel",
                                   "cuLaunchKernelEx", "cuGraphLaunch", "cuCtxCreate", "cuModuleLoadData",
                                   "cuDeviceTotalMem", "cuMemAllocPitch", "cuDevicePrimaryCtxRelease"};
  json out;
  out["mode"] = "resolve";
  for (const char* s : kSymbols) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    CUresult r = get(s, &p, version, flags, &status);
    json e = describe(p);
    e["rc"] = int(r);
    e["status"] = int(status);
    out[s] = e;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

template <class F>
F resolve(GetProc get, const char* name, int version, cuuint64_t flags) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (get(name, &p, version, flags, &status) != CUDA_SUCCESS || !p) fail(std::string("cannot resolve ") + name);
  return reinterpret_cast<F>(p);
}

int mode_run(int version, cuuint64_t flags, uint64_t big, uint64_t launches) {
  GetProc get = resolver(open_driver());
  // Everything resolved before cuInit, as cudart does.
  auto init = resolve<decltype(&cuInit)>(get, "cuInit", version, flags);
  auto device_get = resolve<decltype(&cuDeviceGet)>(get, "cuDeviceGet", version, flags);
  auto retain = resolve<decltype(&cuDevicePrimaryCtxRetain)>(get, "cuDevicePrimaryCtxRetain", version, flags);
  auto set_current = resolve<decltype(&cuCtxSetCurrent)>(get, "cuCtxSetCurrent", version, flags);
  auto alloc = resolve<decltype(&cuMemAlloc_v2)>(get, "cuMemAlloc", version, flags);
  auto free_ = resolve<decltype(&cuMemFree_v2)>(get, "cuMemFree", version, flags);
  auto info = resolve<decltype(&cuMemGetInfo_v2)>(get, "cuMemGetInfo", version, flags);
  auto load = resolve<decltype(&cuModuleLoadData)>(get, "cuModuleLoadData", version, flags);
  auto function = resolve<decltype(&cuModuleGetFunction)>(get, "cuModuleGetFunction", version, flags);
  auto launch = resolve<decltype(&cuLaunchKernel)>(get, "cuLaunchKernel", version, flags);
  auto sync = resolve<decltype(&cuCtxSynchronize)>(get, "cuCtxSynchronize", 12000, 0);  // the 0-argument ABI

  json out;
  out["mode"] = "run";
  out["init"] = int(init(0));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  out["device"] = int(device_get(&dev, 0));
  out["retain"] = int(retain(&ctx, dev));
  out["set_current"] = int(set_current(ctx));
  CUdeviceptr p = 0, q = 0;
  out["alloc_big"] = int(alloc(&p, big));
  out["alloc_small"] = int(alloc(&q, 1 << 20));
  size_t fr = 0, tot = 0;
  out["meminfo"] = int(info(&fr, &tot));
  out["free_bytes"] = fr;
  out["total_bytes"] = tot;
  CUmodule m = nullptr;
  CUfunction f = nullptr;
  out["module"] = int(load(&m, coloc_kernels_fatbin));
  out["function"] = int(function(&f, m, "coloc_spin"));
  unsigned long long ns = 0;
  void* params[] = {&ns};
  uint64_t done = 0;
  for (; done < launches; ++done)
    if (launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) != CUDA_SUCCESS) break;
  out["launched"] = done;
  out["sync"] = int(sync());
  if (q) out["free_small"] = int(free_(q));
  if (p) out["free_big"] = int(free_(p));
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Calls f with value-initialised arguments (null pointers, zeros).
template <class R, class... P>
R call_zero(R (*f)(P...)) {
  return f(P{}...);
}

int mode_hooks(bool use_dlopen) {
  void* h = use_dlopen ? open_driver() : RTLD_DEFAULT;
  json out;
  out["mode"] = "hooks";
#define COLOC_HOOK(policy, name, params, args)                                  \
  {                                                                             \
    auto f = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));              \
    if (f) out[#name] = int(call_zero(f));                                      \
    else out[#name] = "missing";                                                \
  }
#include "interpose/hooks.def"
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "resolve" && argc == 4) return mode_resolve(std::atoi(argv[2]), flags_arg(argv[3]));
  if (mode == "run" && argc == 6) {
    coloc::SizeParse big = coloc::parse_size(argv[4]);
    if (!big) fail("bad size");
    return mode_run(std::atoi(argv[2]), flags_arg(argv[3]), *big.bytes, std::strtoull(argv[5], nullptr, 10));
  }
  if (mode == "hooks") return mode_hooks(argc > 2 && std::strcmp(argv[2], "dlopen") == 0);
  fail("usage: interpose_cudart resolve VERSION FLAGS | run VERSION FLAGS SIZE N | hooks [dlopen]");
}
