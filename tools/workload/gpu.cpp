// tools/workload/gpu.cpp — see gpu.h. Every CUresult is checked; failures become CudaError with the
// call and CUDA's name for the error.
//
// The driver is loaded when the first Gpu is made (dlopen of libcuda.so.1, then dlsym of each entry
// point under the name cuda.h binds it to, e.g. cuMemAlloc_v2), not by the loader at start: so
// --help, --list-models and argument errors work on a machine without any CUDA library, and a
// missing driver is an ordinary error line (exit 1) instead of the loader's refusal. A preloaded
// libcoloc.so sees these calls exactly as it sees cudart's (its dlsym answers for libcuda's handle).
#include "gpu.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "errors.h"
#include "kernels.h"

namespace coloc::workload {

namespace {

// Every driver entry point coloc-train calls. Each name goes through cuda.h's macros first
// (cuMemAlloc -> cuMemAlloc_v2), so the symbol looked up is the one a link against libcuda binds.
#define COLOC_TRAIN_DRIVER_CALLS(X)                                                                    \
  X(cuInit) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuModuleLoadData) X(cuModuleGetFunction)           \
  X(cuModuleUnload) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemAlloc)          \
  X(cuMemFree) X(cuLaunchKernel) X(cuGetErrorName) X(cuGetErrorString) X(cuMemcpyHtoD) X(cuMemcpyDtoH)   \
  X(cuMemsetD32Async)
#define COLOC_TRAIN_STR2(x) #x
#define COLOC_TRAIN_STR(x) COLOC_TRAIN_STR2(x)

struct Driver {
#define COLOC_TRAIN_FIELD(f) decltype(&::f) f = nullptr;
  COLOC_TRAIN_DRIVER_CALLS(COLOC_TRAIN_FIELD)
#undef COLOC_TRAIN_FIELD
};

std::mutex g_load_mutex;                      // one loader at a time
std::atomic<const Driver*> g_driver{nullptr};  // set once every entry point was found

// The driver's entry points, loading libcuda.so.1 the first time. Throws CudaError when there is
// no driver (no libcuda.so.1, or one without an entry point we call).
const Driver& driver() {
  if (const Driver* d = g_driver.load(std::memory_order_acquire)) return *d;
  std::lock_guard<std::mutex> g(g_load_mutex);
  if (const Driver* d = g_driver.load(std::memory_order_acquire)) return *d;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    const char* why = ::dlerror();
    throw CudaError(CUDA_ERROR_STUB_LIBRARY,
                    std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "not found") +
                        "; on a machine without a GPU run on simgpu (LD_LIBRARY_PATH=build/sim, or coloc run --sim)");
  }
  static Driver d;
  struct Entry {
    const char* name;
    void* slot;  // the address of d's field for it
  };
#define COLOC_TRAIN_ENTRY(f) Entry{COLOC_TRAIN_STR(f), &d.f},
  const Entry entries[] = {COLOC_TRAIN_DRIVER_CALLS(COLOC_TRAIN_ENTRY)};
#undef COLOC_TRAIN_ENTRY
  for (const Entry& e : entries) {
    void* fn = ::dlsym(lib, e.name);
    if (!fn) throw CudaError(CUDA_ERROR_STUB_LIBRARY, std::string("libcuda.so.1 has no ") + e.name);
    std::memcpy(e.slot, &fn, sizeof fn);  // a function pointer from dlsym (POSIX)
  }
  g_driver.store(&d, std::memory_order_release);
  return d;
}

// The driver once it is loaded, else null (no call is made before a Gpu exists).
const Driver* loaded_driver() { return g_driver.load(std::memory_order_acquire); }

}  // namespace

std::string cuda_error_text(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  const Driver* d = loaded_driver();
  if (!d || d->cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUDA error " + std::to_string(int(result));
  std::string out = name;
  if (d->cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

namespace {

void check(CUresult r, const std::string& call) {
  if (r != CUDA_SUCCESS) throw CudaError(r, call + ": " + cuda_error_text(r));
}

}  // namespace

Gpu::Gpu(int ordinal) : ordinal_(ordinal) {
  const Driver& drv = driver();
  check(drv.cuInit(0), "cuInit");
  check(drv.cuDeviceGet(&device_, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  char name[256] = {};
  check(drv.cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName");
  name_ = name;
  size_t total = 0;
  check(drv.cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  total_bytes_ = total;
  check(drv.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  check(drv.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  check(drv.cuModuleLoadData(&module_, coloc_kernels_fatbin), "cuModuleLoadData(coloc kernels)");
  check(drv.cuModuleGetFunction(&spin_, module_, "coloc_spin"), "cuModuleGetFunction(coloc_spin)");
  check(drv.cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
}

Gpu::~Gpu() {
  const Driver* drv = loaded_driver();  // loaded: this Gpu was made
  if (!drv) return;
  // On the way out: report nothing, free what we can.
  if (second_) drv->cuStreamDestroy(second_);
  if (stream_) drv->cuStreamDestroy(stream_);
  if (module_) drv->cuModuleUnload(module_);
  if (context_) drv->cuDevicePrimaryCtxRelease(device_);
}

CUdeviceptr Gpu::allocate(uint64_t bytes) {
  const Driver& drv = driver();
  CUdeviceptr p = 0;
  check(drv.cuMemAlloc(&p, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  return p;
}

void Gpu::release(CUdeviceptr ptr) { check(driver().cuMemFree(ptr), "cuMemFree"); }

void Gpu::spin(uint64_t ns) {
  const Driver& drv = driver();
  unsigned long long duration = ns;
  void* args[] = {&duration};
  check(drv.cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream_, args, nullptr), "cuLaunchKernel(coloc_spin)");
}

void Gpu::synchronize() { check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

void Gpu::upload(CUdeviceptr dst, const void* src, uint64_t bytes) {
  check(driver().cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void Gpu::download(void* dst, CUdeviceptr src, uint64_t bytes) {
  check(driver().cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void Gpu::memset32(CUdeviceptr dst, uint32_t value, uint64_t words) {
  check(driver().cuMemsetD32Async(dst, value, words, stream_), "cuMemsetD32Async");
}

void Gpu::spin_on(unsigned stream, uint64_t ns) {
  const Driver& drv = driver();
  if (stream != 0 && !second_) check(drv.cuStreamCreate(&second_, CU_STREAM_DEFAULT), "cuStreamCreate");
  unsigned long long duration = ns;
  void* args[] = {&duration};
  check(drv.cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream ? second_ : stream_, args, nullptr),
        "cuLaunchKernel(coloc_spin)");
}

void Gpu::synchronize_all() {
  synchronize();
  if (second_) check(driver().cuStreamSynchronize(second_), "cuStreamSynchronize");
}

}  // namespace coloc::workload
