// tools/workload/pattern.cpp — see pattern.h.
#include "pattern.h"

#include <cmath>

namespace coloc::workload {

std::string check_async(const AsyncPattern& p) {
  if (p.kernels < kMinPatternKernels || p.kernels > kMaxPatternKernels)
    return "--kernels must be from 3 to 100000 (got " + std::to_string(p.kernels) + ")";
  if (p.streams != 1 && p.streams != 2) return "--streams must be 1 or 2 (got " + std::to_string(p.streams) + ")";
  if (p.sync_every < 1 || p.sync_every > kMaxSyncEvery)
    return "--sync-every must be from 1 to 10000 iterations (got " + std::to_string(p.sync_every) + ")";
  if (!std::isfinite(p.step_ms) || !(p.step_ms > 0) || p.step_ms > kMaxStepMs)
    return "--step-ms must be more than 0 and at most 60000 ms";
  // Every kernel needs at least 1 ns.
  if (std::llround(p.step_ms * 1e6) < p.kernels) return "--step-ms is too short for --kernels kernels of at least 1 ns";
  return "";
}

namespace {

// splitmix64 (Steele, Lea, Flood 2014): small, seeded, the same on every platform.
uint64_t next(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform(uint64_t& s) { return double(next(s) >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<PatternKernel> async_iteration(const AsyncPattern& p) {
  const size_t k = size_t(p.kernels), forward = (k + 2) / 3;
  uint64_t s = p.seed;
  std::vector<PatternKernel> fwd(forward);
  for (PatternKernel& x : fwd) {
    const double u = uniform(s);
    x.cls = u < kKernelMix[0].count_share ? 0 : u < kKernelMix[0].count_share + kKernelMix[1].count_share ? 1 : 2;
    const KernelClassSpec& c = kKernelMix[x.cls];
    x.ns = c.min_ns + uint64_t(uniform(s) * double(c.max_ns - c.min_ns));
  }
  std::vector<PatternKernel> out(fwd);
  // Backward: last layer first; input gradient, then weight gradient (the second stream).
  for (size_t i = forward; out.size() < k;) {
    if (i == 0) i = forward;  // only when K is not a multiple of 3: fewer pairs than layers
    const PatternKernel& f = fwd[--i];
    out.push_back({f.ns, 0, f.cls, true});
    if (out.size() < k) out.push_back({f.ns, p.streams == 2 ? 1u : 0u, f.cls, true});
  }
  // Scale to step_ms exactly: each rounded down (at least 1 ns), the remainder spread one ns each.
  const uint64_t target = uint64_t(std::llround(p.step_ms * 1e6));
  double raw = 0;
  for (const PatternKernel& x : out) raw += double(x.ns);
  uint64_t sum = 0;
  for (PatternKernel& x : out) {
    x.ns = std::max<uint64_t>(1, uint64_t(double(x.ns) * double(target) / raw));
    sum += x.ns;
  }
  for (size_t i = 0; sum < target; i = (i + 1) % out.size()) ++out[i].ns, ++sum;
  for (size_t i = 0; sum > target; i = (i + 1) % out.size())
    if (out[i].ns > 1) --out[i].ns, --sum;
  return out;
}

void run_async_loop(Clock& clock, const LoopPlan& plan, const AsyncPattern& p,
                    const std::vector<PatternKernel>& iteration, StreamCompute& compute,
                    const std::function<void(size_t, double)>& after, LoopStats& stats) {
  const uint64_t start = clock.now_ns();
  size_t done = 0;
  for (;;) {
    const uint64_t t0 = done == 0 ? start : clock.now_ns();
    if (plan.duration_ns > 0 ? t0 - start >= plan.duration_ns : int64_t(done) >= plan.iters) break;
    int64_t group = p.sync_every;
    if (plan.duration_ns == 0) group = std::min<int64_t>(group, plan.iters - int64_t(done));
    for (int64_t i = 0; i < group; ++i)
      for (const PatternKernel& k : iteration) compute.spin_on(k.stream, k.ns);
    compute.synchronize_all();
    const uint64_t t1 = clock.now_ns();
    const double ms = double(t1 - t0) / 1e6 / double(group);
    stats.loop_ns = t1 - start;
    for (int64_t i = 0; i < group; ++i) {
      stats.iter_ms.push_back(ms);
      ++done;
      if (after) after(done, ms);
    }
  }
}

}  // namespace coloc::workload
