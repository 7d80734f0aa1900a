// Unit tests of the interposer's ledger (interpose/ledger.h): charging within a ceiling, records,
// frees, contexts, pools, exactness under 16 threads, and the fork reset.
#include "interpose/ledger.h"

#include <doctest/doctest.h>

#include "tests/support/proc.h"

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

using namespace coloc::interpose;

namespace {

struct Fixture {
  std::unique_ptr<coloc::pages::StatsPage> page = std::make_unique<coloc::pages::StatsPage>();
  std::unique_ptr<Ledger> ledger = std::make_unique<Ledger>(*page);
  Ledger& l = *ledger;
};

// Iterations, a tenth of them under ThreadSanitizer (each atomic there costs ~100x).
int scaled(int n) { return coloc::test::sanitizer() == "tsan" ? n / 10 : n; }

Record rec(uint64_t bytes, int slot, Kind kind = Kind::allocation, uint64_t ctx = 0) {
  return Record{bytes, ctx, kNoPool, uint16_t(slot), kind};
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE_FIXTURE(Fixture, "charges stay within the ceiling and are exact") {
  uint64_t seen = 0;
  CHECK(l.try_charge(0, 600, 1000, &seen));
  CHECK(seen == 0);
  CHECK_FALSE(l.try_charge(0, 401, 1000, &seen));
  CHECK(seen == 600);
  CHECK(l.try_charge(0, 400, 1000));
  CHECK(l.in_use(0) == 1000);
  CHECK(page->slots[0].in_use.load() == 1000);  // the shared counter is the one the ledger uses
  l.uncharge(0, 1000);
  CHECK(l.in_use(0) == 0);
  CHECK(l.in_use(1) == 0);  // slots are independent
}

TEST_CASE_FIXTURE(Fixture, "huge requests never wrap around") {
  const uint64_t half = 1ull << 63;
  CHECK(l.try_charge(0, half, kNoLimit));      // no limit: 2^63 may be asked for
  CHECK_FALSE(l.try_charge(0, half, kNoLimit));  // a second one would overflow 64 bits
  CHECK_FALSE(l.try_charge(0, UINT64_MAX, kNoLimit));
  CHECK(l.in_use(0) == half);
  l.force_charge(0, UINT64_MAX);  // saturates
  CHECK(l.in_use(0) == UINT64_MAX);
}

TEST_CASE_FIXTURE(Fixture, "commit, take and release keep every number") {
  REQUIRE(l.try_charge(2, 100, kNoLimit));
  REQUIRE(l.commit(Key{0x1000, Space::devptr}, rec(100, 2)));
  REQUIRE(l.try_charge(2, 50, kNoLimit));
  REQUIRE(l.commit(Key{0x1000, Space::array}, rec(50, 2, Kind::array)));  // same value, other space
  CHECK(l.live_records() == 2);
  DeviceCounts c = l.counts(2);
  CHECK(c.in_use == 150);
  CHECK(c.kind_in_use[int(Kind::allocation)] == 100);
  CHECK(c.kind_in_use[int(Kind::array)] == 50);
  CHECK(c.allocs == 2);

  auto r = l.take(Key{0x1000, Space::devptr});
  REQUIRE(r);
  CHECK(r->bytes == 100);
  CHECK_FALSE(l.take(Key{0x1000, Space::devptr}));  // taken once only
  l.release(*r);
  c = l.counts(2);
  CHECK(c.in_use == 50);
  CHECK(c.frees == 1);
  CHECK(c.peak == 150);
  CHECK(c.kind_peak[int(Kind::allocation)] == 100);

  // A free the driver refused: the record goes back.
  auto a = l.take(Key{0x1000, Space::array});
  REQUIRE(a);
  l.restore(Key{0x1000, Space::array}, *a);
  CHECK(l.live_records() == 1);
  CHECK(l.counts(2).in_use == 50);
}

TEST_CASE_FIXTURE(Fixture, "unknown frees and failures are counted where they belong") {
  CHECK_FALSE(l.take(Key{0xdead, Space::devptr}));
  l.count_untracked_free(3);
  l.count_untracked_free(-1);
  l.count_failed(3, true);
  l.count_failed(3, false);
  DeviceCounts c = l.counts(3);
  CHECK(c.untracked_frees == 1);
  CHECK(c.frees == 1);  // the stats page counts every free
  CHECK(c.failed == 2);
  CHECK(c.refused == 1);
  CHECK(l.unattributed_untracked_frees() == 1);
}

TEST_CASE_FIXTURE(Fixture, "a context's records die with it, nothing else") {
  for (uint64_t i = 1; i <= 100; ++i) {
    REQUIRE(l.try_charge(0, i, kNoLimit));
    REQUIRE(l.commit(Key{i * 256, Space::devptr}, rec(i, 0, Kind::allocation, i % 2 ? 0xc1 : 0xc2)));
  }
  REQUIRE(l.try_charge(0, 4096, kNoLimit));
  REQUIRE(l.commit(Key{7, Space::vmm}, rec(4096, 0, Kind::vmm)));  // VMM: no context
  uint64_t odd = 0;
  for (uint64_t i = 1; i <= 100; i += 2) odd += i;
  CHECK(l.release_records_of_context(0xc1) == 50);
  DeviceCounts c = l.counts(0);
  CHECK(c.in_use == 5050 - odd + 4096);
  CHECK(c.released_with_context == 50);
  CHECK(l.live_records() == 51);
  for (uint64_t i = 2; i <= 100; i += 2) CHECK(l.take(Key{i * 256, Space::devptr}));
  for (uint64_t i = 1; i <= 100; i += 2) CHECK_FALSE(l.take(Key{i * 256, Space::devptr}));
}

TEST_CASE_FIXTURE(Fixture, "the record map grows and shrinks without losing anything") {
  const uint64_t n = 200000;
  uint64_t stored = 0, found = 0;
  for (uint64_t i = 0; i < n; ++i)
    if (l.try_charge(1, 8, kNoLimit) && l.commit(Key{0x7f0000000000ull + i * 512, Space::devptr}, rec(8, 1))) ++stored;
  CHECK(stored == n);
  CHECK(l.live_records() == n);
  CHECK(l.in_use(1) == 8 * n);
  // Take them back in a different order than inserted.
  for (uint64_t i = n; i-- > 0;) {
    if (auto r = l.take(Key{0x7f0000000000ull + i * 512, Space::devptr})) {
      l.release(*r);
      ++found;
    }
  }
  CHECK(found == n);
  CHECK(l.live_records() == 0);
  CHECK(l.in_use(1) == 0);
  CHECK(l.counts(1).allocs == n);
  CHECK(l.counts(1).frees == n);
}

TEST_CASE_FIXTURE(Fixture, "a pool is charged its growth before the driver call, and readings correct it") {
  int p = l.pool_track(0xabc, 0, 0, 16);  // chunk 16 bytes
  REQUIRE(p >= 0);
  CHECK(l.pool_find(0xabc) == p);
  CHECK(l.pool_slot(p) == 0);
  uint64_t seen = 0, growth = 0;
  PoolShadow::Ticket t;
  REQUIRE(l.pool_try_begin(p, 10, 9, 100, &seen, &growth, &t));
  CHECK(growth == 16);  // a whole chunk, before the driver allocates
  CHECK(l.in_use(0) == 16);
  REQUIRE(l.pool_end(p, true, t, Key{0x10, Space::devptr}, Record{10, 0, uint32_t(p), 0, Kind::pool}));
  CHECK(l.counts(0).kind_in_use[int(Kind::pool)] == 16);
  REQUIRE(l.pool_try_begin(p, 20, 9, 100, &seen, &growth, &t));
  CHECK(growth == 32);
  REQUIRE(l.pool_end(p, true, t, Key{0x20, Space::devptr}, Record{20, 0, uint32_t(p), 0, Kind::pool}));
  CHECK(l.in_use(0) == 48);
  // Past the ceiling: refused, nothing charged.
  CHECK_FALSE(l.pool_try_begin(p, 60, 9, 100, &seen, &growth, &t));
  CHECK(growth == 64);
  CHECK(l.in_use(0) == 48);
  // A failed driver call gives the growth back.
  REQUIRE(l.pool_try_begin(p, 40, 9, 100, &seen, &growth, &t));
  CHECK(l.in_use(0) == 96);
  l.pool_end(p, false, t, Key{}, Record{});
  CHECK(l.in_use(0) == 48);
  CHECK_FALSE(l.pools_hold_reserve());
  // A free keeps its block reserved (pending until a synchronize): charged, not reusable yet.
  auto r = l.take(Key{0x10, Space::devptr});
  REQUIRE(r);
  l.pool_release(*r, 7, 1);
  CHECK(l.in_use(0) == 48);
  CHECK(l.pools_hold_reserve());
  REQUIRE(l.pool_try_begin(p, 10, 9, 100, &seen, &growth, &t));
  CHECK(growth == 16);
  l.pool_end(p, false, t, Key{}, Record{});
  // Its own stream may reuse it at once (stream order).
  REQUIRE(l.pool_try_begin(p, 10, 7, 100, &seen, &growth, &t));
  CHECK(growth == 0);
  l.pool_end(p, false, t, Key{}, Record{});
  // Synchronizing another stream changes nothing; its own stream makes the block reusable by all.
  l.pool_synchronized(8, 1, l.pool_free_seq());
  REQUIRE(l.pool_try_begin(p, 10, 9, 100, &seen, &growth, &t));
  CHECK(growth == 16);
  l.pool_end(p, false, t, Key{}, Record{});
  l.pool_synchronized(7, 1, l.pool_free_seq());
  REQUIRE(l.pool_try_begin(p, 10, 9, 100, &seen, &growth, &t));
  CHECK(growth == 0);
  l.pool_end(p, false, t, Key{}, Record{});
  // A lower reading (a trim) lets the reserve go, but only when no allocation began meanwhile.
  uint64_t epoch = l.pool_epoch(p);
  REQUIRE(l.pool_try_begin(p, 10, 9, 100, &seen, &growth, &t));
  l.pool_end(p, false, t, Key{}, Record{});
  CHECK(l.pool_reconcile(p, 32, epoch) == 0);
  CHECK(l.in_use(0) == 48);
  epoch = l.pool_epoch(p);
  CHECK(l.pool_reconcile(p, 32, epoch) == 0);
  CHECK(l.in_use(0) == 32);  // what is still live
  CHECK_FALSE(l.pools_hold_reserve());
  // A higher reading than the model is charged at once, and reported.
  CHECK(l.pool_reconcile(p, 40, l.pool_epoch(p)) == 8);
  CHECK(l.in_use(0) == 40);
  CHECK(l.pools_hold_reserve());
  // Destroyed with memory live: it costs that until freed, then is forgotten.
  l.pool_destroyed(p);
  CHECK(l.pool_find(0xabc) == -1);
  CHECK(l.in_use(0) == 32);
  r = l.take(Key{0x20, Space::devptr});
  REQUIRE(r);
  l.pool_release(*r, 7, 1);
  CHECK(l.in_use(0) == 0);
  CHECK_FALSE(l.pools_hold_reserve());
  CHECK(l.counts(0).allocs == 2);
  CHECK(l.counts(0).frees == 2);
  int idx[4];
  uint64_t handles[4];
  CHECK(l.pools_of_slot(0, idx, handles, 4) == 0);
}

TEST_CASE_FIXTURE(Fixture, "16 threads charging against one ceiling never pass it and end exact") {
  const uint64_t ceiling = 1 << 20;
  const int threads = 16;
  const int per_thread = scaled(20000);
  std::atomic<bool> over{false};
  std::atomic<uint64_t> ok{0}, refused{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint64_t> live;
      for (int i = 0; i < per_thread; ++i) {
        if (live.size() == 8 || (!live.empty() && rng() % 2)) {
          size_t k = rng() % live.size();
          auto r = l.take(Key{live[k], Space::devptr});
          if (!r) {
            over = true;  // a record vanished
            return;
          }
          l.release(*r);
          live[k] = live.back();
          live.pop_back();
        }
        uint64_t bytes = 1 + rng() % (64 << 10);
        if (!l.try_charge(0, bytes, ceiling)) {
          l.count_failed(0, true);
          ++refused;
          continue;
        }
        if (l.in_use(0) > ceiling) over = true;
        uint64_t key = (uint64_t(t) << 40) | (uint64_t(i) << 8);
        if (!l.commit(Key{key, Space::devptr}, rec(bytes, 0))) over = true;  // no doctest asserts in threads
        live.push_back(key);
        ++ok;
      }
      for (uint64_t k : live) {
        auto r = l.take(Key{k, Space::devptr});
        if (r) l.release(*r);
      }
    });
  for (auto& t : pool) t.join();
  CHECK_FALSE(over.load());
  DeviceCounts c = l.counts(0);
  CHECK(c.in_use == 0);
  CHECK(c.peak <= ceiling);
  CHECK(c.allocs == ok.load());
  CHECK(c.frees == ok.load());
  CHECK(c.refused == refused.load());
  CHECK(l.live_records() == 0);
}

TEST_CASE_FIXTURE(Fixture, "8 threads on one pool against a ceiling never pass it, and the books end exact") {
  // The pool path under contention: begins (charged before the "driver"), ends that succeed
  // (without the pool lock) or fail (with it), frees on each thread's own stream, and synchronizes
  // that make pending pieces ready for every stream.
  const uint64_t chunk = 4096, ceiling = 2 << 20;
  int p = l.pool_track(0x9001, 0, 0, chunk);
  REQUIRE(p >= 0);
  const int threads = 8, per_thread = scaled(20000);
  std::atomic<bool> wrong{false};
  std::atomic<uint64_t> ok{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      const uint64_t stream = uint64_t(t + 1) << 4;
      std::vector<uint64_t> live;
      for (int i = 0; i < per_thread; ++i) {
        if (live.size() == 6 || (!live.empty() && rng() % 2)) {
          size_t k = rng() % live.size();
          auto r = l.take(Key{live[k], Space::devptr});
          if (!r || r->pool != uint32_t(p)) {
            wrong = true;
            return;
          }
          l.pool_release(*r, stream, 1);
          live[k] = live.back();
          live.pop_back();
        }
        if (rng() % 16 == 0) l.pool_synchronized(PoolShadow::kAllStreams, 1, l.pool_free_seq());
        uint64_t bytes = 1 + rng() % (32 << 10), seen = 0, growth = 0;
        PoolShadow::Ticket ticket;
        if (!l.pool_try_begin(p, bytes, stream, ceiling, &seen, &growth, &ticket)) continue;
        if (l.in_use(0) > ceiling) wrong = true;
        bool driver_ok = rng() % 8 != 0;
        uint64_t key = (uint64_t(t) << 40) | (uint64_t(i) << 8);
        if (!l.pool_end(p, driver_ok, ticket, Key{key, Space::devptr}, Record{bytes, 0, uint32_t(p), 0, Kind::pool}))
          wrong = true;
        if (!driver_ok) continue;
        live.push_back(key);
        ++ok;
      }
      for (uint64_t k : live) {
        auto r = l.take(Key{k, Space::devptr});
        if (!r) wrong = true;
        else l.pool_release(*r, stream, 1);
      }
    });
  for (auto& t : pool) t.join();
  CHECK_FALSE(wrong.load());
  DeviceCounts c = l.counts(0);
  CHECK(c.peak <= ceiling);
  CHECK(c.allocs == ok.load());
  CHECK(c.frees == ok.load());
  CHECK(l.live_records() == 0);
  // Nothing is live: the pool is charged its reserve only, exactly what its shadow says, and a
  // reading of an empty pool (the driver trimmed it) takes the books to zero.
  PoolShadow shadow = l.pool_shadow(p);
  CHECK(shadow.held() == 0);
  CHECK(c.in_use == shadow.charge());
  CHECK(c.kind_in_use[int(Kind::pool)] == c.in_use);
  CHECK(l.pool_reconcile(p, 0, l.pool_epoch(p)) == 0);
  CHECK(l.in_use(0) == 0);
  CHECK_FALSE(l.pools_hold_reserve());
}

TEST_CASE_FIXTURE(Fixture, "after fork the child's ledger is empty and usable") {
  REQUIRE(l.try_charge(0, 100, kNoLimit));
  REQUIRE(l.commit(Key{0x1, Space::devptr}, rec(100, 0)));
  REQUIRE(l.pool_track(0x9, 0, 64, 16) >= 0);
  l.reset_in_child();  // what the child does (the parent's table is left allocated: a leak here)
  CHECK(l.in_use(0) == 0);
  CHECK(l.live_records() == 0);
  CHECK(l.pool_find(0x9) == -1);
  CHECK(l.counts(0).allocs == 0);
  REQUIRE(l.try_charge(0, 10, kNoLimit));
  CHECK(l.commit(Key{0x1, Space::devptr}, rec(10, 0)));
  CHECK(l.take(Key{0x1, Space::devptr}));
}

}  // TEST_SUITE
