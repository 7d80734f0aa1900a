// tools/workload/pattern.h — the asynchronous launch pattern of real training (--pattern async).
//
// A PyTorch training step queues its whole forward and backward pass — hundreds to thousands of
// kernels of a few µs to several ms — on one or two streams and waits only where the host reads a
// result (loss.item()), sometimes only every N iterations. This pattern does the same with
// coloc_spin kernels:
//
//   forward   F = ceil(K / 3) kernels, their durations drawn from the mix below (seeded, so every
//             iteration and every run with the same options launches the same durations);
//   backward  the forward kernels in reverse, each twice (the gradient of its input, then of its
//             weights: backward ≈ 2 × forward, Kaplan et al. 2020), K − F kernels in all; with two
//             streams the weight-gradient kernels go to the second stream (as frameworks overlap
//             them, or the gradient all-reduce, on a side stream), the rest to the first; no event
//             orders the two streams (the kernels only take time);
//   synchronize every stream after every --sync-every iterations (and after the last).
//
// The kernel mix is an ASSUMPTION (no kernel-level data in ../shared/data): by count 80% short
// kernels of 10–50 µs (elementwise, activations, normalization, optimizer updates), 15% medium of
// 100–400 µs (reductions, softmax, small GEMMs), 5% long GEMM-like ones of 1–4 ms, each uniform in
// its range, then all scaled by one factor so that an iteration's kernels sum to --step-ms. Before
// scaling the expected shares of device time are about 13% short, 20% medium, 67% long: the shape
// profiles of ResNet and BERT training commonly show (most kernels are short elementwise ones;
// GEMMs and convolutions take most of the time), not a measured distribution.
//
// Pure (no driver calls): unit tests run it with a fake device and a fake clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "duty.h"

namespace coloc::workload {

/// Limits of the pattern's options, checked by check_async().
inline constexpr int64_t kMinPatternKernels = 3, kMaxPatternKernels = 100'000;
inline constexpr int64_t kMaxSyncEvery = 10'000;
inline constexpr double kMaxStepMs = 60'000;

/// The mix before scaling (see the top of this file): share of kernels by count, duration range.
struct KernelClassSpec {
  const char* name;
  double count_share;   ///< fraction of kernels, the three sum to 1
  uint64_t min_ns, max_ns;
};
inline constexpr KernelClassSpec kKernelMix[3] = {
    {"short", 0.80, 10'000, 50'000},
    {"medium", 0.15, 100'000, 400'000},
    {"long", 0.05, 1'000'000, 4'000'000},
};

struct AsyncPattern {
  int64_t kernels = 400;   ///< K: kernels per iteration, forward and backward, [3, 100000]
  int64_t streams = 1;     ///< 1 or 2
  int64_t sync_every = 1;  ///< synchronize after this many iterations, [1, 10000]
  double step_ms = 100;    ///< device time of one iteration's kernels, ms, (0, 60000]
  uint64_t seed = 1;       ///< draws the durations
};

/// Empty when valid, else one line naming the option (--kernels, --streams, --sync-every, --step-ms).
std::string check_async(const AsyncPattern& p);

/// One kernel of an iteration, in launch order.
struct PatternKernel {
  uint64_t ns = 0;      ///< duration
  unsigned stream = 0;  ///< 0 or 1
  unsigned cls = 0;     ///< index in kKernelMix
  bool backward = false;
};

/// One iteration's K kernels in launch order; their durations sum to round(step_ms × 10^6) ns
/// exactly (each at least 1 ns). `p` must be valid.
std::vector<PatternKernel> async_iteration(const AsyncPattern& p);

/// The device side of the pattern: kernels on numbered streams.
class StreamCompute {
 public:
  virtual ~StreamCompute() = default;
  /// Enqueues a kernel of `ns` on stream `stream` (0 or 1). Throws CudaError.
  virtual void spin_on(unsigned stream, uint64_t ns) = 0;
  /// Waits until every stream's kernels have finished. Throws CudaError.
  virtual void synchronize_all() = 0;
};

/// Runs the pattern: plan.iters iterations, or groups of sync_every iterations until
/// plan.duration_ns has passed since the first began (plan.host_ns must be 0). Each iteration
/// launches `iteration` through `compute`; after every sync_every-th (and the last) it
/// synchronizes, and each iteration of that group is recorded as the group's wall time divided by
/// its size (the host cannot see one iteration's end without a synchronize). `after(iteration
/// number from 1, its ms)` runs for each recorded iteration when given.
void run_async_loop(Clock& clock, const LoopPlan& plan, const AsyncPattern& p,
                    const std::vector<PatternKernel>& iteration, StreamCompute& compute,
                    const std::function<void(size_t, double)>& after, LoopStats& stats);

}  // namespace coloc::workload
