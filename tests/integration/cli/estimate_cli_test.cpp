// coloc estimate as a process (no daemon): the JSON breakdown sums to total_bytes, the text names
// the peak layer, --list-models lists the presets, and every bad input exits 2 with one line on
// stderr naming the field.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../../support/proc.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

ProcResult estimate(std::vector<std::string> args) {
  args.insert(args.begin(), {build_path("bin/coloc"), "estimate"});
  return run(args, Env(), 20s);
}

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

}  // namespace

TEST_SUITE("cli") {
TEST_CASE("coloc estimate: JSON items sum to total_bytes; text names the peak layer; --list-models") {
  ProcResult r = estimate({"--model", "resnet50", "--batch", "32", "--optimizer", "sgd-momentum", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  const json j = json::parse(r.out);
  const std::vector<std::string> keys = {"weights",     "gradients",    "master_weights",   "optimizer_state",
                                         "activations", "allocator",    "cuda_context",     "cublas_workspace",
                                         "cudnn_workspace", "safety_margin"};
  REQUIRE(j["items"].size() == keys.size());
  uint64_t sum = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    CHECK(j["items"][i]["key"] == keys[i]);
    CHECK(j["items"][i]["bytes"].is_number_unsigned());
    sum += j["items"][i]["bytes"].get<uint64_t>();
  }
  CHECK(j["total_bytes"].get<uint64_t>() == sum);
  CHECK(j["params"] == 25557032);
  CHECK(j["peak_layer"] == "layer4.2");
  CHECK(j["inputs"]["batch"] == 32);
  CHECK(j["inputs"]["optimizer"] == "sgd-momentum");
  CHECK(j["inputs"]["model"] == "resnet50");
  CHECK(j["layers"].size() == 18);
  CHECK(j["items"][0]["bytes"] == 25557032ULL * 4);

  r = estimate({"--model", "resnet50", "--batch", "32", "--optimizer", "sgd-momentum"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("backward pass of layer4.2") != std::string::npos);
  CHECK(r.out.find("<- peak") != std::string::npos);
  CHECK(r.out.find("total") != std::string::npos);
  CHECK(r.out.find("safety margin (5%") != std::string::npos);

  r = estimate({"--list-models"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("resnet50") != std::string::npos);
  CHECK(r.out.find("25,557,032") != std::string::npos);
  r = estimate({"--list-models", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  bool found = false;
  const json list = json::parse(r.out);
  for (const json& m : list["models"])
    if (m["name"] == "resnet50") {
      found = true;
      CHECK(m["params"] == 25557032);
      CHECK(m["kind"] == "cnn");
      CHECK(m["source"].is_string());
    }
  CHECK(found);

  r = estimate({"--help"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("--model-file") != std::string::npos);
  CHECK(r.out.find("--device-model") != std::string::npos);
}

TEST_CASE("coloc estimate: bad input exits 2 with one line naming the field") {
  TempDir dir("coloc-estimate-cli");
  write(dir / "broken.json", "{\"name\": \"x\", \"layers\": [");
  write(dir / "huge.json", R"({"model_type": "gpt2", "n_layer": 1e400})");
  write(dir / "huge-spec.json", R"({"name": "x", "layers": [{"type": "linear", "params": -1e999}]})");
  write(dir / "hf.json",
        R"({"model_type": "bert", "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "vocab_size": 100, "max_position_embeddings": 64})");
  struct Bad {
    std::vector<std::string> args;
    const char* names;  // what the message must mention
  };
  const Bad bad[] = {
      {{"--model", "nope", "--batch", "1"}, "nope"},
      {{"--model", "resnet50", "--batch", "0"}, "--batch"},
      {{"--model", "resnet50", "--batch", "-3"}, "--batch"},
      {{"--model", "resnet50", "--batch", "many"}, "--batch"},
      {{"--model", "resnet50"}, "--batch"},
      {{"--model", "resnet50", "--batch", "2", "--dtype", "fp8"}, "--dtype"},
      {{"--model", "resnet50", "--batch", "2", "--optimizer", "lion"}, "--optimizer"},
      {{"--model", "resnet50", "--batch", "2", "--allocator", "slab"}, "--allocator"},
      {{"--model", "resnet50", "--batch", "2", "--device-model", "B200"}, "--device-model"},
      {{"--batch", "2"}, "--model"},
      {{"--model", "resnet50", "--model-file", dir / "hf.json", "--batch", "2"}, "--model-file"},
      {{"--model-file", dir / "broken.json", "--batch", "2"}, "broken.json"},
      {{"--model-file", dir / "missing.json", "--batch", "2"}, "missing.json"},
      {{"--model-file", dir / "hf.json", "--batch", "2", "--seq", "16"}, "hidden_size"},
      // A number no double holds: the parser's own error, named by its field (it was
      // "unexpected answer from colocd: [json.exception.out_of_range.406]..." and exit 1).
      {{"--model-file", dir / "huge.json", "--batch", "2"}, "\"n_layer\": number out of range ('1e400')"},
      {{"--model-file", dir / "huge-spec.json", "--batch", "2"}, "\"layers.params\": number out of range"},
  };
  for (const Bad& b : bad) {
    ProcResult r = estimate(b.args);
    CAPTURE(b.args);
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find(b.names) != std::string::npos);
    CHECK(r.err.find('\n') == r.err.size() - 1);  // one line
  }
  // coloc-train reads the same files the same way: exit 2, one line (it aborted with `terminate called`).
  ProcResult train = run({build_path("bin/coloc-train"), "--model-file", dir / "huge.json", "--batch", "2"}, Env(), 20s);
  INFO(describe(train));
  CHECK(train.exit_code == 2);
  CHECK(train.err.find("\"n_layer\": number out of range") != std::string::npos);
  CHECK(train.err.find("terminate") == std::string::npos);
  // The unknown model's message lists the known ones.
  CHECK(estimate({"--model", "nope", "--batch", "1"}).err.find("resnet50") != std::string::npos);
}
}
