// simgpu/range_allocator.h — a first-fit allocator of offsets inside one fixed span. It hands
// out ranges of a device's address reservation; it never touches memory itself.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace simgpu {

class RangeAllocator {
 public:
  /// Manages offsets [0, span).
  explicit RangeAllocator(uint64_t span);

  /// Returns the lowest offset, a multiple of `alignment`, of a free range of `size` bytes and
  /// marks it used; nullopt when no free range fits. `size` > 0; `alignment` a power of two.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t alignment);

  /// Returns [offset, offset+size) to the free set, merging it with free neighbours. The range
  /// must be one that allocate() returned (the caller keeps that record).
  void release(uint64_t offset, uint64_t size);

  /// Bytes currently free.
  uint64_t free_bytes() const { return free_bytes_; }
  /// Number of disjoint free ranges (1 when nothing is allocated).
  size_t fragments() const { return free_.size(); }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> size; disjoint, never adjacent
  uint64_t free_bytes_;
};

}  // namespace simgpu
