// estimator/hf_config.cpp — Hugging Face config.json → TransformerConfig or XLNetConfig; see
// hf_config.h for the fields read.
#include "hf_config.h"

#include <cmath>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "input_error.h"
#include "json_input.h"

namespace coloc::est {

using nlohmann::json;

namespace {

constexpr std::string_view kModelTypes[] = {"bert", "gpt2", "llama", "xlnet"};

// Reads the fields of one config; errors name the file, the model type and the field.
class Fields {
 public:
  Fields(const json& doc, std::string source, std::string type)
      : doc_(doc), source_(std::move(source)), type_(std::move(type)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(source_ + ": " + type_ + ": " + problem);
  }

  // Present and not null.
  bool has(const char* key) const { return doc_.contains(key) && !doc_[key].is_null(); }

  uint64_t count(const char* key) const {
    if (!has(key)) fail(std::string("missing \"") + key + "\"");
    const json& v = doc_[key];
    if (!v.is_number_unsigned()) fail(std::string("\"") + key + "\" must be a non-negative integer");
    return v.get<uint64_t>();
  }
  uint64_t count_or(const char* key, uint64_t fallback) const { return has(key) ? count(key) : fallback; }

  double probability_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = doc_[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > 1)
      fail(std::string("\"") + key + "\" must be a number from 0 to 1");
    return v.get<double>();
  }

  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(std::string("\"") + key + "\" must be true or false");
    return doc_[key].get<bool>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_string()) fail(std::string("\"") + key + "\" must be a string");
    return doc_[key].get<std::string>();
  }

  // "architectures": a list of class names.
  bool has_architecture(std::string_view name) const {
    if (!has("architectures")) return false;
    const json& v = doc_["architectures"];
    if (!v.is_array()) fail("\"architectures\" must be a list of strings");
    bool found = false;
    for (const json& a : v) {
      if (!a.is_string()) fail("\"architectures\" must be a list of strings");
      found = found || a.get<std::string>() == name;
    }
    return found;
  }

  // "attn_implementation" / "_attn_implementation", or nullopt when neither is given.
  std::optional<TransformerConfig::Attention> attention() const {
    for (const char* key : {"attn_implementation", "_attn_implementation"}) {
      if (!has(key)) continue;
      const std::string a = string_or(key, "");
      if (a == "eager") return TransformerConfig::Attention::eager;
      if (a == "sdpa" || a == "flash_attention_2") return TransformerConfig::Attention::flash;
      fail(std::string("\"") + key + "\": '" + a + "' is not one of: eager, sdpa, flash_attention_2");
    }
    return std::nullopt;
  }

  const json& doc() const { return doc_; }

 private:
  const json& doc_;
  std::string source_;
  std::string type_;
};

void check(const Fields& f, const std::string& problem) {
  if (!problem.empty()) f.fail(problem);
}

// transformers >= 4.41: BertModel, GPT2Model and LlamaModel default to SDPA.
TransformerConfig::Attention attention_or_sdpa(const Fields& f) {
  return f.attention().value_or(TransformerConfig::Attention::flash);
}

TransformerConfig bert(const Fields& f) {
  TransformerConfig c;
  c.hidden = f.count("hidden_size");
  c.layers = f.count("num_hidden_layers");
  c.heads = c.kv_heads = f.count("num_attention_heads");
  c.ffn = f.count("intermediate_size");
  c.vocab = f.count("vocab_size");
  c.max_positions = f.count_or("max_position_embeddings", 512);
  c.type_vocab = f.count_or("type_vocab_size", 2);
  c.dropout = f.probability_or("hidden_dropout_prob", 0.1) > 0;
  c.attention = attention_or_sdpa(f);
  c.head = f.has_architecture("BertForPreTraining") ? TransformerConfig::Head::bert_pretraining
                                                    : TransformerConfig::Head::bert_mlm;
  c.embedding_norm = true;
  c.final_norm = false;
  c.default_seq = c.max_positions;
  return c;
}

TransformerConfig gpt2(const Fields& f) {
  TransformerConfig c;
  c.hidden = f.count("n_embd");
  c.layers = f.count("n_layer");
  c.heads = c.kv_heads = f.count("n_head");
  c.vocab = f.count("vocab_size");
  c.ffn = f.count_or("n_inner", 4 * c.hidden);
  c.max_positions = f.count_or("n_positions", 1024);
  c.dropout = f.probability_or("resid_pdrop", 0.1) > 0;
  c.tied_embeddings = f.flag_or("tie_word_embeddings", true);
  c.attention = attention_or_sdpa(f);
  c.default_seq = c.max_positions;
  return c;
}

