// Unit tests of the pool shadow (interpose/pool_shadow.h): what a stream-ordered allocation is
// charged before the driver call, and how readings of the pool's reserved memory correct it.
#include "interpose/pool_shadow.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <algorithm>
#include <random>
#include <vector>

using coloc::interpose::PoolShadow;

TEST_SUITE("interpose") {

TEST_CASE("pool shadow: need() rounds to the chunk and saturates") {
  PoolShadow s;
  CHECK(s.chunk() == PoolShadow::kDefaultChunk);
  s.set_chunk(3);  // not a power of two: kept as it was
  CHECK(s.chunk() == PoolShadow::kDefaultChunk);
  s.set_chunk(16);
  CHECK(s.need(0) == 0);
  CHECK(s.need(1) == 16);
  CHECK(s.need(16) == 16);
  CHECK(s.need(17) == 32);
  CHECK(s.need(UINT64_MAX) == (UINT64_MAX & ~uint64_t(15)));
}

TEST_CASE("pool shadow: a ready piece is reused best-fit; its excess stays charged") {
  PoolShadow s;
  s.set_chunk(16);
  auto a = s.begin(40);  // 48
  auto b = s.begin(10);  // 16
  CHECK(a.growth == 48);
  CHECK(b.growth == 16);
  s.freed(40, PoolShadow::FreeSite{1, 1, 0});
  s.freed(10, PoolShadow::FreeSite{1, 1, 0});
  CHECK(s.charge() == 64);
  CHECK(s.ready_bytes() == 0);
  s.synchronized(PoolShadow::kAllStreams, 1, 1);
  CHECK(s.ready_bytes() == 64);
  auto c = s.begin(5);  // 16: the 16-byte piece, not the 48
  CHECK(c.growth == 0);
  CHECK(c.piece == 16);
  auto d = s.begin(20);  // 32: takes the 48-byte piece, 16 of slack
  CHECK(d.growth == 0);
  CHECK(d.piece == 48);
  CHECK(s.charge() == 64);
  CHECK(s.held() == 48);
  auto e = s.begin(1);  // slack is never handed out
  CHECK(e.growth == 16);
  s.abort(e);
  s.abort(d);
  CHECK(s.ready_bytes() == 48);
  CHECK(s.charge() == 64);
}

TEST_CASE("pool shadow: a lower reading forgets every piece and never uncharges live blocks") {
  PoolShadow s;
  s.set_chunk(16);
  s.begin(16);
  s.begin(32);
  s.begin(64);
  s.begin(16);
  s.freed(32, PoolShadow::FreeSite{1, 1, 0});  // will be ready
  s.freed(64, PoolShadow::FreeSite{2, 1, 0});  // stays pending
  s.synchronized(1, 1, 1);
  CHECK(s.charge() == 128);
  CHECK(s.reconcile(200, false) == 72);  // higher: taken at once, even with allocations in flight
  CHECK(s.charge() == 200);
  CHECK(s.reconcile(100, false) == 0);  // lower while allocations were in flight: ignored
  CHECK(s.charge() == 200);
  CHECK(s.reconcile(200, true) == 0);  // the same reading again: nothing changes
  CHECK(s.pieces() == 2);
  CHECK(s.ready_bytes() == 32);
  CHECK(s.reconcile(96, true) == 0);  // lower: which blocks went is not known
  CHECK(s.charge() == 96);
  CHECK(s.pieces() == 0);
  CHECK(s.spare() == 64);
  CHECK(s.begin(1).growth == 16);
  CHECK(s.reconcile(0, true) == 0);
  CHECK(s.charge() == 48);  // the live blocks stay charged whatever the reading
  CHECK(s.spare() == 0);
}

TEST_CASE("pool shadow: a synchronize makes ready only its own context's or stream's frees, queued before it began") {
  PoolShadow s;
  s.set_chunk(16);
  s.begin(16);
  s.begin(16);
  s.begin(16);
  s.freed(16, PoolShadow::FreeSite{100, 1, 0});  // context 1, stream 100
  s.freed(16, PoolShadow::FreeSite{200, 2, 1});  // context 2, stream 200
  s.freed(16, PoolShadow::FreeSite{100, 1, 5});  // context 1, stream 100, after the sync below began
  s.synchronized(PoolShadow::kAllStreams, 1, 5);  // context 1's synchronize, begun at sequence 5
  CHECK(s.ready_bytes() == 16);                   // only the first: not context 2's, not the late one
  s.synchronized(200, 2, 2);
  CHECK(s.ready_bytes() == 32);
  CHECK(s.begin(1, 300).growth == 0);  // ready: any stream
  CHECK(s.begin(1, 300).growth == 0);
  CHECK(s.begin(1, 300).growth == 16);  // the late one: only its own stream may take it
  CHECK(s.begin(1, 100).growth == 0);
}

TEST_CASE("pool shadow: more pieces than the table holds fold into slack, nothing is lost") {
  PoolShadow s;
  s.set_chunk(16);
  uint64_t total = 0;
  for (int i = 1; i <= PoolShadow::kMaxPieces + 8; ++i) {
    s.begin(16 * i);
    total += 16 * i;
  }
  for (int i = 1; i <= PoolShadow::kMaxPieces + 8; ++i) s.freed(16 * i, PoolShadow::FreeSite{1, 1, 0});
  CHECK(s.pieces() == PoolShadow::kMaxPieces);
  CHECK(s.charge() == total);
  CHECK(s.held() == 0);
  s.synchronized(1, 1, 1);
  auto t = s.begin(16 * (PoolShadow::kMaxPieces + 8));  // the largest piece was kept
  CHECK(t.growth == 0);
}

// The property the limit rests on: against a model pool that reserves a chunk per block, reuses
// only freed blocks (best fit) and frees in stream order, the shadow's charge never falls below the
// pool's reserved memory.
TEST_CASE("pool shadow: the charge bounds a chunked pool's reserve under random use") {
  std::mt19937_64 rng(42);
  const uint64_t chunk = 16;
  PoolShadow s;
  s.set_chunk(chunk);
  struct Block {
    uint64_t bytes, size;
  };
  std::vector<uint64_t> free_chunks;  // the model pool's reusable chunks
  std::vector<uint64_t> freeing;      // freed, not yet run
  std::vector<Block> live;
  uint64_t reserved = 0, seq = 0;
  for (int step = 0; step < 20000; ++step) {
    int op = int(rng() % 10);
    if (op < 5) {
      uint64_t bytes = 1 + rng() % 200;
      uint64_t need = (bytes + chunk - 1) / chunk * chunk;
      auto t = s.begin(bytes);
      int best = -1;
      for (size_t i = 0; i < free_chunks.size(); ++i)
        if (free_chunks[i] >= need && (best < 0 || free_chunks[i] < free_chunks[size_t(best)])) best = int(i);
      uint64_t size = need;
      if (best >= 0) {
        size = free_chunks[size_t(best)];
        free_chunks.erase(free_chunks.begin() + best);
      } else {
        reserved += need;
      }
      live.push_back(Block{bytes, size});
      (void)t;
    } else if (op < 8 && !live.empty()) {
      size_t i = rng() % live.size();
      s.freed(live[i].bytes, PoolShadow::FreeSite{1, 1, seq++});
      freeing.push_back(live[i].size);
      live.erase(live.begin() + long(i));
    } else if (op == 8) {
      for (uint64_t c : freeing) free_chunks.push_back(c);
      freeing.clear();
      s.synchronized(1, 1, seq);
      if (rng() % 2) {  // a trim to a threshold, largest first
        uint64_t keep = rng() % 400;
        std::sort(free_chunks.begin(), free_chunks.end());
        while (reserved > keep && !free_chunks.empty()) {
          reserved -= free_chunks.back();
          free_chunks.pop_back();
        }
        s.reconcile(reserved, true);
      }
    } else {
      s.reconcile(reserved, true);
    }
    REQUIRE(s.charge() >= reserved);
  }
}

}  // TEST_SUITE
