// interpose/pool_hooks.cpp — stream-ordered allocation (alloc policy: cuMemAllocAsync*,
// cuMemAllocFromPoolAsync*), the pool policy (cuMemPoolCreate/Destroy/TrimTo) and the sync policy
// (the synchronize calls, where pools give memory back): hooks.def.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// An allocation from a pool is charged what the pool may grow by, before the driver call
// (Ledger::pool_try_begin, pool_shadow.h): no driver query on this path. The pool's real reserved
// memory is read only off the fast path (pools.h): after a synchronize when some pool holds a
// reserve, in cuMemGetInfo, cuMemPoolTrimTo, and before a refusal.
#include <cstdint>
#include <optional>

#include "devices.h"
#include "estimate.h"
#include "driver.h"
#include "graph_hooks.h"
#include "handlers.h"
#include "limits.h"
#include "log.h"
#include "pools.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

// A per-thread default stream's key: an address unique to this thread (no driver handle is one).
__thread char tl_per_thread_stream;
constexpr uint64_t kLegacyStream = 1;  // CU_STREAM_LEGACY's value

uint64_t pool_key(CUmemoryPool pool) { return reinterpret_cast<uint64_t>(pool); }

// The chunk a pool on device `ordinal` reserves memory in: the device's minimum allocation
// granularity (PoolShadow::kDefaultChunk when the driver does not say).
uint64_t pool_chunk(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  size_t g = 0;
  if (call<Fn::cuMemGetAllocationGranularity>(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0)
    return PoolShadow::kDefaultChunk;
  return g;
}

// The ledger's index for `pool` on `slot`, tracking it on first sight (-1: cannot track); *at
// (when given) the slot it is tracked on.
int track_pool(CUmemoryPool pool, int slot, int* at = nullptr) {
  int idx = ledger().pool_find(pool_key(pool), at);
  if (idx >= 0) return idx;
  idx = ledger().pool_track(pool_key(pool), slot, read_reserved(pool).value_or(0),
                            pool_chunk(devices().info(slot).ordinal));
  if (at) *at = slot;
  return idx;
}

class PoolCharge final : public ChargeAttempt {
 public:
  PoolCharge(int pool, uint64_t bytes, uint64_t stream) : pool_(pool), bytes_(bytes), stream_(stream) {}
  bool attempt(uint64_t ceiling, uint64_t* seen, uint64_t* wanted) override {
    return ledger().pool_try_begin(pool_, bytes_, stream_, ceiling, seen, wanted, &ticket_);
  }
  void undo() override { ledger().pool_end(pool_, false, ticket_, Key{}, Record{}); }
  /// What the last successful attempt decided (its growth is this request's charge).
  const PoolShadow::Ticket& ticket() const { return ticket_; }

 private:
  int pool_;
  uint64_t bytes_, stream_;
  PoolShadow::Ticket ticket_;
};

// cuMemAllocAsync*, cuMemAllocFromPoolAsync*: `pool` null = the current pool of the stream's device;
// `per_thread`: a _ptsz entry point.
template <Fn id, Fn free_id, bool per_thread, class Call>
CUresult pool_alloc(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream, Call&& driver_alloc) {
  // Recorded by stream capture: graph memory (graph_hooks.cpp), charged when the graph runs.
  if (g_active_captures.load(std::memory_order_relaxed) > 0 && stream_capturing(stream, per_thread)) [[unlikely]] {
    CUresult r = driver_alloc();
    if (r == CUDA_SUCCESS) note_captured_alloc(stream, per_thread, bytes);
    return r;
  }
  Where w = devices().of_stream(stream);
  if (w.slot < 0) return driver_alloc();
  if (!pool && call<Fn::cuDeviceGetMemPool>(&pool, CUdevice(devices().info(w.slot).ordinal)) != CUDA_SUCCESS)
    pool = nullptr;
  int slot = w.slot;
  int idx = pool ? track_pool(pool, w.slot, &slot) : -1;
  if (idx < 0) {
    // Untrackable pool (none, or kMaxPools in use): charge the bytes themselves, as Kind::pool.
    if (CUresult r = charge(w.slot, bytes, kFnName[index(id)]); r != CUDA_SUCCESS) return r;
    CUresult r = call_charged(w.slot, bytes, driver_alloc);
    if (r != CUDA_SUCCESS) {
      charge_failed(w.slot, bytes, r);
      return r;
    }
    CUdeviceptr p = *dptr;
    Record rec{bytes, 0, kNoPool, uint16_t(w.slot), Kind::pool};
    if (ledger().commit(Key{p, Space::devptr}, rec)) return CUDA_SUCCESS;
    call<free_id>(p, stream);
    charge_failed(w.slot, bytes, CUDA_SUCCESS);
  } else {
    PoolCharge attempt(idx, bytes, stream_key(stream, per_thread, w.ctx));
    if (CUresult r = charge_with(slot, bytes, kFnName[index(id)], attempt); r != CUDA_SUCCESS) return r;
    CUresult r = call_charged(slot, bytes, attempt.ticket().growth, driver_alloc);
    bool ok = r == CUDA_SUCCESS;
    CUdeviceptr p = ok ? *dptr : 0;
    Record rec{bytes, 0, uint32_t(idx), uint16_t(slot), Kind::pool};
    if (ledger().pool_end(idx, ok, attempt.ticket(), Key{p, Space::devptr}, rec)) {
      if (r == CUDA_ERROR_OUT_OF_MEMORY) ledger().count_failed(slot, false);
      // Charged a growth while the shadow held at least as much spare it could not use (frees on
      // other streams not yet seen done): the pool probably reused one. Read it, so that books
      // without a limit (nothing else reads them then) do not grow without bound.
      const PoolShadow::Ticket& t = attempt.ticket();
      if (ok && t.growth && t.spare_before >= t.need) {
        uint64_t epoch = ledger().pool_epoch(idx);
        uint64_t before = ledger().in_use(slot);
        if (std::optional<uint64_t> reserved = read_reserved(pool)) ledger().pool_reconcile(idx, *reserved, epoch);
        if (ledger().in_use(slot) < before) after_free(slot);
      }
      return r;
    }
    call<free_id>(p, stream);  // the ledger could not store the record: undo
  }
  logf(LogLevel::error, "out of host memory for the ledger: an allocation of %llu bytes was undone",
       (unsigned long long)bytes);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// After a synchronize that began at free sequence `seq` returned CUDA_SUCCESS: the frees queued
// before it on `stream` (a stream key; kAllStreams: every stream of context `ctx`; 0: none known)
// have run, and the driver may have trimmed the pools on `slot` (-1: unknown, every slot) to their
// release thresholds. Free when no pool holds a reserve.
void synchronized(int slot, uint64_t stream, CUcontext ctx, uint64_t seq) {
  if (!ledger().pools_hold_reserve()) return;
  if (stream != 0 && (stream != PoolShadow::kAllStreams || ctx))
    ledger().pool_synchronized(stream, reinterpret_cast<uintptr_t>(ctx), seq);
  uint64_t fell = 0;
  refresh_pools(slot, &fell);
  for (int s = 0; s < kMaxDevices; ++s)
    if (fell & (uint64_t(1) << s)) after_free(s);
}

}  // namespace

static bool is_default_stream(CUstream stream) {
  auto v = reinterpret_cast<uintptr_t>(stream);
  return v == 0 || v == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) || v == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);
}

