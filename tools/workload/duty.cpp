// tools/workload/duty.cpp — see duty.h.
#include "duty.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "errors.h"

namespace coloc::workload {

uint64_t Duty::iter_ns() const { return uint64_t(std::llround(iter_ms * 1e6)); }

uint64_t Duty::device_ns() const {
  const uint64_t total = iter_ns();
  const uint64_t d = uint64_t(std::llround(double(total) * gpu_util / 100));
  return std::min(total, std::max<uint64_t>(d, 1));
}

uint64_t Duty::host_ns() const { return iter_ns() - device_ns(); }

std::string check_duty(double gpu_util, double iter_ms) {
  if (!std::isfinite(gpu_util) || gpu_util < kMinGpuUtil || gpu_util > kMaxGpuUtil)
    return "--gpu-util must be a percentage from 1 to 100 (got " + std::to_string(gpu_util) + ")";
  if (!std::isfinite(iter_ms) || !(iter_ms > 0))
    return "--iter-ms must be a positive number of milliseconds (got " + std::to_string(iter_ms) + ")";
  if (iter_ms > kMaxIterMs) return "--iter-ms must be at most 60000 (one minute per iteration)";
  if (std::llround(iter_ms * 1e6) < 1) return "--iter-ms is below a nanosecond";
  return "";
}

std::vector<uint64_t> split_kernels(uint64_t total_ns, uint64_t kernel_ns) {
  if (total_ns == 0 || kernel_ns == 0) return {};
  uint64_t n = (total_ns + kernel_ns / 2) / kernel_ns;  // round(total / kernel)
  n = std::max<uint64_t>(n, 1);
  std::vector<uint64_t> out(n, total_ns / n);
  for (uint64_t i = 0; i < total_ns % n; ++i) ++out[i];
  return out;
}

double tflops_for_step(const Model& model, uint64_t device_ns) {
  // Trainer launches forward_flops per layer forward and twice that backward.
  const double step_flops = 3 * model.forward_flops();
  if (!(step_flops > 0))
    throw InputError("model '" + model.name + "' has no FLOPs: --gpu-util cannot scale its kernels (give its layers \"flops\")");
  // kernel_ns(flops, tflops) = flops / (tflops · 10^3): the step's kernels sum to device_ns.
  return step_flops / (double(device_ns) * 1e3);
}

uint64_t MonotonicClock::now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ULL + uint64_t(ts.tv_nsec);
}

void MonotonicClock::sleep_until_ns(uint64_t t_ns) {
  // The workload's own host time (its data loading), not synchronization.
  timespec ts{time_t(t_ns / 1'000'000'000ULL), long(t_ns % 1'000'000'000ULL)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

double LoopStats::iters_per_s() const {
  if (iter_ms.empty() || loop_ns == 0) return 0;
  return double(iter_ms.size()) / (double(loop_ns) / 1e9);
}

const char* host_model_name(HostModel m) { return m == HostModel::overlap ? "overlap" : "serial"; }

std::optional<HostModel> parse_host_model(std::string_view s) {
  if (s == "serial") return HostModel::serial;
  if (s == "overlap") return HostModel::overlap;
  return std::nullopt;
}

void run_loop(Clock& clock, const LoopPlan& plan, const std::function<void()>& launch,
              const std::function<void()>& synchronize, const std::function<void(size_t, double)>& after,
              LoopStats& stats) {
  const uint64_t start = clock.now_ns();
  for (size_t i = 0;; ++i) {
    const uint64_t t0 = i == 0 ? start : clock.now_ns();
    if (plan.duration_ns > 0 ? t0 - start >= plan.duration_ns : int64_t(i) >= plan.iters) break;
    launch();
    if (plan.host == HostModel::overlap) {
      if (plan.host_ns > 0) clock.sleep_until_ns(t0 + plan.host_ns);
      synchronize();
    } else {
      synchronize();
      if (plan.host_ns > 0) clock.sleep_until_ns(clock.now_ns() + plan.host_ns);
    }
    const uint64_t t1 = clock.now_ns();
    stats.iter_ms.push_back(double(t1 - t0) / 1e6);
    stats.loop_ns = t1 - start;
    if (after) after(i + 1, stats.iter_ms.back());
  }
}

}  // namespace coloc::workload