TransformerConfig llama(const Fields& f) {
  TransformerConfig c;
  c.hidden = f.count("hidden_size");
  c.layers = f.count("num_hidden_layers");
  c.heads = f.count("num_attention_heads");
  c.kv_heads = f.count_or("num_key_value_heads", c.heads);
  c.ffn = f.count("intermediate_size");
  c.vocab = f.count("vocab_size");
  c.default_seq = f.count_or("max_position_embeddings", 2048);
  c.max_positions = 0;  // rotary
  c.tied_embeddings = f.flag_or("tie_word_embeddings", false);
  const bool attention_bias = f.flag_or("attention_bias", false), mlp_bias = f.flag_or("mlp_bias", false);
  if (attention_bias != mlp_bias) f.fail("\"attention_bias\" and \"mlp_bias\" differ: not supported");
  c.bias = attention_bias;
  if (f.has("head_dim") && c.heads && (c.hidden % c.heads != 0 || f.count("head_dim") != c.hidden / c.heads))
    f.fail("\"head_dim\" other than hidden_size / num_attention_heads is not supported");
  if (f.string_or("hidden_act", "silu") != "silu") f.fail("\"hidden_act\": only \"silu\" (SwiGLU) is supported");
  c.norm = TransformerConfig::Norm::rmsnorm;
  c.mlp = TransformerConfig::Mlp::swiglu;
  c.attention = attention_or_sdpa(f);
  c.dropout = false;  // LlamaModel has no hidden dropout; attention_dropout defaults to 0
  return c;
}

XLNetConfig xlnet(const Fields& f) {
  XLNetConfig c;
  c.hidden = f.count("d_model");
  c.layers = f.count("n_layer");
  c.heads = f.count("n_head");
  c.ffn = f.count("d_inner");
  c.vocab = f.count("vocab_size");
  if (f.has("d_head") && c.heads && (c.hidden % c.heads != 0 || f.count("d_head") != c.hidden / c.heads))
    f.fail("\"d_head\" must be d_model / n_head");
  c.dropout = f.probability_or("dropout", 0.1) > 0;
  if (f.has("num_labels")) {
    c.classes = f.count("num_labels");
  } else if (f.has("id2label")) {
    if (!f.doc()["id2label"].is_object()) f.fail("\"id2label\" must be an object");
    c.classes = f.doc()["id2label"].size();
  }
  if (auto a = f.attention(); a && *a != TransformerConfig::Attention::eager)
    f.fail("Hugging Face XLNet has no SDPA or FlashAttention path; only \"eager\" attention");
  return c;
}

}  // namespace

std::string hf_model_types() {
  std::string list;
  for (std::string_view t : kModelTypes) list += (list.empty() ? "" : ", ") + std::string(t);
  return list;
}

HfModel parse_hf_config(std::string_view text, const std::string& source) {
  json doc;
  doc = parse_json_input(text, source);
  if (!doc.is_object()) throw InputError(source + ": a config.json must be a JSON object");
  if (!doc.contains("model_type")) throw InputError(source + ": missing \"model_type\"");
  if (!doc["model_type"].is_string()) throw InputError(source + ": \"model_type\" must be a string");

  HfModel m;
  m.model_type = doc["model_type"].get<std::string>();
  const Fields f(doc, source, m.model_type);
  m.name = f.string_or("_name_or_path", "");
  if (m.name.empty()) m.name = source;
  if (m.model_type == "bert") {
    m.transformer = bert(f);
  } else if (m.model_type == "gpt2") {
    m.transformer = gpt2(f);
  } else if (m.model_type == "llama") {
    m.transformer = llama(f);
  } else if (m.model_type == "xlnet") {
    m.xlnet = xlnet(f);
  } else {
    throw InputError(source + ": unknown model_type '" + m.model_type + "' (known: " + hf_model_types() + ")");
  }
  check(f, m.transformer ? m.transformer->check() : m.xlnet->check());
  return m;
}

Model build_from_hf(const HfModel& m, const RunShape& shape) {
  if (m.transformer) return build_transformer(m.name, *m.transformer, shape);
  if (m.xlnet) return build_xlnet(m.name, *m.xlnet, shape);
  throw InputError(m.name + ": no model");
}

}  // namespace coloc::est
