// tools/workload/trainer.h — one training job's use of a GPU, iteration by iteration:
//
//   setup()  allocates, once, every parameter tensor's weights, then the fp32 master copies
//            (16-bit dtypes), the gradients and the optimizer state, through the caching
//            allocator, one tensor at a time as PyTorch does.
//   step()   forward: for each layer, allocate the tensors autograd keeps, launch one kernel;
//            backward, last layer first: allocate the gradient of the layer's input and one
//            temporary gradient (the size of its largest saved tensor), launch one kernel of twice
//            the forward FLOPs, free the temporary, the saved tensors and the gradient of its
//            output; then wait for the stream, as reading the loss does. The optimizer step
//            updates in place and allocates nothing; its time is not modelled.
// Kernel durations: FLOPs / (tflops × 10^12) seconds.
#pragma once

#include <cstdint>
#include <vector>

#include "caching_allocator.h"
#include "../../estimator/model.h"

namespace coloc::workload {

// The model description is the estimator's (estimator/model.h): coloc-train and `coloc estimate`
// read the same one.
using namespace coloc::est;

/// The compute side of the device: kernels on one stream. coloc-train launches coloc_spin; unit
/// tests record the durations.
class Compute {
 public:
  virtual ~Compute() = default;
  /// Enqueues a kernel that keeps the device busy for `ns` nanoseconds. Throws CudaError.
  virtual void spin(uint64_t ns) = 0;
  /// Waits until every enqueued kernel has finished. Throws CudaError.
  virtual void synchronize() = 0;
};

struct TrainOptions {
  DType dtype = DType::fp32;
  Optimizer optimizer = Optimizer::adam;
  double tflops = 400;   ///< device rate in 10^12 FLOP/s (> 0) that turns FLOPs into kernel time
};

/// Nanoseconds a kernel of `flops` (>= 0) takes at `tflops` (> 0), rounded; saturates at 2^63-1.
uint64_t kernel_ns(double flops, double tflops);

class Trainer {
 public:
  Trainer(const Model& model, const TrainOptions& options, CachingAllocator& allocator, Compute& compute);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Allocates weights, master copies, gradients and optimizer state. Throws CudaError.
  void setup();
  /// Runs one iteration and waits for it to finish: launch_step(), then the stream's synchronize.
  /// Throws CudaError; after an error the trainer must not be stepped again.
  void step();
  /// One iteration's allocations, launches and frees, without the final synchronize.
  void launch_step();
  /// Bytes requested by setup() (before the allocator's rounding).
  uint64_t static_bytes() const { return static_bytes_; }
  /// Kernels launched so far.
  uint64_t kernels() const { return kernels_; }

 private:
  void launch(double flops);
  CUdeviceptr alloc(uint64_t bytes);

  const Model& model_;
  TrainOptions options_;
  CachingAllocator& allocator_;
  Compute& compute_;
  uint64_t static_bytes_ = 0;
  uint64_t kernels_ = 0;
  std::vector<CUdeviceptr> persistent_;   // weights, masters, gradients, optimizer state
};

}  // namespace coloc::workload
