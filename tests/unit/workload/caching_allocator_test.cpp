// The caching allocator against a fake device: PyTorch's rounding and segment sizes, reuse, split
// and merge, and the release-and-retry on out-of-memory.
#include <doctest/doctest.h>

#include <map>
#include <stdexcept>
#include <vector>

#include "../../../tools/workload/caching_allocator.h"
#include "../../../tools/workload/errors.h"
#include "fakes.h"

using namespace coloc::workload;
using coloc::workload::test::FakeCompute;
using coloc::workload::test::FakeDevice;

namespace {

constexpr uint64_t MiB = 1ULL << 20;

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("block rounding and segment sizes follow PyTorch") {
  CHECK(round_block_size(0) == 512);
  CHECK(round_block_size(1) == 512);
  CHECK(round_block_size(512) == 512);
  CHECK(round_block_size(513) == 1024);
  CHECK(round_block_size(1000000) == 1000448);
  // <= 1 MiB: 2 MiB segments; (1 MiB, 10 MiB): 20 MiB; >= 10 MiB: rounded up to 2 MiB.
  CHECK(segment_size_for(512) == 2 * MiB);
  CHECK(segment_size_for(1 * MiB) == 2 * MiB);
  CHECK(segment_size_for(1 * MiB + 512) == 20 * MiB);
  CHECK(segment_size_for(10 * MiB - 512) == 20 * MiB);
  CHECK(segment_size_for(10 * MiB) == 10 * MiB);
  CHECK(segment_size_for(11 * MiB) == 12 * MiB);
  CHECK(segment_size_for(100 * MiB + 512) == 102 * MiB);
}

TEST_CASE("small requests share a 2 MiB segment; the driver sees segments only") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  std::vector<CUdeviceptr> ptrs;
  for (int i = 0; i < 4; ++i) ptrs.push_back(a.allocate(100 * 1024));  // 100 KiB each
  CHECK(dev.allocs == std::vector<uint64_t>{2 * MiB});
  for (int i = 1; i < 4; ++i) CHECK(ptrs[i] == ptrs[i - 1] + 100 * 1024);  // carved in order
  CHECK(a.stats().allocated_bytes == 4 * 100 * 1024);
  CHECK(a.stats().reserved_bytes == 2 * MiB);
  // A fifth of 1 MiB does not fit in what is left (2 MiB - 400 KiB < 1 MiB + ...): new segment.
  a.allocate(1 * MiB);
  a.allocate(1 * MiB);
  CHECK(dev.allocs == std::vector<uint64_t>{2 * MiB, 2 * MiB});
}

TEST_CASE("medium requests come from 20 MiB segments, large ones get their own") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  CUdeviceptr m1 = a.allocate(3 * MiB);
  CUdeviceptr m2 = a.allocate(5 * MiB);
  CHECK(dev.allocs == std::vector<uint64_t>{20 * MiB});  // both carved from one 20 MiB segment
  CHECK(m2 == m1 + 3 * MiB);
  CUdeviceptr l = a.allocate(13 * MiB + 1);               // 13 MiB + 512 -> its own 14 MiB segment
  CHECK(dev.allocs == std::vector<uint64_t>{20 * MiB, 14 * MiB});
  CHECK(l != m1 + 8 * MiB);
  CHECK(a.stats().reserved_bytes == 34 * MiB);
  CHECK(a.stats().peak_reserved_bytes == 34 * MiB);
  CHECK(a.stats().segments == 2);
  // A large request that fits the 12 MiB left in the 20 MiB segment is carved from it (best fit
  // over the whole large pool), as in PyTorch.
  CHECK(a.allocate(11 * MiB) == m1 + 8 * MiB);
  CHECK(dev.allocs.size() == 2);
}

TEST_CASE("freed blocks are cached and reused: best fit, split, merge") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  CUdeviceptr big = a.allocate(64 * MiB);
  a.free(big);
  CHECK(dev.frees.empty());                     // cached, not given back
  CHECK(a.stats().reserved_bytes == 64 * MiB);
  CHECK(a.stats().allocated_bytes == 0);

  // Reuse with a split: 30 MiB from the cached 64 MiB; the 34 MiB rest stays free.
  CUdeviceptr x = a.allocate(30 * MiB);
  CHECK(x == big);
  CUdeviceptr y = a.allocate(34 * MiB);
  CHECK(y == big + 30 * MiB);
  CHECK(dev.allocs.size() == 1);                // no new segment for either

  // Free both: they merge back into one 64 MiB block that a 64 MiB request can take whole.
  a.free(x);
  a.free(y);
  CHECK(a.allocate(64 * MiB) == big);
  CHECK(dev.allocs.size() == 1);

  // Best fit: with free blocks of 24 MiB and 40 MiB cached, a 22 MiB request takes the 24 MiB one.
  FakeDevice dev2(1ULL << 40);
  CachingAllocator b(dev2);
  CUdeviceptr s40 = b.allocate(40 * MiB), s24 = b.allocate(24 * MiB);
  b.free(s40);
  b.free(s24);
  CHECK(b.allocate(22 * MiB) == s24);
  // 2 MiB remained, more than 1 MiB, so the block was split and the rest is cached on its own.
  CHECK(b.allocate(2 * MiB) == s24 + 22 * MiB);
  CHECK(dev2.allocs.size() == 2);
}

