// Driver API: primary contexts, contexts, the context stack.
#include "capture.h"
#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// Flags cuCtxCreate accepts: scheduling (CU_CTX_SCHED_MASK), MAP_HOST, LMEM_RESIZE_TO_MAX,
// COREDUMP_ENABLE, USER_COREDUMP_ENABLE, SYNC_MEMOPS.
constexpr unsigned kContextFlags = 0xff;

CUresult create(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~kContextFlags) return CUDA_ERROR_INVALID_VALUE;
  Driver& drv = Driver::get();
  DeviceState* d = drv.device(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  Context* ctx;
  {
    std::lock_guard<std::mutex> lk(drv.mu);
    if (CUresult rc = drv.create_context(*d, false, flags, &ctx); rc != CUDA_SUCCESS) return rc;
  }
  CUcontext h = reinterpret_cast<CUcontext>(ctx);
  if (CUresult rc = push_context(h); rc != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lk(drv.mu);
    drv.destroy_context(ctx);
    return rc;
  }
  *pctx = h;
  return CUDA_SUCCESS;
}

CUresult primary_release(CUdevice dev) {
  Driver& drv = Driver::get();
  DeviceState* d = drv.device(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(drv.mu);
  if (d->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--d->primary_refs == 0 && d->primary) {
    drv.destroy_context(d->primary);
    d->primary = nullptr;
  }
  return CUDA_SUCCESS;
}

CUresult primary_reset(CUdevice dev) {
  Driver& drv = Driver::get();
  DeviceState* d = drv.device(dev);
  if (!d) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(drv.mu);
  if (d->primary) drv.destroy_context(d->primary);
  d->primary = nullptr;
  d->primary_refs = 0;
  return CUDA_SUCCESS;
}

// The context a "ctx or NULL for the current one" argument names.
CUresult context_or_current(CUcontext h, Context** out) {
  *out = h ? g_contexts.get(h) : current_context();
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult synchronize(Context* ctx) {
  CUresult rc = ctx->synchronize();
  Driver::get().trim_pools(ctx->device);
  return rc;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    Driver& drv = Driver::get();
    DeviceState* d = drv.device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lk(drv.mu);
    if (!d->primary) {
      if (CUresult rc = drv.create_context(*d, true, d->primary_flags, &d->primary); rc != CUDA_SUCCESS) return rc;
    }
    ++d->primary_refs;
    *pctx = reinterpret_cast<CUcontext>(d->primary);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return primary_release(dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return primary_release(dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return primary_reset(dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return primary_reset(dev); });
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    Driver& drv = Driver::get();
    DeviceState* d = drv.device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> lk(drv.mu);
    *flags = d->primary_flags;
    *active = d->primary != nullptr;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return create(pctx, flags, dev); });
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                                CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (numParams < 0 || (numParams > 0 && !paramsArray)) return CUDA_ERROR_INVALID_VALUE;
    return create(pctx, flags, dev);  // execution affinity is accepted and ignored
  });
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams < 0) return CUDA_ERROR_INVALID_VALUE;
    return create(pctx, flags, dev);  // affinity and CIG parameters are accepted and ignored
  });
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    Driver& drv = Driver::get();
    std::lock_guard<std::mutex> lk(drv.mu);
    Context* c = g_contexts.get(ctx);
    if (!c || c->primary) return CUDA_ERROR_INVALID_CONTEXT;  // primary contexts go with Release/Reset
    forget_context(ctx);
    drv.destroy_context(c);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = reinterpret_cast<CUcontext>(current_context());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (ctx && !g_contexts.get(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    set_current_context(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (!g_contexts.get(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    return push_context(ctx);
  });
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!current_handle()) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext top = pop_context();
    if (pctx) *pctx = top;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    Context* c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *device = c->device.ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    Context* c;
    if (CUresult rc = context_or_current(ctx, &c); rc != CUDA_SUCCESS) return rc;
    *device = c->device.ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Context* c = current_context();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
    return synchronize(c);
  });
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Context* c;
    if (CUresult rc = context_or_current(ctx, &c); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
    return synchronize(c);
  });
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    Context* c;
    if (CUresult rc = context_or_current(ctx, &c); rc != CUDA_SUCCESS) return rc;
    *version = 3020;  // contexts made by the cuCtxCreate_v2 ABI and later
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
