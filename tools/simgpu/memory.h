// simgpu/memory.h — device memory as this process sees it.
//
// Each device is backed by one mmap(PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE)
// reservation of twice its capacity (room for alignment), made at the first allocation and
// sub-allocated by a RangeAllocator: allocations of 2 MiB or more are 2 MiB-aligned, smaller ones
// 512 B-aligned. Pages are committed only when something writes them (copies, memsets,
// coloc_fill) and are given back with MADV_DONTNEED when freed, so an 80 GiB device costs no RAM
// until it is written. Device pointers are host addresses: copies are memmove.
//
// What an allocation costs the device (charged in the shared state, see shared_state.h):
//   cuMemAlloc      its size rounded up to 512 B (kAllocGranule)
//   cuMemAllocPitch pitch × height, pitch = width rounded up to 512 B
//   pools           the pool's reserved memory: chunks of the block size rounded up to 2 MiB;
//                   a freed block stays reserved until cuMemPoolTrimTo, or a synchronize call
//                   trims the pool to its release threshold (default 0)
//   cuMemCreate     its size (a multiple of 2 MiB) when device-located; nothing when host-located
//   arrays          their bytes (width × height × depth × channels × element size, mipmap levels
//                   summed) rounded up to 512 B
//   managed memory  nothing: it is host memory until touched on a device, and simgpu never
//                   touches it there
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "range_allocator.h"

namespace simgpu {

struct DeviceState;
class MemPool;

/// Charge granularity of every allocation (bytes).
inline constexpr uint64_t kAllocGranule = 512;
/// Alignment of large allocations, pool chunk size unit, VMM granularity (bytes).
inline constexpr uint64_t kLargePage = 2ull << 20;

/// `v` rounded up to a multiple of `to` (a power of two); 0 when that overflows.
inline uint64_t round_up(uint64_t v, uint64_t to) {
  uint64_t r = (v + to - 1) & ~(to - 1);
  return r < v ? 0 : r;
}

/// Address space reserved for `bytes` of device memory: twice as much (alignment slack) plus one
/// large page, at most 64 TiB.
inline uint64_t arena_span(uint64_t bytes) {
  constexpr uint64_t kMaxSpan = 1ull << 46;
  return bytes > kMaxSpan / 2 ? kMaxSpan : 2 * bytes + kLargePage;
}

/// Writes `count` elements of `element` bytes (1 or 4), each the low bytes of `value`, at `dst`.
void fill_memory(uintptr_t dst, uint32_t value, unsigned element, size_t count);

enum class AllocKind : uint8_t { plain, pool_chunk, managed, graph };

struct Allocation {
  uint64_t size = 0;      ///< usable bytes (the request rounded up to 512)
  uint64_t charged = 0;   ///< bytes charged to the device for it
  uint32_t context = 0;   ///< id of the context it belongs to (freed with it); 0 for pool chunks
  AllocKind kind = AllocKind::plain;
  MemPool* pool = nullptr;  ///< for pool chunks
  // graph: the address of a graph allocation node (graph_memory.h); charged 0, live only while
  // its graph memory pool says so
};

/// A span of address space reserved once and sub-allocated. Thread-safe.
class Arena {
 public:
  explicit Arena(uint64_t span) : span_(span), ranges_(span) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// True when `p` lies in this arena's span (lock-free).
  bool contains(uintptr_t p) const {
    uintptr_t b = base_.load(std::memory_order_acquire);
    return b != 0 && p - b < span_;
  }
  /// Places an allocation of `a.size` bytes; nullopt when the span has no room (or cannot be mapped).
  std::optional<uintptr_t> allocate(const Allocation& a);
  /// Removes the allocation starting exactly at `p` and gives its pages back; nullopt if none.
  std::optional<Allocation> release(uintptr_t p);
  /// The allocation containing `p` (its base and record), if any.
  std::optional<std::pair<uintptr_t, Allocation>> find(uintptr_t p) const;
  /// True when [p, p+n) lies inside one live allocation (n > 0).
  bool live_range(uintptr_t p, uint64_t n) const;
  /// Releases every allocation for which `pred` is true and returns them.
  std::vector<Allocation> release_if(const std::function<bool(const Allocation&)>& pred);
  /// Every live allocation's [base, base + size), in address order.
  std::vector<std::pair<uintptr_t, uint64_t>> live_ranges() const;

 private:
  bool map_locked();
  void discard(uintptr_t p, uint64_t n);

