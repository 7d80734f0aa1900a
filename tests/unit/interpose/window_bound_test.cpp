// Unit: the in-flight window's bound (interpose/window_bound.h) as a pure function with a fake
// clock: the slow start from the first launch, its growth per round trip, the learned cost (rises
// at once, falls by quarters), the age of the oldest unfinished work, and staleness.
#include "interpose/window_bound.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>

using namespace coloc::interpose;

namespace {
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kWindow = 12 * kMs + kMs / 2;  // a 50 ms quantum's window
}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("window bound: before any completion, one launch may be in flight; the allowance then doubles per round trip") {
  WindowBound b;
  uint64_t now = 1000 * kMs;
  b.launch(now, true);
  CHECK_FALSE(b.over(0, 0, now, kWindow));  // the first launch goes
  CHECK(b.over(1, now, now, kWindow));      // the second waits for it
  // Each round trip completes what the allowance let in flight (cheap work, 1 us a launch), in
  // marks of one launch or two: the allowance doubles per round, 1 -> 2 -> 4 -> 8 ...
  uint64_t allowed = 1;
  for (int round = 0; round < 5; ++round) {
    for (uint64_t done = 0; done < allowed;) {
      const uint64_t n = allowed - done >= 2 ? 2 : 1;
      b.completed(now += 10'000, n, n * 1000);
      done += n;
    }
    allowed *= 2;
    CHECK(b.allowed == allowed);
    CHECK_FALSE(b.over(allowed - 1, now, now, kWindow));
    CHECK(b.over(allowed, now, now, kWindow));
  }
  // Not per completion: one completion of one launch adds one.
  b.completed(now, 1, 1000);
  CHECK(b.allowed == allowed + 1);
  // Up to the ceiling, where only the learned cost bounds.
  for (int i = 0; i < 40; ++i) b.completed(now, b.allowed, b.allowed * 1000);
  CHECK(b.allowed == WindowBound::kMaxAllowed);
  CHECK_FALSE(b.near_allowance(WindowBound::kMaxAllowed));
}

TEST_CASE("window bound: the learned cost bounds the launches in flight to the window") {
  WindowBound b;
  b.launch(kMs, true);
  for (int i = 0; i < 30; ++i) b.completed(2 * kMs, 1, 5 * kMs);  // 5 ms kernels
  CHECK(b.per_launch_ns == 5 * kMs);
  CHECK_FALSE(b.over(2, 0, 0, kWindow));  // 10 ms in flight: one more may go
  CHECK(b.over(3, 0, 0, kWindow));        // 15 ms: over
  CHECK_FALSE(b.over(100, 0, 0, 0));      // window 0: no bound
}

TEST_CASE("window bound: a higher cost is taken at once, a lower one only per span of device time, a quarter of the way to the span's highest") {
  WindowBound b;
  b.completed(kMs, 10, 10 * 20'000);  // 20 us a launch
  CHECK(b.per_launch_ns == 20'000);
  b.completed(2 * kMs, 1, 20 * kMs);  // then a 20 ms kernel: at once
  CHECK(b.per_launch_ns == 20 * kMs);
  // Cheap work after it: the cost holds until the span's device time is done (20 ms + 79 x 1 ms).
  for (int i = 0; i < 79; ++i) b.completed(3 * kMs, 50, 50 * 20'000);
  CHECK(b.per_launch_ns == 20 * kMs);
  // Not an average: the window still holds one long kernel, not 600 short ones.
  CHECK(b.over(1, 0, 0, kWindow));
  b.completed(3 * kMs, 50, 50 * 20'000);  // the span's 100 ms: a quarter of the way to its highest (20 ms)
  CHECK(b.per_launch_ns == 20 * kMs);
  // A span of cheap work only: a quarter of the way down.
  for (int i = 0; i < 100; ++i) b.completed(4 * kMs, 50, 50 * 20'000);
  CHECK(b.per_launch_ns == 20 * kMs - (20 * kMs - 20'000) / 4);
}

TEST_CASE("window bound: mixed training work (80% 30 us, 15% 250 us, 5% 2.5 ms) keeps the learned cost near its long kernels") {
  // Marks of a few launches each, as the tracker places them: most cover only cheap kernels.
  WindowBound b;
  uint64_t now = kMs;
  const uint64_t costs[20] = {30'000, 30'000, 30'000, 250'000, 30'000, 30'000, 30'000, 30'000, 2'500'000, 30'000,
                              30'000, 250'000, 30'000, 30'000, 30'000, 30'000, 30'000, 250'000, 30'000, 30'000};
  uint64_t low = UINT64_MAX;
  for (int round = 0; round < 200; ++round)
    for (uint64_t c : costs) {
      b.completed(now += c, 1, c);
      if (round > 0) low = std::min(low, b.per_launch_ns);
    }
  // A per-completion fall (the rule before) came down to 89 us before the next 2.5 ms kernel: 12.5 ms
  // / 89 us let 140 launches in flight, about 26 ms of this mix, twice the window. Per span the
  // cost stays at 2.5 ms.
  CHECK(low == 2'500'000);
  CHECK(b.over(6, 0, 0, kWindow));
}

TEST_CASE("window bound: the oldest unfinished work's age past the window stops launches whatever the estimate") {
  WindowBound b;
  for (int i = 0; i < 20; ++i) b.completed(kMs, 10, 10 * 20'000);  // learned: 20 us a launch
  const uint64_t since = 100 * kMs;
  CHECK_FALSE(b.over(50, since, since + kWindow, kWindow));  // 1 ms estimated, the oldest at the window: go
  CHECK(b.over(50, since, since + kWindow + 1, kWindow));    // past it: the estimate is wrong, wait
  CHECK(WindowBound::aged(since, since + kWindow + 1, kWindow));
  CHECK_FALSE(WindowBound::aged(0, since + 10 * kWindow, kWindow));  // nothing in flight: no age
  CHECK_FALSE(b.over(0, since, since + 10 * kWindow, kWindow));      // nothing in flight: go
}

TEST_CASE("window bound: a job idle for longer than kStaleNs starts over; a shorter gap keeps what it learned") {
  WindowBound b;
  uint64_t now = kMs;
  b.launch(now, true);
  for (int i = 0; i < 10; ++i) b.completed(now += kMs, 1, 5 * kMs);
  REQUIRE(b.allowed == 11);
  // A gap of half a second (a host synchronize, other jobs' turns): kept.
  now += WindowBound::kStaleNs / 2;
  b.launch(now, true);
  CHECK(b.allowed == 11);
  CHECK(b.per_launch_ns == 5 * kMs);
  // Busy (something in flight) for longer than kStaleNs without a completion: not idle, kept.
  now += 2 * WindowBound::kStaleNs;
  b.launch(now, false);
  CHECK(b.allowed == 11);
  // Idle for longer than kStaleNs: the slow start again, the cost unknown.
  now += WindowBound::kStaleNs + 1;
  b.launch(now, true);
  CHECK(b.allowed == WindowBound::kFirstLaunches);
  CHECK(b.per_launch_ns == 0);
  CHECK(b.over(1, now, now, kWindow));
}
}
