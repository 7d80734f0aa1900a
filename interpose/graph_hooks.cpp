// interpose/graph_hooks.cpp — the handlers of the graph and graph_launch policies (hooks.def): the
// books of CUDA graph memory.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The driver backs graph memory nodes with a per-device graph memory pool that persists across
// launches: physical memory is taken when an executable graph is uploaded or launched and the
// pool's unbound reserve cannot hold its allocations, stays reserved after the launch, and goes
// back at cuDeviceGraphMemTrim. The books follow that (Kind::graph):
//   - each graph's allocation nodes are summed (cuGraphAddMemAllocNode, cuGraphAddNode[_v2] with
//     CU_GRAPH_NODE_TYPE_MEM_ALLOC, and cuMemAllocAsync recorded by stream capture, which is not a
//     pool allocation), each rounded up to 2 MiB (kGraphGranule), and carried to the executable
//     graph at instantiation;
//   - a shadow of each device's pool keeps `reserved` (what the books charge) and `held` (an upper
//     bound of what executable graphs hold: every exec uploaded or launched since the last
//     reconciliation counts as holding its bytes);
//   - cuGraphUpload / cuGraphLaunch of an exec that does not hold its bytes T charges
//     max(0, T − (reserved − held)) *before* the driver call; when that passes the limit the call
//     returns CUDA_ERROR_OUT_OF_MEMORY and reaches no driver (and no launch gate). Only when the
//     shadow says the pool must grow is the driver asked first (reconciliation), so a relaunch
//     costs one relaxed load and a table lookup;
//   - reconciliation (at growth, after cuDeviceGraphMemTrim, and wherever pools are refreshed:
//     refresh_pools in limits.cpp) sets `reserved` to CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
//     charging or crediting the difference. If `held` is above USED_MEM_CURRENT (the memory bound
//     to graphs now), which execs still hold memory is unknown: every exec on the device is marked
//     not holding and `held` becomes USED_MEM_CURRENT. `held` never falls below what the driver
//     has bound, so a launch is never charged less than the pool grows (interpose/README.md).
// Limits: one device per graph (nodes on another device count on the first one's books); a graph
// used as a child graph node is not followed; the per-thread default stream's captures are told
// apart by thread.
#include "graph_hooks.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "devices.h"
#include "driver.h"
#include "gate.h"
#include "glibc_compat.h"
#include "handlers.h"
#include "limits.h"
#include "log.h"
#include "mutex.h"
#include "runtime.h"

namespace coloc::interpose {

std::atomic<int> g_active_captures{0};

namespace {

/// Granularity the graph memory pool maps in (bytes): 2 MiB, the minimum granularity of device
/// memory mappings (cuMemGetAllocationGranularity) on current GPUs, and simgpu's.
constexpr uint64_t kGraphGranule = 2ull << 20;

uint64_t round_granule(uint64_t v) {
  uint64_t r = (v + kGraphGranule - 1) & ~(kGraphGranule - 1);
  return r < v ? UINT64_MAX : r;
}

uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

constexpr uint64_t kEmpty = 0, kTomb = ~0ull;

// A record per graph or executable graph that has graph memory.
struct MemRec {
  uint64_t key = kEmpty;  // the handle
  int slot = -1;
  uint64_t bytes = 0;     // its allocation nodes, each rounded to kGraphGranule
  bool holding = false;   // (execs) counted in its device's `held`
};

// Open addressing on handles, linear probing, tombstones. Callers hold g_mutex.
template <unsigned N>
struct Table {
  MemRec rows[N];
  unsigned live = 0;
  static unsigned hash(uint64_t k) { return unsigned((k * 0x9E3779B97F4A7C15ull) >> 40) % N; }
  MemRec* find(uint64_t k) {
    for (unsigned i = hash(k), n = 0; n < N; ++n, i = (i + 1) % N) {
      if (rows[i].key == k) return &rows[i];
      if (rows[i].key == kEmpty) return nullptr;
    }
    return nullptr;
  }
  MemRec* insert(uint64_t k) {  // nullptr when full
    if (MemRec* r = find(k)) return r;
    for (unsigned i = hash(k), n = 0; n < N; ++n, i = (i + 1) % N)
      if (rows[i].key == kEmpty || rows[i].key == kTomb) {
        rows[i] = MemRec{k};
        ++live;
        return &rows[i];
      }
    return nullptr;
  }
  void erase(MemRec* r) {
    r->key = kTomb;
    --live;
  }
  void clear() {
    for (MemRec& r : rows) r = MemRec{};
    live = 0;
  }
};

struct Capture {
  uint64_t stream = 0;  // 0: free
  long tid = 0;         // the capturing thread, for the per-thread default stream
  int slot = -1;
  uint64_t bytes = 0;
};
constexpr int kMaxCaptures = 64;

struct Shadow {
  uint64_t reserved = 0;  // charged on the books as Kind::graph (committed), plus in-flight charges
  uint64_t held = 0;
  int inflight = 0;       // upload/launch calls charged and not returned yet
  bool seen = false;      // some graph memory was ever bound here (else refresh asks nothing)
};

constinit Mutex g_mutex;
constinit Table<4096> g_graphs;
constinit Table<4096> g_execs;
constinit Capture g_captures[kMaxCaptures];
constinit Shadow g_shadow[kMaxDevices];
// Executable graphs with graph memory: zero keeps every graph launch on the plain path.
constinit std::atomic<int> g_mem_execs{0};

void warn_full(const char* what) {
  static constinit std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed))
    logf(LogLevel::warn, "too many %s with graph memory: the graph memory of the others is not counted", what);
}

