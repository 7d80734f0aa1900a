// Driver API: graphs — creation, memory nodes, capture into a graph, instantiation, upload,
// launch, and the device's graph memory (graph_memory.h).
#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// The dependencies of a new node: live nodes of `g` made by the node API (simgpu gives captured
// nodes no handles). Duplicates are not checked.
CUresult check_dependencies(Graph* g, const CUgraphNode* deps, size_t n) {
  if (n > 0 && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    GraphNode* d = g_graph_nodes.get(deps[i]);
    if (!d || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult make_handle(Graph* g, CUgraphNodeType type, uintptr_t p, CUgraphNode* out) {
  GraphNode* n = g_graph_nodes.create(g, type, p);
  if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
  g->handles.push_back(n);
  *out = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

// An allocation node on `dev` of `bytes` in `g`; its address in *out.
CUresult add_alloc(Graph* g, DeviceState& dev, uint64_t bytes, uintptr_t* out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (g->mem_device && g->mem_device != &dev) return CUDA_ERROR_NOT_SUPPORTED;  // one device per graph in simgpu
  if (CUresult rc = dev.graph_pool.add_block(g->id, bytes, out); rc != CUDA_SUCCESS) return rc;
  g->allocs.push_back(*out);
  g->mem_device = &dev;
  return CUDA_SUCCESS;
}

// The device whose graph memory holds `p`, or nullptr.
DeviceState* block_device(uintptr_t p) {
  for (const auto& dev : Driver::get().devices)
    if (dev->memory.contains(p) && dev->graph_pool.is_block(p)) return dev.get();
  return nullptr;
}

CUresult alloc_node(CUgraphNode* node, CUgraph hGraph, const CUgraphNode* deps, size_t n,
                    const CUmemPoolProps& props, size_t count, size_t bytes, CUdeviceptr* dptr) {
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.get(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_dependencies(g, deps, n); rc != CUDA_SUCCESS) return rc;
  if (raw(props.allocType) != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (raw(props.location.type) != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (raw(props.handleTypes) != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;  // no IPC
  DeviceState* dev = Driver::get().device(props.location.id);
  if (!dev || count > Driver::get().devices.size()) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t p;
  if (CUresult rc = add_alloc(g, *dev, bytes, &p); rc != CUDA_SUCCESS) return rc;
  *dptr = CUdeviceptr(p);
  return make_handle(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p, node);
}

CUresult free_node(CUgraphNode* node, CUgraph hGraph, const CUgraphNode* deps, size_t n, CUdeviceptr dptr) {
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.get(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_dependencies(g, deps, n); rc != CUDA_SUCCESS) return rc;
  DeviceState* dev = block_device(uintptr_t(dptr));
  if (!dev) return CUDA_ERROR_INVALID_VALUE;  // not an address an allocation node returned
  if (CUresult rc = dev->graph_pool.add_free(g->id, uintptr_t(dptr)); rc != CUDA_SUCCESS) return rc;
  g->nodes.push_back(GraphFreeWork{dev, uintptr_t(dptr)});
  return make_handle(g, CU_GRAPH_NODE_TYPE_MEM_FREE, uintptr_t(dptr), node);
}

CUresult add_node(CUgraphNode* node, CUgraph hGraph, const CUgraphNode* deps, size_t n, CUgraphNodeParams* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  switch (raw(params->type)) {
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      CUDA_MEM_ALLOC_NODE_PARAMS_v2& a = params->alloc;
      return alloc_node(node, hGraph, deps, n, a.poolProps, a.accessDescCount, a.bytesize, &a.dptr);
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return free_node(node, hGraph, deps, n, params->free.dptr);
    default: return g_graphs.get(hGraph) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult begin_capture_to_graph(CUstream h, CUgraph hGraph, const CUgraphNode* deps, size_t n, unsigned mode,
                                bool per_thread) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.get(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_dependencies(g, deps, n); rc != CUDA_SUCCESS) return rc;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (s == &s->ctx->null_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream
  return s->ctx->begin_capture(*s, g, mode);
}

constexpr unsigned long long kInstantiateFlags = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                                 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                                 CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                                 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

CUresult instantiate(CUgraphExec* out, CUgraph hGraph, unsigned long long flags, GraphExec** made = nullptr) {
  if (!out || (flags & ~kInstantiateFlags)) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.get(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // "Only one instantiation of the graph may exist at any point in time" (graphs with memory nodes).
  if (g->mem_device && g->live_execs > 0) return CUDA_ERROR_INVALID_VALUE;
  GraphExec* x = g_graph_execs.create();
  if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
  x->nodes = g->nodes;
  x->source = g->id;
  for (const Work& w : x->nodes) {
    const auto* k = std::get_if<KernelWork>(&w);
    if (!k || k->kind == KernelKind::fill) x->has_effects = true;
  }
  if (g->mem_device) {
    x->mem_device = g->mem_device;
    x->mem_exec = g->mem_device->graph_pool.add_exec(g->allocs, flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    x->has_effects = true;
  }
  ++g->live_execs;
  if (made) *made = x;
  *out = reinterpret_cast<CUgraphExec>(x);
  return CUDA_SUCCESS;
}

CUresult exec_destroy(GraphExec* x) {
  if (x->mem_device) x->mem_device->graph_pool.exec_destroyed(x->mem_exec);
  const uint64_t source = x->source;
  g_graphs.for_each([&](Graph* g) {
    if (g->id == source && g->live_execs > 0) --g->live_execs;
  });
  g_graph_execs.destroy(x);  // launches already queued hold copies of its nodes
  return CUDA_SUCCESS;
}

CUresult instantiate_with_params(CUgraphExec* out, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* p,
                                 bool per_thread) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  GraphExec* x = nullptr;
  CUresult rc = instantiate(out, hGraph, p->flags, &x);
  p->hErrNode_out = nullptr;
  if (rc == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) && x->mem_device) {
    Stream* s;
    rc = resolve_stream(p->hUploadStream, per_thread, &s);
    if (rc == CUDA_SUCCESS) rc = x->mem_device->graph_pool.upload(x->mem_exec);
    if (rc != CUDA_SUCCESS) exec_destroy(x);
  }
  p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}

CUresult graph_upload(CUgraphExec h, CUstream stream, bool per_thread) {
  GraphExec* x = g_graph_execs.get(h);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(stream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  return x->mem_device ? x->mem_device->graph_pool.upload(x->mem_exec) : CUDA_SUCCESS;
}

CUresult graph_launch(CUgraphExec h, CUstream stream, bool per_thread) {
  GraphExec* g = g_graph_execs.get(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(stream, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (!g->has_effects && g_fast.load(std::memory_order_relaxed) && !s->capture.load(std::memory_order_relaxed))
    return CUDA_SUCCESS;
  if (g->mem_device && g->mem_device != &s->ctx->device) return CUDA_ERROR_INVALID_VALUE;
  return s->ctx->launch_graph(*s, *g);
}

}  // namespace

namespace simgpu {

void destroy_graph(Graph* g) {
  for (GraphNode* n : g->handles) g_graph_nodes.destroy(n);
  for (const auto& dev : Driver::get().devices) dev->graph_pool.graph_destroyed(g->id);
  g_graphs.destroy(g);
}

}  // namespace simgpu

extern "C" {

CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!phGraph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Graph* g = g_graphs.create(Driver::get().next_graph_id.fetch_add(1));
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = reinterpret_cast<CUgraph>(g);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    return alloc_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->poolProps,
                      nodeParams->accessDescCount, nodeParams->bytesize, &nodeParams->dptr);
  });
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, CUdeviceptr dptr) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return free_node(phGraphNode, hGraph, dependencies, numDependencies, dptr); });
}

CUresult CUDAAPI cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                size_t numDependencies, CUgraphNodeParams* nodeParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams); });
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  static constinit CallCounter calls{__func__};
  (void)dependencyData;  // edge data only orders nodes; simgpu runs them in the order added
  return enter(calls, [&] { return add_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams); });
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode) {
  static constinit CallCounter calls{__func__};
  (void)dependencyData;
  return enter(calls, [&] {
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, raw(mode), false);
  });
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                                  const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode) {
  static constinit CallCounter calls{__func__};
  (void)dependencyData;
  return enter(calls, [&] {
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, raw(mode), true);
  });
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                    char* logBuffer, size_t bufferSize) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (phErrorNode) *phErrorNode = nullptr;
    if (logBuffer && bufferSize > 0) logBuffer[0] = '\0';
    return instantiate(phGraphExec, hGraph, 0);
  });
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                       char* logBuffer, size_t bufferSize) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (phErrorNode) *phErrorNode = nullptr;
    if (logBuffer && bufferSize > 0) logBuffer[0] = '\0';
    return instantiate(phGraphExec, hGraph, 0);
  });
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return instantiate(phGraphExec, hGraph, flags); });
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return instantiate_with_params(phGraphExec, hGraph, instantiateParams, false); });
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return instantiate_with_params(phGraphExec, hGraph, instantiateParams, true); });
}

CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return graph_upload(hGraphExec, hStream, false); });
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return graph_upload(hGraphExec, hStream, true); });
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return graph_launch(hGraphExec, hStream, false); });
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return graph_launch(hGraphExec, hStream, true); });
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    GraphExec* x = g_graph_execs.get(hGraphExec);
    return x ? exec_destroy(x) : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Graph* g = g_graphs.get(hGraph);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    destroy_graph(g);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    DeviceState* d = Driver::get().device(device);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    d->graph_pool.trim();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    DeviceState* d = Driver::get().device(device);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    return d->graph_pool.get_attribute(raw(attr), static_cast<cuuint64_t*>(value));
  });
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    DeviceState* d = Driver::get().device(device);
    if (!d) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    return d->graph_pool.set_attribute(raw(attr), static_cast<const cuuint64_t*>(value));
  });
}

}  // extern "C"
