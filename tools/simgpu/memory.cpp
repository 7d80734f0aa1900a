#include "memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "driver.h"

namespace simgpu {

namespace {

constexpr uint64_t kPage = 4096;

void* reserve_span(uint64_t span) {
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Gives back the whole pages inside [p, p+n): they read as zero again and cost no RAM.
void discard_pages(uintptr_t p, uint64_t n) {
  uintptr_t start = (p + kPage - 1) & ~(kPage - 1);
  uintptr_t end = (p + n) & ~(kPage - 1);
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
}

}  // namespace

void fill_memory(uintptr_t dst, uint32_t value, unsigned element, size_t count) {
  if (element == 1) {
    std::memset(reinterpret_cast<void*>(dst), int(value & 0xff), count);
  } else if (element == 2) {
    auto* p = reinterpret_cast<uint16_t*>(dst);
    std::fill(p, p + count, uint16_t(value));
  } else {
    auto* p = reinterpret_cast<uint32_t*>(dst);
    std::fill(p, p + count, value);
  }
}

// ---- Arena ------------------------------------------------------------------------------

bool Arena::map_locked() {
  if (base_.load(std::memory_order_relaxed)) return true;
  void* p = reserve_span(span_);
  if (!p) return false;
  base_.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
  return true;
}

std::optional<uintptr_t> Arena::allocate(const Allocation& a) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!map_locked()) return std::nullopt;
  auto off = ranges_.allocate(a.size, a.size >= kLargePage ? kLargePage : kAllocGranule);
  if (!off) return std::nullopt;
  uintptr_t p = base_.load(std::memory_order_relaxed) + *off;
  live_.emplace(p, a);
  return p;
}

std::optional<Allocation> Arena::release(uintptr_t p) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return std::nullopt;
    a = it->second;
    live_.erase(it);
    // Discard before the range can be handed out again.
    discard_pages(p, a.size);
    ranges_.release(p - base_.load(std::memory_order_relaxed), a.size);
  }
  return a;
}

std::optional<std::pair<uintptr_t, Allocation>> Arena::find(uintptr_t p) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.upper_bound(p);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (p - it->first >= it->second.size) return std::nullopt;
  return *it;
}

bool Arena::live_range(uintptr_t p, uint64_t n) const {
  auto hit = find(p);
  return hit && n <= hit->second.size - (p - hit->first);
}

std::vector<Allocation> Arena::release_if(const std::function<bool(const Allocation&)>& pred) {
  std::vector<Allocation> out;
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = live_.begin(); it != live_.end();) {
    if (!pred(it->second)) {
      ++it;
      continue;
    }
    discard_pages(it->first, it->second.size);
    ranges_.release(it->first - base_.load(std::memory_order_relaxed), it->second.size);
    out.push_back(it->second);
    it = live_.erase(it);
  }
  return out;
}

std::vector<std::pair<uintptr_t, uint64_t>> Arena::live_ranges() const {
  std::vector<std::pair<uintptr_t, uint64_t>> out;
  std::lock_guard<std::mutex> lk(mu_);
  out.reserve(live_.size());
  for (const auto& [p, a] : live_) out.emplace_back(p, a.size);
  return out;
}

// ---- MemPool ----------------------------------------------------------------------------

