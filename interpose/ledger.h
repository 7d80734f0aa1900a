// interpose/ledger.h — this process's books of device memory, per device slot: bytes in use per
// kind, peak, counts, and the record of every live allocation.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Exact under concurrency by reserve-then-commit: a hook first *charges* the bytes (try_charge, one
// compare-and-swap on the device's in-use counter, refused when the result would pass a ceiling),
// then calls the driver, then either *commits* the record or *uncharges* the bytes. Two threads can
// never jointly pass a ceiling, and a driver failure gives back exactly what was taken.
//
// The record map (key -> Record) is sharded 64 ways, each shard an open-addressing table under its
// own mutex: no global lock on the hot path and no allocation except when a shard's table grows.
//
// Devices are "slots" 0..kMaxDevices-1 (devices.h maps UUIDs and ordinals onto them). The numbers
// the daemon reads (in-use, peak, allocations, frees, out-of-memory failures) live in a stats page
// (include/coloc/pages.h) given at construction; the rest (per kind, refusals, untracked frees) is
// private. The ledger knows nothing of CUDA: it is plain C++ and unit-tested alone
// (tests/unit/interpose).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include "mutex.h"
#include <optional>

#include "broker.h"
#include "options.h"
#include "pool_shadow.h"

namespace coloc::interpose {

/// What the device memory is for. `context` is charged per live CUDA context (options.h); `graph`
/// is the device's graph memory pool (graph_hooks.cpp).
enum class Kind : uint8_t { allocation, pool, vmm, array, context, graph };
inline constexpr int kKinds = 6;
/// "allocation", "pool", "vmm", "array", "context", "graph".
const char* kind_name(Kind k);

/// The number space a key lives in: device pointers, VMM handles, arrays and mipmapped arrays are
/// different kinds of handle and may share numeric values. `none` marks an empty map entry.
enum class Space : uint8_t { none = 0, devptr, vmm, array, mipmap };

/// No device slot: a record of memory that is not device memory (host-located VMM handles).
inline constexpr uint16_t kNoSlot = 0xffff;
/// Not a stream-ordered allocation.
inline constexpr uint32_t kNoPool = 0xffffffff;

/// Identifies one live allocation.
struct Key {
  uint64_t value = 0;          ///< device pointer, VMM handle or array handle, as an integer
  Space space = Space::devptr;
};

/// What the ledger remembers about one live allocation.
struct Record {
  uint64_t bytes = 0;          ///< bytes charged for it
  uint64_t ctx = 0;            ///< the context it dies with (0: none; always 0 for VMM and pool memory)
  uint32_t pool = kNoPool;     ///< pool index (pool_track) for stream-ordered allocations
  uint16_t slot = kNoSlot;     ///< device slot, or kNoSlot
  Kind kind = Kind::allocation;
};

/// A snapshot of one device's books (each number read atomically).
struct DeviceCounts {
  uint64_t in_use = 0;                   ///< bytes charged now, all kinds (what the limit bounds)
  uint64_t peak = 0;                     ///< highest in_use seen after a commit
  uint64_t kind_in_use[kKinds] = {};     ///< bytes per kind
  uint64_t kind_peak[kKinds] = {};       ///< peak per kind
  uint64_t allocs = 0;                   ///< successful allocations (contexts not included)
  uint64_t frees = 0;                    ///< frees, tracked and untracked (as the stats page counts)
  uint64_t failed = 0;                   ///< allocations that ended in CUDA_ERROR_OUT_OF_MEMORY
  uint64_t refused = 0;                  ///< of those, refused by coloc (limit or broker)
  uint64_t untracked_frees = 0;          ///< frees of memory the ledger did not know
  uint64_t released_with_context = 0;    ///< allocations that died with their context
};

class Ledger {
 public:
  static constexpr int kShards = 64;
  static constexpr int kMaxPools = 256;

