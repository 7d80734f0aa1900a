// tools/workload/duty.h — duty-cycle training jobs: each iteration keeps the device busy for a
// share of a period and spends the rest on the host, as real training jobs do (data loading, Python,
// the optimizer's host side).
//
// Two ways an iteration can spend its host time (--host-model); alone, both last iter_ms with the
// device busy gpu_util% of it:
//
//   serial (default)  launch the iteration's kernels (device time gpu_util% × iter_ms), synchronize
//                     (as reading the loss does), then wait on the host for a FIXED
//                     (100 − gpu_util)% × iter_ms from the end of that synchronize. Under
//                     contention the device part stretches and the host part does not shrink to
//                     make up for it: the host part stands for fixed work (loading a batch, running
//                     Python), not a deadline, so a job slowed on the device is slowed by exactly the
//                     device's delay.
//   overlap           launch the kernels, do iter_ms of host work from the iteration's start while
//                     they run (the CPU launching the next kernels and a DataLoader's workers
//                     preparing the next batch run beside the GPU in a real PyTorch loop), then
//                     synchronize. A slower device part costs nothing until it outlasts the host's
//                     iter_ms: the model of a job whose GPU idles because its CPU side cannot feed it.
//
// Lucid's pairs (make bench-contention, docs/performance.md) lie between the two: the serial model
// slows both jobs of a pair alike and more than the real GPU did.
//
// The pure parts (validation, kernel split, FLOP scaling, the loop over an injected clock) have no
// driver calls, so the unit tests run them with a fake clock and a fake device.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../estimator/model.h"

namespace coloc::workload {

// The model description is the estimator's (estimator/model.h): coloc-train and `coloc estimate`
// read the same one.
using namespace coloc::est;

/// Limits of the duty-cycle options, checked by check_duty().
inline constexpr double kMinGpuUtil = 1, kMaxGpuUtil = 100;   ///< percent
inline constexpr double kMaxIterMs = 60'000;                  ///< one minute per iteration
inline constexpr double kMinKernelUs = 10, kMaxKernelUs = 1'000'000;
inline constexpr double kMaxDurationS = 86'400;               ///< a day

/// A duty cycle: gpu_util percent of iter_ms on the device, the rest on the host.
struct Duty {
  double gpu_util = 100;  ///< percent of the iteration the device is busy, [1, 100]
  double iter_ms = 0;     ///< the iteration's period when run alone, ms, (0, kMaxIterMs]

  uint64_t iter_ns() const;
  /// Device time of one iteration: iter_ns × gpu_util / 100, rounded; at least 1 ns.
  uint64_t device_ns() const;
  /// Host time of one iteration: iter_ns − device_ns.
  uint64_t host_ns() const;
};

/// Empty when gpu_util and iter_ms are valid (finite, gpu_util in [1, 100], iter_ms in
/// (0, 60000]), else one line saying what is wrong, naming the option.
std::string check_duty(double gpu_util, double iter_ms);

/// Splits `total_ns` (> 0) of device time into kernels of about `kernel_ns` (> 0) each: n =
/// max(1, round(total / kernel)) kernels of equal length (the first total % n one ns longer), so
/// they sum to exactly `total_ns`.
std::vector<uint64_t> split_kernels(uint64_t total_ns, uint64_t kernel_ns);

/// The device rate (10^12 FLOP/s) at which one training step of `model` (forward + backward =
/// 3 × forward FLOPs, as Trainer launches them) takes `device_ns` of kernel time: the model's
/// kernels keep their proportions and sum to device_ns (each is rounded to a whole ns). Throws
/// InputError when the model has no FLOPs to scale.
double tflops_for_step(const Model& model, uint64_t device_ns);

/// Time for the training loop; a fake in unit tests.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Nanoseconds on a monotonic clock.
  virtual uint64_t now_ns() = 0;
  /// Returns at `t_ns` (now_ns()'s clock) or later.
  virtual void sleep_until_ns(uint64_t t_ns) = 0;
};

/// CLOCK_MONOTONIC, and clock_nanosleep(TIMER_ABSTIME) to wait.
class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() override;
  void sleep_until_ns(uint64_t t_ns) override;
};

/// Where an iteration's host time goes (see the top of this file).
enum class HostModel { serial, overlap };
/// "serial", "overlap".
const char* host_model_name(HostModel m);
/// Parses a host model's name; nullopt when unknown.
std::optional<HostModel> parse_host_model(std::string_view s);

/// How long the loop runs and how long each iteration spends on the host.
struct LoopPlan {
  int64_t iters = 0;          ///< > 0: this many iterations (duration_ns must be 0)
  uint64_t duration_ns = 0;   ///< > 0: start iterations while less than this has passed since the first began
  /// serial: the host wait after the synchronize, counted from its end; overlap: the host time
  /// from the iteration's start, before the synchronize.
  uint64_t host_ns = 0;
  HostModel host = HostModel::serial;
};

/// What the loop measured. Filled as it goes, so it holds the completed iterations when the device
/// part throws.
struct LoopStats {
  std::vector<double> iter_ms;  ///< each completed iteration's wall time (device part + host wait)
  uint64_t loop_ns = 0;         ///< first iteration's start to the last completed one's end
  /// Completed iterations per second of loop_ns; 0 when none completed.
  double iters_per_s() const;
};

/// Runs the loop. Each iteration: serial: `launch()`, `synchronize()`, then sleeps until host_ns
/// after the synchronize returned; overlap: `launch()`, sleeps until host_ns after the iteration
/// began, then `synchronize()`. Then `after(iteration number from 1, its ms)` when given. launch
/// and synchronize may throw, which ends the loop and propagates.
void run_loop(Clock& clock, const LoopPlan& plan, const std::function<void()>& launch,
              const std::function<void()>& synchronize, const std::function<void(size_t, double)>& after,
              LoopStats& stats);

}  // namespace coloc::workload