CUresult MemPool::allocate(uint64_t size, uintptr_t* out, const void* stream) {
  const uint64_t block = round_up(size, kAllocGranule);
  const uint64_t chunk = round_up(block, kLargePage);
  if (block == 0 || chunk == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(mu_);
  // Reuse the smallest free chunk that holds the block (free, or being freed on this stream).
  auto best = chunks_.end();
  for (auto it = chunks_.begin(); it != chunks_.end(); ++it) {
    const Chunk& c = it->second;
    bool reusable = c.used == 0 || (stream && c.freeing == stream);
    if (reusable && c.size >= block && (best == chunks_.end() || c.size < best->second.size)) best = it;
  }
  if (best == chunks_.end()) {
    SharedState& shared = *Driver::get().shared;
    if (!shared.charge(device.physical, chunk)) {
      trim_locked(0);  // give cached chunks back and try once more
      if (!shared.charge(device.physical, chunk)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    Allocation a;
    a.size = chunk;
    a.charged = chunk;
    a.kind = AllocKind::pool_chunk;
    a.pool = this;
    auto p = device.memory.allocate(a);
    if (!p) {
      shared.uncharge(device.physical, chunk);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    best = chunks_.emplace(*p, Chunk{chunk, 0}).first;
    reserved_ += chunk;
    reserved_high_ = std::max(reserved_high_, reserved_);
  }
  used_ -= best->second.used;  // a block being freed on this stream: its free is now moot
  best->second.used = block;
  best->second.freeing = nullptr;
  ++best->second.generation;
  used_ += block;
  used_high_ = std::max(used_high_, used_);
  *out = best->first;
  return CUDA_SUCCESS;
}

bool MemPool::free_block(uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = chunks_.find(p);
  if (it == chunks_.end() || it->second.used == 0 || it->second.freeing) return false;
  used_ -= it->second.used;
  it->second.used = 0;
  return true;
}

bool MemPool::begin_free(uintptr_t p, const void* stream, uint64_t* generation) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = chunks_.find(p);
  if (it == chunks_.end() || it->second.used == 0 || it->second.freeing) return false;
  it->second.freeing = stream;
  *generation = it->second.generation;
  return true;
}

void MemPool::finish_free(uintptr_t p, uint64_t generation) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = chunks_.find(p);
  if (it == chunks_.end() || it->second.generation != generation || !it->second.freeing) return;
  used_ -= it->second.used;
  it->second.used = 0;
  it->second.freeing = nullptr;
}

void MemPool::release_chunk_locked(std::map<uintptr_t, Chunk>::iterator it) {
  used_ -= it->second.used;
  reserved_ -= it->second.size;
  if (auto a = device.memory.release(it->first)) Driver::get().shared->uncharge(device.physical, a->charged);
  chunks_.erase(it);
}

void MemPool::trim_locked(uint64_t keep) {
  while (reserved_ > keep) {
    auto largest = chunks_.end();
    for (auto it = chunks_.begin(); it != chunks_.end(); ++it)
      if (it->second.used == 0 && (largest == chunks_.end() || it->second.size > largest->second.size)) largest = it;
    if (largest == chunks_.end()) return;  // everything left is in use
    release_chunk_locked(largest);
  }
}

void MemPool::trim(uint64_t keep) {
  std::lock_guard<std::mutex> lk(mu_);
  trim_locked(keep);
}

void MemPool::trim_to_threshold() {
  std::lock_guard<std::mutex> lk(mu_);
  trim_locked(release_threshold_);
}

void MemPool::release_all() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!chunks_.empty()) release_chunk_locked(chunks_.begin());
}