  /// A ledger keeping its shared counters in `stats` (which must outlive it).
  constexpr explicit Ledger(pages::StatsPage& stats) : stats_(&stats) {}
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // ---- charging (reserve, then commit or uncharge) ---------------------------------------------

  /// Adds `bytes` to the in-use counter of `slot` if the result is <= `ceiling`; returns true when
  /// charged. *seen (if given) is the in-use value that was compared (before adding). Lock-free: one
  /// sequentially consistent compare-and-swap (the fast-path rule of pages.h: re-read the grant
  /// after it).
  bool try_charge(int slot, uint64_t bytes, uint64_t ceiling, uint64_t* seen = nullptr);
  /// Adds `bytes` regardless of any ceiling (memory the driver already gave: context cost after
  /// the fact, pool growth). Saturates at 2^64-1.
  void force_charge(int slot, uint64_t bytes);
  /// Takes back bytes charged by try_charge/force_charge that will not be committed.
  void uncharge(int slot, uint64_t bytes);
  /// Records a successful allocation that was charged: per-kind totals, peaks, the allocation
  /// count, and the record under `key` (contexts: pass a key with Space::none to skip the map).
  /// Returns false when the record map could not grow (out of host memory); then nothing but the
  /// charge is recorded and the caller must undo the allocation and uncharge.
  bool commit(const Key& key, const Record& rec);
  /// Counts an allocation on `slot` that ended in CUDA_ERROR_OUT_OF_MEMORY; `refused` when coloc
  /// (not the driver) refused it.
  void count_failed(int slot, bool refused);

  // ---- freeing -------------------------------------------------------------------------------

  /// Removes and returns the record under `key` (books unchanged), or nullopt when unknown.
  std::optional<Record> take(const Key& key);
  /// Puts back a record taken for a free that the driver then refused.
  void restore(const Key& key, const Record& rec);
  /// Credits a freed record: in-use, per-kind totals, the free count.
  void release(const Record& rec);
  /// Counts a free of memory the ledger does not know, on `slot` (kNoSlot: not attributed to a
  /// device; see unattributed_untracked_frees()).
  void count_untracked_free(int slot);
  /// Credits a context's memory (Kind::context, `bytes`) when the context goes away.
  void release_context_cost(int slot, uint64_t bytes);
  /// Books `bytes` already charged on `slot` (try_charge/force_charge) as kind `k`, with no record
  /// and no allocation count (graph memory pool growth). Updates the kind's total and the peaks.
  void commit_bytes(int slot, Kind k, uint64_t bytes);
  /// Credits `bytes` booked with commit_bytes: in-use and the kind's total.
  void release_bytes(int slot, Kind k, uint64_t bytes);
  /// Removes every record that dies with context `ctx` and credits it (released_with_context).
  /// Returns the number of records removed. O(live records); for context destruction only.
  size_t release_records_of_context(uint64_t ctx);

  // ---- memory pools (stream-ordered allocation) ------------------------------------------------
  //
  // A pool costs the device its reserved memory: the driver keeps freed blocks reserved for reuse.
  // Each tracked pool has a PoolShadow (pool_shadow.h) that bounds the reserved memory from above
  // without asking the driver; the ledger keeps the shadow's charge on the device's in-use counter
  // (Kind::pool). An allocation is charged what it may make the pool grow *before* the driver call
  // (pool_try_begin); readings of CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, taken off the fast path
  // (pool_reconcile), follow trims and correct the shadow.

