// simgpu/driver.h — the process-wide driver: configuration, devices, the shared state, every
// live object behind a handle, and the calling thread's context stack.
//
// Lock order (outer to inner): Driver::mu → Context::mu → MemPool mutex → Arena/Vmm mutex →
// the shared-state mutex. Handle pools have their own innermost mutex. Nothing blocks (waits on
// the engine or on a condition variable) while holding Driver::mu except context destruction,
// which waits for that context's own work.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "context.h"
#include "cuda_api.h"
#include "graph_memory.h"
#include "handles.h"
#include "image.h"
#include "memory.h"
#include "shared_state.h"
#include "trace.h"

namespace simgpu {

/// One device as this process sees it.
struct DeviceState {
  DeviceState(int ord, int phys, DeviceSpec s, Uuid u)
      : ordinal(ord), physical(phys), spec(std::move(s)), uuid(u), memory(arena_span(spec.bytes)), graph_pool(*this) {}
  const int ordinal;   ///< CUdevice, after CUDA_VISIBLE_DEVICES
  const int physical;  ///< index in SIMGPU_DEVICES (shared state, trace)
  const DeviceSpec spec;
  const Uuid uuid;
  Arena memory;  ///< cuMemAlloc and pool chunks; twice the capacity, for alignment slack
  GraphMemPool graph_pool;  ///< backs graph memory nodes (graph_memory.h)
  MemPool* default_pool = nullptr;        ///< set at cuInit
  std::atomic<MemPool*> current_pool{nullptr};
  // Guarded by Driver::mu:
  Context* primary = nullptr;
  unsigned primary_refs = 0;
  unsigned primary_flags = 0;
};

struct Function;

struct Module {
  Module(Context* c, ImageKind k, std::string img) : ctx(c), kind(k), image(std::move(img)) {}
  Context* const ctx;
  const ImageKind kind;
  const std::string image;  ///< a copy of the loaded image, searched by cuModuleGetFunction
  std::mutex mu;
  std::map<std::string, Function*, std::less<>> functions;  ///< guarded by mu
};

struct Function {
  Function(Module* m, const char* n, KernelKind k) : module(m), ctx(m->ctx), name(n), kind(k) {}
  Module* const module;
  Context* const ctx;
  const char* const name;  ///< interned
  const KernelKind kind;
  // The deprecated execution-control state (cuFuncSetBlockShape, cuParamSet*) that cuLaunch,
  // cuLaunchGrid and cuLaunchGridAsync use; guarded by legacy_mu.
  std::mutex legacy_mu;
  unsigned block[3] = {0, 0, 0};     ///< 0: never set (a launch is CUDA_ERROR_INVALID_VALUE)
  std::vector<unsigned char> params;  ///< sized by cuParamSetSize
};

// Every object behind a handle lives in one of these pools (static storage, see handles.h).
extern constinit HandlePool<Context, 256> g_contexts;
extern constinit HandlePool<Stream, 8192> g_streams;
extern constinit HandlePool<Event, 65536> g_events;
extern constinit HandlePool<Module, 4096> g_modules;
extern constinit HandlePool<Function, 16384> g_functions;
extern constinit HandlePool<Graph, 4096> g_graphs;
extern constinit HandlePool<GraphExec, 4096> g_graph_execs;
extern constinit HandlePool<GraphNode, 16384> g_graph_nodes;
extern constinit HandlePool<MemPool, 1024> g_mem_pools;
extern constinit HandlePool<PhysicalMemory, 65536> g_physical_memory;
extern constinit HandlePool<ArrayObject, 65536> g_arrays;

/// SIMGPU_FAST, published before the driver becomes ready.
inline constinit std::atomic<bool> g_fast{false};

class Driver {
 public:
  /// The one driver of this process; never destroyed (executor threads may outlive main).
  static Driver& get();

  /// cuInit: reads the configuration, opens the shared state, claims a process slot. Runs once;
  /// later calls return the first result. Prints a one-line reason to stderr on failure.
  CUresult init(unsigned flags);

