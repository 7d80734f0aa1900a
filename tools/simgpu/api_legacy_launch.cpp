// Driver API: the deprecated launches — cuLaunch, cuLaunchGrid, cuLaunchGridAsync with the
// execution-control state they read (cuFuncSetBlockShape, cuParamSetSize, cuParamSeti/f/v) — and
// cuLaunchCooperativeKernelMultiDevice. Each runs like cuLaunchKernel (launch.h): the parameter
// buffer is read as a CU_LAUNCH_PARAM_BUFFER_POINTER buffer would be (coloc_spin's ns at offset 0).
//
// Errors are the ones cuda.h lists for each: cuParamSet*, cuLaunch and cuLaunchGrid do not list
// CUDA_ERROR_INVALID_HANDLE, so an unknown function is CUDA_ERROR_INVALID_VALUE there.
#include <cstring>

#include "driver.h"
#include "entry.h"
#include "launch.h"

using namespace simgpu;

namespace {

/// The kernel parameter space of CUDA 12.1 and later, in bytes.
constexpr unsigned kMaxParamBytes = 32764;

// The function `h` of the current context for the setters, or an error.
CUresult legacy_function(CUfunction h, CUresult unknown, Function** out) {
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  Function* f = g_functions.get(h);
  if (!f) return unknown;
  *out = f;
  return CUDA_SUCCESS;
}

CUresult param_set(CUfunction h, int offset, const void* data, size_t bytes) {
  Function* f;
  if (CUresult rc = legacy_function(h, CUDA_ERROR_INVALID_VALUE, &f); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lk(f->legacy_mu);
  if (offset < 0 || size_t(offset) > f->params.size() || bytes > f->params.size() - size_t(offset))
    return CUDA_ERROR_INVALID_VALUE;
  if (bytes) std::memcpy(f->params.data() + offset, data, bytes);
  return CUDA_SUCCESS;
}

// cuLaunch (1 x 1 grid), cuLaunchGrid (legacy stream) and cuLaunchGridAsync.
CUresult legacy_launch(CUfunction h, int grid_w, int grid_h, CUstream stream, CUresult unknown) {
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  Function* f = g_functions.get(h);
  if (!f || f->ctx != ctx) return unknown;
  if (grid_w <= 0 || grid_h <= 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned block[3];
  std::vector<unsigned char> params;
  {
    std::lock_guard<std::mutex> lk(f->legacy_mu);
    std::memcpy(block, f->block, sizeof block);
    params = f->params;
  }
  size_t size = params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  return launch({h, {unsigned(grid_w), unsigned(grid_h), 1}, {block[0], block[1], block[2]}, 0, stream, nullptr,
                 size ? extra : nullptr},
                false);
}

bool same_shape(const CUDA_LAUNCH_PARAMS& a, const CUDA_LAUNCH_PARAMS& b) {
  return a.gridDimX == b.gridDimX && a.gridDimY == b.gridDimY && a.gridDimZ == b.gridDimZ &&
         a.blockDimX == b.blockDimX && a.blockDimY == b.blockDimY && a.blockDimZ == b.blockDimZ &&
         a.sharedMemBytes == b.sharedMemBytes;
}

// Every entry is validated before any is submitted: one launch per device, identical devices,
// identical shapes, streams made by cuStreamCreate (never NULL, CU_STREAM_LEGACY or
// CU_STREAM_PER_THREAD) in the function's context.
CUresult launch_multi_device(CUDA_LAUNCH_PARAMS* list, unsigned n, unsigned flags) {
  constexpr unsigned kFlags =
      CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC | CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
  if (!list || n == 0 || (flags & ~kFlags)) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::get();
  if (n > drv.devices.size()) return CUDA_ERROR_INVALID_VALUE;
  std::vector<PreparedLaunch> prepared(n);
  for (unsigned i = 0; i < n; ++i) {
    const CUDA_LAUNCH_PARAMS& p = list[i];
    if (!same_shape(p, list[0])) return CUDA_ERROR_INVALID_VALUE;
    if (!p.hStream || p.hStream == CU_STREAM_LEGACY || p.hStream == CU_STREAM_PER_THREAD)
      return CUDA_ERROR_INVALID_VALUE;
    Stream* s = g_streams.get(p.hStream);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    const DeviceState& dev = s->ctx->device;
    const DeviceState& first = prepared[0].stream ? prepared[0].stream->ctx->device : dev;
    if (dev.spec.name != first.spec.name || dev.spec.bytes != first.spec.bytes) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned j = 0; j < i; ++j)
      if (&prepared[j].stream->ctx->device == &dev) return CUDA_ERROR_INVALID_VALUE;  // two on one device
    Launch l{p.function, {p.gridDimX, p.gridDimY, p.gridDimZ}, {p.blockDimX, p.blockDimY, p.blockDimZ},
             p.sharedMemBytes, p.hStream, p.kernelParams, nullptr};
    if (CUresult rc = prepare_launch(l, false, s->ctx, &prepared[i]); rc != CUDA_SUCCESS) return rc;
  }
  for (PreparedLaunch& p : prepared) {
    if (p.skip) continue;
    if (CUresult rc = p.stream->ctx->submit(*p.stream, p.work); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Function* f;
    if (CUresult rc = legacy_function(hfunc, CUDA_ERROR_INVALID_HANDLE, &f); rc != CUDA_SUCCESS) return rc;
    if (x <= 0 || y <= 0 || z <= 0 || x > 1024 || y > 1024 || z > 64 || int64_t(x) * y * z > 1024)
      return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lk(f->legacy_mu);
    f->block[0] = unsigned(x);
    f->block[1] = unsigned(y);
    f->block[2] = unsigned(z);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuParamSetSize(CUfunction hfunc, unsigned int numbytes) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Function* f;
    if (CUresult rc = legacy_function(hfunc, CUDA_ERROR_INVALID_VALUE, &f); rc != CUDA_SUCCESS) return rc;
    if (numbytes > kMaxParamBytes) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lk(f->legacy_mu);
    f->params.resize(numbytes);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuParamSeti(CUfunction hfunc, int offset, unsigned int value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return param_set(hfunc, offset, &value, sizeof value); });
}

CUresult CUDAAPI cuParamSetf(CUfunction hfunc, int offset, float value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return param_set(hfunc, offset, &value, sizeof value); });
}

CUresult CUDAAPI cuParamSetv(CUfunction hfunc, int offset, void* ptr, unsigned int numbytes) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!ptr && numbytes) return CUDA_ERROR_INVALID_VALUE;
    return param_set(hfunc, offset, ptr, numbytes);
  });
}

CUresult CUDAAPI cuLaunch(CUfunction f) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return legacy_launch(f, 1, 1, nullptr, CUDA_ERROR_INVALID_VALUE); });
}

CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return legacy_launch(f, grid_width, grid_height, nullptr, CUDA_ERROR_INVALID_VALUE); });
}

CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return legacy_launch(f, grid_width, grid_height, hStream, CUDA_ERROR_INVALID_HANDLE); });
}

CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices,
                                                       unsigned int flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return launch_multi_device(launchParamsList, numDevices, flags); });
}

}  // extern "C"
