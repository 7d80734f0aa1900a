// The transformer presets against their published parameter counts, XLNet's activation
// accounting against Hugging Face's modeling_xlnet.py, and BERT's masked-LM head.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "../../../estimator/input_error.h"
#include "../../../estimator/model.h"
#include "../../../estimator/xlnet.h"

using namespace coloc::est;

namespace {

uint64_t params_of(const char* name) { return make_preset(name, RunShape{}).param_count(); }

}  // namespace

TEST_SUITE("estimator") {
TEST_CASE("transformer presets have their published parameter counts") {
  // GPT2LMHeadModel, LM head tied to the embeddings. Hugging Face model.num_parameters() of
  // openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl; the same counts are KerasHub's
  // gpt2_base_en, gpt2_medium_en, gpt2_large_en, gpt2_extra_large_en presets ("params").
  CHECK(params_of("gpt2-small") == 124439808ULL);
  CHECK(params_of("gpt2-medium") == 354823168ULL);
  CHECK(params_of("gpt2-large") == 774030080ULL);
  CHECK(params_of("gpt2-xl") == 1557611200ULL);

  // BertForPreTraining = BertModel (with its pooler) + next-sentence classifier (h·2 + 2) + MLM
  // head (transform h·h + h, LayerNorm 2h, decoder bias = vocab; decoder weight tied).
  // BertModel: KerasHub bert_base_en_uncased 109,482,240 and bert_large_en_uncased 335,141,888
  // (= HF BertModel.from_pretrained("bert-base-uncased" / "bert-large-uncased")).
  CHECK(params_of("bert-base") == 109482240ULL + (768 * 2 + 2) + (768 * 768 + 768 + 2 * 768 + 30522));
  CHECK(params_of("bert-base") == 110106428ULL);
  CHECK(params_of("bert-large") == 335141888ULL + (1024 * 2 + 2) + (1024 * 1024 + 1024 + 2 * 1024 + 30522));
  CHECK(params_of("bert-large") == 336226108ULL);

  // XLNetForSequenceClassification (2 labels) from xlnet-base-cased: 117,310,466 (the
  // "num_parameters" backprop-ai/backprop lists for it, backprop/models/hf_seq_tc_model/models_list.py).
  CHECK(params_of("xlnet-base") == 117310466ULL);

  // xlnet-large-cased: no exact published count found. Hugging Face's pretrained-models table says
  // "340M", the size of BERT-Large it was matched to (Yang et al. 2019 §3.1), not a count. The
  // per-layer count is checked against pytorch/PiPPy#908, which split XLNetLMHeadModel
  // (xlnet-large-cased) into 4 stages of 6 layers: "stage 1 81M params", "stage 0 114M" (word
  // embedding 32000 × 1024 + mask_emb + 6 layers).
  Model large = make_preset("xlnet-large", RunShape{});
  uint64_t six_layers = 0;
  for (int i = 1; i <= 6; ++i) six_layers += large.layers[i].param_count();
  CHECK(six_layers / 1000000 == 81);
  CHECK((large.layers[0].param_count() + six_layers) / 1000000 == 114);
  CHECK(large.layers[0].param_count() == 32000ULL * 1024 + 1024);
  // Hence XLNetModel 360,268,800 + summary (1024² + 1024) + classifier (1024·2 + 2).
  CHECK(large.param_count() == 361320450ULL);

  // Llama-3.2-1B, tied embeddings: 1,235,814,400 (Meta's model card: 1.23B).
  CHECK(params_of("llama-1b") == 1235814400ULL);
}

TEST_CASE("gpt2-xl activations follow Korthikanti et al. 2022, equation (1)") {
  const uint64_t b = 2, s = 256, h = 1600, a = 25;
  Model m = make_preset("gpt2-xl", RunShape{b, s, DType::bf16});
  REQUIRE(m.layers.size() == 48 + 2);
  CHECK(m.layers[1].saved_total() == s * b * h * 34 + 5 * a * s * s * b);
  CHECK_THROWS_AS(make_preset("gpt2-xl", RunShape{1, 1025, DType::fp32}), InputError);  // 1024 positions
}

TEST_CASE("xlnet keeps what HF modeling_xlnet's autograd graph keeps") {
  const uint64_t b = 2, s = 128, d = 768, n = 12, f = 3072, t = b * s;
  SUBCASE("fp32: one shared copy of the relative encodings") {
    const uint64_t e = 4;
    Model m = make_preset("xlnet-base", RunShape{b, s, DType::fp32});
    REQUIRE(m.layers.size() == 12 + 2);
    // ids, word-embedding dropout mask, the fp32 relative encodings (2s positions).
    CHECK(m.layers[0].saved_total() == 8 * t + t * d + 4 * 2 * t * d);
    // Per block: h, q+r_w_bias, k, q+r_r_bias, q+r_s_bias, v, attention output, two LayerNorm
    // inputs, the feed-forward input (10 × t·d); position keys over 2s; the one-hot segment
    // matrix (s × s × b × 2); softmax output, dropout mask (1 byte) and output; GeLU input and
    // layer_2 input; dropout masks after attention, the activation and the feed-forward.
    const uint64_t block = e * t * d * 10 + e * 2 * t * d + e * 2 * b * s * s + 2 * e * b * n * s * s +
                           b * n * s * s + 2 * e * t * f + t * f + 2 * t * d;
    for (size_t i = 1; i <= 12; ++i) CHECK(m.layers[i].saved_total() == block);
    CHECK(m.layers[1].name == "block.0");
    CHECK(m.layers.back().name == "sequence_summary");
    // Final dropout mask, the kept [b, s, d] output, tanh output, summary dropout mask and
    // output, logits, fp32 log-softmax.
    CHECK(m.layers.back().saved_total() == t * d + e * t * d + e * b * d + b * d + e * b * d + e * b * 2 + 4 * b * 2);
  }
  SUBCASE("bf16: every layer casts the relative encodings and keeps its copy") {
    const uint64_t e = 2;
    Model m = make_preset("xlnet-base", RunShape{b, s, DType::bf16});
    CHECK(m.layers[0].saved_total() == 8 * t + t * d);
    const uint64_t block = e * t * d * 10 + e * 2 * t * d + e * 2 * t * d + e * 2 * b * s * s +
                           2 * e * b * n * s * s + b * n * s * s + 2 * e * t * f + t * f + 2 * t * d;
    CHECK(m.layers[1].saved_total() == block);
  }
  SUBCASE("default sequence 512, no position limit, classes from the shape") {
    Model m = make_preset("xlnet-base", RunShape{1, 0, DType::fp32});
    CHECK(m.layers[1].saved_bytes.size() > 10);
    Model at512 = make_preset("xlnet-base", RunShape{1, 512, DType::fp32});
    CHECK(m.saved_total() == at512.saved_total());
    CHECK_NOTHROW(make_preset("xlnet-base", RunShape{1, 4096, DType::fp32}));  // relative positions
    RunShape five{1, 0, DType::fp32};
    five.classes = 5;
    CHECK(make_preset("xlnet-base", five).param_count() == 117310466ULL + 3 * 768 + 3);
    RunShape image{1, 0, DType::fp32};
    image.image = 224;
    CHECK_THROWS_AS(make_preset("xlnet-base", image), InputError);
  }
}

TEST_CASE("xlnet configurations are checked") {
  XLNetConfig c = xlnet_base_config();
  CHECK(c.check().empty());
  c.heads = 7;
  CHECK(c.check() == "heads must divide d_model");
  CHECK_THROWS_AS(build_xlnet("x", c, RunShape{}), InputError);
  c = xlnet_base_config();
  CHECK_THROWS_AS(build_xlnet("x", c, RunShape{1ULL << 40, 512, DType::fp32}), InputError);
}

TEST_CASE("BERT with the masked-LM head only") {
  // BertForMaskedLM: no pooler, no next-sentence head. bert-base-uncased: 109,514,298 parameters
  // (HF AutoModelForMaskedLM.from_pretrained("bert-base-uncased").num_parameters()).
  TransformerConfig c = find_preset("bert-base")->config();
  c.head = TransformerConfig::Head::bert_mlm;
  Model mlm = build_transformer("bert-mlm", c, RunShape{2, 128, DType::fp32});
  CHECK(mlm.param_count() == 109514298ULL);
  Model pre = make_preset("bert-base", RunShape{2, 128, DType::fp32});
  CHECK(pre.param_count() - mlm.param_count() == (768 * 768 + 768) + (768 * 2 + 2));
  // The pooler's two [b, h] tensors are all the saved bytes it loses.
  CHECK(pre.saved_total() - mlm.saved_total() == 2 * 4 * 2 * 768);
  CHECK(mlm.layers.back().name == "mlm_head");
  CHECK(mlm.forward_flops() < pre.forward_flops());
}
}
