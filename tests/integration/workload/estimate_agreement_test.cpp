// The analytic estimate (estimator/analytic.h) against what actually happens: coloc-train on
// simgpu, whose peak_bytes is what its emulated PyTorch caching allocator held from the driver
// (context excluded). The estimate's tensor items and its allocator item, without the library
// workspaces simgpu does not have, must not be below that by more than 2% and not above it by more
// than kOver. The allocator item is computed from the allocator's rules; here it meets the
// allocator's behaviour.
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../../../estimator/analytic.h"
#include "../../../tools/workload/caching_allocator.h"
#include "../../../tools/workload/trainer.h"
#include "../../support/proc.h"
#include "../../unit/workload/fakes.h"

using namespace coloc::test;
namespace est = coloc::est;
namespace wl = coloc::workload;

namespace {

constexpr double kUnder = 0.02;  // the estimate may be at most 2% below the emulated peak
// ... and at most this much above it. The allocator model assumes a cached block serves only
// requests of its own size and adds a segment of the largest tensor for later iterations, both
// conservative. Seen (2026-12, this file's runs): resnet50 b8 +12.1%, bert-base b2 s128 +4.1%,
// gpt2-small b2 s256 +8.5%, mobilenet-v2 b16 bf16 +16.5%; the sweep below ranges from -2.7%
// (resnet50 b1 bf16 sgd) to +34.4% (mobilenet-v2 b4 bf16: many tensor sizes, each counted apart).
constexpr double kOver = 0.20;
constexpr double kSweepUnder = 0.03, kSweepOver = 0.35;

// What coloc-train allocates: the estimate without library workspaces, context or margin.
uint64_t driver_bytes(const est::Model& model, est::DType dtype, est::Optimizer optimizer) {
  est::EstimateOptions o;
  o.dtype = dtype;
  o.optimizer = optimizer;
  o.libraries = false;
  const est::Estimate e = est::estimate_training(model, o);
  uint64_t sum = 0;
  for (const char* key : {"weights", "gradients", "master_weights", "optimizer_state", "activations", "allocator"})
    sum += e.item(key)->bytes;
  return sum;
}

double relative(uint64_t estimate, uint64_t actual) { return (double(estimate) - double(actual)) / double(actual); }

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("the estimate agrees with coloc-train's peak on simgpu") {
  struct Run {
    const char* model;
    uint64_t batch;
    uint64_t seq;  // 0 = not given
    const char* dtype;
    const char* optimizer;
  };
  const Run runs[] = {{"resnet50", 8, 0, "fp32", "sgd-momentum"},
                      {"bert-base", 2, 128, "fp32", "adam"},
                      {"gpt2-small", 2, 256, "fp32", "adam"},
                      {"mobilenet-v2", 16, 0, "bf16", "sgd-momentum"}};
  struct Running {
    std::unique_ptr<TempDir> dir;
    std::unique_ptr<Proc> proc;
  };
  std::vector<Running> procs;
  for (const Run& r : runs) {
    auto dir = std::make_unique<TempDir>("coloc-estimate");
    std::vector<std::string> args{build_path("bin/coloc-train"), "--model", r.model, "--batch", std::to_string(r.batch),
                                  "--iters", "3", "--dtype", r.dtype, "--optimizer", r.optimizer, "--tflops", "1e6"};
    if (r.seq) args.insert(args.end(), {"--seq", std::to_string(r.seq)});
    Env env;
    env.simgpu(*dir, "80GiB");
    auto proc = std::make_unique<Proc>(args, env);
    procs.push_back({std::move(dir), std::move(proc)});
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    const Run& r = runs[i];
    const std::string name = r.model;
    CAPTURE(name);
    ProcResult res = procs[i].proc->wait(120s);
    INFO(describe(res));
    REQUIRE(res.exit_code == 0);
    const nlohmann::json j = res.last_json();
    const uint64_t peak = j["peak_bytes"].get<uint64_t>();
    const est::DType dtype = *est::parse_dtype(r.dtype);
    const est::Model model = est::make_preset(r.model, est::RunShape{r.batch, r.seq, dtype});
    const uint64_t estimate = driver_bytes(model, dtype, *est::parse_optimizer(r.optimizer));
    const double err = relative(estimate, peak);
    MESSAGE(std::string(r.model) << " batch " << r.batch << ": estimate " << estimate << " B, coloc-train peak " << peak << " B, "
                    << err * 100 << "%");
    CHECK(err >= -kUnder);
    CHECK(err <= kOver);
  }
}

TEST_CASE("the allocator model against the emulated allocator over presets, batches, dtypes and optimizers") {
  // In process (the same allocator coloc-train runs, on a fake device): three iterations, as the
  // reserved peak can grow in the second.
  double lo = 1, hi = -1;
  for (const char* name : {"resnet50", "mobilenet-v2", "bert-base", "gpt2-small", "gpt2-medium"})
    for (uint64_t batch : {1, 4, 16, 64})
      for (est::DType dtype : {est::DType::fp32, est::DType::bf16})
        for (est::Optimizer opt : {est::Optimizer::sgd, est::Optimizer::adam}) {
          const bool cnn = name[0] == 'r' || name[0] == 'm';
          const uint64_t seq = cnn ? 0 : 256;
          if (!cnn && batch > 16) continue;
          const est::Model model = est::make_preset(name, est::RunShape{batch, seq, dtype});
          wl::test::FakeDevice dev;
          wl::test::FakeCompute gpu;
          wl::CachingAllocator alloc(dev);
          wl::Trainer trainer(model, wl::TrainOptions{dtype, opt, 400}, alloc, gpu);
          trainer.setup();
          for (int i = 0; i < 3; ++i) trainer.step();
          const uint64_t peak = alloc.stats().peak_reserved_bytes;
          const double err = relative(driver_bytes(model, dtype, opt), peak);
          lo = std::min(lo, err);
          hi = std::max(hi, err);
          const std::string what = std::string(name) + " batch " + std::to_string(batch) + " " +
                                   est::dtype_name(dtype) + " " + est::optimizer_name(opt);
          CAPTURE(what);
          CHECK(err >= -kSweepUnder);
          CHECK(err <= kSweepOver);
        }
  MESSAGE("estimate vs emulated reserved peak: " << lo * 100 << "% .. " << hi * 100 << "%");
}
}
