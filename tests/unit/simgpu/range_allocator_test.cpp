// The offset allocator behind each simulated device's address space.
#include <doctest/doctest.h>

#include <map>
#include <random>

#include "tools/simgpu/range_allocator.h"

using simgpu::RangeAllocator;

TEST_SUITE("simgpu") {
TEST_CASE("range allocator: first fit, alignment, coalescing") {
  RangeAllocator r(1 << 20);
  auto a = r.allocate(100, 512);
  auto b = r.allocate(100, 512);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a == 0);
  CHECK(*b == 512);  // aligned past a's 100 bytes
  CHECK(r.free_bytes() == (1u << 20) - 200);
  auto big = r.allocate(4096, 4096);
  REQUIRE(big);
  CHECK(*big % 4096 == 0);
  CHECK(*big == 4096);
  r.release(*a, 100);
  auto c = r.allocate(64, 512);  // reuses the first hole
  REQUIRE(c);
  CHECK(*c == 0);
  r.release(*c, 64);
  r.release(*b, 100);
  r.release(*big, 4096);
  CHECK(r.free_bytes() == 1u << 20);
  CHECK(r.fragments() == 1);  // everything merged back
}

TEST_CASE("range allocator: exhaustion and exact fit") {
  RangeAllocator r(4096);
  CHECK_FALSE(r.allocate(4097, 1));
  auto a = r.allocate(4096, 4096);
  REQUIRE(a);
  CHECK_FALSE(r.allocate(1, 1));
  r.release(*a, 4096);
  CHECK(r.allocate(4096, 1));
  RangeAllocator tail(1000);
  REQUIRE(tail.allocate(10, 1));
  CHECK_FALSE(tail.allocate(600, 512));  // the aligned start (512) leaves 488
}

TEST_CASE("range allocator: random workload keeps ranges disjoint and books exact") {
  RangeAllocator r(64 << 20);
  std::mt19937_64 rng(42);
  std::map<uint64_t, uint64_t> live;
  uint64_t used = 0;
  for (int i = 0; i < 20000; ++i) {
    if (!live.empty() && (rng() % 2 == 0)) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      r.release(it->first, it->second);
      used -= it->second;
      live.erase(it);
      continue;
    }
    uint64_t size = 1 + rng() % (1 << 16);
    uint64_t align = size >= (1 << 15) ? (1 << 15) : 512;
    auto off = r.allocate(size, align);
    if (!off) continue;
    CHECK(*off % align == 0);
    auto next = live.lower_bound(*off);
    if (next != live.end()) CHECK(*off + size <= next->first);
    if (next != live.begin()) CHECK(std::prev(next)->first + std::prev(next)->second <= *off);
    live.emplace(*off, size);
    used += size;
    CHECK(r.free_bytes() == (64u << 20) - used);
  }
  for (auto& [o, s] : live) r.release(o, s);
  CHECK(r.fragments() == 1);
}
}
