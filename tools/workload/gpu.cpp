// tools/workload/gpu.cpp — see gpu.h. Every CUresult is checked; failures become CudaError with the
// call and CUDA's name for the error.
#include "gpu.h"

#include "errors.h"
#include "kernels.h"

namespace coloc::workload {

std::string cuda_error_text(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUDA error " + std::to_string(int(result));
  std::string out = name;
  if (cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

namespace {

void check(CUresult r, const std::string& call) {
  if (r != CUDA_SUCCESS) throw CudaError(r, call + ": " + cuda_error_text(r));
}

}  // namespace

Gpu::Gpu(int ordinal) : ordinal_(ordinal) {
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device_, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName");
  name_ = name;
  size_t total = 0;
  check(cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  total_bytes_ = total;
  check(cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  check(cuModuleLoadData(&module_, coloc_kernels_fatbin), "cuModuleLoadData(coloc kernels)");
  check(cuModuleGetFunction(&spin_, module_, "coloc_spin"), "cuModuleGetFunction(coloc_spin)");
  check(cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
}

Gpu::~Gpu() {
  // On the way out: report nothing, free what we can.
  if (stream_) cuStreamDestroy(stream_);
  if (module_) cuModuleUnload(module_);
  if (context_) cuDevicePrimaryCtxRelease(device_);
}

CUdeviceptr Gpu::allocate(uint64_t bytes) {
  CUdeviceptr p = 0;
  check(cuMemAlloc(&p, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  return p;
}

void Gpu::release(CUdeviceptr ptr) { check(cuMemFree(ptr), "cuMemFree"); }

void Gpu::spin(uint64_t ns) {
  unsigned long long duration = ns;
  void* args[] = {&duration};
  check(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream_, args, nullptr), "cuLaunchKernel(coloc_spin)");
}

void Gpu::synchronize() { check(cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

}  // namespace coloc::workload