TEST_CASE("large blocks split only when more than 1 MiB would remain") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  CUdeviceptr p = a.allocate(12 * MiB);
  a.free(p);
  // 11 MiB + 512 from the cached 12 MiB: under 1 MiB remains, so the whole block is handed out
  // and a following small request cannot use the rest.
  CUdeviceptr q = a.allocate(11 * MiB + 512);
  CHECK(q == p);
  CHECK(a.stats().allocated_bytes == 12 * MiB);
  // Small requests never come from the large pool.
  a.free(q);
  a.allocate(4096);
  CHECK(dev.allocs == std::vector<uint64_t>{12 * MiB, 2 * MiB});
}

TEST_CASE("on driver OOM the cache is released and the allocation retried once") {
  FakeDevice dev(100 * MiB);
  CachingAllocator a(dev);
  CUdeviceptr p = a.allocate(60 * MiB);
  a.free(p);                                    // 60 MiB cached, device 60 MiB used
  CUdeviceptr q = a.allocate(70 * MiB);         // does not fit next to the cache: flush, retry
  CHECK(q != 0);
  CHECK(dev.ooms == 1);
  CHECK(dev.frees == std::vector<uint64_t>{60 * MiB});
  CHECK(a.stats().cache_flushes == 1);
  CHECK(a.stats().reserved_bytes == 70 * MiB);
  CHECK(a.stats().peak_reserved_bytes == 70 * MiB);

  // A request that cannot fit even after the flush: two driver attempts, then the OOM.
  int before = dev.ooms;
  try {
    a.allocate(40 * MiB);
    FAIL("expected an out-of-memory error");
  } catch (const CudaError& e) {
    CHECK(e.out_of_memory());
    CHECK(std::string(e.what()).find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
  }
  CHECK(dev.ooms == before + 2);
  CHECK(a.stats().allocated_bytes == 70 * MiB);  // nothing lost
  // Allocated blocks are never released by a flush; split segments stay.
  CHECK(dev.live.size() == 1);
}

TEST_CASE("a non-OOM driver error is passed on without a retry") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  dev.fail_next_with = CUDA_ERROR_UNKNOWN;
  CHECK_THROWS_AS(a.allocate(1 * MiB), CudaError);
  CHECK(dev.allocs.size() == 1);
  CHECK(a.stats().cache_flushes == 0);
  CHECK(a.allocate(1 * MiB) != 0);
}

TEST_CASE("bad frees are errors; zero-byte requests are null") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  CHECK(a.allocate(0) == 0);
  a.free(0);
  CUdeviceptr p = a.allocate(1000);
  CHECK_THROWS_AS(a.free(p + 512), std::invalid_argument);
  a.free(p);
  CHECK_THROWS_AS(a.free(p), std::invalid_argument);
  CHECK(dev.allocs.size() == 1);
}

TEST_CASE("empty_cache returns fully free segments only; the destructor returns the rest") {
  FakeDevice dev(1ULL << 40);
  {
    CachingAllocator a(dev);
    CUdeviceptr s1 = a.allocate(512), s2 = a.allocate(512);  // one 2 MiB segment, in use
    CUdeviceptr l = a.allocate(30 * MiB);
    a.free(l);
    a.free(s1);
    CHECK(a.empty_cache() == 30 * MiB);       // the small segment still holds s2
    CHECK(dev.live.size() == 1);
    CHECK(a.stats().reserved_bytes == 2 * MiB);
    (void)s2;
  }
  CHECK(dev.live.empty());
}

TEST_CASE("random alloc/free keeps the books exact") {
  FakeDevice dev(1ULL << 40);
  CachingAllocator a(dev);
  std::vector<std::pair<CUdeviceptr, uint64_t>> held;
  uint64_t x = 88172645463325252ULL;  // xorshift: a fixed, reproducible sequence
  auto rnd = [&x] { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x; };
  for (int i = 0; i < 20000; ++i) {
    if (held.empty() || rnd() % 3 != 0) {
      const uint64_t sizes[] = {1 + rnd() % 4096, 1 + rnd() % (1 * MiB), 1 + rnd() % (12 * MiB), 1 + rnd() % (64 * MiB)};
      uint64_t n = sizes[rnd() % 4];
      held.emplace_back(a.allocate(n), n);
    } else {
      size_t k = rnd() % held.size();
      a.free(held[k].first);
      held.erase(held.begin() + long(k));
    }
  }
  // No two live blocks overlap, and every one lies inside a segment the device handed out.
  std::map<CUdeviceptr, CUdeviceptr> ranges;
  for (auto& [p, n] : held) ranges[p] = p + round_block_size(n);
  CUdeviceptr end = 0;
  for (auto& [s, e] : ranges) {
    CHECK(s >= end);
    end = e;
    auto seg = dev.live.upper_bound(s);
    REQUIRE(seg != dev.live.begin());
    --seg;
    CHECK(e <= seg->first + seg->second);
  }
  CHECK(a.stats().reserved_bytes == dev.used);
  for (auto& [p, n] : held) a.free(p);
  CHECK(a.stats().allocated_bytes == 0);
}
}
