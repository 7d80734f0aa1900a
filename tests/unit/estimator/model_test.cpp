// Presets against the published figures of their architectures, and the activation accounting
// against Korthikanti et al. 2022.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "../../../estimator/input_error.h"
#include "../../../estimator/model.h"

using namespace coloc::est;

namespace {

// |got - published| <= tolerance × published
bool near(double got, double published, double tolerance) { return std::fabs(got - published) <= tolerance * published; }

uint64_t params_of(const char* name) { return make_preset(name, RunShape{}).param_count(); }

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("preset parameter counts match the published totals") {
  // Exact counts, from the architectures' own configurations (each a well-known published figure):
  // torchvision's resnet50 model card: 25,557,032.
  CHECK(params_of("resnet50") == 25557032ULL);
  // Hugging Face GPT2LMHeadModel (tied head): gpt2 124,439,808; gpt2-medium 354,823,168;
  // gpt2-large 774,030,080.
  CHECK(params_of("gpt2-small") == 124439808ULL);
  CHECK(params_of("gpt2-medium") == 354823168ULL);
  CHECK(params_of("gpt2-large") == 774030080ULL);
  // Llama-3.2-1B (tied embeddings): 1,235,814,400 (model card: 1.23B).
  CHECK(params_of("llama-1b") == 1235814400ULL);
  // BertForPreTraining (BertModel with pooler + MLM and NSP heads, decoder tied): bert-base-uncased
  // 110,106,428.
  CHECK(params_of("bert-base") == 110106428ULL);

  // And the rounded totals the papers and model cards publish, with their rounding as tolerance.
  CHECK(near(double(params_of("resnet50")), 25.6e6, 0.005));     // He et al. 2016: 25.6M (torchvision)
  CHECK(near(double(params_of("bert-base")), 110e6, 0.01));      // Devlin et al. 2019: 110M
  CHECK(near(double(params_of("bert-large")), 340e6, 0.015));    // Devlin et al. 2019: 340M (HF count 336M)
  CHECK(near(double(params_of("gpt2-small")), 124e6, 0.005));    // HF model card: 124M
  CHECK(near(double(params_of("gpt2-medium")), 355e6, 0.005));   // HF model card: 355M
  CHECK(near(double(params_of("gpt2-large")), 774e6, 0.005));    // HF model card: 774M
  CHECK(near(double(params_of("llama-1b")), 1.23e9, 0.01));      // Meta model card: 1.23B
}

TEST_CASE("every preset builds at its default shape and at bf16") {
  for (const Preset& p : presets()) {
    CAPTURE(p.name);
    CHECK(!p.source.empty());
    for (DType t : {DType::fp32, DType::bf16}) {
      Model m = make_preset(p.name, RunShape{2, 0, t});
      CHECK(m.layers.size() >= 3);
      CHECK(m.forward_flops() > 0);
      CHECK(m.saved_total() > 0);
      for (const Layer& l : m.layers) {
        CHECK(!l.name.empty());
        CHECK(l.output_bytes > 0);
        for (uint64_t b : l.saved_bytes) CHECK(b > 0);
      }
    }
  }
}

TEST_CASE("resnet50 forward FLOPs match the published multiply-adds") {
  // torchvision's resnet50 card: 4.09 G multiply-adds per 224x224 image (He et al. 2016 Table 1:
  // 3.8e9 for v1; v1.5 moves the stride and costs a little more). One multiply-add = 2 FLOPs.
  Model m = make_preset("resnet50", RunShape{1, 0, DType::fp32});
  CHECK(near(m.forward_flops() / 2, 4.09e9, 0.01));
  // Batch scales FLOPs and activations linearly, parameters not at all.
  Model m8 = make_preset("resnet50", RunShape{8, 0, DType::fp32});
  CHECK(m8.forward_flops() == doctest::Approx(8 * m.forward_flops()));
  CHECK(m8.saved_total() == 8 * m.saved_total());
  CHECK(m8.param_count() == m.param_count());
}

TEST_CASE("transformer FLOPs follow 6·N·tokens") {
  // Forward = 2·N·tokens plus the attention term 2·n_layer·n_ctx·d_model per token (Kaplan et al.
  // 2020, Table 1), where N excludes embeddings; backward doubles it, so a step is 3× forward.
  const uint64_t b = 4, s = 1024;
  Model m = make_preset("gpt2-small", RunShape{b, s, DType::fp32});
  const double tokens = double(b * s);
  const double n_blocks = 12 * 7087872.0;   // non-embedding parameters of GPT-2 small's blocks
  const double head = 50257.0 * 768;         // the tied LM head's matmul
  const double attention = 12 * 2.0 * s * 768;
  CHECK(m.forward_flops() == doctest::Approx(2 * (n_blocks + head) * tokens + attention * tokens));
  CHECK(m.layers.front().forward_flops == 0);  // the embedding is a lookup
}

TEST_CASE("block activations match Korthikanti et al. 2022, equation (1)") {
  // Per layer, 16-bit activations with dropout and materialized attention scores:
  // s·b·h·(34 + 5·a·s/h) bytes.
  for (const char* name : {"gpt2-small", "gpt2-medium", "bert-large"}) {
    CAPTURE(name);
    auto c = find_preset(name)->config();
    const uint64_t b = 2, s = 256, h = c.hidden, a = c.heads;
    Model m = make_preset(name, RunShape{b, s, DType::bf16});
    const Layer& block = m.layers[1];
    REQUIRE(block.name == "block.0");
    CHECK(block.saved_total() == s * b * h * 34 + 5 * a * s * s * b);
  }
}

TEST_CASE("llama-1b: grouped-query, SwiGLU, FlashAttention, no dropout") {
  const uint64_t b = 1, s = 2048, h = 2048, f = 8192, kv = 512, a = 32;
  Model m = make_preset("llama-1b", RunShape{b, 0, DType::bf16});  // default seq is 2048
  const Layer& block = m.layers[1];
  const uint64_t t = b * s;
  // norm in, QKV in, Q, K, V, O, norm in, MLP in: 2 bytes each; gate, SiLU, up, product (f wide);
  // the fp32 log-sum-exp per head and query.
  CHECK(block.saved_total() == 2 * t * (6 * h + 2 * kv) + 2 * t * 4 * f + 4 * a * s * b);
  // No s² term: doubling the sequence doubles the activations.
  Model m2 = make_preset("llama-1b", RunShape{b, 2 * s, DType::bf16});
  CHECK(m2.layers[1].saved_total() == 2 * block.saved_total());
  CHECK(m.layers.size() == 16 + 2);
}

TEST_CASE("static bytes per parameter") {
  // Full precision: weights + gradients (4 + 4), plus the optimizer state.
  CHECK(static_bytes_per_param(DType::fp32, Optimizer::sgd) == 8);
  CHECK(static_bytes_per_param(DType::fp32, Optimizer::sgd_momentum) == 12);
  CHECK(static_bytes_per_param(DType::fp32, Optimizer::adam) == 16);
  // Mixed precision with Adam: 2 + 2 + 12 = 16 bytes (Rajbhandari et al. 2020, ZeRO §3.1).
  CHECK(static_bytes_per_param(DType::bf16, Optimizer::adam) == 16);
  CHECK(static_bytes_per_param(DType::fp16, Optimizer::sgd) == 8);
}

TEST_CASE("names parse") {
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK(!parse_dtype("int8"));
  CHECK(parse_optimizer("adamw") == Optimizer::adam);
  CHECK(parse_optimizer("sgd-momentum") == Optimizer::sgd_momentum);
  CHECK(!parse_optimizer("lion"));
}

TEST_CASE("bad shapes and unknown models are input errors") {
  CHECK_THROWS_WITH_AS(make_preset("gpt5", RunShape{}), doctest::Contains("unknown model 'gpt5'"), InputError);
  CHECK_THROWS_WITH_AS(make_preset("resnet50", RunShape{1, 128, DType::fp32}), doctest::Contains("--seq"), InputError);
  CHECK_THROWS_WITH_AS(make_preset("gpt2-small", RunShape{1, 2048, DType::fp32}), doctest::Contains("1024"), InputError);
  CHECK_THROWS_AS(make_preset("bert-base", RunShape{0, 0, DType::fp32}), InputError);
  CHECK_THROWS_AS(make_preset("llama-1b", RunShape{1ULL << 40, 1ULL << 20, DType::fp32}), InputError);
  TransformerConfig c = find_preset("gpt2-small")->config();
  c.heads = 7;
  CHECK_THROWS_WITH_AS(build_transformer("x", c, RunShape{}), doctest::Contains("heads must divide hidden"), InputError);
}
}
