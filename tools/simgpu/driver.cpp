#include "driver.h"

#include "capture.h"
#include "checkpoint.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "entry.h"

namespace simgpu {

constinit HandlePool<Context, 256> g_contexts;
constinit HandlePool<Stream, 8192> g_streams;
constinit HandlePool<Event, 65536> g_events;
constinit HandlePool<Module, 4096> g_modules;
constinit HandlePool<Function, 16384> g_functions;
constinit HandlePool<Graph, 4096> g_graphs;
constinit HandlePool<GraphExec, 4096> g_graph_execs;
constinit HandlePool<GraphNode, 16384> g_graph_nodes;
constinit HandlePool<MemPool, 1024> g_mem_pools;
constinit HandlePool<PhysicalMemory, 65536> g_physical_memory;
constinit HandlePool<ArrayObject, 65536> g_arrays;

namespace {

// Set in a fork child: it must not give back (or report on) its parent's process slot.
constinit std::atomic<bool> g_forked_child{false};
// SIMGPU_CALLS, read once when the library loads.
constinit const char* g_calls_path = nullptr;

void after_fork_in_child() {
  g_forked_child.store(true, std::memory_order_relaxed);
  if (g_phase.load(std::memory_order_relaxed) != Phase::uninitialized)
    g_phase.store(Phase::forked, std::memory_order_relaxed);
}

void write_calls_at_exit() {
  if (!g_forked_child.load(std::memory_order_relaxed) && g_calls_path) write_call_counts(g_calls_path);
}

void release_at_exit() {
  if (g_forked_child.load(std::memory_order_relaxed)) return;
  Phase expected = Phase::ready;
  if (!g_phase.compare_exchange_strong(expected, Phase::deinitialized)) {
    expected = Phase::lost;
    if (!g_phase.compare_exchange_strong(expected, Phase::deinitialized)) return;
  }
  // Give the machine's devices back now; executor threads may still run, and find nothing to own.
  Driver::get().shared->release_process();
}

__attribute__((constructor)) void on_load() {
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  const char* calls = std::getenv("SIMGPU_CALLS");
  if (calls && *calls) {
    g_calls_path = strdup(calls);
    g_count_calls.store(true, std::memory_order_relaxed);
    std::atexit(write_calls_at_exit);
  }
}

}  // namespace

Driver& Driver::get() {
  static Driver* driver = new Driver;
  return *driver;
}

CUresult Driver::init(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(init_mu_);
  Phase p = g_phase.load(std::memory_order_acquire);
  if (p == Phase::ready || p == Phase::failed) return init_result_;
  if (p == Phase::lost) return CUDA_ERROR_ILLEGAL_STATE;
  init_result_ = init_once();
  g_phase.store(init_result_ == CUDA_SUCCESS ? Phase::ready : Phase::failed, std::memory_order_release);
  return init_result_;
}

CUresult Driver::init_once() {
  auto fail = [](CUresult rc, const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return rc;
  };
  std::string error;
  EnvLookup env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  if (!load_config(env, getuid(), &config, &error)) return fail(CUDA_ERROR_INVALID_VALUE, "simgpu: " + error);

  OpenFailure why;
  shared = SharedState::open(config.state_dir, config.devices, &error, &why);
  if (!shared)
    return fail(why == OpenFailure::mismatch ? CUDA_ERROR_INVALID_VALUE
                : why == OpenFailure::full ? CUDA_ERROR_OUT_OF_MEMORY
                                           : CUDA_ERROR_OPERATING_SYSTEM,
                error);
  shared->set_timeslice_ns(config.timeslice_ns);

  char* real = realpath(config.state_dir.c_str(), nullptr);
  std::string dir = real ? real : config.state_dir;
  std::free(real);
  std::vector<Uuid> uuids;
  for (size_t i = 0; i < config.devices.size(); ++i) uuids.push_back(device_uuid(dir, int(i)));
  std::vector<int> visible;
  if (config.visible) {
    visible = apply_visible_devices(*config.visible, uuids);
  } else {
    for (size_t i = 0; i < uuids.size(); ++i) visible.push_back(int(i));
  }
  if (visible.empty()) {
    shared.reset();
    return fail(CUDA_ERROR_NO_DEVICE, "simgpu: CUDA_VISIBLE_DEVICES=\"" + config.visible.value_or("") +
                                          "\" leaves no visible device");
  }

  uint64_t total = 0;
  for (size_t ord = 0; ord < visible.size(); ++ord) {
    const int phys = visible[ord];
    const DeviceSpec& spec = config.devices[size_t(phys)];
    total += spec.bytes;
    auto dev = std::make_unique<DeviceState>(int(ord), phys, spec, uuids[size_t(phys)]);
    MemPool* pool = g_mem_pools.create(*dev, true);
    if (!pool) return fail(CUDA_ERROR_OUT_OF_MEMORY, "simgpu: no room for a default memory pool");
    dev->default_pool = pool;
    dev->current_pool.store(pool);
    devices.push_back(std::move(dev));
  }
  managed = std::make_unique<Arena>(64ull << 30);
  vmm = std::make_unique<Vmm>(arena_span(std::max<uint64_t>(total, 32ull << 30)));

  if (!config.trace_path.empty() && !trace.open(config.trace_path, &error)) {
    shared.reset();
    return fail(CUDA_ERROR_OPERATING_SYSTEM, error);
  }
  pid = getpid();
  g_fast.store(config.fast, std::memory_order_relaxed);
  std::atexit(release_at_exit);
  return CUDA_SUCCESS;
}

bool Driver::device_range_live(uintptr_t p, uint64_t n) const { return device_range(p, n, true); }

bool Driver::device_range_addressable(uintptr_t p, uint64_t n) const { return device_range(p, n, false); }

bool Driver::device_range(uintptr_t p, uint64_t n, bool need_live) const {
  if (n == 0 || n > UINTPTR_MAX - p) return false;
  for (const auto& dev : devices) {
    if (!dev->memory.contains(p)) continue;
    if (!dev->memory.live_range(p, n)) return false;
    auto hit = dev->memory.find(p);  // a graph allocation's address is live only while allocated
    return hit && (hit->second.kind != AllocKind::graph || dev->graph_pool.range(p, n, need_live));
  }
  if (managed->contains(p)) return managed->live_range(p, n);
  if (vmm->contains(p)) return vmm->live_range(p, n);
  return false;
}

MemPool* Driver::pool_of_block(uintptr_t p) {
  for (const auto& dev : devices) {
    if (!dev->memory.contains(p)) continue;
    auto hit = dev->memory.find(p);
    if (hit && hit->first == p && hit->second.kind == AllocKind::pool_chunk) return hit->second.pool;
    return nullptr;
  }
  return nullptr;
}

CUresult Driver::free_device_memory(uintptr_t p) {
  for (const auto& dev : devices) {
    if (!dev->memory.contains(p)) continue;
    auto hit = dev->memory.find(p);
    if (!hit || hit->first != p) return CUDA_ERROR_INVALID_VALUE;
    if (hit->second.kind == AllocKind::pool_chunk)
      return hit->second.pool->free_block(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (hit->second.kind == AllocKind::graph) return dev->graph_pool.free_outside(p);
    auto a = dev->memory.release(p);
    if (!a) return CUDA_ERROR_INVALID_VALUE;  // freed by another thread meanwhile
    shared->uncharge(dev->physical, a->charged);
    return CUDA_SUCCESS;
  }
  if (managed->contains(p)) return managed->release(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult Driver::create_context(DeviceState& dev, bool primary, unsigned flags, Context** out) {
  if (!shared->charge(dev.physical, config.context_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  const int entry = shared->add_context(dev.physical);
  Context* ctx = entry < 0 ? nullptr : g_contexts.create(dev, next_context_id.fetch_add(1), primary, flags, entry);
  if (!ctx) {
    if (entry >= 0) shared->remove_context(dev.physical, entry);
    shared->uncharge(dev.physical, config.context_bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // The checkpoint API's restore thread comes with the first context, as the driver's own threads
  // do: a process with no context has no thread of the driver's (so pthread_exit in main ends it).
  checkpoint::start_restore_thread();
  *out = ctx;
  return CUDA_SUCCESS;
}

void Driver::destroy_context(Context* ctx) {
  DeviceState& dev = ctx->device;
  const uint32_t id = ctx->id;
  ctx->synchronize();  // nothing queued may point at what is freed below
  forget_captures(*ctx);
  g_events.for_each([&](Event* e) {
    if (e->ctx == ctx) g_events.destroy(e);
  });
  g_streams.for_each([&](Stream* s) {
    if (s->ctx == ctx) g_streams.destroy(s);
  });
  g_functions.for_each([&](Function* f) {
    if (f->ctx == ctx) g_functions.destroy(f);
  });
  g_modules.for_each([&](Module* m) {
    if (m->ctx == ctx) g_modules.destroy(m);
  });
  g_contexts.destroy(ctx);  // joins the executor, frees the engine entry

  for (const Allocation& a : dev.memory.release_if([&](const Allocation& x) { return x.kind == AllocKind::plain && x.context == id; }))
    shared->uncharge(dev.physical, a.charged);
  managed->release_if([&](const Allocation& x) { return x.context == id; });
  g_arrays.for_each([&](ArrayObject* a) {
    if (a->context != id) return;
    shared->uncharge(a->device->physical, a->bytes);
    g_arrays.destroy(a);
  });
  shared->uncharge(dev.physical, config.context_bytes);
}

void Driver::trim_pools(DeviceState& dev) {
  g_mem_pools.for_each([&](MemPool* p) {
    if (&p->device == &dev) p->trim_to_threshold();
  });
}

const char* Driver::intern(std::string_view name) {
  std::lock_guard<std::mutex> lk(names_mu_);
  auto it = names_.find(name);
  if (it == names_.end()) it = names_.emplace(name).first;
  return it->c_str();
}

// ---- context stack ------------------------------------------------------------------------

namespace {
// One thread-local object, so that a lookup costs one TLS access.
struct ContextStack {
  CUcontext items[kMaxContextStack];
  int depth;
};
thread_local ContextStack tls_stack;
}  // namespace

CUcontext current_handle() {
  const ContextStack& s = tls_stack;
  return s.depth > 0 ? s.items[s.depth - 1] : nullptr;
}

Context* current_context() { return g_contexts.get(current_handle()); }

CUresult push_context(CUcontext ctx) {
  ContextStack& s = tls_stack;
  if (s.depth == kMaxContextStack) return CUDA_ERROR_INVALID_VALUE;
  s.items[s.depth++] = ctx;
  return CUDA_SUCCESS;
}

CUcontext pop_context() {
  ContextStack& s = tls_stack;
  return s.depth > 0 ? s.items[--s.depth] : nullptr;
}

void set_current_context(CUcontext ctx) {
  ContextStack& s = tls_stack;
  if (!ctx) {
    if (s.depth > 0) --s.depth;
  } else if (s.depth == 0) {
    s.items[s.depth++] = ctx;
  } else {
    s.items[s.depth - 1] = ctx;
  }
}

void forget_context(CUcontext ctx) {
  ContextStack& s = tls_stack;
  if (s.depth > 0 && s.items[s.depth - 1] == ctx) --s.depth;
}

CUresult resolve_stream(CUstream h, bool per_thread, Stream** out) {
  const bool special = h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
  return resolve_stream(h, per_thread, special ? current_context() : nullptr, out);
}

CUresult resolve_stream(CUstream h, bool per_thread, Context* ctx, Stream** out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    const bool pt = h == CU_STREAM_PER_THREAD || (h == nullptr && per_thread);
    *out = pt ? &ctx->per_thread_stream : &ctx->null_stream;
    return CUDA_SUCCESS;
  }
  Stream* s = g_streams.get(h);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

}  // namespace simgpu
