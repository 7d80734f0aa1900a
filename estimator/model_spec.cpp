// estimator/model_spec.cpp — strict JSON model specs; see model_spec.h for the format.
#include "model_spec.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "coloc/size.h"
#include "input_error.h"
#include "json_input.h"

namespace coloc::est {

using nlohmann::json;

namespace {

constexpr size_t kMaxSpecLayers = 65536;  // far more than any network lists; bounds time and memory

// Errors name the spec and the JSON path of the offending value.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw InputError(source_ + ": " + (where.empty() ? "" : where + ": ") + problem);
  }

  // Rejects keys of `obj` that are not in `known`.
  void only_keys(const json& obj, const std::string& where, std::initializer_list<std::string_view> known) const {
    for (auto& [key, value] : obj.items()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || key == k;
      if (!ok) {
        std::string list;
        for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(where.empty() ? key : where + "." + key, "unknown key (expected one of: " + list + ")");
      }
    }
  }

  uint64_t count(const json& v, const std::string& where) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() || (v.is_number_float() && v.get<double>() < 0)) fail(where, "must not be negative");
    fail(where, "must be a non-negative integer");
  }

  // A byte count, or a string in the size grammar.
  uint64_t size(const json& v, const std::string& where) const {
    if (v.is_string()) {
      SizeParse p = parse_size(v.get<std::string>());
      if (!p) fail(where, std::string("bad size '") + v.get<std::string>() + "': " + p.error);
      return *p.bytes;
    }
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number()) fail(where, v.get<double>() < 0 ? "negative size" : "a size in bytes must be a whole number");
    fail(where, "must be a size (a byte count or a string such as \"4MiB\")");
  }

  double number(const json& v, const std::string& where) const {
    if (!v.is_number()) fail(where, "must be a number");
    double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) fail(where, "must be a non-negative number");
    return d;
  }

  bool boolean(const json& v, const std::string& where) const {
    if (!v.is_boolean()) fail(where, "must be true or false");
    return v.get<bool>();
  }

  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "must be a string");
    return v.get<std::string>();
  }

  // One value or a list of them.
  template <class F>
  std::vector<uint64_t> one_or_list(const json& v, const std::string& where, F&& one) const {
    std::vector<uint64_t> out;
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) out.push_back(one(v[i], where + "[" + std::to_string(i) + "]"));
    } else {
      out.push_back(one(v, where));
    }
    return out;
  }

 private:
  std::string source_;
};

template <class E>
E pick(const Reader& r, const json& v, const std::string& where, std::initializer_list<std::pair<std::string_view, E>> choices) {
  std::string s = r.string(v, where);
  std::string list;
  for (auto& [name, value] : choices) {
    if (s == name) return value;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  r.fail(where, "'" + s + "' is not one of: " + list);
}

SpecLayer parse_layer(const Reader& r, const json& v, const std::string& where, size_t index) {
  if (!v.is_object()) r.fail(where, "must be an object");
  r.only_keys(v, where, {"name", "params", "activation_bytes", "output_bytes", "flops"});
  SpecLayer l;
  l.name = v.contains("name") ? r.string(v["name"], where + ".name") : "layer" + std::to_string(index);
  auto count = [&r](const json& x, const std::string& w) { return r.count(x, w); };
  auto size = [&r](const json& x, const std::string& w) { return r.size(x, w); };
  if (v.contains("params")) l.params = r.one_or_list(v["params"], where + ".params", count);
  if (v.contains("activation_bytes"))
    l.activation_bytes = r.one_or_list(v["activation_bytes"], where + ".activation_bytes", size);
  if (v.contains("output_bytes")) l.output_bytes = r.size(v["output_bytes"], where + ".output_bytes");
  if (v.contains("flops")) l.flops = r.number(v["flops"], where + ".flops");
  return l;
}

TransformerConfig parse_transformer(const Reader& r, const json& v) {
  const std::string w = "transformer";
  if (!v.is_object()) r.fail(w, "must be an object");
  r.only_keys(v, w,
              {"base", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "max_positions", "type_vocab", "norm",
               "mlp", "attention", "head", "bias", "tied_embeddings", "dropout", "embedding_norm", "final_norm",
               "seq"});
  TransformerConfig c;
  bool have_base = false;
  if (v.contains("base")) {
    std::string base = r.string(v["base"], w + ".base");
    const Preset* p = find_preset(base);
    if (!p || !p->config) r.fail(w + ".base", "'" + base + "' is not a transformer preset");
    c = p->config();
    have_base = true;
  } else {
    for (const char* required : {"layers", "hidden", "heads", "vocab"})
      if (!v.contains(required)) r.fail(w, std::string("missing \"") + required + "\" (or a \"base\" preset)");
  }
  auto num = [&](const char* key, uint64_t& field) {
    if (v.contains(key)) field = r.count(v[key], w + "." + key);
  };
  auto flag = [&](const char* key, bool& field) {
    if (v.contains(key)) field = r.boolean(v[key], w + "." + key);
  };
  num("layers", c.layers);
  num("hidden", c.hidden);
  num("heads", c.heads);
  num("vocab", c.vocab);
  num("max_positions", c.max_positions);
  num("type_vocab", c.type_vocab);
  num("seq", c.default_seq);
  // Defaults that follow other numbers, unless given (or inherited from the base).
  if (v.contains("kv_heads")) num("kv_heads", c.kv_heads);
  else if (!have_base || v.contains("heads")) c.kv_heads = c.heads;
  if (v.contains("ffn")) num("ffn", c.ffn);
  else if (!have_base || v.contains("hidden")) c.ffn = 4 * c.hidden;
  using T = TransformerConfig;
  if (v.contains("norm")) c.norm = pick<T::Norm>(r, v["norm"], w + ".norm", {{"layernorm", T::Norm::layernorm}, {"rmsnorm", T::Norm::rmsnorm}});
  if (v.contains("mlp")) c.mlp = pick<T::Mlp>(r, v["mlp"], w + ".mlp", {{"gelu", T::Mlp::gelu}, {"swiglu", T::Mlp::swiglu}});
  if (v.contains("attention"))
    c.attention = pick<T::Attention>(r, v["attention"], w + ".attention", {{"eager", T::Attention::eager}, {"flash", T::Attention::flash}});
  if (v.contains("head"))
    c.head = pick<T::Head>(r, v["head"], w + ".head", {{"causal-lm", T::Head::causal_lm}, {"bert-pretraining", T::Head::bert_pretraining},
                                                            {"bert-mlm", T::Head::bert_mlm}});
  flag("bias", c.bias);
  flag("tied_embeddings", c.tied_embeddings);
  flag("dropout", c.dropout);
  flag("embedding_norm", c.embedding_norm);
  flag("final_norm", c.final_norm);
  if (std::string problem = c.check(); !problem.empty()) r.fail(w, problem);
  return c;
}

}  // namespace

