// The training loop against a fake device and a fake stream: what it allocates once, what one
// iteration allocates and frees, and the kernel durations it asks for.
#include <doctest/doctest.h>

#include <map>
#include <stdexcept>
#include <vector>

#include "../../../tools/workload/errors.h"
#include "../../../estimator/model_spec.h"
#include "../../../tools/workload/trainer.h"
#include "fakes.h"

using namespace coloc::workload;
using coloc::workload::test::FakeCompute;
using coloc::workload::test::FakeDevice;

namespace {

Model two_layers() {
  // Layer 0: 1000 + 24 params, saves 1 MiB, outputs 256 KiB, 4e9 FLOPs.
  // Layer 1: 10 params, saves 3 MiB + 512 B, outputs 4 B (the loss), 1e9 FLOPs.
  return build_from_spec(parse_model_spec(R"({"name": "two", "layers": [
      {"params": [1000, 24], "activation_bytes": "1MiB", "output_bytes": "256KiB", "flops": 4e9},
      {"params": 10, "activation_bytes": ["3MiB", 512], "output_bytes": 4, "flops": 1e9}]})",
                                          "two.json"),
                         RunShape{1, 0, DType::fp32});
}

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("kernel time is FLOPs at the device rate") {
  CHECK(kernel_ns(400e12, 400) == 1000000000ULL);  // 400 TFLOP at 400 TFLOP/s: one second
  CHECK(kernel_ns(4e9, 400) == 10000);
  CHECK(kernel_ns(0, 400) == 0);
  CHECK(kernel_ns(1e30, 1e-9) == uint64_t(INT64_MAX));  // saturates instead of overflowing
}

TEST_CASE("setup allocates weights, masters, gradients and optimizer state once") {
  Model m = two_layers();
  struct Case {
    DType dtype;
    Optimizer opt;
  };
  for (Case c : {Case{DType::fp32, Optimizer::sgd}, Case{DType::fp32, Optimizer::adam}, Case{DType::bf16, Optimizer::adam},
                 Case{DType::fp16, Optimizer::sgd_momentum}}) {
    CAPTURE(dtype_name(c.dtype));
    CAPTURE(optimizer_name(c.opt));
    FakeDevice dev;
    FakeCompute gpu;
    CachingAllocator alloc(dev);
    Trainer t(m, TrainOptions{c.dtype, c.opt, 400}, alloc, gpu);
    t.setup();
    CHECK(t.static_bytes() == m.param_count() * static_bytes_per_param(c.dtype, c.opt));
    // One block per parameter tensor and kind (weights, master copy, gradients, optimizer states),
    // each rounded to 512 B by the allocator.
    std::vector<uint64_t> kind_bytes{dtype_bytes(c.dtype)};
    if (c.dtype != DType::fp32) kind_bytes.push_back(4);
    kind_bytes.push_back(dtype_bytes(c.dtype));
    for (int i = 0; i < (c.opt == Optimizer::adam ? 2 : c.opt == Optimizer::sgd_momentum ? 1 : 0); ++i) kind_bytes.push_back(4);
    uint64_t expect = 0;
    for (uint64_t k : kind_bytes)
      for (uint64_t n : {1000, 24, 10}) expect += round_block_size(n * k);
    CHECK(alloc.stats().allocated_bytes == expect);
    CHECK(gpu.kernels.empty());
  }
}

TEST_CASE("an iteration: forward allocates, backward frees, kernels of 1× and 2× the FLOPs") {
  Model m = two_layers();
  FakeDevice dev;
  FakeCompute gpu;
  CachingAllocator alloc(dev);
  Trainer t(m, TrainOptions{DType::fp32, Optimizer::sgd, 400}, alloc, gpu);
  t.setup();
  const uint64_t after_setup = alloc.stats().allocated_bytes;
  t.step();
  // Forward layer 0, forward layer 1, backward layer 1, backward layer 0.
  CHECK(gpu.kernels == std::vector<uint64_t>{10000, 2500, 5000, 20000});
  CHECK(gpu.syncs == 1);
  CHECK(t.kernels() == 4);
  CHECK(alloc.stats().allocated_bytes == after_setup);  // every activation freed again
  // At the peak: static + every saved tensor (1 MiB + 3 MiB + 512 B) + the loss gradient (512 B
  // rounded) + the gradient of layer 1's input (256 KiB) + layer 1's temporary (3 MiB).
  CHECK(alloc.stats().peak_allocated_bytes == after_setup + (1 << 20) + (3 << 20) + 512 + 512 + (256 << 10) + (3 << 20));
  // The second iteration reuses the cache: the driver sees no new segment.
  const uint64_t segments = alloc.stats().device_allocs;
  t.step();
  t.step();
  CHECK(alloc.stats().device_allocs == segments);
  CHECK(gpu.syncs == 3);
}

TEST_CASE("every preset trains an iteration on a fake device, and its peak covers the model") {
  for (const Preset& p : presets()) {
    CAPTURE(p.name);
    Model m = make_preset(p.name, RunShape{1, p.config ? 128ULL : 0ULL, DType::bf16});
    FakeDevice dev;
    FakeCompute gpu;
    CachingAllocator alloc(dev);
    Trainer t(m, TrainOptions{DType::bf16, Optimizer::adam, 400}, alloc, gpu);
    t.setup();
    t.step();
    CHECK(gpu.kernels.size() == 2 * m.layers.size());
    CHECK(alloc.stats().peak_reserved_bytes >= t.static_bytes() + m.saved_total());
    CHECK(dev.used == alloc.stats().reserved_bytes);
  }
}

TEST_CASE("an OOM in the middle of an iteration comes out as CudaError") {
  Model m = two_layers();
  FakeDevice dev;
  dev.capacity = 6 << 20;  // three small segments: room for the static state, not for activations
  FakeCompute gpu;
  CachingAllocator alloc(dev);
  Trainer t(m, TrainOptions{DType::fp32, Optimizer::adam, 400}, alloc, gpu);
  t.setup();
  try {
    t.step();
    FAIL("expected an out-of-memory error");
  } catch (const CudaError& e) {
    CHECK(e.out_of_memory());
  }
}
}
