// tools/workload/caching_allocator.h — a caching allocator that asks the driver for memory the way
// PyTorch's CUDACachingAllocator does, so the driver (and coloc, which sits in front of it) sees the
// same segment sizes and the same caching a PyTorch training job produces.
//
// Policy (PyTorch c10/cuda/CUDACachingAllocator.cpp, default settings, one stream):
//   - every request is rounded up to a multiple of 512 B (kMinBlockSize), at least 512 B;
//   - requests of at most 1 MiB (kSmallSize) come from the small pool, whose segments are 2 MiB
//     (kSmallBuffer); larger requests come from the large pool, whose segments are 20 MiB
//     (kLargeBuffer) for requests under 10 MiB (kMinLargeAlloc) and otherwise the request rounded
//     up to 2 MiB (kRoundLarge);
//   - a request takes the smallest cached free block of its pool that fits (best fit, ties by
//     address) and splits off the rest when the rest is at least 512 B (small pool) or more than
//     1 MiB (large pool); a freed block merges with its free neighbours in the same segment and
//     stays cached: segments go back to the driver only when an allocation fails;
//   - when the driver answers CUDA_ERROR_OUT_OF_MEMORY, every fully free cached segment is released
//     and the allocation is tried once more; a second failure is reported as the OOM.
// Not modelled: several streams, expandable segments, max_split_size, garbage collection, graphs.
//
// Not thread-safe: coloc-train allocates from one thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>

#include "device_memory.h"

namespace coloc::workload {

/// PyTorch's allocator constants, in bytes (names as in CUDACachingAllocator.cpp).
inline constexpr uint64_t kMinBlockSize = 512;
inline constexpr uint64_t kSmallSize = 1ULL << 20;
inline constexpr uint64_t kSmallBuffer = 2ULL << 20;
inline constexpr uint64_t kLargeBuffer = 20ULL << 20;
inline constexpr uint64_t kMinLargeAlloc = 10ULL << 20;
inline constexpr uint64_t kRoundLarge = 2ULL << 20;

/// The block size a request of `bytes` gets: a multiple of 512, at least 512.
uint64_t round_block_size(uint64_t bytes);
/// The size of the segment the allocator asks the driver for when no cached block fits a block of
/// `block_bytes` (already rounded): 2 MiB, 20 MiB, or `block_bytes` rounded up to 2 MiB.
uint64_t segment_size_for(uint64_t block_bytes);

/// Counters, all in bytes except the counts.
struct AllocatorStats {
  uint64_t allocated_bytes = 0;       ///< blocks handed out and not yet freed (rounded sizes)
  uint64_t peak_allocated_bytes = 0;
  uint64_t reserved_bytes = 0;        ///< segments held from the driver: what the driver sees
  uint64_t peak_reserved_bytes = 0;
  uint64_t segments = 0;              ///< segments held now
  uint64_t device_allocs = 0;         ///< successful DeviceMemory::allocate calls
  uint64_t device_frees = 0;          ///< DeviceMemory::release calls
  uint64_t cache_flushes = 0;         ///< times a driver OOM made the allocator release its cache
};

class CachingAllocator {
 public:
  explicit CachingAllocator(DeviceMemory& device);
  /// Gives every segment back to the device (errors ignored: this runs on the way out).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Returns the address of a block of at least `bytes` bytes; 0 for 0 bytes, as PyTorch returns
  /// a null pointer for empty tensors. Throws CudaError when the device fails; for
  /// CUDA_ERROR_OUT_OF_MEMORY, only after releasing the cache and retrying once.
  CUdeviceptr allocate(uint64_t bytes);
  /// Returns a block to the cache. Freeing 0 does nothing. Throws std::invalid_argument for an
  /// address that allocate() did not return or that was already freed.
  void free(CUdeviceptr ptr);
  /// Releases every fully free segment to the device (torch.cuda.empty_cache()). Returns the bytes
  /// released. Throws CudaError when the device fails to free.
  uint64_t empty_cache();

  const AllocatorStats& stats() const { return stats_; }

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  Pool& pool_of(const Block* b);
  Block* find_free_block(uint64_t size, bool small);
  Block* new_segment(uint64_t size, bool small);
  CUdeviceptr device_allocate(uint64_t bytes);
  void split(Block* b, uint64_t size);
  Block* merge_free_neighbours(Block* b);
  void erase_block(Block* b);

  DeviceMemory& device_;
  Pool small_free_;
  Pool large_free_;
  // Every block, free or allocated, by its start address (unique: blocks never overlap).
  std::unordered_map<CUdeviceptr, std::unique_ptr<Block>> blocks_;
  AllocatorStats stats_;
};

}  // namespace coloc::workload
