// tools/workload/caching_allocator.cpp — see caching_allocator.h for the policy and its source.
#include "caching_allocator.h"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "coloc/size.h"
#include "errors.h"

namespace coloc::workload {

// A block is a contiguous range inside one segment; the blocks of a segment form a doubly linked
// list in address order. A segment is fully free when its only block is free.
struct CachingAllocator::Block {
  CUdeviceptr ptr = 0;
  uint64_t size = 0;
  bool small = false;      // which pool it belongs to
  bool allocated = false;
  Block* prev = nullptr;   // neighbours in the same segment
  Block* next = nullptr;
  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

uint64_t round_block_size(uint64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

uint64_t segment_size_for(uint64_t block_bytes) {
  if (block_bytes <= kSmallSize) return kSmallBuffer;
  if (block_bytes < kMinLargeAlloc) return kLargeBuffer;
  return (block_bytes + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::CachingAllocator(DeviceMemory& device) : device_(device) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [ptr, b] : blocks_) {
    if (b->prev != nullptr) continue;  // only the first block of a segment owns its address
    try {
      device_.release(ptr);
    } catch (...) {
      // On the way out (often after an OOM): the process exit returns the memory anyway.
    }
  }
}

CachingAllocator::Pool& CachingAllocator::pool_of(const Block* b) { return b->small ? small_free_ : large_free_; }

CUdeviceptr CachingAllocator::allocate(uint64_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > UINT64_MAX - kRoundLarge) throw CudaError(CUDA_ERROR_OUT_OF_MEMORY, "allocation of " + std::to_string(bytes) + " bytes is larger than any device");
  const uint64_t size = round_block_size(bytes);
  const bool small = size <= kSmallSize;
  Block* b = find_free_block(size, small);
  if (b == nullptr) b = new_segment(segment_size_for(size), small);
  split(b, size);
  b->allocated = true;
  stats_.allocated_bytes += b->size;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::find_free_block(uint64_t size, bool small) {
  Pool& pool = small ? small_free_ : large_free_;
  Block key;
  key.size = size;
  key.ptr = 0;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(uint64_t size, bool small) {
  CUdeviceptr ptr = device_allocate(size);
  auto owned = std::make_unique<Block>();
  Block* b = owned.get();
  b->ptr = ptr;
  b->size = size;
  b->small = small;
  blocks_.emplace(ptr, std::move(owned));
  stats_.reserved_bytes += size;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) stats_.peak_reserved_bytes = stats_.reserved_bytes;
  ++stats_.segments;
  return b;
}

CUdeviceptr CachingAllocator::device_allocate(uint64_t bytes) {
  try {
    CUdeviceptr p = device_.allocate(bytes);
    ++stats_.device_allocs;
    return p;
  } catch (const CudaError& e) {
    if (!e.out_of_memory()) throw;
  }
  // As PyTorch does: give the whole cache back, then try once more (another process may also have
  // freed memory meanwhile, so retry even when the cache was empty).
  ++stats_.cache_flushes;
  empty_cache();
  try {
    CUdeviceptr p = device_.allocate(bytes);
    ++stats_.device_allocs;
    return p;
  } catch (const CudaError& e) {
    if (!e.out_of_memory()) throw;
    char want[32], reserved[32], allocated[32];
    format_size(bytes, want, sizeof want);
    format_size(stats_.reserved_bytes, reserved, sizeof reserved);
    format_size(stats_.allocated_bytes, allocated, sizeof allocated);
    throw CudaError(e.result(), std::string(e.what()) + "; caching allocator: tried to allocate a " + want +
                                    " segment with " + reserved + " reserved, " + allocated +
                                    " allocated, after releasing its cache");
  }
}

void CachingAllocator::split(Block* b, uint64_t size) {
  const uint64_t remaining = b->size - size;
  // PyTorch's should_split(): small blocks split when at least a minimum block is left, large ones
  // only when more than a small allocation's worth (1 MiB) is left.
  const bool worth_it = b->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!worth_it) return;
  auto owned = std::make_unique<Block>();
  Block* rest = owned.get();
  rest->ptr = b->ptr + size;
  rest->size = remaining;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  blocks_.emplace(rest->ptr, std::move(owned));
  pool_of(rest).insert(rest);
}

void CachingAllocator::free(CUdeviceptr ptr) {
  if (ptr == 0) return;
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second->allocated) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)ptr);
    throw std::invalid_argument(std::string("caching allocator: free of ") + hex + ", which is not an allocated block");
  }
  Block* b = it->second.get();
  b->allocated = false;
  stats_.allocated_bytes -= b->size;
  b = merge_free_neighbours(b);
  pool_of(b).insert(b);
}

// Merges `b` (free, in no pool) with its free neighbours; returns the merged block (in no pool).
CachingAllocator::Block* CachingAllocator::merge_free_neighbours(Block* b) {
  if (Block* n = b->next; n && !n->allocated) {
    pool_of(n).erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    erase_block(n);
  }
  if (Block* p = b->prev; p && !p->allocated) {
    pool_of(p).erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    erase_block(b);
    b = p;
  }
  return b;
}

void CachingAllocator::erase_block(Block* b) { blocks_.erase(b->ptr); }

uint64_t CachingAllocator::empty_cache() {
  std::vector<Block*> whole;
  for (Pool* pool : {&small_free_, &large_free_})
    for (Block* b : *pool)
      if (b->whole_segment()) whole.push_back(b);
  uint64_t released = 0;
  for (Block* b : whole) {
    device_.release(b->ptr);
    ++stats_.device_frees;
    pool_of(b).erase(b);
    stats_.reserved_bytes -= b->size;
    --stats_.segments;
    released += b->size;
    erase_block(b);
  }
  return released;
}

}  // namespace coloc::workload
