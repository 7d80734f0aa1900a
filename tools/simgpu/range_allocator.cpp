#include "range_allocator.h"

#include <cassert>
#include <iterator>

namespace simgpu {

RangeAllocator::RangeAllocator(uint64_t span) : free_bytes_(span) {
  if (span > 0) free_.emplace(0, span);
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t alignment) {
  assert(size > 0 && alignment > 0 && (alignment & (alignment - 1)) == 0);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first, len = it->second;
    const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    const uint64_t skip = aligned - start;
    if (aligned < start || skip >= len || len - skip < size) continue;
    // Split [start, start+len) into [start, aligned) + used + [aligned+size, start+len).
    const uint64_t tail = len - skip - size;
    if (skip > 0) {
      it->second = skip;
    } else {
      free_.erase(it);
    }
    if (tail > 0) free_.emplace(aligned + size, tail);
    free_bytes_ -= size;
    return aligned;
  }
  return std::nullopt;
}

void RangeAllocator::release(uint64_t offset, uint64_t size) {
  assert(size > 0);
  auto next = free_.lower_bound(offset);
  assert(next == free_.end() || next->first >= offset + size);  // no overlap with a free range
  uint64_t start = offset, len = size;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    assert(prev->first + prev->second <= offset);
    if (prev->first + prev->second == offset) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == offset + size) {
    len += next->second;
    free_.erase(next);
  }
  free_.emplace(start, len);
  free_bytes_ += size;
}

}  // namespace simgpu
