// Graph memory: allocation and free nodes (node API, cuGraphAddNode_v2, stream capture), the
// device's graph memory pool that backs them, charged on the device from upload or launch until
// cuDeviceGraphMemTrim, and its attributes.
#include "sim.h"

using namespace simtest;

namespace {

struct GraphApi {
  explicit GraphApi(Api& a)
      : create(a.load<PFN_cuGraphCreate_v10000>("cuGraphCreate")),
        add_alloc(a.load<PFN_cuGraphAddMemAllocNode_v11040>("cuGraphAddMemAllocNode")),
        add_free(a.load<PFN_cuGraphAddMemFreeNode_v11040>("cuGraphAddMemFreeNode")),
        add_node(a.load<PFN_cuGraphAddNode_v12030>("cuGraphAddNode_v2")),
        capture_to(a.load<PFN_cuStreamBeginCaptureToGraph_v12030>("cuStreamBeginCaptureToGraph")),
        upload(a.load<PFN_cuGraphUpload_v11010>("cuGraphUpload")),
        trim(a.load<PFN_cuDeviceGraphMemTrim_v11040>("cuDeviceGraphMemTrim")),
        get(a.load<PFN_cuDeviceGetGraphMemAttribute_v11040>("cuDeviceGetGraphMemAttribute")),
        set(a.load<PFN_cuDeviceSetGraphMemAttribute_v11040>("cuDeviceSetGraphMemAttribute")) {}
  PFN_cuGraphCreate_v10000 create;
  PFN_cuGraphAddMemAllocNode_v11040 add_alloc;
  PFN_cuGraphAddMemFreeNode_v11040 add_free;
  PFN_cuGraphAddNode_v12030 add_node;
  PFN_cuStreamBeginCaptureToGraph_v12030 capture_to;
  PFN_cuGraphUpload_v11010 upload;
  PFN_cuDeviceGraphMemTrim_v11040 trim;
  PFN_cuDeviceGetGraphMemAttribute_v11040 get;
  PFN_cuDeviceSetGraphMemAttribute_v11040 set;

  uint64_t attr(CUgraphMem_attribute a) {
    cuuint64_t v = ~0ull;
    REQUIRE(get(0, a, &v) == CUDA_SUCCESS);
    return v;
  }
  uint64_t reserved() { return attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT); }
  uint64_t used() { return attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT); }
};

CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(uint64_t bytes, int device = 0) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = device;
  p.bytesize = bytes;
  return p;
}

}  // namespace

