// JSON model specs: both forms, and every kind of mistake named with its place.
#include <doctest/doctest.h>

#include <string>

#include "../../../estimator/input_error.h"
#include "../../../estimator/model_spec.h"
#include "../../support/proc.h"

using namespace coloc::est;

namespace {

std::string error_of(const std::string& json) {
  try {
    parse_model_spec(json, "spec.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("a layer-list spec builds, scaled by batch") {
  ModelSpec spec = parse_model_spec(R"({"name": "mlp", "layers": [
      {"name": "fc1", "params": [1048576, 1024], "activation_bytes": "4MiB", "output_bytes": 4096, "flops": 2e9},
      {"params": 1000, "activation_bytes": [100, "1KiB"], "flops": 0}]})",
                                    "spec.json");
  CHECK(spec.name == "mlp");
  REQUIRE(spec.layers.size() == 2);
  CHECK(spec.layers[1].name == "layer1");
  Model m = build_from_spec(spec, RunShape{8, 0, DType::fp32});
  CHECK(m.name == "mlp");
  CHECK(m.param_count() == 1048576 + 1024 + 1000);
  CHECK(m.layers[0].saved_bytes == std::vector<uint64_t>{8 * 4 * 1048576ULL});
  CHECK(m.layers[1].saved_bytes == std::vector<uint64_t>{800, 8192});
  CHECK(m.layers[0].output_bytes == 8 * 4096);
  CHECK(m.forward_flops() == doctest::Approx(16e9));
  CHECK_THROWS_WITH_AS(build_from_spec(spec, RunShape{1, 128, DType::fp32}), doctest::Contains("--seq"), InputError);
}

TEST_CASE("a transformer spec gives the same model as the preset it restates") {
  ModelSpec spec = parse_model_spec(R"({"name": "my-gpt2", "transformer": {
      "layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "max_positions": 1024, "seq": 1024}})",
                                    "spec.json");
  Model a = build_from_spec(spec, RunShape{2, 0, DType::bf16});
  Model b = make_preset("gpt2-small", RunShape{2, 0, DType::bf16});
  CHECK(a.param_count() == b.param_count());
  CHECK(a.saved_total() == b.saved_total());
  CHECK(a.forward_flops() == doctest::Approx(b.forward_flops()));

  // "base" starts from a preset: a 32-layer Llama-3.2-1B.
  ModelSpec deeper = parse_model_spec(R"({"transformer": {"base": "llama-1b", "layers": 32}})", "spec.json");
  CHECK(deeper.name == "custom");
  const uint64_t per_layer = 60821504;  // Llama-3.2-1B's parameters per block
  CHECK(build_from_spec(deeper, RunShape{}).param_count() == 1235814400ULL + 16 * per_layer);
  CHECK(deeper.transformer->kv_heads == 8);  // inherited, not reset to heads
}

TEST_CASE("the example specs in the source tree") {
  ModelSpec mlp = load_model_spec(coloc::test::source_path("tools/workload/examples/tiny-mlp.json"));
  CHECK(build_from_spec(mlp, RunShape{}).param_count() == 2 * (4194304 + 2048) + 20480 + 10);
  // GPT-2 XL restated as GPT-2 small with 48 layers of 1600 (25 heads): Hugging Face
  // openai-community/gpt2-xl has 1,557,611,200 parameters.
  ModelSpec xl = load_model_spec(coloc::test::source_path("tools/workload/examples/gpt2-xl.json"));
  CHECK(build_from_spec(xl, RunShape{}).param_count() == 1557611200ULL);
}

TEST_CASE("malformed specs name the problem and its place, in one line") {
  struct Case {
    std::string json, message;
  };
  const Case cases[] = {
      {"{", "spec.json: not valid JSON"},
      {"[]", "spec.json: must be a JSON object"},
      {R"({"name": "x"})", "spec.json: give exactly one of \"layers\" and \"transformer\""},
      {R"({"layers": [], "transformer": {}})", "spec.json: give exactly one of"},
      {R"({"layers": []})", "spec.json: layers: must not be empty"},
      {R"({"layers": {}})", "spec.json: layers: must be a list"},
      {R"({"layers": [{"params": -1}]})", "spec.json: layers[0].params: must not be negative"},
      {R"({"layers": [{"params": 1.5}]})", "spec.json: layers[0].params: must be a non-negative integer"},
      {R"({"layers": [{"params": "10"}]})", "spec.json: layers[0].params: must be a non-negative integer"},
      {R"({"layers": [{}, {"activation_bytes": -5}]})", "spec.json: layers[1].activation_bytes: negative size"},
      {R"({"layers": [{"activation_bytes": "-5MiB"}]})", "spec.json: layers[0].activation_bytes: bad size '-5MiB': negative size"},
      {R"({"layers": [{"activation_bytes": [1, "4 parsecs"]}]})", "spec.json: layers[0].activation_bytes[1]: bad size"},
      {R"({"layers": [{"output_bytes": true}]})", "spec.json: layers[0].output_bytes: must be a size"},
      {R"({"layers": [{"flops": -1}]})", "spec.json: layers[0].flops: must be a non-negative number"},
      {R"({"layers": [{"flop": 1}]})", "spec.json: layers[0].flop: unknown key"},
      {R"({"layers": [3]})", "spec.json: layers[0]: must be an object"},
      {R"({"model": "x"})", "spec.json: model: unknown key"},
      {R"({"name": "", "layers": [{}]})", "spec.json: name: must not be empty"},
      {R"({"transformer": {"hidden": 768}})", "spec.json: transformer: missing \"layers\""},
      {R"({"transformer": {"base": "resnet50"}})", "spec.json: transformer.base: 'resnet50' is not a transformer preset"},
      {R"({"transformer": {"base": "gpt2-small", "heads": 7}})", "spec.json: transformer: heads must divide hidden"},
      {R"({"transformer": {"base": "gpt2-small", "norm": "batchnorm"}})",
       "spec.json: transformer.norm: 'batchnorm' is not one of: layernorm, rmsnorm"},
      {R"({"transformer": {"base": "gpt2-small", "bias": "yes"}})", "spec.json: transformer.bias: must be true or false"},
      {R"({"transformer": {"base": "gpt2-small", "hiden": 1}})", "spec.json: transformer.hiden: unknown key"},
      {R"({"transformer": {"base": "gpt2-small", "vocab": 99999999999}})", "spec.json: transformer: hidden, ffn, vocab"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.json);
    std::string err = error_of(c.json);
    CHECK_MESSAGE(err.rfind(c.message, 0) == 0, "got: " << err);
    CHECK(err.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(load_model_spec("/nonexistent.json"), doctest::Contains("cannot read"), InputError);
  // Too many layers to be a network: refused before they cost seconds and gigabytes.
  std::string many = R"({"layers": [{})";
  for (int i = 0; i < 65536; ++i) many += ",{}";
  CHECK(error_of(many + "]}") == "spec.json: layers: more than 65536 layers");
  // --image and --classes do not apply to a layer list (its sizes are per sample).
  const ModelSpec one = parse_model_spec(R"({"name": "one", "layers": [{"params": 10}]})", "spec.json");
  CHECK_THROWS_WITH_AS(build_from_spec(one, RunShape{1, 0, DType::fp32, 64, 0}), doctest::Contains("--image and --classes"),
                       InputError);
  CHECK_THROWS_WITH_AS(build_from_spec(one, RunShape{1, 0, DType::fp32, 0, 10}), doctest::Contains("--image and --classes"),
                       InputError);
}
}