ModelSpec parse_model_spec(std::string_view text, const std::string& source) {
  Reader r(source);
  json doc;
  doc = parse_json_input(text, source);
  if (!doc.is_object()) r.fail("", "must be a JSON object with \"layers\" or \"transformer\"");
  r.only_keys(doc, "", {"name", "layers", "transformer"});
  ModelSpec spec;
  spec.name = doc.contains("name") ? r.string(doc["name"], "name") : "custom";
  if (spec.name.empty()) r.fail("name", "must not be empty");
  const bool has_layers = doc.contains("layers"), has_transformer = doc.contains("transformer");
  if (has_layers == has_transformer) r.fail("", "give exactly one of \"layers\" and \"transformer\"");
  if (has_transformer) {
    spec.transformer = parse_transformer(r, doc["transformer"]);
  } else {
    const json& layers = doc["layers"];
    if (!layers.is_array()) r.fail("layers", "must be a list");
    if (layers.empty()) r.fail("layers", "must not be empty");
    if (layers.size() > kMaxSpecLayers) r.fail("layers", "more than 65536 layers");
    for (size_t i = 0; i < layers.size(); ++i)
      spec.layers.push_back(parse_layer(r, layers[i], "layers[" + std::to_string(i) + "]", i));
  }
  return spec;
}

ModelSpec load_model_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the model spec");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the model spec");
  return parse_model_spec(text.str(), path);
}

Model build_from_spec(const ModelSpec& spec, const RunShape& shape) {
  if (spec.transformer) return build_transformer(spec.name, *spec.transformer, shape);
  if (shape.seq) throw InputError(spec.name + ": --seq applies only to transformer models");
  if (shape.image || shape.classes)
    throw InputError(spec.name + ": --image and --classes apply only to convolutional presets (a spec's sizes are per sample)");
  if (shape.batch == 0) throw InputError(spec.name + ": batch must be at least 1");
  Model m;
  m.name = spec.name;
  auto times_batch = [&](uint64_t per_sample, const std::string& layer) {
    if (per_sample && shape.batch > UINT64_MAX / per_sample)
      throw InputError(spec.name + ": layer " + layer + ": size × batch is over 2^64 bytes");
    return per_sample * shape.batch;
  };
  for (const SpecLayer& s : spec.layers) {
    Layer l;
    l.name = s.name;
    l.params = s.params;
    for (uint64_t bytes : s.activation_bytes) l.saved_bytes.push_back(times_batch(bytes, s.name));
    l.output_bytes = times_batch(s.output_bytes, s.name);
    l.forward_flops = s.flops * double(shape.batch);
    m.layers.push_back(std::move(l));
  }
  return m;
}

}  // namespace coloc::est
