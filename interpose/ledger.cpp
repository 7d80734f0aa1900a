// interpose/ledger.cpp — see ledger.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "ledger.h"

#include <cstdlib>
#include <new>

namespace coloc::interpose {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allocation: return "allocation";
    case Kind::pool: return "pool";
    case Kind::vmm: return "vmm";
    case Kind::array: return "array";
    case Kind::context: return "context";
    case Kind::graph: return "graph";
  }
  return "?";
}

Ledger::~Ledger() {
  for (Shard& s : shards_) std::free(s.table);
}

// ---- charging ---------------------------------------------------------------------------------

bool Ledger::try_charge(int slot, uint64_t bytes, uint64_t ceiling, uint64_t* seen) {
  std::atomic<uint64_t>& in_use = shared(slot).in_use;
  if (bytes == 0) {  // nothing to add (a pool reuses reserve it holds): a load, not a locked CAS
    uint64_t cur = in_use.load(std::memory_order_seq_cst);
    if (seen) *seen = cur;
    return cur <= ceiling;
  }
  uint64_t cur = in_use.load(std::memory_order_relaxed);
  for (;;) {
    if (seen) *seen = cur;
    if (bytes > ceiling || cur > ceiling - bytes) return false;
    if (in_use.compare_exchange_weak(cur, cur + bytes, std::memory_order_seq_cst, std::memory_order_relaxed))
      return true;
  }
}

void Ledger::force_charge(int slot, uint64_t bytes) {
  std::atomic<uint64_t>& in_use = shared(slot).in_use;
  uint64_t cur = in_use.load(std::memory_order_relaxed);
  for (;;) {
    uint64_t next = cur > UINT64_MAX - bytes ? UINT64_MAX : cur + bytes;
    if (in_use.compare_exchange_weak(cur, next, std::memory_order_seq_cst, std::memory_order_relaxed)) return;
  }
}

void Ledger::uncharge(int slot, uint64_t bytes) {
  shared(slot).in_use.fetch_sub(bytes, std::memory_order_seq_cst);
}

void Ledger::note_kind(int slot, Kind k, uint64_t bytes) {
  Books& b = books_[slot];
  uint64_t now = b.kind_in_use[int(k)].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (now > b.kind_peak[int(k)].load(std::memory_order_relaxed)) atomic_max(b.kind_peak[int(k)], now);
  pages::StatsSlot& st = shared(slot);
  uint64_t total = st.in_use.load(std::memory_order_relaxed);
  if (total > st.peak.load(std::memory_order_relaxed)) atomic_max(st.peak, total);
  if (EventSink s = sink_.load(std::memory_order_relaxed)) s(true, slot, bytes, total);
}

