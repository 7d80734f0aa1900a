// estimator/model_spec.h — models described in a JSON file (coloc-train --model-file).
//
// Two forms; exactly one of "layers" and "transformer" is given:
//
//   {"name": "my-mlp",
//    "layers": [{"name": "fc1", "params": 1048576, "activation_bytes": "4MiB",
//                "output_bytes": "4MiB", "flops": 2.1e9}, ...]}
//
//     A list of layers, each with, per sample (multiplied by --batch):
//       params            parameter elements: an integer, or a list of tensor sizes (default 0)
//       activation_bytes  bytes autograd keeps for backward: a size, or a list of sizes (default 0)
//       output_bytes      bytes of the layer's output, whose gradient backward allocates (default 0)
//       flops             forward FLOPs (default 0); backward counts twice as many
//     Sizes are byte counts or strings in coloc's size grammar ("4MiB", "1.5GB").
//
//   {"name": "my-gpt",
//    "transformer": {"base": "gpt2-small", "layers": 24, "hidden": 1024, "heads": 16, ...}}
//
//     The architecture numbers of a transformer (TransformerConfig in model.h): layers, hidden,
//     heads, kv_heads (default heads), ffn (default 4 × hidden), vocab, max_positions (0 = rotary),
//     type_vocab, norm ("layernorm" | "rmsnorm"), mlp ("gelu" | "swiglu"), attention ("eager" |
//     "flash"), head ("causal-lm" | "bert-pretraining" |
//     "bert-mlm"), bias, tied_embeddings, dropout,
//     embedding_norm, final_norm (booleans), seq (default sequence length). "base" starts from a
//     transformer preset and overrides what follows.
//
// Unknown keys are errors, so a typo never passes silently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model.h"

namespace coloc::est {

/// One layer of a "layers" spec; sizes and FLOPs per sample.
struct SpecLayer {
  std::string name;
  std::vector<uint64_t> params;
  std::vector<uint64_t> activation_bytes;
  uint64_t output_bytes = 0;
  double flops = 0;
};

struct ModelSpec {
  std::string name;
  std::optional<TransformerConfig> transformer;  ///< set for the "transformer" form
  std::vector<SpecLayer> layers;                 ///< set for the "layers" form
};

/// Parses the JSON text of a spec. `source` names it in errors. Throws InputError with one line:
/// "<source>: <where>: <problem>", e.g. "spec.json: layers[2].params: must be a non-negative integer".
ModelSpec parse_model_spec(std::string_view text, const std::string& source);
/// Reads and parses the file at `path`. Throws InputError when it cannot be read or parsed.
ModelSpec load_model_spec(const std::string& path);
/// The model of `spec` at `shape`. Throws InputError when --seq is given for a "layers" spec, or the
/// transformer numbers are inconsistent.
Model build_from_spec(const ModelSpec& spec, const RunShape& shape);

}  // namespace coloc::est
