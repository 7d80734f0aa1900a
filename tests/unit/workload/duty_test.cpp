// Duty-cycle jobs without a device: the arithmetic of a duty cycle, the kernel split, the FLOP
// scaling that makes a model's step fill its device time, and the loop over a fake clock (host wait
// fixed after the device part, --iters and --duration, an error mid-run).
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../../tools/workload/duty.h"
#include "../../../tools/workload/errors.h"
#include "../../../estimator/model_spec.h"
#include "../../../tools/workload/trainer.h"
#include "fakes.h"

using namespace coloc::workload;
using coloc::workload::test::FakeCompute;
using coloc::workload::test::FakeDevice;

namespace {

constexpr uint64_t kMs = 1'000'000;

// A clock that moves only when told to: the device part advances it by what the device took; a
// sleep jumps to its deadline (and records it).
struct FakeClock : Clock {
  uint64_t t = 5 * kMs;  // not zero, so a "since the start" bug shows
  std::vector<uint64_t> sleeps;
  uint64_t now_ns() override { return t; }
  void sleep_until_ns(uint64_t until) override {
    sleeps.push_back(until);
    t = std::max(t, until);
  }
};

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("a duty cycle splits its period into device and host time") {
  const Duty d{40, 20};
  CHECK(d.iter_ns() == 20 * kMs);
  CHECK(d.device_ns() == 8 * kMs);
  CHECK(d.host_ns() == 12 * kMs);
  CHECK(Duty{100, 20}.host_ns() == 0);
  CHECK(Duty{58.667, 18.142}.device_ns() == uint64_t(std::llround(18.142e6 * 0.58667)));
  CHECK(Duty{1, 0.000001}.device_ns() == 1);  // never a zero-length device part
}

TEST_CASE("duty-cycle options are range-checked with a message naming the option") {
  CHECK(check_duty(40, 20).empty());
  CHECK(check_duty(1, 0.5).empty());
  CHECK(check_duty(100, 60000).empty());
  CHECK(check_duty(0, 20).find("--gpu-util must be a percentage from 1 to 100") != std::string::npos);
  CHECK(check_duty(0.5, 20).find("--gpu-util") != std::string::npos);
  CHECK(check_duty(100.5, 20).find("--gpu-util") != std::string::npos);
  CHECK(check_duty(NAN, 20).find("--gpu-util") != std::string::npos);
  CHECK(check_duty(50, 0).find("--iter-ms must be a positive number") != std::string::npos);
  CHECK(check_duty(50, -3).find("--iter-ms") != std::string::npos);
  CHECK(check_duty(50, INFINITY).find("--iter-ms") != std::string::npos);
  CHECK(check_duty(50, 60001).find("at most 60000") != std::string::npos);
}

TEST_CASE("device time is split into kernels of about --kernel-us that sum exactly") {
  CHECK(split_kernels(8 * kMs, 500'000) == std::vector<uint64_t>(16, 500'000));
  // 10.3 ms in kernels of about 0.5 ms: 21 kernels, none more than 1 ns apart.
  auto k = split_kernels(10'300'001, 500'000);
  REQUIRE(k.size() == 21);
  CHECK(std::accumulate(k.begin(), k.end(), uint64_t(0)) == 10'300'001);
  CHECK(*std::max_element(k.begin(), k.end()) - *std::min_element(k.begin(), k.end()) <= 1);
  CHECK(split_kernels(100'000, 500'000) == std::vector<uint64_t>{100'000});  // shorter than one kernel
  CHECK(split_kernels(750'000, 500'000).size() == 2);                         // rounds to the nearest count
  CHECK(split_kernels(0, 500'000).empty());
}

TEST_CASE("a model's step scaled to a duty cycle: kernels keep their proportions and fill the device time") {
  const Model m = build_from_spec(parse_model_spec(R"({"name": "two", "layers": [
      {"params": 1000, "activation_bytes": "1MiB", "output_bytes": "256KiB", "flops": 4e9},
      {"params": 10, "activation_bytes": "3MiB", "output_bytes": 4, "flops": 1e9}]})",
                                                   "two.json"),
                                  RunShape{1, 0, DType::fp32});
  const uint64_t device = 8 * kMs;
  FakeDevice dev;
  FakeCompute gpu;
  CachingAllocator alloc(dev);
  Trainer t(m, TrainOptions{DType::fp32, Optimizer::adam, tflops_for_step(m, device)}, alloc, gpu);
  t.setup();
  t.step();
  REQUIRE(gpu.kernels.size() == 4);  // forward 0, 1; backward 1, 0
  const uint64_t sum = std::accumulate(gpu.kernels.begin(), gpu.kernels.end(), uint64_t(0));
  CHECK(sum >= device - 2);
  CHECK(sum <= device + 2);  // each kernel rounded to a whole ns
  // 4e9 : 1e9 forward, twice that backward: 8/30, 2/30, 4/30, 16/30 of the step.
  CHECK(gpu.kernels[0] == doctest::Approx(device * 8.0 / 30).epsilon(1e-6));
  CHECK(gpu.kernels[3] == doctest::Approx(device * 16.0 / 30).epsilon(1e-6));

  const Model none = build_from_spec(parse_model_spec(R"({"name": "idle", "layers": [{"params": 10}]})", "idle.json"),
                                     RunShape{1, 0, DType::fp32});
  CHECK_THROWS_WITH_AS(tflops_for_step(none, device), doctest::Contains("has no FLOPs"), InputError);
}

TEST_CASE("the loop: host wait is fixed after the device part, not shortened when the device was slow") {
  FakeClock clock;
  const uint64_t start = clock.t;
  // The device part takes 8 ms alone; the second iteration is contended and takes 20 ms.
  std::vector<uint64_t> device_ms{8, 20, 8};
  size_t calls = 0;
  std::vector<std::pair<size_t, double>> seen;
  LoopStats stats;
  // launch() takes no time; synchronize() returns when the device part is done.
  run_loop(clock, LoopPlan{3, 0, 12 * kMs}, [] {}, [&] { clock.t += device_ms[calls++] * kMs; },
           [&](size_t i, double ms) { seen.emplace_back(i, ms); }, stats);
  CHECK(calls == 3);
  CHECK(stats.iter_ms == std::vector<double>{20, 32, 20});
  // Each sleep ends 12 ms after its device part ended.
  CHECK(clock.sleeps == std::vector<uint64_t>{start + 20 * kMs, start + 52 * kMs, start + 72 * kMs});
  CHECK(stats.loop_ns == 72 * kMs);
  CHECK(stats.iters_per_s() == doctest::Approx(3 / 0.072));
  CHECK(seen == std::vector<std::pair<size_t, double>>{{1, 20}, {2, 32}, {3, 20}});
}

TEST_CASE("the loop, overlap host model: host work runs beside the kernels; only a device part longer than the period slows it") {
  FakeClock clock;
  const uint64_t start = clock.t;
  // The device part ends `device_ms` after the launch; the host works 20 ms from the iteration's start.
  std::vector<uint64_t> device_ms{8, 16, 26, 8};
  size_t i = 0;
  uint64_t launched_at = 0;
  std::vector<std::string> calls;
  LoopStats stats;
  run_loop(clock, LoopPlan{4, 0, 20 * kMs, HostModel::overlap}, [&] { launched_at = clock.t, calls.push_back("launch"); },
           [&] {
             calls.push_back("sync");
             clock.t = std::max(clock.t, launched_at + device_ms[i++] * kMs);
           },
           nullptr, stats);
  // Twice as long on the device (16 ms) still fits the 20 ms of host work; 26 ms does not.
  CHECK(stats.iter_ms == std::vector<double>{20, 20, 26, 20});
  CHECK(clock.sleeps == std::vector<uint64_t>{start + 20 * kMs, start + 40 * kMs, start + 60 * kMs, start + 86 * kMs});
  CHECK(calls == std::vector<std::string>{"launch", "sync", "launch", "sync", "launch", "sync", "launch", "sync"});
  CHECK(parse_host_model("overlap") == HostModel::overlap);
  CHECK(parse_host_model("serial") == HostModel::serial);
  CHECK(!parse_host_model("parallel"));
  CHECK(std::string(host_model_name(HostModel::overlap)) == "overlap");
}

TEST_CASE("the loop: --duration starts iterations until the time has passed") {
  FakeClock clock;
  size_t calls = 0;
  LoopStats stats;
  // 20 ms iterations over 100 ms: they start at 0, 20, 40, 60 and 80 ms; at 100 ms none starts.
  run_loop(clock, LoopPlan{0, 100 * kMs, 15 * kMs}, [] {}, [&] { clock.t += 5 * kMs, ++calls; }, nullptr, stats);
  CHECK(calls == 5);
  CHECK(stats.iter_ms.size() == 5);
  CHECK(stats.loop_ns == 100 * kMs);
  CHECK(stats.iters_per_s() == doctest::Approx(50));
  // One slower iteration that crosses the end still completes; no new one starts after it.
  FakeClock c2;
  LoopStats s2;
  calls = 0;
  run_loop(c2, LoopPlan{0, 30 * kMs, 0}, [] {}, [&] { c2.t += (++calls == 2 ? 50 : 10) * kMs; }, nullptr, s2);
  CHECK(calls == 2);
  CHECK(s2.loop_ns == 60 * kMs);
  CHECK(c2.sleeps.empty());  // no host wait at 100%
}

TEST_CASE("the loop: an error in the device part ends it, keeping the completed iterations") {
  FakeClock clock;
  LoopStats stats;
  size_t calls = 0;
  auto fail_third = [&] {
    if (++calls == 3) throw CudaError(CUDA_ERROR_OUT_OF_MEMORY, "fake");
    clock.t += kMs;
  };
  CHECK_THROWS_AS(run_loop(clock, LoopPlan{10, 0, kMs}, [] {}, fail_third, nullptr, stats), CudaError);
  CHECK(stats.iter_ms.size() == 2);
  CHECK(stats.loop_ns == 4 * kMs);
  CHECK(LoopStats{}.iters_per_s() == 0);
}
}
