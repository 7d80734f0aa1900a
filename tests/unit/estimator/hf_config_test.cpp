// Hugging Face config.json files as models, and resolve_model (preset, config.json, coloc spec).
// The configs below are the published config.json files of the models named, as Hugging Face
// serves them (every field, including those the estimator ignores).
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "../../../estimator/analytic.h"
#include "../../../estimator/hf_config.h"
#include "../../../estimator/input_error.h"
#include "../../../estimator/model.h"
#include "../../support/proc.h"

using namespace coloc::est;

namespace {

// openai-community/gpt2
const char* kGpt2 = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

// openai-community/gpt2-xl (n_inner null: 4 × n_embd)
const char* kGpt2Xl = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 1600,
  "n_head": 25,
  "n_inner": null,
  "n_layer": 48,
  "n_positions": 1024,
  "output_past": true,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
})";

// google-bert/bert-base-uncased
const char* kBertBase = R"({
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
})";

// google-bert/bert-large-uncased
const char* kBertLarge = R"({
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 4096,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 16,
  "num_hidden_layers": 24,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
})";

// xlnet/xlnet-base-cased
const char* kXlnetBase = R"({
  "architectures": ["XLNetLMHeadModel"],
  "attn_type": "bi",
  "bi_data": false,
  "bos_token_id": 1,
  "clamp_len": -1,
  "d_head": 64,
  "d_inner": 3072,
  "d_model": 768,
  "dropout": 0.1,
  "end_n_top": 5,
  "eos_token_id": 2,
  "ff_activation": "gelu",
  "initializer_range": 0.02,
  "layer_norm_eps": 1e-12,
  "mem_len": null,
  "model_type": "xlnet",
  "n_head": 12,
  "n_layer": 12,
  "pad_token_id": 5,
  "reuse_len": null,
  "same_length": false,
  "start_n_top": 5,
  "summary_activation": "tanh",
  "summary_last_dropout": 0.1,
  "summary_type": "last",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 250}},
  "untie_r": true,
  "use_mems_eval": true,
  "use_mems_train": false,
  "vocab_size": 32000
})";

// meta-llama/Llama-3.2-1B
const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// `json` with `extra` ("key": value pairs) added as its first fields.
std::string with(const std::string& json, const std::string& extra) { return "{" + extra + "," + json.substr(1); }

// The same JSON with the field `key` (one line of it) removed.
std::string without(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\"");
  REQUIRE(at != std::string::npos);
  const size_t line_start = json.rfind('\n', at), line_end = json.find('\n', at);
  return json.substr(0, line_start) + json.substr(line_end);
}

Model from_hf(const std::string& json, const RunShape& shape) {
  return build_from_hf(parse_hf_config(json, "config.json"), shape);
}

// A preset's configuration with another attention.
Model preset_with(const char* name, TransformerConfig::Attention attention, const RunShape& shape,
                  TransformerConfig::Head head) {
  TransformerConfig c = find_preset(name)->config();
  c.attention = attention;
  c.head = head;
  return build_transformer(name, c, shape);
}

void check_same(const Model& a, const Model& b) {
  CHECK(a.param_count() == b.param_count());
  CHECK(a.saved_total() == b.saved_total());
  CHECK(a.forward_flops() == doctest::Approx(b.forward_flops()));
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    CAPTURE(i);
    CHECK(a.layers[i].params == b.layers[i].params);
    CHECK(a.layers[i].saved_bytes == b.layers[i].saved_bytes);
    CHECK(a.layers[i].output_bytes == b.layers[i].output_bytes);
  }
}