CUresult MemPool::get_attribute(unsigned attr, void* value) {
  std::lock_guard<std::mutex> lk(mu_);
  auto u64 = [&](uint64_t v) {
    *static_cast<cuuint64_t*>(value) = v;
    return CUDA_SUCCESS;
  };
  auto i32 = [&](int v) {
    *static_cast<int*>(value) = v;
    return CUDA_SUCCESS;
  };
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: return i32(reuse_follow_events_);
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: return i32(reuse_opportunistic_);
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: return i32(reuse_internal_);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: return u64(release_threshold_);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: return u64(reserved_);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: return u64(reserved_high_);
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: return u64(used_);
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: return u64(used_high_);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemPool::set_attribute(unsigned attr, void* value) {
  std::lock_guard<std::mutex> lk(mu_);
  const int i = *static_cast<const int*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: reuse_follow_events_ = i != 0; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: reuse_opportunistic_ = i != 0; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: reuse_internal_ = i != 0; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      release_threshold_ = *static_cast<const cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:  // only a reset to 0 is allowed
      if (*static_cast<const cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      reserved_high_ = reserved_;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<const cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      used_high_ = used_;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- Vmm --------------------------------------------------------------------------------

bool Vmm::map_locked() {
  if (base_.load(std::memory_order_relaxed)) return true;
  void* p = reserve_span(span_);
  if (!p) return false;
  base_.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
  return true;
}

CUresult Vmm::reserve(uint64_t size, uint64_t alignment, uintptr_t* out) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!map_locked()) return CUDA_ERROR_OUT_OF_MEMORY;
  auto off = ranges_.allocate(size, std::max(alignment, kLargePage));
  if (!off) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = base_.load(std::memory_order_relaxed) + *off;
  reservations_.emplace(*out, size);
  return CUDA_SUCCESS;
}

CUresult Vmm::free(uintptr_t p, uint64_t size) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = reservations_.find(p);
  if (it == reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = mappings_.lower_bound(p);
  if (m != mappings_.end() && m->first < p + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  ranges_.release(p - base_.load(std::memory_order_relaxed), size);
  reservations_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Vmm::map(uintptr_t p, uint64_t size, uint64_t offset, PhysicalMemory* h) {
  std::lock_guard<std::mutex> lk(mu_);
  if (h->released) return CUDA_ERROR_INVALID_HANDLE;
  if (size == 0 || p % kLargePage || size % kLargePage || offset % kLargePage || offset > h->size ||
      size > h->size - offset)
    return CUDA_ERROR_INVALID_VALUE;
  // Inside one reservation.
  auto r = reservations_.upper_bound(p);
  if (r == reservations_.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (p - r->first >= r->second || size > r->second - (p - r->first)) return CUDA_ERROR_INVALID_VALUE;
  // Not over another mapping.
  auto next = mappings_.lower_bound(p);
  if (next != mappings_.end() && next->first < p + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != mappings_.begin() && std::prev(next)->first + std::prev(next)->second.size > p)
    return CUDA_ERROR_INVALID_VALUE;
  void* m = mmap(reinterpret_cast<void*>(p), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, off_t(offset));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  mappings_.emplace(p, Mapping{size, h, false});
  ++h->mappings;
  return CUDA_SUCCESS;
}

std::vector<std::map<uintptr_t, Vmm::Mapping>::iterator> Vmm::cover_locked(uintptr_t p, uint64_t size) {
  std::vector<std::map<uintptr_t, Mapping>::iterator> out;
  uintptr_t at = p;
  const uintptr_t end = p + size;
  while (at < end) {
    auto it = mappings_.find(at);
    if (it == mappings_.end() || it->second.size > end - at) return {};
    out.push_back(it);
    at += it->second.size;
  }
  return out;
}

CUresult Vmm::unmap(uintptr_t p, uint64_t size) {
  std::lock_guard<std::mutex> lk(mu_);
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  auto cover = cover_locked(p, size);
  if (cover.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : cover) {
    // Put plain reserved address space back where the mapping was.
    mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    PhysicalMemory* h = it->second.handle;
    mappings_.erase(it);
    --h->mappings;
    drop_locked(h);
  }
  return CUDA_SUCCESS;
}

CUresult Vmm::set_access(uintptr_t p, uint64_t size, bool accessible) {
  std::lock_guard<std::mutex> lk(mu_);
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  auto cover = cover_locked(p, size);
  if (cover.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (auto it : cover) it->second.accessible = accessible;
  return CUDA_SUCCESS;
}

CUresult Vmm::release(PhysicalMemory* h) {
  std::lock_guard<std::mutex> lk(mu_);
  if (h->released) return CUDA_ERROR_INVALID_VALUE;  // released twice (still mapped somewhere)
  h->released = true;
  drop_locked(h);
  return CUDA_SUCCESS;
}

void Vmm::drop_locked(PhysicalMemory* h) {
  if (!h->released || h->mappings > 0) return;
  Driver& drv = Driver::get();
  if (h->device) drv.shared->uncharge(h->device->physical, h->size);
  ::close(h->fd);
  g_physical_memory.destroy(h);
}

bool Vmm::live_range(uintptr_t p, uint64_t n) const {
  if (n == 0 || n > UINTPTR_MAX - p) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = mappings_.upper_bound(p);
  if (it == mappings_.begin()) return false;
  --it;
  uintptr_t at = p;
  const uintptr_t end = p + n;
  while (it != mappings_.end() && it->first <= at && at < it->first + it->second.size && it->second.accessible) {
    at = it->first + it->second.size;
    if (at >= end) return true;
    ++it;
  }
  return false;
}

}  // namespace simgpu
