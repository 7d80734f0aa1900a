// The asynchronous training pattern (tools/workload/pattern.h) with a fake device and clock.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../../../tools/workload/pattern.h"

using namespace coloc::workload;

namespace {

constexpr uint64_t kMs = 1'000'000;

struct FakeClock : Clock {
  uint64_t t = 5 * kMs;
  uint64_t now_ns() override { return t; }
  void sleep_until_ns(uint64_t until) override { t = std::max(t, until); }
};

// Records launches; a synchronize takes the device time queued since the last one.
struct FakeStreams : StreamCompute {
  FakeClock& clock;
  explicit FakeStreams(FakeClock& c) : clock(c) {}
  std::vector<std::pair<unsigned, uint64_t>> launches;
  std::vector<size_t> syncs;  // launches before each synchronize
  uint64_t pending = 0;
  void spin_on(unsigned stream, uint64_t ns) override {
    launches.emplace_back(stream, ns);
    pending += ns;
  }
  void synchronize_all() override {
    syncs.push_back(launches.size());
    clock.t += pending;
    pending = 0;
  }
};

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("--pattern async: options are range-checked with a message naming the option") {
  CHECK(check_async(AsyncPattern{}).empty());
  struct Case {
    AsyncPattern p;
    const char* option;
  } cases[] = {{{2, 1, 1, 100, 1}, "--kernels"},     {{100001, 1, 1, 100, 1}, "--kernels"},
               {{400, 0, 1, 100, 1}, "--streams"},   {{400, 3, 1, 100, 1}, "--streams"},
               {{400, 1, 0, 100, 1}, "--sync-every"}, {{400, 1, 10001, 100, 1}, "--sync-every"},
               {{400, 1, 1, 0, 1}, "--step-ms"},     {{400, 1, 1, 60001, 1}, "--step-ms"},
               {{400, 1, 1, 0.0001, 1}, "--step-ms"}};
  for (const Case& c : cases) {
    const std::string why = check_async(c.p);
    CAPTURE(why);
    CHECK(why.find(c.option) != std::string::npos);
  }
}

TEST_CASE("--pattern async: an iteration is a forward and a backward pass of mixed durations summing to --step-ms") {
  AsyncPattern p;  // 400 kernels, 100 ms
  p.streams = 2;
  auto it = async_iteration(p);
  REQUIRE(it.size() == 400);
  uint64_t sum = 0, forward_ns = 0, backward_ns = 0;
  size_t forward = 0, on_second = 0;
  size_t count[3] = {};
  uint64_t time[3] = {};
  for (const PatternKernel& k : it) {
    sum += k.ns;
    CHECK(k.ns >= 1);
    (k.backward ? backward_ns : forward_ns) += k.ns;
    forward += !k.backward;
    on_second += k.stream == 1;
    CHECK((k.stream == 0 || k.backward));  // the forward pass is on the first stream
    ++count[k.cls];
    time[k.cls] += k.ns;
  }
  CHECK(sum == 100 * kMs);
  CHECK(forward == 134);  // ceil(400 / 3)
  CHECK(std::find_if(it.begin(), it.end(), [](const PatternKernel& k) { return k.backward; }) - it.begin() == 134);
  CHECK(on_second == 133);  // the weight-gradient kernels
  // Backward is about twice the forward's time (each forward kernel twice, one short of a pair).
  CHECK(double(backward_ns) / double(forward_ns) > 1.8);
  CHECK(double(backward_ns) / double(forward_ns) < 2.01);
  // Mostly short kernels by count; the long ones take most of the time; a wide spread.
  CHECK(count[0] > 400 * 0.65);
  CHECK(count[2] >= 4);
  CHECK(count[2] < 400 * 0.12);
  CHECK(double(time[2]) / double(sum) > 0.4);
  const auto [lo, hi] = std::minmax_element(it.begin(), it.end(), [](auto& a, auto& b) { return a.ns < b.ns; });
  CHECK(double(hi->ns) / double(lo->ns) > 20);
  // The same options give the same durations; another seed others.
  CHECK(async_iteration(p).front().ns == it.front().ns);
  AsyncPattern q = p;
  q.seed = 2;
  auto other = async_iteration(q);
  bool differs = false;
  for (size_t i = 0; i < it.size(); ++i) differs = differs || other[i].ns != it[i].ns;
  CHECK(differs);
  // One stream: everything on stream 0.
  p.streams = 1;
  for (const PatternKernel& k : async_iteration(p)) CHECK(k.stream == 0);
}

TEST_CASE("--pattern async: the loop synchronizes every --sync-every iterations and splits the group's time") {
  FakeClock clock;
  FakeStreams dev(clock);
  AsyncPattern p;
  p.kernels = 30;
  p.step_ms = 10;
  p.sync_every = 4;
  auto it = async_iteration(p);
  LoopStats stats;
  std::vector<size_t> seen;
  run_async_loop(clock, LoopPlan{10, 0, 0}, p, it, dev, [&](size_t i, double) { seen.push_back(i); }, stats);
  // Groups of 4, 4 and the last 2.
  CHECK(dev.syncs == std::vector<size_t>{120, 240, 300});
  REQUIRE(stats.iter_ms.size() == 10);
  for (double ms : stats.iter_ms) CHECK(ms == doctest::Approx(10));
  CHECK(stats.loop_ns == 100 * kMs);
  CHECK(seen == std::vector<size_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  // --duration: whole groups until the time has passed.
  FakeClock c2;
  FakeStreams d2(c2);
  LoopStats s2;
  run_async_loop(c2, LoopPlan{0, 50 * kMs, 0}, p, it, d2, nullptr, s2);
  CHECK(s2.iter_ms.size() == 8);  // 40 ms after one group (go on), 80 ms after two (stop)
  CHECK(d2.syncs.size() == 2);
}
}  // TEST_SUITE
