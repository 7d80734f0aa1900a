// estimate_training (estimator/analytic.h): ResNet-50's breakdown against the arithmetic of its
// architecture done here by hand, the allocator model on a model small enough to count its
// segments by hand, and the properties every estimate has. Agreement with the emulated allocator
// is tests/integration/workload/estimate_agreement_test.cpp.
#include <doctest/doctest.h>

#include <string>

#include "../../../estimator/analytic.h"
#include "../../../estimator/input_error.h"

using namespace coloc::est;

namespace {

constexpr uint64_t MiB = 1ULL << 20;

uint64_t bytes_of(const Estimate& e, const char* key) {
  const EstimateItem* i = e.item(key);
  REQUIRE_MESSAGE(i != nullptr, key);
  return i->bytes;
}

uint64_t sum_of_items(const Estimate& e) {
  uint64_t s = 0;
  for (const EstimateItem& i : e.items) s += i.bytes;
  return s;
}

const Layer& layer_named(const Model& m, const std::string& name) {
  for (const Layer& l : m.layers)
    if (l.name == name) return l;
  FAIL("no layer " << name);
  return m.layers.front();
}

}  // namespace

TEST_SUITE("estimator") {
TEST_CASE("ResNet-50, batch 32, fp32, sgd-momentum: each item against the architecture's arithmetic") {
  const Model m = make_preset("resnet50", RunShape{32, 0, DType::fp32});
  EstimateOptions o;
  o.dtype = DType::fp32;
  o.optimizer = Optimizer::sgd_momentum;
  const Estimate e = estimate_training(m, o);

  // Model states: torchvision's 25,557,032 parameters, 4 B each for weights, gradients and the
  // momentum buffer; no master copy in fp32.
  const uint64_t P = 25557032, b = 32, f = 4;
  CHECK(e.params == P);
  CHECK(bytes_of(e, "weights") == P * 4);   // 102,228,128 B
  CHECK(bytes_of(e, "gradients") == P * 4);
  CHECK(bytes_of(e, "master_weights") == 0);
  CHECK(bytes_of(e, "optimizer_state") == P * 4);

  // Activations. Saved elements per image (model.cpp's accounting of He et al. 2016, Table 1):
  //   stem: the input 3·224², batch-norm input and ReLU output 2·64·112², max-pool output 64·56²,
  //         plus its int64 indices (8 B each) 64·56²
  //   a bottleneck of width w from hw to ohw: 2·w·hw² + 2·w·ohw² + 2·4w·ohw², the first of a stage
  //   also its shortcut's output 4w·ohw²
  const uint64_t stem = 3 * 224 * 224 + 2 * 64 * 112 * 112 + 64 * 56 * 56;
  const uint64_t stem_indices = 64 * 56 * 56;
  auto block = [](uint64_t w, uint64_t hw, uint64_t ohw, bool first) {
    return 2 * w * hw * hw + 2 * w * ohw * ohw + 2 * 4 * w * ohw * ohw + (first ? 4 * w * ohw * ohw : 0);
  };
  const uint64_t layer1 = block(64, 56, 56, true) + 2 * block(64, 56, 56, false);       // 2,408,448·3 + 802,816
  const uint64_t layer2 = block(128, 56, 28, true) + 3 * block(128, 28, 28, false);     // 2,207,744 + 3·1,204,224
  const uint64_t layer3 = block(256, 28, 14, true) + 5 * block(256, 14, 14, false);     // 1,103,872 + 5·602,112
  const uint64_t layer4 = block(512, 14, 7, true) + 2 * block(512, 7, 7, false);        // 551,936 + 2·301,056
  CHECK(layer1 == 3 * 2408448 + 802816);
  CHECK(layer4 == 551936 + 2 * 301056);
  const uint64_t saved_through_layer4 = b * (f * (stem + layer1 + layer2 + layer3 + layer4) + 8 * stem_indices);
  // The peak is the backward pass of the last bottleneck, layer4.2: every saved tensor but the
  // head's, the gradient of its output and of its input (each 2048·7² per image) and the temporary
  // of its largest saved tensor (also 2048·7²).
  const uint64_t block_out = f * b * 2048 * 7 * 7;   // 12,845,056 B
  const uint64_t activations = saved_through_layer4 + 3 * block_out;
  CHECK(e.peak_layer == "layer4.2");
  CHECK(bytes_of(e, "activations") == activations);
  // The head's backward holds less: every saved tensor (the head's: pooled features 2048, logits
  // 1000, fp32 log-softmax 1000 per image), the loss's gradient (4 B), the gradient of its input
  // (layer4.2's output) and a temporary of 2048 per image.
  const uint64_t fc_moment = saved_through_layer4 + b * (f * 2048 + f * 1000 + 4 * 1000) + 4 + block_out + f * b * 2048;
  CHECK(fc_moment < activations);
  CHECK(e.layers.back().bytes == fc_moment);

  // What the driver sees beyond tensors.
  CHECK(bytes_of(e, "cuda_context") == 666632192);                    // pytorch#86509, eager loading
  CHECK(bytes_of(e, "cublas_workspace") == 2 * (2 * 4 * MiB + 8 * 16 * 1024));  // 2 × 8.125 MiB, sm80
  CHECK(bytes_of(e, "cudnn_workspace") == layer_named(m, "layer4.2").workspace_bytes);
  CHECK(bytes_of(e, "allocator") > 0);
  const uint64_t before_margin = sum_of_items(e) - bytes_of(e, "safety_margin");
  CHECK(bytes_of(e, "safety_margin") == (before_margin * 5 + 99) / 100);
  CHECK(e.total_bytes == sum_of_items(e));

  // The items in their order, each with a label and a note.
  const char* keys[] = {"weights",     "gradients",    "master_weights",   "optimizer_state", "activations",
                        "allocator",   "cuda_context", "cublas_workspace", "cudnn_workspace", "safety_margin"};
  REQUIRE(e.items.size() == std::size(keys));
  for (size_t i = 0; i < e.items.size(); ++i) {
    CHECK(e.items[i].key == keys[i]);
    CHECK(!e.items[i].label.empty());
    CHECK(!e.items[i].note.empty());
  }
  CHECK(e.item("safety_margin")->label.find("5%") != std::string::npos);
  REQUIRE(e.layers.size() == m.layers.size());
  CHECK(e.layers.front().layer == "stem");
}

TEST_CASE("the caching allocator's segments, counted by hand on a two-layer model") {
  // fp32, sgd, no library workspaces: only the allocator's rules are at work.
  Model m;
  m.name = "toy";
  Layer a;
  a.name = "a";
  a.params = {262144};              // 1 MiB: a small-pool block, two to a 2 MiB segment
  a.saved_bytes = {30 * MiB};       // a segment of its own
  a.output_bytes = 30 * MiB;
  Layer c;
  c.name = "c";
  c.params = {100};                 // 400 B -> a 512 B block
  c.saved_bytes = {12 * MiB + 1};   // block 12 MiB + 512 -> a 14 MiB segment
  c.output_bytes = 4;               // the loss: a 512 B block
  m.layers = {a, c};
  EstimateOptions o;
  o.dtype = DType::fp32;
  o.optimizer = Optimizer::sgd;
  o.libraries = false;
  const Estimate e = estimate_training(m, o);

  // Backward of c: c's saved tensor and a's, the loss gradient, the gradient of a's output (30 MiB),
  // a temporary of 12 MiB + 1. Backward of a: a's saved tensor, its output's gradient, a temporary
  // of 30 MiB (no input gradient for the first layer): 90 MiB, the peak.
  CHECK(e.layers[1].bytes == 30 * MiB + (12 * MiB + 1) + 4 + 30 * MiB + (12 * MiB + 1));
  CHECK(e.layers[0].bytes == 90 * MiB);
  CHECK(e.peak_layer == "a");
  // Reserved, replaying the step over PyTorch's rules (512 B blocks, best fit, splits, no merging):
  //   setup, small pool: a's weight (1 MiB) opens a 2 MiB segment, leaving a free 1 MiB; c's
  //     weight (512 B) splits it (1 MiB - 512 left); a's gradient does not fit there: a second
  //     2 MiB segment; c's gradient splits the smaller free block again. 4 MiB.
  //   iteration 1, large pool: a's saved 30 MiB, a segment of 30 MiB; c's saved 12 MiB + 512 B, a
  //     14 MiB segment whose 2 MiB - 512 B rest is cached (more than 1 MiB: split); the loss's
  //     gradient, 512 B from the small pool's cache. c's backward: the gradient of a's output,
  //     another 30 MiB segment; the temporary of 12 MiB + 512 B fits no cached block (2 MiB - 512
  //     B): another 14 MiB segment. a's backward: its temporary of 30 MiB, a third 30 MiB segment.
  //     3·30 + 2·14 = 118 MiB.
  //   iteration 2 finds every block it asks for, of its own size, in the cache: nothing more.
  // 122 MiB in all (coloc-train's emulated allocator reaches the same: estimate_agreement_test.cpp).
  const uint64_t reserved = 4 * MiB + 118 * MiB;
  const uint64_t requested = 2 * (262144 * 4 + 400) + 90 * MiB;
  CHECK(bytes_of(e, "allocator") == reserved - requested);
  CHECK(bytes_of(e, "cublas_workspace") == 0);
  CHECK(bytes_of(e, "cudnn_workspace") == 0);

  // plain: each tensor on its own, 512 B rounding below 2 MiB, 2 MiB pages from there; peak at a.
  o.allocator = Allocator::plain;
  const Estimate p = estimate_training(m, o);
  const uint64_t plain_peak = 2 * (1 * MiB + 512) + std::max<uint64_t>(3 * 30 * MiB, 30 * MiB + 14 * MiB + 512 + 30 * MiB + 14 * MiB);
  CHECK(bytes_of(p, "allocator") == plain_peak - requested);
}

TEST_CASE("properties: mixed precision, optimizers, devices, allocators, the sum") {
  const RunShape shape{2, 128, DType::fp32};
  const Model fp32 = make_preset("bert-base", shape);
  const uint64_t P = fp32.param_count();
  EstimateOptions o;
  o.optimizer = Optimizer::sgd;
  const Estimate sgd = estimate_training(fp32, o);

  SUBCASE("bf16 and fp16 add fp32 master weights and halve weights and gradients") {
    for (DType d : {DType::bf16, DType::fp16}) {
      const Model half = make_preset("bert-base", RunShape{2, 128, d});
      EstimateOptions h = o;
      h.dtype = d;
      const Estimate e = estimate_training(half, h);
      CHECK(bytes_of(e, "master_weights") == 4 * P);
      CHECK(bytes_of(e, "weights") == 2 * P);
      CHECK(bytes_of(e, "gradients") == 2 * P);
      CHECK(bytes_of(e, "activations") < bytes_of(sgd, "activations"));
    }
    CHECK(bytes_of(sgd, "master_weights") == 0);
  }
  SUBCASE("adam keeps 8 B per parameter more than sgd, sgd-momentum 4") {
    EstimateOptions a = o;
    a.optimizer = Optimizer::adam;
    CHECK(bytes_of(estimate_training(fp32, a), "optimizer_state") == bytes_of(sgd, "optimizer_state") + 8 * P);
    a.optimizer = Optimizer::sgd_momentum;
    CHECK(bytes_of(estimate_training(fp32, a), "optimizer_state") == 4 * P);
    CHECK(estimate_training(fp32, a).total_bytes > sgd.total_bytes);
  }
  SUBCASE("Hopper's cuBLAS workspace is 32 MiB per handle") {
    for (const char* name : {"H100", "NVIDIA H200", "nvidia h100 80gb hbm3"}) {
      EstimateOptions h = o;
      h.device_model = name;
      CHECK(bytes_of(estimate_training(fp32, h), "cublas_workspace") == 2 * 32 * MiB);
    }
    CHECK(bytes_of(sgd, "cublas_workspace") == 2 * (8 * MiB + 128 * 1024));
    CHECK(bytes_of(sgd, "cuda_context") == 666632192);
  }
  SUBCASE("device models match by name, the longest first; unknown ones are refused with the known list") {
    REQUIRE(find_device_profile("NVIDIA A100-SXM4-80GB") != nullptr);
    CHECK(find_device_profile("NVIDIA A100-SXM4-80GB")->name == "A100");
    CHECK(find_device_profile("NVIDIA A10")->name == "A10");
    CHECK(find_device_profile("NVIDIA L40S")->name == "L40");
    CHECK(find_device_profile("NVIDIA L4")->name == "L4");
    CHECK(find_device_profile("NVIDIA H200")->sm_major == 9);
    CHECK(find_device_profile("Tesla K80") == nullptr);
    CHECK(device_profiles().front().name == "A100");
    EstimateOptions bad = o;
    bad.device_model = "B200";
    try {
      estimate_training(fp32, bad);
      FAIL("B200 was accepted");
    } catch (const InputError& err) {
      CHECK(std::string(err.what()).find("B200") != std::string::npos);
      CHECK(std::string(err.what()).find("H100") != std::string::npos);
    }
  }
  SUBCASE("a plain allocator loses memory to 2 MiB pages, PyTorch's caching one to its cache") {
    // resnet50: the caching allocator keeps every layer's cuDNN workspace and temporaries cached,
    // where cuMemFree returns them. gpt2-small: each 768 x 768 fp32 weight and gradient (2.25 MiB)
    // takes two 2 MiB pages under plain, 4.5 MiB of a 20 MiB segment under caching.
    struct Case {
      const char* name;
      bool caching_costs_more;
    };
    for (const Case c : {Case{"resnet50", true}, Case{"gpt2-small", false}}) {
      const Model mm = make_preset(c.name, RunShape{8, c.caching_costs_more ? 0u : 256u, DType::fp32});
      EstimateOptions p = o;
      const uint64_t caching = bytes_of(estimate_training(mm, p), "allocator");
      p.allocator = Allocator::plain;
      const uint64_t plain = bytes_of(estimate_training(mm, p), "allocator");
      CAPTURE(std::string(c.name));
      CHECK(plain > 0);
      CHECK(caching > 0);
      CHECK((caching > plain) == c.caching_costs_more);
    }
    CHECK(parse_allocator("plain") == Allocator::plain);
    CHECK(parse_allocator("pytorch") == Allocator::pytorch);
    CHECK(!parse_allocator("cudaMalloc"));
  }
  SUBCASE("a model whose bytes would wrap 64 bits is refused, not summed modulo 2^64") {
    Model huge;
    huge.name = "huge";
    for (int i = 0; i < 2; ++i) {
      Layer l;
      l.name = "l" + std::to_string(i);
      l.params = {1ULL << 62};  // 2^63 parameters in all: 2^67 bytes of weights alone
      huge.layers.push_back(l);
    }
    CHECK_THROWS_WITH_AS(estimate_training(huge, o), doctest::Contains("huge: too large to estimate"), InputError);
    huge.layers.resize(1);
    huge.layers[0].params = {};
    huge.layers[0].saved_bytes = {1ULL << 63, 1ULL << 63};  // 2^64 bytes saved: 0 modulo 2^64
    CHECK_THROWS_WITH_AS(estimate_training(huge, o), doctest::Contains("over 2^60 bytes"), InputError);
    // Just under the bound, the sum is exact.
    huge.layers[0].saved_bytes = {1ULL << 56};
    const Estimate e = estimate_training(huge, o);
    CHECK(bytes_of(e, "activations") == (1ULL << 57));
    CHECK(e.total_bytes == sum_of_items(e));
  }
  SUBCASE("total is the sum of the items; without libraries their workspaces are 0") {
    CHECK(sgd.total_bytes == sum_of_items(sgd));
    EstimateOptions n = o;
    n.libraries = false;
    const Estimate e = estimate_training(fp32, n);
    CHECK(bytes_of(e, "cublas_workspace") == 0);
    CHECK(bytes_of(e, "cudnn_workspace") == 0);
    CHECK(e.total_bytes == sum_of_items(e));
    CHECK(e.total_bytes < sgd.total_bytes);
  }
}
}