bool Ledger::commit(const Key& key, const Record& rec) {
  if (key.space != Space::none && !insert(key, rec)) return false;
  if (rec.slot == kNoSlot) return true;
  note_kind(rec.slot, rec.kind, rec.bytes);
  if (rec.kind != Kind::context) shared(rec.slot).allocs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Ledger::count_failed(int slot, bool refused) {
  shared(slot).failures.fetch_add(1, std::memory_order_relaxed);
  if (refused) books_[slot].refused.fetch_add(1, std::memory_order_relaxed);
}

// ---- freeing ----------------------------------------------------------------------------------

void Ledger::release(const Record& rec) {
  if (rec.slot == kNoSlot) return;
  books_[rec.slot].kind_in_use[int(rec.kind)].fetch_sub(rec.bytes, std::memory_order_relaxed);
  pages::StatsSlot& st = shared(rec.slot);
  const uint64_t after = st.in_use.fetch_sub(rec.bytes, std::memory_order_seq_cst) - rec.bytes;
  st.frees.fetch_add(1, std::memory_order_relaxed);
  note_free(rec.slot, rec.bytes, after);
}

void Ledger::count_untracked_free(int slot) {
  if (slot < 0 || slot >= kMaxDevices) {
    unattributed_untracked_frees_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  books_[slot].untracked_frees.fetch_add(1, std::memory_order_relaxed);
  shared(slot).frees.fetch_add(1, std::memory_order_relaxed);
}

void Ledger::release_context_cost(int slot, uint64_t bytes) {
  books_[slot].kind_in_use[int(Kind::context)].fetch_sub(bytes, std::memory_order_relaxed);
  note_free(slot, bytes, shared(slot).in_use.fetch_sub(bytes, std::memory_order_seq_cst) - bytes);
}

void Ledger::commit_bytes(int slot, Kind k, uint64_t bytes) { note_kind(slot, k, bytes); }

void Ledger::release_bytes(int slot, Kind k, uint64_t bytes) {
  books_[slot].kind_in_use[int(k)].fetch_sub(bytes, std::memory_order_relaxed);
  note_free(slot, bytes, shared(slot).in_use.fetch_sub(bytes, std::memory_order_seq_cst) - bytes);
}

size_t Ledger::release_records_of_context(uint64_t ctx) {
  if (ctx == 0) return 0;
  size_t removed = 0;
  for (Shard& s : shards_) {
    SpinLock g(s.mutex);
    for (uint32_t i = 0; i < s.capacity;) {
      Entry& e = s.table[i];
      // Pool memory belongs to its pool, not to a context (Record::ctx is 0 for it).
      if (e.space == Space::none || e.ctx != ctx || e.pool != kNoPool) {
        ++i;
        continue;
      }
      Record r{e.bytes, e.ctx, e.pool, e.slot, e.kind};
      erase_at_locked(s, i);  // another entry may move into i: look at i again
      ++removed;
      if (r.slot != kNoSlot) {
        Books& b = books_[r.slot];
        b.kind_in_use[int(r.kind)].fetch_sub(r.bytes, std::memory_order_relaxed);
        b.released_with_context.fetch_add(1, std::memory_order_relaxed);
        shared(r.slot).in_use.fetch_sub(r.bytes, std::memory_order_seq_cst);
      }
    }
  }
  return removed;
}

// ---- the record map ---------------------------------------------------------------------------

uint64_t Ledger::hash(const Key& k) {
  // splitmix64's finalizer over the value mixed with its space (Steele, Lea, Flood, "Fast
  // splittable pseudorandom number generators", OOPSLA 2014).
  uint64_t z = k.value ^ (uint64_t(k.space) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool Ledger::grow_locked(Shard& s) {
  uint32_t cap = s.capacity ? s.capacity * 2 : 64;
  auto* table = static_cast<Entry*>(std::calloc(cap, sizeof(Entry)));  // zero = Space::none
  if (!table) return false;
  Entry* old = s.table;
  uint32_t old_cap = s.capacity;
  s.table = table;
  s.capacity = cap;
  for (uint32_t i = 0; i < old_cap; ++i) {
    const Entry& e = old[i];
    if (e.space == Space::none) continue;
    uint32_t j = uint32_t(hash(Key{e.key, e.space})) & (cap - 1);
    while (table[j].space != Space::none) j = (j + 1) & (cap - 1);
    table[j] = e;
  }
  std::free(old);
  return true;
}

bool Ledger::insert_locked(Shard& s, uint64_t h, const Key& k, const Record& r) {
  if ((s.count + 1) * 2 > s.capacity && !grow_locked(s)) return false;  // load factor <= 1/2
  uint32_t mask = s.capacity - 1;
  uint32_t i = uint32_t(h) & mask;
  while (s.table[i].space != Space::none) {
    if (s.table[i].key == k.value && s.table[i].space == k.space) break;  // replace a stale entry
    i = (i + 1) & mask;
  }
  if (s.table[i].space == Space::none) ++s.count;
  s.table[i] = Entry{k.value, r.bytes, r.ctx, r.pool, r.slot, r.kind, k.space};
  return true;
}

void Ledger::erase_at_locked(Shard& s, uint32_t i) {
  // Linear probing with backward-shift deletion: no tombstones, probe chains stay short.
  uint32_t mask = s.capacity - 1;
  uint32_t hole = i;
  for (uint32_t j = (i + 1) & mask; s.table[j].space != Space::none; j = (j + 1) & mask) {
    uint32_t home = uint32_t(hash(Key{s.table[j].key, s.table[j].space})) & mask;
    // Move j into the hole unless its home lies cyclically in (hole, j].
    bool home_after_hole = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_after_hole) {
      s.table[hole] = s.table[j];
      hole = j;
    }
  }
  s.table[hole] = Entry{};
  --s.count;
}

bool Ledger::insert(const Key& k, const Record& r) {
  uint64_t h = hash(k);
  Shard& s = shard_of(h);
  SpinLock g(s.mutex);
  return insert_locked(s, h, k, r);
}

std::optional<Record> Ledger::take(const Key& k) {
  uint64_t h = hash(k);
  Shard& s = shard_of(h);
  SpinLock g(s.mutex);
  if (s.count == 0) return std::nullopt;
  uint32_t mask = s.capacity - 1;
  for (uint32_t i = uint32_t(h) & mask; s.table[i].space != Space::none; i = (i + 1) & mask) {
    const Entry& e = s.table[i];
    if (e.key == k.value && e.space == k.space) {
      Record r{e.bytes, e.ctx, e.pool, e.slot, e.kind};
      erase_at_locked(s, i);
      return r;
    }
  }
  return std::nullopt;
}

void Ledger::restore(const Key& k, const Record& r) {
  // Cannot fail for want of memory in practice: the entry's room was freed a moment ago and the
  // table never shrinks. If it ever did, the allocation would be forgotten, not double-counted.
  insert(k, r);
}

size_t Ledger::live_records() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    SpinLock g(s.mutex);
    n += s.count;
  }
  return n;
}

// ---- pools ------------------------------------------------------------------------------------

void Ledger::settle_pool_locked(Pool& p) {
  uint64_t cost = p.shadow.charge();
  if (cost > p.charge) {
    uint64_t d = cost - p.charge;
    force_charge(p.slot, d);
    note_kind(p.slot, Kind::pool, d);
  } else if (cost < p.charge) {
    uint64_t d = p.charge - cost;
    books_[p.slot].kind_in_use[int(Kind::pool)].fetch_sub(d, std::memory_order_relaxed);
    shared(p.slot).in_use.fetch_sub(d, std::memory_order_seq_cst);
  }
  p.charge = cost;
  note_reserve_locked(p);
  if (p.destroyed && p.shadow.held() == 0 && in_flight(p) == 0) {
    if (p.reserve) add_reserve_pools_locked(-1);
    p = Pool{};  // forgotten
  }
}

// Every writer of reserve_pools_ holds pool_mutex_: a load and a store, not a locked read-modify-write
// (two of these per alloc+free pair when a pool's reserve comes and goes with each block).
void Ledger::add_reserve_pools_locked(int d) {
  reserve_pools_.store(reserve_pools_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

void Ledger::note_reserve_locked(Pool& p) {
  bool reserve = p.shadow.spare() > 0;
  if (reserve == p.reserve) return;
  add_reserve_pools_locked(reserve ? 1 : -1);
  p.reserve = reserve;
}

uint32_t Ledger::in_flight(Pool& p) { return std::atomic_ref<uint32_t>(p.in_flight).load(std::memory_order_acquire); }

namespace {
// The last pool this thread found (pool_find), valid while the ledger's pool generation is `gen`.
struct PoolCache {
  const void* ledger;
  uint64_t handle, gen;
  int idx, slot;
};
__thread PoolCache tl_pool_cache __attribute__((tls_model("initial-exec")));
}  // namespace

int Ledger::pool_find(uint64_t handle, int* slot) {
  PoolCache& c = tl_pool_cache;
  const uint64_t gen = pools_gen_.load(std::memory_order_acquire);
  if (c.ledger == this && c.handle == handle && c.gen == gen) {
    if (slot) *slot = c.slot;
    return c.idx;
  }
  SpinLock g(pool_mutex_);
  for (int i = 0; i < kMaxPools; ++i)
    if (pools_[i].used && !pools_[i].destroyed && pools_[i].handle == handle) {
      c = PoolCache{this, handle, pools_gen_.load(std::memory_order_relaxed), i, pools_[i].slot};
      if (slot) *slot = pools_[i].slot;
      return i;
    }
  return -1;
}

int Ledger::pool_slot(int pool) {
  SpinLock g(pool_mutex_);
  return pools_[pool].slot;
}

int Ledger::pool_track(uint64_t handle, int slot, uint64_t reserved, uint64_t chunk) {
  SpinLock g(pool_mutex_);
  int free_index = -1;
  for (int i = 0; i < kMaxPools; ++i) {
    if (pools_[i].used && !pools_[i].destroyed && pools_[i].handle == handle) return i;
    if (!pools_[i].used && free_index < 0) free_index = i;
  }
  if (free_index < 0) return -1;
  Pool& p = pools_[free_index];
  p = Pool{};
  pools_gen_.fetch_add(1, std::memory_order_acq_rel);
  p.handle = handle;
  p.slot = uint16_t(slot);
  p.used = true;
  p.shadow.set_chunk(chunk);
  p.shadow.reconcile(reserved, true);  // reserve it had before we saw it: charged, shape unknown
  settle_pool_locked(p);
  return free_index;
}

bool Ledger::pool_try_begin(int pool, uint64_t bytes, uint64_t stream, uint64_t ceiling, uint64_t* seen,
                            uint64_t* growth, PoolShadow::Ticket* ticket) {
  SpinLock g(pool_mutex_);
  Pool& p = pools_[pool];
  PoolShadow::Ticket t = p.shadow.begin(bytes, stream);
  if (growth) *growth = t.growth;
  if (!try_charge(p.slot, t.growth, ceiling, seen)) {
    p.shadow.abort(t);
    return false;
  }
  if (t.growth) note_kind(p.slot, Kind::pool, t.growth);
  p.charge += t.growth;  // the shadow's charge now (begin() moved a taken piece into held)
  note_reserve_locked(p);
  ++p.epoch;
  std::atomic_ref<uint32_t>(p.in_flight).fetch_add(1, std::memory_order_relaxed);
  *ticket = t;
  return true;
}

bool Ledger::pool_end(int pool, bool ok, const PoolShadow::Ticket& ticket, const Key& key, const Record& rec) {
  Pool& p = pools_[pool];
  if (ok && insert(key, rec)) {
    // The usual end needs no lock: pool_try_begin left the books as the shadow says, and the pool
    // (live blocks in it now) cannot be forgotten meanwhile. The release orders the record before a
    // reading that sees no allocation in flight (pool_reconcile).
    shared(p.slot).allocs.fetch_add(1, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(p.in_flight).fetch_sub(1, std::memory_order_release);
    return true;
  }
  SpinLock g(pool_mutex_);
  std::atomic_ref<uint32_t>(p.in_flight).fetch_sub(1, std::memory_order_relaxed);
  p.shadow.abort(ticket);
  settle_pool_locked(p);
  return !ok;  // false: the driver allocated but the record could not be stored
}

void Ledger::pool_release(const Record& rec, uint64_t stream, uint64_t ctx) {
  {
    SpinLock g(pool_mutex_);
    Pool& p = pools_[rec.pool];
    // Every writer of free_seq_ holds pool_mutex_: a load and a store publish the next number.
    const uint64_t seq = free_seq_.load(std::memory_order_relaxed);
    free_seq_.store(seq + 1, std::memory_order_release);
    p.shadow.freed(rec.bytes, PoolShadow::FreeSite{stream, ctx, seq});
    if (p.destroyed) p.shadow.destroyed();  // the driver gives a destroyed pool's blocks back
    settle_pool_locked(p);
  }
  shared(rec.slot).frees.fetch_add(1, std::memory_order_relaxed);
  note_free(rec.slot, rec.bytes, shared(rec.slot).in_use.load(std::memory_order_relaxed));
}

void Ledger::pool_synchronized(uint64_t stream, uint64_t ctx, uint64_t seq) {
  SpinLock g(pool_mutex_);
  for (Pool& p : pools_)
    if (p.used && !p.destroyed) p.shadow.synchronized(stream, ctx, seq);
}

uint64_t Ledger::pool_epoch(int pool) {
  SpinLock g(pool_mutex_);
  return pools_[pool].epoch;
}

uint64_t Ledger::pool_reconcile(int pool, uint64_t reserved, uint64_t epoch) {
  SpinLock g(pool_mutex_);
  Pool& p = pools_[pool];
  if (!p.used || p.destroyed) return 0;
  uint64_t beyond = p.shadow.reconcile(reserved, in_flight(p) == 0 && p.epoch == epoch);
  settle_pool_locked(p);
  return beyond;
}

void Ledger::pool_destroyed(int pool) {
  SpinLock g(pool_mutex_);
  Pool& p = pools_[pool];
  if (!p.used) return;
  p.destroyed = true;
  pools_gen_.fetch_add(1, std::memory_order_acq_rel);
  p.shadow.destroyed();
  settle_pool_locked(p);
}

int Ledger::pools_tracked() {
  SpinLock g(pool_mutex_);
  int n = 0;
  for (const Pool& p : pools_) n += p.used;
  return n;
}

PoolShadow Ledger::pool_shadow(int pool) {
  SpinLock g(pool_mutex_);
  return pools_[pool].shadow;
}

int Ledger::pools_of_slot(int slot, int* indices, uint64_t* handles, int cap) {
  SpinLock g(pool_mutex_);
  int n = 0;
  for (int i = 0; i < kMaxPools && n < cap; ++i)
    if (pools_[i].used && !pools_[i].destroyed && (slot < 0 || pools_[i].slot == slot)) {
      indices[n] = i;
      handles[n] = pools_[i].handle;
      ++n;
    }
  return n;
}

// ---- reading ----------------------------------------------------------------------------------

uint64_t Ledger::in_use(int slot) const { return shared(slot).in_use.load(std::memory_order_relaxed); }

DeviceCounts Ledger::counts(int slot) const {
  const Books& b = books_[slot];
  const pages::StatsSlot& st = shared(slot);
  DeviceCounts c;
  c.in_use = st.in_use.load(std::memory_order_relaxed);
  c.peak = st.peak.load(std::memory_order_relaxed);
  for (int k = 0; k < kKinds; ++k) {
    c.kind_in_use[k] = b.kind_in_use[k].load(std::memory_order_relaxed);
    c.kind_peak[k] = b.kind_peak[k].load(std::memory_order_relaxed);
  }
  c.allocs = st.allocs.load(std::memory_order_relaxed);
  c.frees = st.frees.load(std::memory_order_relaxed);
  c.failed = st.failures.load(std::memory_order_relaxed);
  c.refused = b.refused.load(std::memory_order_relaxed);
  c.untracked_frees = b.untracked_frees.load(std::memory_order_relaxed);
  c.released_with_context = b.released_with_context.load(std::memory_order_relaxed);
  return c;
}

uint64_t Ledger::unattributed_untracked_frees() const {
  return unattributed_untracked_frees_.load(std::memory_order_relaxed);
}

// ---- fork -------------------------------------------------------------------------------------

void Ledger::reset_in_child() {
  for (Shard& s : shards_) {
    s.mutex.reinit_in_child();
    s.table = nullptr;  // the parent's table stays in the child's copy-on-write image, untouched
    s.capacity = 0;
    s.count = 0;
  }
  pool_mutex_.reinit_in_child();
  for (Pool& p : pools_) p = Pool{};
  reserve_pools_.store(0, std::memory_order_relaxed);
  free_seq_.store(0, std::memory_order_relaxed);
  pools_gen_.fetch_add(1, std::memory_order_relaxed);
  for (int slot = 0; slot < kMaxDevices; ++slot) {
    Books& b = books_[slot];
    for (int k = 0; k < kKinds; ++k) {
      b.kind_in_use[k].store(0, std::memory_order_relaxed);
      b.kind_peak[k].store(0, std::memory_order_relaxed);
    }
    b.refused.store(0, std::memory_order_relaxed);
    b.untracked_frees.store(0, std::memory_order_relaxed);
    b.released_with_context.store(0, std::memory_order_relaxed);
    pages::StatsSlot& st = shared(slot);
    for (std::atomic<uint64_t>* a : {&st.in_use, &st.peak, &st.allocs, &st.frees, &st.failures,
                                     &st.wait_memory_ns, &st.wait_admission_ns, &st.launches})
      a->store(0, std::memory_order_relaxed);
  }
  unattributed_untracked_frees_.store(0, std::memory_order_relaxed);
}

}  // namespace coloc::interpose