std::string error_of(const std::string& json) {
  try {
    parse_hf_config(json, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

using Attention = TransformerConfig::Attention;
using Head = TransformerConfig::Head;

}  // namespace

TEST_SUITE("estimator") {
TEST_CASE("GPT-2's config.json is the gpt2 preset, with SDPA attention by default") {
  const RunShape shape{4, 512, DType::fp32};
  HfModel hf = parse_hf_config(kGpt2, "config.json");
  CHECK(hf.model_type == "gpt2");
  CHECK(hf.name == "config.json");
  REQUIRE(hf.transformer);
  CHECK(hf.transformer->attention == Attention::flash);
  CHECK(hf.transformer->default_seq == 1024);
  CHECK(from_hf(kGpt2, RunShape{}).param_count() == 124439808ULL);
  // The preset keeps the scores (eager); transformers >= 4.41 runs GPT-2 through SDPA.
  check_same(from_hf(kGpt2, shape), preset_with("gpt2-small", Attention::flash, shape, Head::causal_lm));
  check_same(from_hf(with(kGpt2, R"("_attn_implementation": "eager")"), shape), make_preset("gpt2-small", shape));
  check_same(from_hf(with(kGpt2, R"("attn_implementation": "eager")"), RunShape{}), make_preset("gpt2-small", RunShape{}));

  CHECK(from_hf(kGpt2Xl, RunShape{}).param_count() == 1557611200ULL);
  check_same(from_hf(with(kGpt2Xl, R"("attn_implementation": "eager")"), shape), make_preset("gpt2-xl", shape));
  // n_inner given explicitly.
  CHECK(from_hf(with(kGpt2, R"("n_inner": 3072)"), shape).param_count() == 124439808ULL);
  // resid_pdrop 0: no dropout masks.
  CHECK(from_hf(with(without(kGpt2, "resid_pdrop"), R"("resid_pdrop": 0.0)"), shape).saved_total() <
        from_hf(kGpt2, shape).saved_total());
}

TEST_CASE("BERT's config.json: the masked-LM head by default, the pre-training heads when asked") {
  const RunShape shape{8, 512, DType::fp32};
  // BertForMaskedLM (what bert-base-uncased's "architectures" says): 109,514,298 parameters
  // (HF AutoModelForMaskedLM.from_pretrained("bert-base-uncased").num_parameters()).
  HfModel hf = parse_hf_config(kBertBase, "config.json");
  REQUIRE(hf.transformer);
  CHECK(hf.transformer->head == Head::bert_mlm);
  CHECK(hf.transformer->attention == Attention::flash);  // SDPA, huggingface/transformers#28802
  CHECK(from_hf(kBertBase, shape).param_count() == 109514298ULL);
  check_same(from_hf(kBertBase, shape), preset_with("bert-base", Attention::flash, shape, Head::bert_mlm));
  check_same(from_hf(kBertLarge, shape), preset_with("bert-large", Attention::flash, shape, Head::bert_mlm));

  // BertForPreTraining with eager attention is exactly the preset.
  for (const char* eager : {R"("attn_implementation": "eager")", R"("_attn_implementation": "eager")"}) {
    const std::string pre = with(without(kBertBase, "architectures"), std::string(R"("architectures": ["BertForPreTraining"],)") + eager);
    check_same(from_hf(pre, shape), make_preset("bert-base", shape));
    check_same(from_hf(pre, RunShape{}), make_preset("bert-base", RunShape{}));
    const std::string pre_large = with(without(kBertLarge, "architectures"), std::string(R"("architectures": ["BertForPreTraining"],)") + eager);
    check_same(from_hf(pre_large, shape), make_preset("bert-large", shape));
  }
  // No "architectures": the masked-LM head.
  CHECK(from_hf(without(kBertBase, "architectures"), shape).param_count() == 109514298ULL);
  // flash_attention_2 keeps what SDPA keeps.
  check_same(from_hf(with(kBertBase, R"("attn_implementation": "flash_attention_2")"), shape), from_hf(kBertBase, shape));
  // 513 tokens do not fit 512 learned positions.
  CHECK_THROWS_AS(from_hf(kBertBase, RunShape{1, 513, DType::fp32}), InputError);
}

TEST_CASE("XLNet's and Llama's config.json are their presets") {
  const RunShape shape{2, 512, DType::fp32};
  HfModel x = parse_hf_config(kXlnetBase, "config.json");
  REQUIRE(x.xlnet);
  CHECK(x.xlnet->classes == 2);
  check_same(from_hf(kXlnetBase, shape), make_preset("xlnet-base", shape));
  check_same(from_hf(kXlnetBase, RunShape{}), make_preset("xlnet-base", RunShape{}));
  CHECK(from_hf(kXlnetBase, RunShape{}).param_count() == 117310466ULL);
  CHECK(from_hf(with(kXlnetBase, R"("id2label": {"0": "a", "1": "b", "2": "c"})"), RunShape{}).param_count() ==
        117310466ULL + 768 + 1);
  CHECK(from_hf(with(kXlnetBase, R"("num_labels": 3)"), RunShape{}).param_count() == 117310466ULL + 768 + 1);
  CHECK(error_of(with(kXlnetBase, R"("attn_implementation": "sdpa")")).find("only \"eager\"") != std::string::npos);
  CHECK_NOTHROW(from_hf(with(kXlnetBase, R"("attn_implementation": "eager")"), shape));

  HfModel l = parse_hf_config(kLlama, "config.json");
  REQUIRE(l.transformer);
  CHECK(l.transformer->default_seq == 131072);  // its max_position_embeddings
  const RunShape at2048{1, 2048, DType::bf16};
  check_same(from_hf(kLlama, at2048), make_preset("llama-1b", at2048));
  CHECK(from_hf(kLlama, at2048).param_count() == 1235814400ULL);
  // tie_word_embeddings false (LlamaConfig's default): a separate LM head.
  CHECK(from_hf(without(kLlama, "tie_word_embeddings"), at2048).param_count() == 1235814400ULL + 128256ULL * 2048);
}

TEST_CASE("the CARMA BERT configs resolve as BertForMaskedLM with SDPA") {
  const RunShape shape{32, 512, DType::fp32};
  Model m = resolve_model(coloc::test::source_path("tests/bench/carma/bert-base-mlm.json"), shape);
  TransformerConfig c = find_preset("bert-base")->config();
  c.vocab = 28996;
  c.head = Head::bert_mlm;
  c.attention = Attention::flash;
  check_same(m, build_transformer("x", c, shape));
}

TEST_CASE("bad config.json files are named, with the field") {
  // Unknown model type: the known ones are listed.
  const std::string unknown = error_of(R"({"model_type": "t5", "d_model": 512})");
  CHECK(unknown == "config.json: unknown model_type 't5' (known: bert, gpt2, llama, xlnet)");
  // A missing required field.
  CHECK(error_of(without(kBertBase, "hidden_size")) == "config.json: bert: missing \"hidden_size\"");
  CHECK(error_of(without(kGpt2, "n_layer")) == "config.json: gpt2: missing \"n_layer\"");
  CHECK(error_of(without(kXlnetBase, "d_inner")) == "config.json: xlnet: missing \"d_inner\"");
  CHECK(error_of(without(kLlama, "intermediate_size")) == "config.json: llama: missing \"intermediate_size\"");
  CHECK(error_of(with(without(kBertBase, "hidden_size"), R"("hidden_size": null)")) ==
        "config.json: bert: missing \"hidden_size\"");
  // Malformed JSON.
  const std::string malformed = error_of(R"({"model_type": "bert", "hidden_size": 768,)");
  CHECK(malformed.rfind("config.json: not valid JSON (", 0) == 0);
  CHECK(malformed.find('\n') == std::string::npos);
  // Wrong types name the field.
  CHECK(error_of(with(without(kBertBase, "hidden_size"), R"("hidden_size": "768")")) ==
        "config.json: bert: \"hidden_size\" must be a non-negative integer");
  CHECK(error_of(with(without(kGpt2, "n_embd"), R"("n_embd": 768.5)")) ==
        "config.json: gpt2: \"n_embd\" must be a non-negative integer");
  CHECK(error_of(with(without(kGpt2, "n_head"), R"("n_head": -12)")) ==
        "config.json: gpt2: \"n_head\" must be a non-negative integer");
  CHECK(error_of(with(without(kGpt2, "resid_pdrop"), R"("resid_pdrop": "0.1")")) ==
        "config.json: gpt2: \"resid_pdrop\" must be a number from 0 to 1");
  CHECK(error_of(with(without(kLlama, "tie_word_embeddings"), R"("tie_word_embeddings": 1)")) ==
        "config.json: llama: \"tie_word_embeddings\" must be true or false");
  CHECK(error_of(with(without(kBertBase, "architectures"), R"("architectures": "BertForMaskedLM")")) ==
        "config.json: bert: \"architectures\" must be a list of strings");
  CHECK(error_of(with(kBertBase, R"("attn_implementation": "flex")")) ==
        "config.json: bert: \"attn_implementation\": 'flex' is not one of: eager, sdpa, flash_attention_2");
  CHECK(error_of(R"({"model_type": 3})") == "config.json: \"model_type\" must be a string");
  CHECK(error_of(R"([1, 2])") == "config.json: a config.json must be a JSON object");
  // Inconsistent numbers.
  CHECK(error_of(with(without(kGpt2, "n_head"), R"("n_head": 7)")) == "config.json: gpt2: heads must divide hidden");
  CHECK(error_of(with(without(kLlama, "head_dim"), R"("head_dim": 128)")).find("head_dim") != std::string::npos);
}

TEST_CASE("resolve_model: a preset, a config.json, a coloc spec, or an error") {
  coloc::test::TempDir dir("coloc-resolve");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  const RunShape shape{2, 256, DType::fp32};
  check_same(resolve_model("gpt2-small", shape), make_preset("gpt2-small", shape));
  check_same(resolve_model("xlnet-large", shape), make_preset("xlnet-large", shape));

  const std::string gpt2 = write("config.json", kGpt2);
  Model from_file = resolve_model(gpt2, shape);
  check_same(from_file, preset_with("gpt2-small", Attention::flash, shape, Head::causal_lm));
  CHECK(from_file.name == gpt2);
  CHECK(resolve_model(write("named.json", with(kGpt2, R"("_name_or_path": "openai-community/gpt2")")), shape).name ==
        "openai-community/gpt2");

  const std::string spec = write("spec.json", R"({"name": "mine", "transformer": {"base": "gpt2-small"}})");
  Model from_spec = resolve_model(spec, shape);
  CHECK(from_spec.name == "mine");
  check_same(from_spec, make_preset("gpt2-small", shape));

  // Neither a preset nor a file: the presets are listed.
  try {
    resolve_model("gpt3", shape);
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind("unknown model 'gpt3' (known: ", 0) == 0);
    CHECK(msg.find("gpt2-xl") != std::string::npos);
    CHECK(msg.find("xlnet-base") != std::string::npos);
    CHECK(msg.find("); or give a file") != std::string::npos);
  }
  // Not a regular file (a FIFO would block, /dev/zero never end), or over 4 MiB: refused at once.
  CHECK_THROWS_WITH_AS(resolve_model("/dev/zero", shape), "/dev/zero: not a regular file, not a model file", InputError);
  const std::string huge = write("huge.json", with(kGpt2, "\"junk\": \"" + std::string(5u << 20, 'x') + "\""));
  CHECK_THROWS_WITH_AS(resolve_model(huge, shape), doctest::Contains("over 4 MiB"), InputError);
  // A file that is not JSON.
  const std::string bad = write("bad.json", "{\"model_type\": \"bert\",\n");
  try {
    resolve_model(bad, shape);
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind(bad + ": not valid JSON (", 0) == 0);
  }
  // A config.json's error names the file.
  try {
    resolve_model(write("t5.json", R"({"model_type": "t5"})"), shape);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == dir / "t5.json" + ": unknown model_type 't5' (known: bert, gpt2, llama, xlnet)");
  }
  // A JSON object without "model_type" is read as a coloc spec, with its errors.
  CHECK_THROWS_WITH_AS(resolve_model(write("typo.json", R"({"layerz": []})"), shape),
                       doctest::Contains("unknown key"), InputError);
  CHECK_THROWS_AS(resolve_model(dir.path(), shape), InputError);
}
}
