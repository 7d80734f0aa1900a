// estimator/xlnet.cpp — XLNetForSequenceClassification, layer by layer; see xlnet.h.
//
// What autograd keeps was read off Hugging Face's modeling_xlnet.py (XLNetModel.forward,
// XLNetRelativeAttention.rel_attn_core and post_attention, XLNetFeedForward, SequenceSummary) op
// by op: an op keeps what its backward needs (an einsum/matmul the operand the other operand's
// gradient needs, softmax its output, dropout its mask, GeLU and LayerNorm their input); adds,
// scalings, the additive mask, reshapes, slices and index_select keep nothing. So the AC, BD
// and EF scores and their sum are computed in every layer but not kept: the kept s×s tensors are
// the softmax output, the dropout mask and the dropout output, as in BERT; what XLNet adds is the
// three biased queries (q + r_w_bias, q + r_r_bias, q + r_s_bias), the position keys over
// 2·seq relative positions, and the one-hot segment matrix the EF contraction keeps.
#include "xlnet.h"

#include <algorithm>
#include <string>

#include "input_error.h"

namespace coloc::est {

std::string XLNetConfig::check() const {
  constexpr uint64_t kMaxWidth = 1ULL << 24, kMaxLayers = 4096;
  if (layers > kMaxLayers) return "layers must be at most 4096";
  for (uint64_t v : {hidden, ffn, vocab, classes, default_seq})
    if (v > kMaxWidth) return "d_model, d_inner, vocab, classes and seq must be at most 2^24";
  if (layers == 0) return "layers must be at least 1";
  if (hidden == 0) return "d_model must be at least 1";
  if (heads == 0) return "heads must be at least 1";
  if (hidden % heads != 0) return "heads must divide d_model";
  if (ffn == 0) return "d_inner must be at least 1";
  if (vocab == 0) return "vocab must be at least 1";
  if (classes == 0) return "classes must be at least 1";
  return "";
}

// Hugging Face xlnet/xlnet-base-cased and xlnet/xlnet-large-cased config.json (Yang et al. 2019
// §3.1: the same sizes as BERT-Base and BERT-Large): vocab 32000, GeLU, dropout 0.1,
// untie_r true (per-layer biases), attn_type "bi", bi_data false, summary "last" + projection +
// tanh; sequence classification with the default num_labels 2.
XLNetConfig xlnet_base_config() {
  XLNetConfig c;
  c.layers = 12;
  c.hidden = 768;
  c.heads = 12;
  c.ffn = 3072;
  c.vocab = 32000;
  return c;
}

XLNetConfig xlnet_large_config() {
  XLNetConfig c;
  c.layers = 24;
  c.hidden = 1024;
  c.heads = 16;
  c.ffn = 4096;
  c.vocab = 32000;
  return c;
}

Model build_xlnet(const std::string& name, const XLNetConfig& c, const RunShape& shape) {
  if (std::string problem = c.check(); !problem.empty()) throw InputError(name + ": " + problem);
  if (shape.image) throw InputError(name + ": --image applies only to convolutional models");
  const uint64_t s = shape.seq ? shape.seq : c.default_seq;
  if (s == 0) throw InputError(name + ": no sequence length (give --seq)");
  if (s > (1ULL << 24)) throw InputError(name + ": --seq must be at most 2^24");
  if (shape.batch == 0) throw InputError(name + ": batch must be at least 1");
  const uint64_t C = shape.classes ? shape.classes : c.classes;
  if (C > (1ULL << 24)) throw InputError(name + ": --classes must be at most 2^24");

  // Every size is a product of at most five of these; refuse shapes that would not fit.
  using u128 = unsigned __int128;
  const u128 widest = std::max({u128(c.hidden), u128(c.ffn), u128(c.vocab), u128(C), u128(2) * c.heads * s});
  if (u128(shape.batch) * s * widest * 8 > u128(1) << 60)
    throw InputError(name + ": batch × seq too large for this model (over 2^60 bytes of activations)");

  const uint64_t b = shape.batch, d = c.hidden, n = c.heads, f = c.ffn, V = c.vocab;
  const uint64_t t = b * s;                      // tokens per batch
  const uint64_t e = dtype_bytes(shape.dtype);   // bytes per activation element
  const uint64_t mask = 1;                       // dropout masks: one byte per element
  const uint64_t ids = 8;                        // token ids are int64
  const bool drop = c.dropout;
  // The relative encodings pos_emb (2·seq positions × batch × d_model, built in fp32 from a
  // sinusoid and expanded over the batch): with dropout, its dropout materializes one fp32 tensor
  // that every layer's r projection keeps, counted once with the embeddings. At 16 bits each layer
  // casts it (r.type(...), or autocast) and keeps its own copy; without dropout it stays an
  // expanded view and each layer's einsum keeps its own contiguous copy.
  const bool shared_pos = drop && shape.dtype == DType::fp32;

  Model m;
  m.name = name;

  // Word embedding (a lookup: backward needs the ids), mask_emb (a parameter of XLNetModel, used
  // only by the query stream in pre-training), dropout.
  {
    Layer l;
    l.name = "embed";
    l.params.push_back(V * d);                   // word_embedding
    l.params.push_back(d);                       // mask_emb
    l.saved_bytes.push_back(ids * t);            // input ids
    if (drop) l.saved_bytes.push_back(mask * t * d);
    if (shared_pos) l.saved_bytes.push_back(4 * 2 * t * d);  // relative encodings after dropout
    l.output_bytes = e * t * d;
    m.layers.push_back(std::move(l));
  }

  for (uint64_t i = 0; i < c.layers; ++i) {
    Layer l;
    l.name = "block." + std::to_string(i);
    auto& p = l.params;
    for (int w = 0; w < 5; ++w) p.push_back(d * d);  // q, k, v, o, r: d_model × n_head × d_head, no bias
    p.push_back(d);                                  // r_w_bias (n_head × d_head)
    p.push_back(d);                                  // r_r_bias
    p.push_back(d);                                  // r_s_bias
    p.push_back(2 * d);                              // seg_embed (2 × n_head × d_head)
    p.push_back(d);                                  // attention LayerNorm weight
    p.push_back(d);                                  //   and bias
    p.push_back(d * f);                              // layer_1
    p.push_back(f);
    p.push_back(f * d);                              // layer_2
    p.push_back(d);
    p.push_back(d);                                  // feed-forward LayerNorm weight
    p.push_back(d);                                  //   and bias

    auto& sv = l.saved_bytes;
    sv.push_back(e * t * d);                         // layer input h (the q, k, v projections' input)
    if (!shared_pos) sv.push_back(e * 2 * t * d);    // this layer's copy of the relative encodings
    sv.push_back(e * t * d);                         // q + r_w_bias (AC's query)
    sv.push_back(e * t * d);                         // k (AC's key)
    sv.push_back(e * t * d);                         // q + r_r_bias (BD's query)
    sv.push_back(e * 2 * t * d);                     // k_r: position keys over 2·seq positions
    sv.push_back(e * t * d);                         // q + r_s_bias (EF's query, with seg_embed)
    sv.push_back(e * 2 * b * s * s);                 // one-hot segment matrix (seq × seq × batch × 2),
                                                     // the copy the EF contraction ("ijbs,ibns") keeps
    sv.push_back(e * b * n * s * s);                 // softmax output
    if (drop) {
      sv.push_back(mask * b * n * s * s);            // attention dropout mask
      sv.push_back(e * b * n * s * s);               // attention dropout output (input of probs × V)
    }
    sv.push_back(e * t * d);                         // v
    sv.push_back(e * t * d);                         // attention output (input of o)
    if (drop) sv.push_back(mask * t * d);            // post-attention dropout mask
    sv.push_back(e * t * d);                         // attention LayerNorm input (residual sum)
    sv.push_back(e * t * d);                         // feed-forward input (layer_1's input)
    sv.push_back(e * t * f);                         // GeLU input
    if (drop) sv.push_back(mask * t * f);            // dropout mask after the activation
    sv.push_back(e * t * f);                         // layer_2 input
    if (drop) sv.push_back(mask * t * d);            // feed-forward output dropout mask
    sv.push_back(e * t * d);                         // feed-forward LayerNorm input (residual sum)
    l.output_bytes = e * t * d;

    // Forward FLOPs (a multiply-add = 2): q, k, v, o over the tokens; r over 2·seq positions per
    // sequence; AC and probs × V over seq × seq, BD over seq × 2·seq; EF: the biased queries
    // against the 2 segment embeddings, then the segment matrix; the feed-forward.
    const double T = double(t), S = double(s), D = double(d);
    l.forward_flops = 2.0 * 4 * D * D * T + 2.0 * D * D * 2 * T + 2.0 * T * S * D + 2.0 * T * 2 * S * D +
                      2.0 * T * D * 2 + 2.0 * T * S * 2 * double(n) + 2.0 * T * S * D + 2.0 * 2 * D * double(f) * T;
    m.layers.push_back(std::move(l));
  }

  // Head: XLNetModel's final dropout and its [batch, seq, d] output; SequenceSummary takes the
  // last token's state (a view: the dense layer keeps it, and with it the whole output tensor),
  // dense + tanh + dropout; logits_proj; cross-entropy over `classes`.
  Layer l;
  l.name = "sequence_summary";
  l.params = {d * d, d, d * C, C};
  if (drop) l.saved_bytes.push_back(mask * t * d);   // final dropout mask
  l.saved_bytes.push_back(e * t * d);                // last hidden state (kept through the view)
  l.saved_bytes.push_back(e * b * d);                // tanh output
  if (drop) {
    l.saved_bytes.push_back(mask * b * d);           // summary dropout mask
    l.saved_bytes.push_back(e * b * d);              // classifier input
  }
  l.saved_bytes.push_back(e * b * C);                // logits
  l.saved_bytes.push_back(4 * b * C);                // log-softmax (fp32)
  l.output_bytes = 4;
  l.forward_flops = 2.0 * double(d * d + d * C) * double(b);
  m.layers.push_back(std::move(l));
  return m;
}

}  // namespace coloc::est