uint64_t stream_key(CUstream s, bool per_thread) {
  if (!s && per_thread) s = CU_STREAM_PER_THREAD;
  return reinterpret_cast<uint64_t>(s);
}
long stream_tid(uint64_t key) { return key == reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD) ? syscall(SYS_gettid) : 0; }

Capture* find_capture_locked(uint64_t key, long tid) {
  for (Capture& c : g_captures)
    if (c.stream == key && c.tid == tid) return &c;
  return nullptr;
}

// Adds `bytes` (already rounded) of allocation nodes on `slot` to graph `graph`.
void add_to_graph_locked(CUgraph graph, int slot, uint64_t bytes) {
  if (!graph || slot < 0 || bytes == 0) return;
  MemRec* r = g_graphs.insert(reinterpret_cast<uint64_t>(graph));
  if (!r) return warn_full("graphs");
  if (r->slot < 0) r->slot = slot;
  r->bytes = add_sat(r->bytes, bytes);
}

// An allocation node on device `ordinal` (from its pool properties).
void note_alloc_node(CUgraph graph, const CUmemPoolProps& props, size_t bytes) {
  if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  Refusal why = Refusal::none;
  int slot = devices().attach(props.location.id, &why);  // its memory will be taken there
  if (slot < 0) return;
  MutexLock lock(g_mutex);
  add_to_graph_locked(graph, slot, round_granule(bytes));
}

