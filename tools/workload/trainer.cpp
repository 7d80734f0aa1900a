// tools/workload/trainer.cpp — see trainer.h.
#include "trainer.h"

#include <cmath>

namespace coloc::workload {

uint64_t kernel_ns(double flops, double tflops) {
  // flops / (tflops · 10^12 FLOP/s) seconds = flops / (tflops · 10^3) ns.
  const double ns = flops / (tflops * 1e3);
  if (!(ns < 9.2e18)) return INT64_MAX;  // saturate (also NaN): no kernel runs for 292 years
  return (uint64_t)std::llround(ns);
}

Trainer::Trainer(const Model& model, const TrainOptions& options, CachingAllocator& allocator, Compute& compute)
    : model_(model), options_(options), allocator_(allocator), compute_(compute) {}

CUdeviceptr Trainer::alloc(uint64_t bytes) { return allocator_.allocate(bytes); }

void Trainer::launch(double flops) {
  compute_.spin(kernel_ns(flops, options_.tflops));
  ++kernels_;
}

void Trainer::setup() {
  const uint64_t e = dtype_bytes(options_.dtype);
  const bool mixed = options_.dtype != DType::fp32;
  const unsigned states = options_.optimizer == Optimizer::sgd ? 0 : options_.optimizer == Optimizer::sgd_momentum ? 1 : 2;
  // The order PyTorch allocates them in: the model's weights when it moves to the device, master
  // copies when mixed precision wraps the optimizer, gradients in the first backward, optimizer
  // state in the first step.
  auto each_param = [&](uint64_t bytes_per_elem) {
    for (const Layer& l : model_.layers)
      for (uint64_t n : l.params) {
        persistent_.push_back(alloc(n * bytes_per_elem));
        static_bytes_ += n * bytes_per_elem;
      }
  };
  each_param(e);                                  // weights
  if (mixed) each_param(4);                       // fp32 master weights
  each_param(e);                                  // gradients
  for (unsigned i = 0; i < states; ++i) each_param(4);  // momentum / Adam's two moments, fp32
}

void Trainer::step() {
  launch_step();
  compute_.synchronize();
}

void Trainer::launch_step() {
  const auto& layers = model_.layers;
  std::vector<std::vector<CUdeviceptr>> saved(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    for (uint64_t bytes : layers[i].saved_bytes) saved[i].push_back(alloc(bytes));
    launch(layers[i].forward_flops);
  }
  CUdeviceptr grad_out = alloc(layers.back().output_bytes);  // gradient of the loss
  for (size_t i = layers.size(); i-- > 0;) {
    CUdeviceptr grad_in = i > 0 ? alloc(layers[i - 1].output_bytes) : 0;
    CUdeviceptr scratch = alloc(layers[i].largest_saved());
    launch(2.0 * layers[i].forward_flops);
    // Freed right after the launch: the stream orders reuse after this kernel, as PyTorch relies on.
    allocator_.free(scratch);
    for (CUdeviceptr p : saved[i]) allocator_.free(p);
    allocator_.free(grad_out);
    grad_out = grad_in;
  }
}

}  // namespace coloc::workload
