// The analytic estimate (estimator/analytic.h) against what actually happens: coloc-train on
// simgpu, whose peak_bytes is what its emulated PyTorch caching allocator held from the driver
// (context excluded). The estimate's tensor items and its allocator item, without the library
// workspaces simgpu does not have, must not be below that by more than 2% and not above it by more
// than kOver. The allocator item replays the training step over its own model of the allocator's
// rules (estimator/analytic.cpp, written apart from tools/workload/caching_allocator.cpp); here
// the two meet.
#include <algorithm>
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

// The replay never merges two free blocks of a segment still in use, so it can only need more
// segments than the emulated allocator (which merges), never fewer: it may be at most 2% below the
// emulated peak (kUnder) and at most kOver above. Seen (this file's runs, with the replay): every
// coloc-train run below and most of the sweep agree to the byte; the sweep ranges from 0% to
// +6.8% (resnet50 b1 fp32 sgd: one 20 MiB segment on 294 MiB; then mobilenet-v2 b1 bf16 sgd
// +3.6%, resnet50 b4 fp32 adam +2.7%, everything else under +0.5%). kOver leaves ~1% above the
// worst; a change that loses a segment at batch 1 shows here first.
constexpr double kUnder = 0.02;
constexpr double kOver = 0.08;
// At small sizes one such extra segment is more than kOver (mobilenet-v2 batch 1 fp32 sgd: one
// 20 MiB segment on 106 MiB, +18.9%, since its in-place ReLU6 keeps a copy of its input): the
// bound is kOver or one large segment (PyTorch's kLargeBuffer, 20 MiB), whichever is larger.
constexpr uint64_t kOneSegment = 20ULL << 20;
bool within_over(uint64_t estimate, uint64_t peak) {
  return estimate <= peak || estimate - peak <= std::max<uint64_t>(kOneSegment, uint64_t(kOver * double(peak)));
}

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
                      {"mobilenet-v2", 16, 0, "bf16", "sgd-momentum"},
                      // batch 32, Adam: where the closed-form rule before the replay was 8-40% above.
                      {"resnet50", 32, 0, "fp32", "adam"},
                      {"inception-v3", 32, 0, "fp32", "adam"},
                      {"vgg16", 32, 0, "fp32", "adam"},
                      {"mobilenet-v2", 32, 0, "fp32", "adam"}};
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
    CHECK(within_over(estimate, peak));
  }
}

TEST_CASE("the allocator model against the emulated allocator over presets, batches, dtypes and optimizers") {
  // In process (the same allocator coloc-train runs, on a fake device): three iterations, as the
  // reserved peak can grow in the second.
  struct Config {
    std::string name;
    uint64_t batch;
    est::DType dtype;
    est::Optimizer opt;
    uint64_t seq = 256;  // transformers only
  };
  std::vector<Config> configs;
  for (const char* name : {"resnet50", "mobilenet-v2", "bert-base", "gpt2-small", "gpt2-medium"})
    for (uint64_t batch : {1, 4, 16, 64})
      for (est::DType dtype : {est::DType::fp32, est::DType::bf16})
        for (est::Optimizer opt : {est::Optimizer::sgd, est::Optimizer::adam}) {
          const bool cnn = name[0] == 'r' || name[0] == 'm';
          if (!cnn && batch > 16) continue;
          configs.push_back({name, batch, dtype, opt});
        }
  // The CNNs at batch 32, fp32, Adam: where the previous closed-form rule was furthest above.
  for (const char* name : {"resnet50", "efficientnet-b0", "inception-v3", "vgg16", "mobilenet-v2"})
    configs.push_back({name, 32, est::DType::fp32, est::Optimizer::adam});
  // Where the emulated allocator reserves more from its second iteration on (62.2 -> 70.2 GB).
  configs.push_back({"llama-1b", 16, est::DType::bf16, est::Optimizer::adam, 1024});
  double lo = 1, hi = -1;
  std::string worst;
  for (const Config& c : configs) {
    const bool cnn = c.name[0] != 'b' && c.name[0] != 'g' && c.name[0] != 'l';
    const est::Model model = est::make_preset(c.name, est::RunShape{c.batch, cnn ? 0u : c.seq, c.dtype});
    wl::test::FakeDevice dev;
    wl::test::FakeCompute gpu;
    wl::CachingAllocator alloc(dev);
    wl::Trainer trainer(model, wl::TrainOptions{c.dtype, c.opt, 400}, alloc, gpu);
    trainer.setup();
    for (int i = 0; i < 3; ++i) trainer.step();
    const uint64_t peak = alloc.stats().peak_reserved_bytes;
    const uint64_t estimate = driver_bytes(model, c.dtype, c.opt);
    const double err = relative(estimate, peak);
    const std::string what = c.name + " batch " + std::to_string(c.batch) + " " + est::dtype_name(c.dtype) + " " +
                             est::optimizer_name(c.opt);
    MESSAGE(what << ": emulated " << peak << " B, model " << estimate << " B, " << err * 100 << "%");
    if (err > hi) worst = what;
    lo = std::min(lo, err);
    hi = std::max(hi, err);
    CAPTURE(what);
    CHECK(err >= -kUnder);
    CHECK(within_over(estimate, peak));
  }
  MESSAGE("estimate vs emulated reserved peak: " << lo * 100 << "% .. " << hi * 100 << "% (" << worst << ")");
}

TEST_CASE("the two-layer model counted by hand in analytic_test.cpp, on the emulated allocator") {
  // The same model: 122 MiB reserved by the replay (counted there), reached by the allocator too.
  constexpr uint64_t MiB = 1ULL << 20;
  est::Model m;
  m.name = "toy";
  est::Layer a;
  a.name = "a";
  a.params = {262144};
  a.saved_bytes = {30 * MiB};
  a.output_bytes = 30 * MiB;
  est::Layer c;
  c.name = "c";
  c.params = {100};
  c.saved_bytes = {12 * MiB + 1};
  c.output_bytes = 4;
  m.layers = {a, c};
  wl::test::FakeDevice dev;
  wl::test::FakeCompute gpu;
  wl::CachingAllocator alloc(dev);
  wl::Trainer trainer(m, wl::TrainOptions{est::DType::fp32, est::Optimizer::sgd, 400}, alloc, gpu);
  trainer.setup();
  for (int i = 0; i < 3; ++i) trainer.step();
  CHECK(alloc.stats().peak_reserved_bytes == 122 * MiB);
  CHECK(driver_bytes(m, est::DType::fp32, est::Optimizer::sgd) == 122 * MiB);
}
}
