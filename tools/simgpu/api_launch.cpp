// Driver API: modules, functions and kernel launches.
//
// simgpu knows two kernels by name (tools/workload/kernels.cu): coloc_spin(unsigned long long ns)
// runs for `ns`, coloc_fill(float* p, unsigned long long n, float v) really fills. Any other
// kernel runs SIMGPU_KERNEL_NS. Parameters come from kernelParams or from the `extra`
// CU_LAUNCH_PARAM_BUFFER_POINTER buffer (laid out with the device's alignment: 8-byte pointer
// and integer, then the float at offset 16).
//
// With SIMGPU_FAST=1 a launch is validated exactly as otherwise and then returns without queuing
// anything (coloc_fill still runs): no lock, no system call on that path.
#include <cstring>
#include <string>

#include "driver.h"
#include "entry.h"
#include "launch.h"

using namespace simgpu;

namespace {

CUresult check_dims(const Launch& l) {
  if (l.grid[0] == 0 || l.grid[1] == 0 || l.grid[2] == 0 || l.grid[0] > 2147483647u || l.grid[1] > 65535 ||
      l.grid[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (l.block[0] == 0 || l.block[1] == 0 || l.block[2] == 0 || l.block[0] > 1024 || l.block[1] > 1024 ||
      l.block[2] > 64 || uint64_t(l.block[0]) * l.block[1] * l.block[2] > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (l.shared_bytes > 232448) return CUDA_ERROR_INVALID_VALUE;  // the opt-in maximum per block
  return CUDA_SUCCESS;
}

// The parameter buffer passed through `extra`, or null when `extra` is malformed.
const unsigned char* extra_buffer(void** extra, size_t* size) {
  const unsigned char* buf = nullptr;
  *size = 0;
  for (int i = 0; i < 32 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buf = static_cast<const unsigned char*>(extra[i + 1]);
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (!extra[i + 1]) return nullptr;
      std::memcpy(size, extra[i + 1], sizeof *size);
    } else {
      return nullptr;
    }
  }
  return *size ? buf : nullptr;
}

// Fills in the parameters simgpu reads for coloc_spin and coloc_fill.
CUresult read_params(const Launch& l, KernelWork* k) {
  if (l.params && l.extra) return CUDA_ERROR_INVALID_VALUE;
  if (k->kind == KernelKind::generic) return CUDA_SUCCESS;
  const size_t need = k->kind == KernelKind::spin ? 8 : 20;
  unsigned char buf[24] = {};
  if (l.params) {
    const int count = k->kind == KernelKind::spin ? 1 : 3;
    for (int i = 0; i < count; ++i)
      if (!l.params[i]) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf, l.params[0], 8);
    if (k->kind == KernelKind::fill) {
      std::memcpy(buf + 8, l.params[1], 8);
      std::memcpy(buf + 16, l.params[2], 4);
    }
  } else if (l.extra) {
    size_t size;
    const unsigned char* src = extra_buffer(l.extra, &size);
    if (!src || size < need) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf, src, need);
  } else {
    return CUDA_ERROR_INVALID_VALUE;  // the kernel takes parameters
  }
  if (k->kind == KernelKind::spin) {
    std::memcpy(&k->duration_ns, buf, 8);
  } else {
    std::memcpy(&k->fill_ptr, buf, 8);
    std::memcpy(&k->fill_count, buf + 8, 8);
    std::memcpy(&k->fill_value, buf + 16, 4);
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace simgpu {

CUresult prepare_launch(const Launch& l, bool per_thread, Context* ctx, PreparedLaunch* out) {
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  Function* fn = g_functions.get(l.f);
  if (!fn || fn->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s;
  if (CUresult rc = resolve_stream(l.stream, per_thread, ctx, &s); rc != CUDA_SUCCESS) return rc;
  if (s->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult rc = check_dims(l); rc != CUDA_SUCCESS) return rc;
  KernelWork& k = out->work;
  k = KernelWork{};
  out->stream = s;
  out->skip = false;
  k.name = fn->name;
  k.kind = fn->kind;
  if (CUresult rc = read_params(l, &k); rc != CUDA_SUCCESS) return rc;
  if (k.kind != KernelKind::fill && g_fast.load(std::memory_order_relaxed) &&
      !s->capture.load(std::memory_order_relaxed)) {
    out->skip = true;
    return CUDA_SUCCESS;
  }
  Driver& drv = Driver::get();
  if (k.kind == KernelKind::generic) k.duration_ns = drv.config.kernel_ns;
  if (k.kind == KernelKind::fill) {
    k.duration_ns = drv.config.kernel_ns;
    if (k.fill_count > 0 && (k.fill_ptr % 4 || k.fill_count > UINT64_MAX / 4 ||
                             !drv.device_range_addressable(k.fill_ptr, k.fill_count * 4)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult launch(const Launch& l, bool per_thread) {
  PreparedLaunch p;
  if (CUresult rc = prepare_launch(l, per_thread, current_context(), &p); rc != CUDA_SUCCESS) return rc;
  return p.skip ? CUDA_SUCCESS : p.stream->ctx->submit(*p.stream, p.work);
}

}  // namespace simgpu

namespace {

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra,
                          bool per_thread) {
  if (!config || (config->numAttrs > 0 && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
  return launch({f,
                 {config->gridDimX, config->gridDimY, config->gridDimZ},
                 {config->blockDimX, config->blockDimY, config->blockDimZ},
                 config->sharedMemBytes,
                 config->hStream,
                 kernelParams,
                 extra},
                per_thread);
}

CUresult load_module(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  size_t size;
  ImageKind kind = classify_image(image, &size);
  if (kind == ImageKind::invalid) return CUDA_ERROR_INVALID_IMAGE;
  Module* m = g_modules.create(ctx, kind, std::string(static_cast<const char*>(image), size));
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

KernelKind kind_of(std::string_view name) {
  if (name == "coloc_spin") return KernelKind::spin;
  if (name == "coloc_fill") return KernelKind::fill;
  return KernelKind::generic;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return load_module(module, image); });
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (numOptions > 0 && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
    return load_module(module, image);  // JIT options are accepted and ignored: nothing is compiled
  });
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    Module* m = g_modules.get(hmod);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard<std::mutex> lk(m->mu);
    auto it = m->functions.find(std::string_view(name));
    if (it == m->functions.end()) {
      if (!image_has_kernel(m->kind, m->image, name)) return CUDA_ERROR_NOT_FOUND;
      Function* f = g_functions.create(m, Driver::get().intern(name), kind_of(name));
      if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
      it = m->functions.emplace(name, f).first;
    }
    *hfunc = reinterpret_cast<CUfunction>(it->second);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Module* m = g_modules.get(hmod);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    {
      std::lock_guard<std::mutex> lk(m->mu);
      for (auto& [name, f] : m->functions) g_functions.destroy(f);
    }
    g_modules.destroy(m);  // queued kernels keep their interned name, not the function
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    return launch({f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                   kernelParams, extra},
                  false);
  });
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    return launch({f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                   kernelParams, extra},
                  true);
  });
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return launch_ex(config, f, kernelParams, extra, false); });
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return launch_ex(config, f, kernelParams, extra, true); });
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void** kernelParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    return launch({f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                   kernelParams, nullptr},
                  false);
  });
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void** kernelParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    return launch({f, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                   kernelParams, nullptr},
                  true);
  });
}

}  // extern "C"