  /// The index of the tracked, not destroyed pool `handle` on `slot`, tracking it if new (with the
  /// reserved-memory reading `reserved` and the pool's chunk `chunk`, bytes, see PoolShadow). -1
  /// when kMaxPools are tracked.
  int pool_track(uint64_t handle, int slot, uint64_t reserved, uint64_t chunk);
  /// The index of the tracked, not destroyed pool `handle`, or -1; *slot (when given) its device
  /// slot. A one-entry cache per thread answers repeated lookups of one pool without the lock.
  int pool_find(uint64_t handle, int* slot = nullptr);
  /// The device slot of tracked pool `pool`.
  int pool_slot(int pool);
  /// Charges what allocating `bytes` from pool `pool` on stream key `stream` may add to the
  /// device's cost (*growth: 0 when a freed block of the pool holds it, else round_up(bytes,
  /// chunk); PoolShadow::begin), if in-use stays <= ceiling. True when charged: then call pool_end
  /// with *ticket. *seen = the in-use value compared.
  bool pool_try_begin(int pool, uint64_t bytes, uint64_t stream, uint64_t ceiling, uint64_t* seen,
                      uint64_t* growth, PoolShadow::Ticket* ticket);
  /// Settles an allocation begun with pool_try_begin: `ok` when the driver allocated (else also a
  /// cancelled one). On success records `key` (the record must have rec.pool == pool) and counts
  /// the allocation. Returns false only when the record could not be stored (out of host memory;
  /// see commit): then the charge is given back as for a failure.
  bool pool_end(int pool, bool ok, const PoolShadow::Ticket& ticket, const Key& key, const Record& rec);
  /// Credits a freed stream-ordered allocation taken from the map, freed on stream key `stream`
  /// (pools.h: equal keys mean the same stream) of context `ctx`.
  void pool_release(const Record& rec, uint64_t stream, uint64_t ctx);
  /// The free sequence number now: read it before a synchronize calls the driver.
  uint64_t pool_free_seq() const { return free_seq_.load(std::memory_order_acquire); }
  /// A synchronize that began at free sequence `seq` returned: the frees queued before it on
  /// `stream` (PoolShadow::kAllStreams: on every stream of context `ctx`) have run.
  void pool_synchronized(uint64_t stream, uint64_t ctx, uint64_t seq);
  /// Allocations begun on `pool` so far: pass the value read before taking a reading to
  /// pool_reconcile.
  uint64_t pool_epoch(int pool);
  /// A reading of `pool`'s reserved memory, begun when pool_epoch() was `epoch`: corrects the
  /// shadow (a lower reading only when no allocation began or is in flight since). Returns the
  /// bytes the reading showed beyond the shadow (the driver grew more than the model: charged
  /// after the fact).
  uint64_t pool_reconcile(int pool, uint64_t reserved, uint64_t epoch);
  /// The pool was destroyed: it keeps costing what is still live in it, then is forgotten.
  void pool_destroyed(int pool);
  /// Pools tracked now (destroyed ones still live included).
  int pools_tracked();
  /// Up to `cap` (index, handle) pairs of the live pools on `slot` (-1: any slot); returns how many.
  int pools_of_slot(int slot, int* indices, uint64_t* handles, int cap);
  /// True when some tracked pool is charged for more than its live blocks (a reserve a trim could
  /// give back, or frees not yet seen to run): only then do synchronize calls look at pools. One
  /// relaxed load.
  bool pools_hold_reserve() const { return reserve_pools_.load(std::memory_order_relaxed) != 0; }
  /// The shadow of `pool` (a copy), for tests and reports.
  PoolShadow pool_shadow(int pool);

  // ---- reading -------------------------------------------------------------------------------

  /// Bytes charged on `slot` now (relaxed load).
  uint64_t in_use(int slot) const;
  /// A snapshot of `slot`'s books.
  DeviceCounts counts(int slot) const;
  /// Untracked frees that could not be attributed to a device.
  uint64_t unattributed_untracked_frees() const;
  /// Number of live records in the map (walks the shards under their locks).
  size_t live_records() const;

  // ---- events (the online estimate: interpose/estimate.h) --------------------------------------
  /// Called after every allocation (`alloc` true) and free booked on a slot, with its bytes and
  /// the slot's in-use after it: on the allocating or freeing thread, so it must be lock-free
  /// and cheap. Null (the default) calls nothing.
  using EventSink = void (*)(bool alloc, int slot, uint64_t bytes, uint64_t in_use);
  void set_event_sink(EventSink sink) { sink_.store(sink, std::memory_order_relaxed); }

