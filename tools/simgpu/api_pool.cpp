// Driver API: stream-ordered allocation and memory pools.
#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// An allocation on a capturing stream becomes an allocation node of the graph being captured: its
// address is reserved now, its memory is bound when the graph is uploaded or launched
// (graph_memory.h). *captured is false when the stream is not capturing.
CUresult capture_alloc(Stream& s, DeviceState& dev, uint64_t bytes, uintptr_t* p, bool* captured) {
  std::lock_guard<std::mutex> lk(s.ctx->mu);
  Graph* g = s.capture.load(std::memory_order_relaxed);
  *captured = g != nullptr;
  if (!g) return CUDA_SUCCESS;
  if (g->mem_device && g->mem_device != &dev) return CUDA_ERROR_NOT_SUPPORTED;  // one device per graph in simgpu
  if (CUresult rc = dev.graph_pool.add_block(g->id, bytes, p); rc != CUDA_SUCCESS) return rc;
  g->allocs.push_back(*p);
  g->mem_device = &dev;
  return CUDA_SUCCESS;
}

// A free on a capturing stream becomes a free node; the address must be a graph allocation.
CUresult capture_free(Stream& s, uintptr_t p, bool* captured) {
  std::unique_lock<std::mutex> lk(s.ctx->mu);
  Graph* g = s.capture.load(std::memory_order_relaxed);
  *captured = g != nullptr;
  if (!g) return CUDA_SUCCESS;
  for (const auto& dev : Driver::get().devices) {
    if (!dev->memory.contains(p) || !dev->graph_pool.is_block(p)) continue;
    if (CUresult rc = dev->graph_pool.add_free(g->id, p); rc != CUDA_SUCCESS) return rc;
    g->nodes.push_back(GraphFreeWork{dev.get(), p});
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult alloc_from(MemPool* pool, CUdeviceptr* dptr, size_t bytesize, CUstream hStream, bool per_thread) {
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(hStream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (!pool) pool = s->ctx->device.current_pool.load();
  uintptr_t p;
  if (s->capture.load(std::memory_order_relaxed)) {
    bool captured = false;
    CUresult rc = capture_alloc(*s, pool->device, bytesize, &p, &captured);
    if (captured) {
      if (rc == CUDA_SUCCESS) *dptr = CUdeviceptr(p);
      return rc;
    }
  }
  if (CUresult rc = pool->allocate(bytesize, &p, s); rc != CUDA_SUCCESS) return rc;
  *dptr = CUdeviceptr(p);
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream hStream, bool per_thread) {
  return alloc_from(nullptr, dptr, bytesize, hStream, per_thread);
}

CUresult alloc_from_pool_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream,
                               bool per_thread) {
  MemPool* p = g_mem_pools.get(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from(p, dptr, bytesize, hStream, per_thread);
}

// Frees in stream order: at once when the stream's context has nothing queued, else when the
// context's queue reaches it.
CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool per_thread) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(hStream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  Driver& drv = Driver::get();
  if (s->capture.load(std::memory_order_relaxed)) {
    bool captured = false;
    CUresult rc = capture_free(*s, uintptr_t(dptr), &captured);
    if (captured) return rc;
  }
  if (!drv.device_range_live(uintptr_t(dptr), 1)) return CUDA_ERROR_INVALID_VALUE;
  if (s->ctx->idle() && !s->capture.load(std::memory_order_relaxed)) return drv.free_device_memory(uintptr_t(dptr));
  FreeWork work{uintptr_t(dptr)};
  MemPool* pool = s->capture.load(std::memory_order_relaxed) ? nullptr : drv.pool_of_block(uintptr_t(dptr));
  if (pool) {  // reusable on its stream from now on (not while capturing: the free runs with the graph)
    if (!pool->begin_free(uintptr_t(dptr), s, &work.generation)) return CUDA_ERROR_INVALID_VALUE;
    work.pool = reinterpret_cast<CUmemoryPool>(pool);
  }
  return s->ctx->submit(*s, work);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return alloc_async(dptr, bytesize, hStream, false); });
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return alloc_async(dptr, bytesize, hStream, true); });
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return alloc_from_pool_async(dptr, bytesize, pool, hStream, false); });
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return alloc_from_pool_async(dptr, bytesize, pool, hStream, true); });
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return free_async(dptr, hStream, false); });
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return free_async(dptr, hStream, true); });
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
    if (raw(poolProps->allocType) != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (raw(poolProps->location.type) != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;  // host pools
    DeviceState* d = Driver::get().device(poolProps->location.id);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    MemPool* p = g_mem_pools.create(*d, false);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = reinterpret_cast<CUmemoryPool>(p);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    MemPool* p = g_mem_pools.get(pool);
    if (!p || p->default_pool) return CUDA_ERROR_INVALID_VALUE;
    MemPool* expected = p;
    p->device.current_pool.compare_exchange_strong(expected, p->device.default_pool);
    g_mem_pools.destroy(p);  // gives every chunk back
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    MemPool* p = g_mem_pools.get(pool);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    p->trim(minBytesToKeep);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    MemPool* p = g_mem_pools.get(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    return p->get_attribute(raw(attr), value);
  });
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    MemPool* p = g_mem_pools.get(pool);
    if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
    return p->set_attribute(raw(attr), value);
  });
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = reinterpret_cast<CUmemoryPool>(d->default_pool);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    DeviceState* d = Driver::get().device(dev);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    *pool = reinterpret_cast<CUmemoryPool>(d->current_pool.load());
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