bool reconcile_locked(int slot) {
  const CUdevice dev = CUdevice(devices().info(slot).ordinal);
  cuuint64_t reserved = 0, used = 0;
  if (call<Fn::cuDeviceGetGraphMemAttribute>(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
      call<Fn::cuDeviceGetGraphMemAttribute>(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return false;
  Shadow& p = g_shadow[slot];
  if (reserved < p.reserved && p.inflight > 0) return false;  // charged for a call the driver has not made yet
  const bool changed = reserved != p.reserved;
  if (reserved > p.reserved) {
    ledger().force_charge(slot, reserved - p.reserved);  // memory the driver already gave
    ledger().commit_bytes(slot, Kind::graph, reserved - p.reserved);
  } else if (reserved < p.reserved) {
    ledger().release_bytes(slot, Kind::graph, p.reserved - reserved);
  }
  p.reserved = reserved;
  // The driver binds less than `held` says: which execs still hold memory is unknown, so none is
  // taken to; what is bound now (USED_MEM_CURRENT) stands for them. Not while a call is in flight
  // (what it bound is in `held`, maybe not yet in the driver's reading).
  if (p.held > used && p.inflight == 0) {
    for (MemRec& x : g_execs.rows)
      if (x.key != kEmpty && x.key != kTomb && x.slot == slot) x.holding = false;
    p.held = used < reserved ? used : reserved;
  }
  return changed;
}

// An upload or launch about to bind an exec's graph memory: what was charged, to settle after.
struct Ticket {
  bool active = false;
  int slot = -1;
  uint64_t exec = 0;     // 0: not recorded yet (instantiate with upload)
  uint64_t bytes = 0;    // T
  uint64_t charged = 0;  // growth charged
};

// Charges the growth binding `bytes` on `slot` needs (see the file comment). *t is active when the
// caller must call bind_end.
CUresult bind_begin_locked(int slot, uint64_t bytes, uint64_t exec, const char* what, Ticket* t) {
  Shadow& p = g_shadow[slot];
  auto growth = [&] {
    uint64_t free = p.reserved > p.held ? p.reserved - p.held : 0;
    return bytes > free ? bytes - free : 0;
  };
  uint64_t n = growth();
  if (n > 0) {  // ask the driver only when the pool must grow
    reconcile_locked(slot);
    n = growth();
  }
  if (n > 0) {
    if (CUresult r = charge(slot, n, what); r != CUDA_SUCCESS) return r;
    p.reserved += n;
  }
  p.held = add_sat(p.held, bytes);
  p.seen = true;
  ++p.inflight;
  *t = Ticket{true, slot, exec, bytes, n};
  return CUDA_SUCCESS;
}

void bind_end(const Ticket& t, CUresult r) {
  MutexLock lock(g_mutex);
  Shadow& p = g_shadow[t.slot];
  --p.inflight;
  MemRec* x = t.exec ? g_execs.find(t.exec) : nullptr;
  if (r == CUDA_SUCCESS) {
    if (t.charged) ledger().commit_bytes(t.slot, Kind::graph, t.charged);
    if (x) x->holding = true;
    return;
  }
  if (t.charged) {
    ledger().uncharge(t.slot, t.charged);
    p.reserved -= t.charged;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) ledger().count_failed(t.slot, false);
  }
  p.held = p.held > t.bytes ? p.held - t.bytes : 0;
  if (x) x->holding = false;
}

// cuGraphUpload / cuGraphLaunch: begins binding `exec` if it has graph memory it does not hold.
CUresult bind_exec(CUgraphExec exec, const char* what, Ticket* t) {
  MutexLock lock(g_mutex);
  MemRec* x = g_execs.find(reinterpret_cast<uint64_t>(exec));
  if (!x || x->holding || x->bytes == 0) return CUDA_SUCCESS;
  x->holding = true;  // a concurrent launch of the same exec charges nothing more
  CUresult r = bind_begin_locked(x->slot, x->bytes, x->key, what, t);
  if (r != CUDA_SUCCESS) x->holding = false;
  return r;
}

template <Fn id>
CUresult upload(CUgraphExec exec, CUstream stream) {
  Ticket t;
  if (g_mem_execs.load(std::memory_order_relaxed) > 0) {
    if (CUresult r = bind_exec(exec, kFnName[index(id)], &t); r != CUDA_SUCCESS) return r;
  }
  CUresult r = call<id>(exec, stream);
  if (t.active) bind_end(t, r);
  return r;
}

// After a successful instantiation of `graph` as *exec: the exec inherits the graph's memory.
void note_exec(CUgraph graph, CUgraphExec exec, bool holding) {
  MutexLock lock(g_mutex);
  MemRec* gr = g_graphs.find(reinterpret_cast<uint64_t>(graph));
  if (!gr || gr->bytes == 0) return;
  MemRec* x = g_execs.insert(reinterpret_cast<uint64_t>(exec));
  if (!x) return warn_full("executable graphs");
  x->slot = gr->slot;
  x->bytes = gr->bytes;
  x->holding = holding;
  g_mem_execs.store(int(g_execs.live), std::memory_order_relaxed);
}

template <Fn id>
CUresult instantiate_with_params(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  Ticket t;
  const bool uploads = params && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
  if (uploads) {
    MutexLock lock(g_mutex);
    MemRec* gr = g_graphs.find(reinterpret_cast<uint64_t>(graph));
    if (gr && gr->bytes > 0) {
      if (CUresult r = bind_begin_locked(gr->slot, gr->bytes, 0, kFnName[index(id)], &t); r != CUDA_SUCCESS) {
        params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
        return r;
      }
    }
  }
  CUresult r = call<id>(exec, graph, params);
  if (r == CUDA_SUCCESS) note_exec(graph, *exec, t.active);
  if (t.active) {
    if (r == CUDA_SUCCESS) {
      MutexLock lock(g_mutex);
      t.exec = reinterpret_cast<uint64_t>(*exec);
    }
    bind_end(t, r);
  }
  return r;
}

template <Fn id, class... Rest>
CUresult begin_capture(CUstream stream, bool per_thread, CUgraph into, Rest... rest) {
  CUresult r = call<id>(stream, rest...);
  if (r != CUDA_SUCCESS) return r;
  const uint64_t key = stream_key(stream, per_thread);
  int slot = devices().of_stream(stream).slot;
  MutexLock lock(g_mutex);
  Capture* c = find_capture_locked(key, stream_tid(key));
  if (!c) c = find_capture_locked(0, 0);
  // Counted even when the table is full (and then never uncounted): the launch gate asks the
  // driver whether a stream captures only while this is above 0 (daemon_broker.cpp).
  g_active_captures.fetch_add(1, std::memory_order_relaxed);
  if (!c) {
    warn_full("stream captures");
    return r;
  }
  *c = Capture{key, stream_tid(key), slot, 0};
  (void)into;
  return r;
}

template <Fn id>
CUresult end_capture(CUstream stream, CUgraph* graph, bool per_thread) {
  CUresult r = call<id>(stream, graph);
  const uint64_t key = stream_key(stream, per_thread);
  MutexLock lock(g_mutex);
  Capture* c = find_capture_locked(key, stream_tid(key));
  if (!c) return r;
  if (r == CUDA_SUCCESS && graph) add_to_graph_locked(*graph, c->slot, c->bytes);
  *c = Capture{};
  g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

}  // namespace

bool stream_capturing(CUstream stream, bool per_thread) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = per_thread ? call<Fn::cuStreamIsCapturing_ptsz>(stream, &status)
                          : call<Fn::cuStreamIsCapturing>(stream, &status);
  return r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

void note_captured_alloc(CUstream stream, bool per_thread, uint64_t bytes) {
  const uint64_t key = stream_key(stream, per_thread);
  MutexLock lock(g_mutex);
  if (Capture* c = find_capture_locked(key, stream_tid(key))) c->bytes = add_sat(c->bytes, round_granule(bytes));
}

bool refresh_graph_pool(int slot) {
  if (!g_mutex.try_lock()) return false;  // a graph hook is settling the books: their reading stands
  bool changed = g_shadow[slot].seen && reconcile_locked(slot);
  g_mutex.unlock();
  return changed;
}

/// In a child after fork: no graph, exec or capture of the parent exists here.
void graph_reset_in_child() {
  g_mutex.reinit_in_child();
  g_graphs.clear();
  g_execs.clear();
  for (Capture& c : g_captures) c = Capture{};
  for (Shadow& s : g_shadow) s = Shadow{};
  g_mem_execs.store(0, std::memory_order_relaxed);
  g_active_captures.store(0, std::memory_order_relaxed);
}

// ---- graph --------------------------------------------------------------------------------------

namespace graph {

CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  CUresult r = call<Fn::cuGraphAddMemAllocNode>(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (r == CUDA_SUCCESS && nodeParams) note_alloc_node(hGraph, nodeParams->poolProps, nodeParams->bytesize);
  return r;
}

CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                        size_t numDependencies, CUgraphNodeParams* nodeParams) {
  CUresult r = call<Fn::cuGraphAddNode>(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  if (r == CUDA_SUCCESS && nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
    note_alloc_node(hGraph, nodeParams->alloc.poolProps, nodeParams->alloc.bytesize);
  return r;
}

CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                           const CUgraphEdgeData* dependencyData, size_t numDependencies, CUgraphNodeParams* nodeParams) {
  CUresult r =
      call<Fn::cuGraphAddNode_v2>(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams);
  if (r == CUDA_SUCCESS && nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
    note_alloc_node(hGraph, nodeParams->alloc.poolProps, nodeParams->alloc.bytesize);
  return r;
}

CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin_capture<Fn::cuStreamBeginCapture>(hStream, false, nullptr);
}
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture<Fn::cuStreamBeginCapture_v2>(hStream, false, nullptr, mode);
}
CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin_capture<Fn::cuStreamBeginCapture_ptsz>(hStream, true, nullptr);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture<Fn::cuStreamBeginCapture_v2_ptsz>(hStream, true, nullptr, mode);
}
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                     const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode) {
  return begin_capture<Fn::cuStreamBeginCaptureToGraph>(hStream, false, hGraph, hGraph, dependencies, dependencyData,
                                                        numDependencies, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode) {
  return begin_capture<Fn::cuStreamBeginCaptureToGraph_ptsz>(hStream, true, hGraph, hGraph, dependencies,
                                                             dependencyData, numDependencies, mode);
}
CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end_capture<Fn::cuStreamEndCapture>(hStream, phGraph, false);
}
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end_capture<Fn::cuStreamEndCapture_ptsz>(hStream, phGraph, true);
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  CUresult r = call<Fn::cuGraphDestroy>(hGraph);
  if (r != CUDA_SUCCESS) return r;
  MutexLock lock(g_mutex);
  if (MemRec* g = g_graphs.find(reinterpret_cast<uint64_t>(hGraph))) g_graphs.erase(g);
  return r;
}

CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                            size_t bufferSize) {
  CUresult r = call<Fn::cuGraphInstantiate>(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  if (r == CUDA_SUCCESS) note_exec(hGraph, *phGraphExec, false);
  return r;
}

CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                               size_t bufferSize) {
  CUresult r = call<Fn::cuGraphInstantiate_v2>(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  if (r == CUDA_SUCCESS) note_exec(hGraph, *phGraphExec, false);
  return r;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  CUresult r = call<Fn::cuGraphInstantiateWithFlags>(phGraphExec, hGraph, flags);
  if (r == CUDA_SUCCESS) note_exec(hGraph, *phGraphExec, false);
  return r;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params<Fn::cuGraphInstantiateWithParams>(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params<Fn::cuGraphInstantiateWithParams_ptsz>(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  CUresult r = call<Fn::cuGraphExecDestroy>(hGraphExec);
  if (r != CUDA_SUCCESS) return r;
  // What it held stays in `held` until a reconciliation finds the driver holding less.
  MutexLock lock(g_mutex);
  if (MemRec* x = g_execs.find(reinterpret_cast<uint64_t>(hGraphExec))) {
    g_execs.erase(x);
    g_mem_execs.store(int(g_execs.live), std::memory_order_relaxed);
  }
  return r;
}

CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) { return upload<Fn::cuGraphUpload>(hGraphExec, hStream); }

CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return upload<Fn::cuGraphUpload_ptsz>(hGraphExec, hStream);
}

CUresult cuDeviceGraphMemTrim(CUdevice device) {
  CUresult r = call<Fn::cuDeviceGraphMemTrim>(device);
  int slot = r == CUDA_SUCCESS ? devices().find_slot(device) : -1;
  if (slot < 0) return r;
  bool changed;
  {
    MutexLock lock(g_mutex);
    changed = reconcile_locked(slot);
  }
  if (changed) after_free(slot);
  return r;
}

}  // namespace graph

// ---- graph_launch: charge first, then the gate ------------------------------------------------

namespace graph_launch {

template <Fn id>
CUresult launch(CUgraphExec exec, CUstream stream) {
  Ticket t;
  if (g_mem_execs.load(std::memory_order_relaxed) > 0) [[unlikely]] {
    if (CUresult r = bind_exec(exec, kFnName[index(id)], &t); r != CUDA_SUCCESS) return r;
  }
  const GateTicket g = gate_pass<id>(exec, stream);
  CUresult r = call<id>(exec, stream);
  if (t.active) bind_end(t, r);
  gate_after<id>(g, r, exec, stream);
  return r;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return launch<Fn::cuGraphLaunch>(hGraphExec, hStream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return launch<Fn::cuGraphLaunch_ptsz>(hGraphExec, hStream);
}

}  // namespace graph_launch

}  // namespace coloc::interpose
