// interpose/pools.h — what the memory hooks share about stream-ordered pools (pool_hooks.cpp):
// stream keys, readings of a pool's reserved memory, and trims.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <cstdint>
#include <optional>

#include "cuda_api.h"
#include "pool_shadow.h"

namespace coloc::interpose {

/// The key under which a pool free on `stream` of context `ctx` waits for a synchronize
/// (PoolShadow): the handle itself for a created stream; for the default streams, which every
/// context has its own of, a key of `ctx` — one for the legacy default stream (NULL or
/// CU_STREAM_LEGACY from a legacy entry point), one per thread for the per-thread default stream
/// (NULL from a _ptsz entry point, or CU_STREAM_PER_THREAD). `per_thread`: a _ptsz entry point.
uint64_t stream_key(CUstream stream, bool per_thread, CUcontext ctx);

/// Where a cuMemFreeAsync on `stream` is queued: its stream key and context (the current one for
/// a default stream, cuStreamGetCtx for a created one). Its `seq` is the ledger's to fill.
PoolShadow::FreeSite free_site(CUstream stream, bool per_thread);

/// CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT of `pool` (bytes), or nullopt when the driver does not answer.
std::optional<uint64_t> read_reserved(CUmemoryPool pool);

/// Reads the reserved memory of every tracked pool on `slot` (-1: on every slot) and corrects the
/// ledger (Ledger::pool_reconcile). Returns true when some device's in-use changed; *fell (when
/// given) gets a bit per slot whose in-use went down. A few driver queries per pool: off the fast
/// path only (synchronize calls, cuMemGetInfo, cuMemPoolTrimTo, before a refusal).
bool refresh_pools(int slot, uint64_t* fell = nullptr);

/// Before refusing an allocation on `slot` at the job's limit: gives the unused reserve of every
/// tracked pool there that the shadow charges beyond its live blocks back to the device
/// (cuMemPoolTrimTo(pool, 0)) and reconciles. The shadow cannot prove that a block of that reserve
/// fits the request, and a refusal the device would not make is worse than growing the pool again;
/// after the trim the shadow is exact (nothing spare of unknown shape). True when in-use went down.
bool trim_pools(int slot);

}  // namespace coloc::interpose
