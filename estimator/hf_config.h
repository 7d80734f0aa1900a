// estimator/hf_config.h — a Hugging Face config.json as a model (`coloc estimate --model-file`).
//
// The architecture is chosen by "model_type"; the fields read, by model type (transformers'
// configuration classes; a field marked * is required, the others take that class's default):
//
//   bert   hidden_size*, num_hidden_layers*, num_attention_heads*, intermediate_size*,
//          vocab_size*, max_position_embeddings (512), type_vocab_size (2),
//          hidden_dropout_prob (0.1). Head from "architectures": BertForPreTraining → pooler, MLM
//          and NSP heads; anything else or none → the masked-LM head alone (BertForMaskedLM).
//   gpt2   n_embd*, n_layer*, n_head*, vocab_size*, n_inner (null → 4·n_embd), n_positions
//          (1024), resid_pdrop (0.1), tie_word_embeddings (true). GPT2LMHeadModel.
//   llama  hidden_size*, num_hidden_layers*, num_attention_heads*, intermediate_size*,
//          vocab_size*, num_key_value_heads (= heads), max_position_embeddings (2048),
//          tie_word_embeddings (false), attention_bias / mlp_bias (false), head_dim (must be
//          hidden_size / num_attention_heads). RMSNorm, SwiGLU, rotary positions, no dropout.
//          LlamaForCausalLM.
//   xlnet  d_model*, n_layer*, n_head*, d_inner*, vocab_size*, d_head (must be d_model / n_head),
//          dropout (0.1), num_labels or the size of id2label (2). XLNetForSequenceClassification
//          (xlnet.h), whatever "architectures" says: that is how XLNet is fine-tuned.
//
// Attention: "attn_implementation" or "_attn_implementation" ("eager" | "sdpa" |
// "flash_attention_2"), else the default of transformers >= 4.41 for the model type: SDPA for
// bert (huggingface/transformers#28802), gpt2 and llama; eager for xlnet, which has no SDPA path
// (asking it for one is an error, as transformers makes it). SDPA's fused kernels and
// FlashAttention-2 keep their output and the log-sum-exp, not the scores (Attention::flash).
// Dropout: a dropout probability of 0 means no dropout masks.
// Default sequence length: max_position_embeddings / n_positions; xlnet 512.
//
// Other keys are ignored: a real config.json carries many that do not change memory.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model.h"
#include "xlnet.h"

namespace coloc::est {

/// A model read from a Hugging Face config.json: exactly one of `transformer` and `xlnet` is set.
struct HfModel {
  std::string name;          ///< "_name_or_path" when the file has one, else the file it came from
  std::string model_type;    ///< "bert", "gpt2", "llama" or "xlnet"
  std::optional<TransformerConfig> transformer;
  std::optional<XLNetConfig> xlnet;
};

/// The model types parse_hf_config knows, comma-separated: "bert, gpt2, llama, xlnet".
std::string hf_model_types();

/// Parses the JSON text of a config.json; `source` names it in errors. Throws InputError with one
/// line: "<source>: not valid JSON (...)", "<source>: unknown model_type 'x' (known: ...)",
/// "<source>: bert: missing \"hidden_size\"", "<source>: gpt2: \"n_embd\" must be a non-negative
/// integer", or the inconsistency TransformerConfig::check() / XLNetConfig::check() finds.
HfModel parse_hf_config(std::string_view text, const std::string& source);

/// The model at `shape`. Throws InputError when the shape does not fit the model.
Model build_from_hf(const HfModel& model, const RunShape& shape);

}  // namespace coloc::est