  /// The device with ordinal `ordinal`, or nullptr.
  DeviceState* device(CUdevice ordinal) const {
    return ordinal >= 0 && size_t(ordinal) < devices.size() ? devices[size_t(ordinal)].get() : nullptr;
  }
  /// True when [p, p+n) (n > 0) is live device memory of this process: one allocation, a pool
  /// chunk, managed memory, or accessible VMM mappings.
  bool device_range_live(uintptr_t p, uint64_t n) const;
  /// device_range_live, except that a graph allocation's reserved address counts even while it is
  /// not allocated: what work checks when it is submitted (it runs once a launch allocated it).
  bool device_range_addressable(uintptr_t p, uint64_t n) const;
  /// Frees what cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged or a pool allocation returned at
  /// exactly `p`: CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE.
  CUresult free_device_memory(uintptr_t p);
  /// The pool whose block starts at `p`, or null (not a pool block).
  MemPool* pool_of_block(uintptr_t p);
  /// Makes a context on `dev` (charging SIMGPU_CONTEXT_BYTES). Caller holds mu.
  CUresult create_context(DeviceState& dev, bool primary, unsigned flags, Context** out);
  /// Waits for the context's work, then frees everything it owns. Caller holds mu.
  void destroy_context(Context* ctx);
  /// Trims every pool of `dev` to its release threshold (after a synchronize call).
  void trim_pools(DeviceState& dev);
  /// A copy of `name` that lives as long as the process.
  const char* intern(std::string_view name);

  Config config;
  std::unique_ptr<SharedState> shared;
  Trace trace;
  pid_t pid = 0;
  std::vector<std::unique_ptr<DeviceState>> devices;  ///< by ordinal
  std::unique_ptr<Arena> managed;
  std::unique_ptr<Vmm> vmm;
  std::mutex mu;  ///< context creation and destruction, primary context reference counts
  std::atomic<uint32_t> next_context_id{1};
  std::atomic<uint32_t> next_stream_id{2};
  std::atomic<uint64_t> next_launch_id{1};
  std::atomic<uint64_t> next_graph_id{1};

 private:
  Driver() = default;
  CUresult init_once();
  bool device_range(uintptr_t p, uint64_t n, bool need_live) const;

  std::mutex init_mu_;
  CUresult init_result_ = CUDA_SUCCESS;
  std::mutex names_mu_;
  std::set<std::string, std::less<>> names_;
};

// ---- the calling thread's context stack (cuCtxPush/Pop/Set/GetCurrent) ----

/// The context on top of this thread's stack, or nullptr (none, or it was destroyed).
Context* current_context();
/// The raw handle on top of the stack (may be stale), or nullptr.
CUcontext current_handle();
/// Pushes `ctx`; CUDA_ERROR_INVALID_VALUE when the stack (kMaxContextStack deep) is full.
CUresult push_context(CUcontext ctx);
/// Pops the top; nullptr when the stack is empty.
CUcontext pop_context();
/// Replaces the top (pushes when empty); nullptr pops.
void set_current_context(CUcontext ctx);
/// Removes `ctx` from the top of this thread's stack if it is there (cuCtxDestroy).
void forget_context(CUcontext ctx);
inline constexpr int kMaxContextStack = 64;

/// Destroys a graph: its node handles, and its claim on its graph memory blocks (api_graph.cpp).
void destroy_graph(Graph* g);

/// Resolves a stream argument. NULL means the legacy default stream, or the per-thread one for
/// the _ptsz/_ptds entry points (`per_thread`); CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name
/// them explicitly; both need a current context (else CUDA_ERROR_INVALID_CONTEXT). Any other
/// value must be a live stream (else CUDA_ERROR_INVALID_HANDLE).
CUresult resolve_stream(CUstream h, bool per_thread, Stream** out);
/// The same, with the caller's current context already looked up (null if none).
CUresult resolve_stream(CUstream h, bool per_thread, Context* current, Stream** out);

}  // namespace simgpu