  mutable std::mutex mu_;
  const uint64_t span_;
  std::atomic<uintptr_t> base_{0};
  RangeAllocator ranges_;
  std::map<uintptr_t, Allocation> live_;
};

/// A stream-ordered memory pool (cuMemPoolCreate, or a device's default pool). Each block lives
/// in its own chunk of reserved memory; a freed chunk is reused for a later block that fits
/// (smallest first) and stays reserved (and charged) until trimmed. A block freed in stream order
/// (cuMemFreeAsync behind queued work) can be reused at once by an allocation on the same stream,
/// as the driver does: stream order puts that allocation after the free. Thread-safe.
class MemPool {
 public:
  MemPool(DeviceState& dev, bool is_default) : device(dev), default_pool(is_default) {}
  ~MemPool() { release_all(); }
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  /// A block of `size` (> 0) bytes, allocated in the order of `stream` (an opaque identity; null:
  /// none): CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY when the device cannot hold another chunk
  /// even after the pool gave its free chunks back.
  CUresult allocate(uint64_t size, uintptr_t* out, const void* stream = nullptr);
  /// Returns the block at `p` to the pool; false when `p` is not a live block of this pool.
  bool free_block(uintptr_t p);
  /// cuMemFreeAsync of the block at `p` queued on `stream`: from now on an allocation on the same
  /// stream may reuse it. *generation identifies this use of the block for finish_free. False when
  /// `p` is not a live block of this pool (or is already being freed).
  bool begin_free(uintptr_t p, const void* stream, uint64_t* generation);
  /// The queued free reached the front of its stream: the block is free, unless an allocation on
  /// that stream reused it meanwhile (its generation changed).
  void finish_free(uintptr_t p, uint64_t generation);
  /// Gives free chunks back (largest first) until at most `keep` bytes stay reserved.
  void trim(uint64_t keep);
  /// trim(release threshold): what a synchronize call does.
  void trim_to_threshold();
  /// Gives every chunk back, live blocks included (cuMemPoolDestroy).
  void release_all();
  /// cuMemPoolGetAttribute / SetAttribute (`attr` a CUmemPool_attribute): CUDA_ERROR_INVALID_VALUE for an attribute simgpu
  /// does not keep or a value that cannot be set.
  CUresult get_attribute(unsigned attr, void* value);
  CUresult set_attribute(unsigned attr, void* value);

  DeviceState& device;
  const bool default_pool;

 private:
  struct Chunk {
    uint64_t size;
    uint64_t used;                   ///< block size while in use, else 0
    const void* freeing = nullptr;   ///< the stream of a queued free of its block
    uint64_t generation = 0;         ///< bumped at every allocation in it
  };
  void release_chunk_locked(std::map<uintptr_t, Chunk>::iterator it);
  void trim_locked(uint64_t keep);

  std::mutex mu_;
  std::map<uintptr_t, Chunk> chunks_;
  uint64_t reserved_ = 0, reserved_high_ = 0, used_ = 0, used_high_ = 0, release_threshold_ = 0;
  int reuse_follow_events_ = 1, reuse_opportunistic_ = 1, reuse_internal_ = 1;
};

/// Physical memory made by cuMemCreate (a CUmemGenericAllocationHandle). Backed by a memfd so
/// that several mappings of it see the same bytes.
struct PhysicalMemory {
  PhysicalMemory(DeviceState* dev, uint64_t bytes, int memfd) : device(dev), size(bytes), fd(memfd) {}
  DeviceState* const device;  ///< null: host-located (charges nothing)
  const uint64_t size;
  const int fd;
  // Guarded by the Vmm mutex:
  int mappings = 0;
  bool released = false;  ///< cuMemRelease called; destroyed once unmapped everywhere
};

/// Virtual address reservations and mappings of the VMM API. Thread-safe.
class Vmm {
 public:
  explicit Vmm(uint64_t span) : span_(span), ranges_(span) {}
  bool contains(uintptr_t p) const {
    uintptr_t b = base_.load(std::memory_order_acquire);
    return b != 0 && p - b < span_;
  }
  CUresult reserve(uint64_t size, uint64_t alignment, uintptr_t* out);
  CUresult free(uintptr_t p, uint64_t size);
  CUresult map(uintptr_t p, uint64_t size, uint64_t offset, PhysicalMemory* h);
  CUresult unmap(uintptr_t p, uint64_t size);
  CUresult set_access(uintptr_t p, uint64_t size, bool accessible);
  /// cuMemRelease: the memory goes once no mapping uses it.
  CUresult release(PhysicalMemory* h);
  /// True when [p, p+n) is covered by contiguous mappings that have access set.
  bool live_range(uintptr_t p, uint64_t n) const;

 private:
  struct Mapping {
    uint64_t size;
    PhysicalMemory* handle;
    bool accessible;
  };
  bool map_locked();
  void drop_locked(PhysicalMemory* h);
  // The mappings exactly covering [p, p+size), in order, or empty if they do not.
  std::vector<std::map<uintptr_t, Mapping>::iterator> cover_locked(uintptr_t p, uint64_t size);

  mutable std::mutex mu_;
  const uint64_t span_;
  std::atomic<uintptr_t> base_{0};
  RangeAllocator ranges_;
  std::map<uintptr_t, uint64_t> reservations_;
  std::map<uintptr_t, Mapping> mappings_;
};

/// A CUDA array or mipmapped array: device memory without an address.
struct ArrayObject {
  ArrayObject(DeviceState* dev, uint32_t ctx, uint64_t bytes_, bool mip) : device(dev), context(ctx), bytes(bytes_), mipmapped(mip) {}
  DeviceState* const device;
  const uint32_t context;
  const uint64_t bytes;  ///< charged
  const bool mipmapped;
};

}  // namespace simgpu