uint64_t stream_key(CUstream stream, bool per_thread, CUcontext ctx) {
  auto v = reinterpret_cast<uintptr_t>(stream);
  if (!is_default_stream(stream)) return v;
  auto c = reinterpret_cast<uintptr_t>(ctx);
  // Context handles are aligned: their low bits are free to say which default stream.
  if (v == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD) || per_thread)
    return (c ^ (reinterpret_cast<uintptr_t>(&tl_per_thread_stream) << 4)) | 2;
  return c | kLegacyStream;
}

PoolShadow::FreeSite free_site(CUstream stream, bool per_thread) {
  PoolShadow::FreeSite site;
  CUcontext ctx = nullptr;
  if (is_default_stream(stream)) ctx = devices().current().ctx;
  else if (call<Fn::cuStreamGetCtx>(stream, &ctx) != CUDA_SUCCESS) ctx = nullptr;
  site.stream = stream_key(stream, per_thread, ctx);
  site.ctx = reinterpret_cast<uintptr_t>(ctx);
  return site;
}

std::optional<uint64_t> read_reserved(CUmemoryPool pool) {
  cuuint64_t v = 0;
  if (call<Fn::cuMemPoolGetAttribute>(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
    return std::nullopt;
  return uint64_t(v);
}

bool refresh_pools(int slot, uint64_t* fell) {
  int idx[Ledger::kMaxPools];
  uint64_t handles[Ledger::kMaxPools];
  int n = ledger().pools_of_slot(slot, idx, handles, Ledger::kMaxPools);
  bool changed = false;
  for (int i = 0; i < n; ++i) {
    int s = ledger().pool_slot(idx[i]);
    uint64_t epoch = ledger().pool_epoch(idx[i]);
    std::optional<uint64_t> reserved = read_reserved(reinterpret_cast<CUmemoryPool>(handles[i]));
    if (!reserved) continue;
    uint64_t before = ledger().in_use(s);
    if (uint64_t beyond = ledger().pool_reconcile(idx[i], *reserved, epoch))
      logf(LogLevel::debug, "a pool on device slot %d reserved %llu bytes more than coloc charged: charged now", s,
           (unsigned long long)beyond);
    uint64_t after = ledger().in_use(s);
    if (after != before) changed = true;
    if (after < before && fell) *fell |= uint64_t(1) << s;
  }
  // The graph memory pool too (graph_hooks.h).
  for (int s = 0; s < kMaxDevices; ++s) {
    if (slot >= 0 && s != slot) continue;
    if (slot < 0 && !control().slots[s].attached.load(std::memory_order_acquire)) continue;
    uint64_t before = ledger().in_use(s);
    if (refresh_graph_pool(s)) changed = true;
    if (ledger().in_use(s) < before && fell) *fell |= uint64_t(1) << s;
  }
  return changed;
}

bool trim_pools(int slot) {
  int idx[Ledger::kMaxPools];
  uint64_t handles[Ledger::kMaxPools];
  int n = ledger().pools_of_slot(slot, idx, handles, Ledger::kMaxPools);
  bool trimmed = false;
  for (int i = 0; i < n; ++i) {
    if (ledger().pool_shadow(idx[i]).spare() == 0) continue;
    if (call<Fn::cuMemPoolTrimTo>(reinterpret_cast<CUmemoryPool>(handles[i]), 0) == CUDA_SUCCESS) trimmed = true;
  }
  if (!trimmed) return false;
  uint64_t before = ledger().in_use(slot);
  refresh_pools(slot);
  return ledger().in_use(slot) < before;
}

// ---- alloc --------------------------------------------------------------------------------------

namespace alloc {

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return pool_alloc<Fn::cuMemAllocAsync, Fn::cuMemFreeAsync, false>(
      dptr, bytesize, nullptr, hStream, [&] { return call<Fn::cuMemAllocAsync>(dptr, bytesize, hStream); });
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return pool_alloc<Fn::cuMemAllocAsync_ptsz, Fn::cuMemFreeAsync_ptsz, true>(
      dptr, bytesize, nullptr, hStream, [&] { return call<Fn::cuMemAllocAsync_ptsz>(dptr, bytesize, hStream); });
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  if (!pool) return call<Fn::cuMemAllocFromPoolAsync>(dptr, bytesize, pool, hStream);  // the driver's error
  return pool_alloc<Fn::cuMemAllocFromPoolAsync, Fn::cuMemFreeAsync, false>(dptr, bytesize, pool, hStream, [&] {
    return call<Fn::cuMemAllocFromPoolAsync>(dptr, bytesize, pool, hStream);
  });
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  if (!pool) return call<Fn::cuMemAllocFromPoolAsync_ptsz>(dptr, bytesize, pool, hStream);
  return pool_alloc<Fn::cuMemAllocFromPoolAsync_ptsz, Fn::cuMemFreeAsync_ptsz, true>(dptr, bytesize, pool, hStream, [&] {
    return call<Fn::cuMemAllocFromPoolAsync_ptsz>(dptr, bytesize, pool, hStream);
  });
}

}  // namespace alloc

// ---- pool ---------------------------------------------------------------------------------------

namespace pool {

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  CUresult r = call<Fn::cuMemPoolCreate>(pool, poolProps);
  if (r != CUDA_SUCCESS || !poolProps || poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return r;
  Refusal why = Refusal::none;
  int slot = devices().attach(poolProps->location.id, &why);  // a pool is about to take memory there
  // A pool the ledger cannot follow would be a way around the limit: refuse it, keeping room in
  // the table for the devices' default pools.
  if (slot >= 0 && (ledger().pools_tracked() >= Ledger::kMaxPools - kMaxDevices || track_pool(*pool, slot) < 0)) {
    call<Fn::cuMemPoolDestroy>(*pool);
    *pool = nullptr;
    logf(LogLevel::warn, "cuMemPoolCreate: more than %d memory pools in this process: refused with "
         "CUDA_ERROR_OUT_OF_MEMORY (coloc follows each pool's reserved memory)", Ledger::kMaxPools - kMaxDevices);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  int idx = pool ? ledger().pool_find(pool_key(pool)) : -1;
  CUresult r = call<Fn::cuMemPoolDestroy>(pool);
  if (r == CUDA_SUCCESS && idx >= 0) ledger().pool_destroyed(idx);
  return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  int idx = pool ? ledger().pool_find(pool_key(pool)) : -1;
  uint64_t epoch = idx >= 0 ? ledger().pool_epoch(idx) : 0;
  CUresult r = call<Fn::cuMemPoolTrimTo>(pool, minBytesToKeep);
  if (r != CUDA_SUCCESS || idx < 0) return r;
  int slot = ledger().pool_slot(idx);
  uint64_t before = ledger().in_use(slot);
  if (std::optional<uint64_t> reserved = read_reserved(pool)) ledger().pool_reconcile(idx, *reserved, epoch);
  if (ledger().in_use(slot) < before) after_free(slot);
  return r;
}

}  // namespace pool

// ---- sync ---------------------------------------------------------------------------------------

namespace sync {

namespace {
// A synchronize is an event of the online estimate (estimate.h): a training loop makes one per
// iteration (reading the loss), and with a caching allocator it is the only event left once the
// allocator has warmed up. The device is the current context's, if known.
void note_sync() {
  if (!estimate::active()) return;  // no daemon reads it: not even the device is looked up
  const int slot = devices().known_current_slot();
  if (slot >= 0) estimate::record(estimate::What::kSync, slot, 0, ledger().in_use(slot));
}
}  // namespace

// Each hook reads the free sequence before calling the driver: only frees queued before the
// synchronize began are taken as done by it.

CUresult cuStreamSynchronize(CUstream hStream) {
  uint64_t seq = ledger().pool_free_seq();
  CUresult r = call<Fn::cuStreamSynchronize>(hStream);
  if (r == CUDA_SUCCESS) note_sync();
  if (r == CUDA_SUCCESS && ledger().pools_hold_reserve()) {
    Where w = devices().of_stream(hStream);
    synchronized(w.slot, stream_key(hStream, false, w.ctx), w.ctx, seq);
  }
  return r;
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  uint64_t seq = ledger().pool_free_seq();
  CUresult r = call<Fn::cuStreamSynchronize_ptsz>(hStream);
  if (r == CUDA_SUCCESS) note_sync();
  if (r == CUDA_SUCCESS && ledger().pools_hold_reserve()) {
    Where w = devices().of_stream(hStream);
    synchronized(w.slot, stream_key(hStream, true, w.ctx), w.ctx, seq);
  }
  return r;
}

// An event's stream is not known here: no free is taken as done, but trims are followed.
CUresult cuEventSynchronize(CUevent hEvent) {
  CUresult r = call<Fn::cuEventSynchronize>(hEvent);
  if (r == CUDA_SUCCESS) note_sync();
  if (r == CUDA_SUCCESS && ledger().pools_hold_reserve()) synchronized(-1, 0, nullptr, 0);
  return r;
}

CUresult cuCtxSynchronize() {
  uint64_t seq = ledger().pool_free_seq();
  CUresult r = call<Fn::cuCtxSynchronize>();
  if (r == CUDA_SUCCESS) note_sync();
  if (r == CUDA_SUCCESS && ledger().pools_hold_reserve()) {
    Where w = devices().current();
    synchronized(w.slot, PoolShadow::kAllStreams, w.ctx, seq);
  }
  return r;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  uint64_t seq = ledger().pool_free_seq();
  CUresult r = call<Fn::cuCtxSynchronize_v2>(ctx);
  if (r == CUDA_SUCCESS) note_sync();
  if (r == CUDA_SUCCESS && ledger().pools_hold_reserve()) {
    Where w = ctx ? Where{devices().slot_of_context(ctx), ctx} : devices().current();
    synchronized(w.slot, PoolShadow::kAllStreams, w.ctx, seq);
  }
  return r;
}

}  // namespace sync

}  // namespace coloc::interpose