TEST_SUITE("simgpu") {

TEST_CASE("graph memory: nodes reserve addresses; launches bind pool memory, which stays reserved until a trim") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  GraphApi g(a);
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  const uint64_t free0 = s.free_bytes();
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);

  CUgraph graph;
  CHECK(g.create(&graph, 1) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(g.create(&graph, 0) == CUDA_SUCCESS);
  CUgraphNode alloc, freed;
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(64 * MiB + 1);
  CUDA_MEM_ALLOC_NODE_PARAMS zero = alloc_params(0), host = alloc_params(MiB);
  host.poolProps.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CHECK(g.add_alloc(&alloc, graph, nullptr, 0, &zero) == CUDA_ERROR_INVALID_VALUE);
  CHECK(g.add_alloc(&alloc, graph, nullptr, 0, &host) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(g.add_alloc(&alloc, nullptr, nullptr, 0, &p) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(g.add_alloc(&alloc, graph, nullptr, 0, &p) == CUDA_SUCCESS);
  CHECK(p.dptr != 0);
  CHECK(s.free_bytes() == free0);  // an address only
  CHECK(g.add_free(&freed, graph, &alloc, 1, p.dptr + 512) == CUDA_ERROR_INVALID_VALUE);  // not an allocation's address
  REQUIRE(g.add_free(&freed, graph, &alloc, 1, p.dptr) == CUDA_SUCCESS);
  CHECK(g.add_free(&freed, graph, &alloc, 1, p.dptr) == CUDA_ERROR_INVALID_VALUE);  // freed twice
  CHECK(a.cuMemFree_v2(p.dptr) == CUDA_ERROR_INVALID_VALUE);                        // not allocated now

  CUgraphExec exec, second;
  REQUIRE(a.cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
  CHECK(a.cuGraphInstantiateWithFlags(&second, graph, 0) == CUDA_ERROR_INVALID_VALUE);  // one instantiation at a time
  CHECK(g.reserved() == 0);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  CHECK(g.reserved() == 66 * MiB);  // rounded up to 2 MiB
  CHECK(s.free_bytes() == free0 - 66 * MiB);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);  // the same executable graph: no more memory
  CHECK(g.reserved() == 66 * MiB);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.used() == 0);                // the free node ran
  CHECK(g.reserved() == 66 * MiB);     // ... and the pool keeps the memory
  CHECK(s.free_bytes() == free0 - 66 * MiB);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.reserved() == 66 * MiB);     // reused
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  CHECK(g.reserved() == 0);
  CHECK(s.free_bytes() == free0);
  CHECK(g.attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) == 66 * MiB);
  CHECK(g.attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 66 * MiB);

  // Upload binds ahead of the launch.
  REQUIRE(g.upload(exec, st) == CUDA_SUCCESS);
  CHECK(g.reserved() == 66 * MiB);
  CHECK(g.used() == 66 * MiB);
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  CHECK(g.reserved() == 66 * MiB);  // bound: not given back
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.reserved() == 66 * MiB);

  cuuint64_t v = 0, one = 1;
  CHECK(g.set(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v) == CUDA_SUCCESS);
  CHECK(g.attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 0);
  CHECK(g.set(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &one) == CUDA_ERROR_INVALID_VALUE);
  CHECK(g.set(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v) == CUDA_ERROR_INVALID_VALUE);
  CHECK(g.get(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(g.get(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(g.trim(7) == CUDA_ERROR_INVALID_DEVICE);

  CHECK(a.cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(a.cuGraphDestroy(graph) == CUDA_SUCCESS);
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  CHECK(g.reserved() == 0);
  CHECK(s.free_bytes() == free0);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

TEST_CASE("graph memory: capture records allocations; an unfreed allocation blocks a relaunch; no memory, no launch") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  GraphApi g(a);
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  const uint64_t free0 = s.free_bytes();
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);

  // cuMemAllocAsync on a capturing stream makes an allocation node, not a pool allocation.
  REQUIRE(a.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr p = 0;
  REQUIRE(a.cuMemAllocAsync(&p, GiB, st) == CUDA_SUCCESS);
  CHECK(s.free_bytes() == free0);
  REQUIRE(a.cuMemsetD32Async(p, 0x05060708, 256, st) == CUDA_SUCCESS);
  CUgraph captured;
  REQUIRE(a.cuStreamEndCapture(st, &captured) == CUDA_SUCCESS);
  CUgraphExec exec;
  REQUIRE(a.cuGraphInstantiateWithFlags(&exec, captured, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(reinterpret_cast<uint32_t*>(p)[255] == 0x05060708u);  // the allocation outlives the launch
  CHECK(g.used() == GiB);
  CHECK(g.reserved() == GiB);
  CHECK(s.free_bytes() == free0 - GiB);
  CHECK(a.cuGraphLaunch(exec, st) == CUDA_ERROR_INVALID_VALUE);  // its allocation is still live
  REQUIRE(a.cuMemFreeAsync(p, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.used() == 0);
  CHECK(g.reserved() == GiB);
  CHECK(a.cuMemFree_v2(p) == CUDA_ERROR_INVALID_VALUE);  // freed already
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(p, st) == CUDA_SUCCESS);  // after the launch queued: live
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.used() == 0);

  // Capture into an existing graph, with its free; cuGraphAddNode_v2 makes a second allocation.
  CUgraph graph;
  REQUIRE(g.create(&graph, 0) == CUDA_SUCCESS);
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  np.alloc.poolProps = alloc_params(0).poolProps;
  np.alloc.bytesize = 3 * GiB;
  CUgraphNode node;
  REQUIRE(g.add_node(&node, graph, nullptr, nullptr, 0, &np) == CUDA_SUCCESS);
  CHECK(np.alloc.dptr != 0);
  REQUIRE(g.capture_to(st, graph, &node, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUdeviceptr q = 0;
  REQUIRE(a.cuMemAllocAsync(&q, 2 * GiB, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(q, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFreeAsync(np.alloc.dptr, st) == CUDA_SUCCESS);
  CUgraph same;
  REQUIRE(a.cuStreamEndCapture(st, &same) == CUDA_SUCCESS);
  CHECK(same == graph);
  CUgraphExec big;
  REQUIRE(a.cuGraphInstantiateWithFlags(&big, graph, 0) == CUDA_SUCCESS);
  REQUIRE(g.upload(big, st) == CUDA_SUCCESS);  // 5 GiB, 1 GiB of it already reserved
  CHECK(g.reserved() == 5 * GiB);
  CHECK(s.free_bytes() == free0 - 5 * GiB);
  REQUIRE(a.cuGraphLaunch(big, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(g.used() == 0);

  // 5 GiB reserved and unbound, under 3 GiB free on the device: an 8 GiB graph cannot get its memory.
  CUgraph huge;
  REQUIRE(g.create(&huge, 0) == CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS hp = alloc_params(8 * GiB);
  REQUIRE(g.add_alloc(&node, huge, nullptr, 0, &hp) == CUDA_SUCCESS);
  CUgraphExec hx;
  REQUIRE(a.cuGraphInstantiateWithFlags(&hx, huge, 0) == CUDA_SUCCESS);
  const uint64_t before = s.free_bytes();
  CHECK(g.upload(hx, st) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuGraphLaunch(hx, st) == CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(a.cuStreamQuery(st) == CUDA_SUCCESS);  // nothing enqueued
  CHECK(s.free_bytes() == before);
  CHECK(g.reserved() == 5 * GiB);

  for (CUgraphExec x : {exec, big, hx}) CHECK(a.cuGraphExecDestroy(x) == CUDA_SUCCESS);
  for (CUgraph x : {captured, graph, huge}) CHECK(a.cuGraphDestroy(x) == CUDA_SUCCESS);
  REQUIRE(g.trim(0) == CUDA_SUCCESS);
  CHECK(g.reserved() == 0);
  CHECK(s.free_bytes() == free0);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

}  // TEST_SUITE