  // ---- fork (see fork.cpp) --------------------------------------------------------------------

  /// In the child after fork: forgets everything (the child owns no device memory) and makes every
  /// lock new, whatever the parent's other threads were doing: no ledger lock is held across fork.
  /// O(shards + pools); never touches the parent's record tables (they stay in the child's
  /// copy-on-write image, unreferenced).
  void reset_in_child();

 private:
  // The private part of a device's books (the shared part is stats_->slots[slot]).
  struct alignas(64) Books {
    std::atomic<uint64_t> kind_in_use[kKinds] = {};
    std::atomic<uint64_t> kind_peak[kKinds] = {};
    std::atomic<uint64_t> refused{0}, untracked_frees{0}, released_with_context{0};
  };
  struct Entry {
    uint64_t key;
    uint64_t bytes;
    uint64_t ctx;
    uint32_t pool;
    uint16_t slot;
    Kind kind;
    Space space;  // Space::none = empty
  };
  struct alignas(64) Shard {
    mutable SpinMutex mutex;
    Entry* table = nullptr;   // capacity entries, power of two (0 = none yet)
    uint32_t capacity = 0;
    uint32_t count = 0;
  };
  struct Pool {
    uint64_t handle = 0;
    uint64_t charge = 0;     // what is on the device's in-use counter for it
    uint64_t epoch = 0;      // allocations begun
    uint32_t in_flight = 0;  // allocations begun and not ended (std::atomic_ref: pool_end's usual
                             // case lowers it without the lock)
    PoolShadow shadow;
    uint16_t slot = 0;
    bool used = false, destroyed = false, reserve = false;  // reserve: counted in reserve_pools_
  };

  static uint64_t hash(const Key& k);
  Shard& shard_of(uint64_t h) { return shards_[h >> 58]; }
  static bool insert_locked(Shard& s, uint64_t h, const Key& k, const Record& r);
  static bool grow_locked(Shard& s);
  static void erase_at_locked(Shard& s, uint32_t i);
  bool insert(const Key& k, const Record& r);
  void note_kind(int slot, Kind k, uint64_t bytes);  // kind total += bytes, kind peak, total peak
  // Tells the event sink about a free of `bytes` on `slot` whose in-use is now `after`.
  void note_free(int slot, uint64_t bytes, uint64_t after) {
    if (EventSink s = sink_.load(std::memory_order_relaxed)) s(false, slot, bytes, after);
  }
  std::atomic<EventSink> sink_{nullptr};
  void settle_pool_locked(Pool& p);                  // charge := cost(p), moving the difference
  void note_reserve_locked(Pool& p);                 // p.reserve := spare > 0, counted in reserve_pools_
  void add_reserve_pools_locked(int d);
  static uint32_t in_flight(Pool& p);

  pages::StatsSlot& shared(int slot) { return stats_->slots[slot]; }
  const pages::StatsSlot& shared(int slot) const { return stats_->slots[slot]; }

  pages::StatsPage* stats_;
  Books books_[kMaxDevices];
  std::atomic<uint64_t> unattributed_untracked_frees_{0};
  Shard shards_[kShards];
  SpinMutex pool_mutex_;
  Pool pools_[kMaxPools];
  std::atomic<int> reserve_pools_{0};  // written under pool_mutex_ only, read without it
  std::atomic<uint64_t> free_seq_{0};  // pool frees so far (pool_free_seq); written under pool_mutex_
  std::atomic<uint64_t> pools_gen_{1};  // bumped whenever a pool index starts or stops naming a pool
};

/// Raises `a` to at least `v` (relaxed).
inline void atomic_max(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace coloc::interpose
