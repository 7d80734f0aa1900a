// estimator/xlnet.h — XLNet (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for
// Language Understanding") fine-tuned for sequence classification, as Hugging Face
// XLNetForSequenceClassification trains it (transformers/models/xlnet/modeling_xlnet.py).
//
// XLNet is not a BERT with another head, so it has its own builder:
//   - no absolute position embeddings: relative positional encodings (Transformer-XL, Dai et al.
//     2019 §3.3). Each layer projects the sinusoidal encodings of 2·seq relative positions with its
//     own matrix r, and has the biases r_w_bias, r_r_bias, r_s_bias (heads × head dim) and a
//     segment embedding seg_embed (2 × heads × head dim);
//   - q, k, v, o, r are einsum weights without bias; post-norm LayerNorm after attention and MLP;
//     dropout after the MLP's activation as well as on its output;
//   - fine-tuning uses only the content stream (no two-stream query stream, no target mapping,
//     no memory): bidirectional attention over the sequence;
//   - attention is eager (HF XLNet has no SDPA path): per head, content (AC), position (BD,
//     over 2·seq positions before the relative shift) and segment (EF) scores, added, softmax,
//     dropout;
//   - head: the last token's hidden state → dense (d × d) + tanh + dropout (SequenceSummary) →
//     classifier (d × classes), cross-entropy.
#pragma once

#include <cstdint>
#include <string>

#include "model.h"

namespace coloc::est {

struct XLNetConfig {
  uint64_t layers = 0;       ///< n_layer
  uint64_t hidden = 0;       ///< d_model
  uint64_t heads = 0;        ///< n_head (d_head = d_model / n_head)
  uint64_t ffn = 0;          ///< d_inner
  uint64_t vocab = 0;        ///< vocab_size
  uint64_t classes = 2;      ///< the classifier's outputs (num_labels); RunShape::classes overrides
  bool dropout = true;       ///< training keeps dropout masks (1 byte per element)
  uint64_t default_seq = 512;///< sequence length when RunShape::seq is 0

  /// Empty when the numbers are consistent, else what is wrong.
  std::string check() const;
};

/// xlnet-base-cased: d_model 768, 12 layers, 12 heads, d_inner 3072, vocab 32000.
XLNetConfig xlnet_base_config();
/// xlnet-large-cased: d_model 1024, 24 layers, 16 heads, d_inner 4096, vocab 32000.
XLNetConfig xlnet_large_config();

/// XLNetForSequenceClassification at `shape`. Throws InputError when config.check() fails or the
/// shape does not fit (--image, a batch or sequence too large).
Model build_xlnet(const std::string& name, const XLNetConfig& config, const RunShape& shape);

}  // namespace coloc::est
