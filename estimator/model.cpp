// estimator/model.cpp — presets and the layer-by-layer accounting described in model.h.
#include "model.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "cnn.h"
#include "input_error.h"
#include "xlnet.h"

namespace coloc::est {

unsigned dtype_bytes(DType t) { return t == DType::fp32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::fp32, DType::bf16, DType::fp16})
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

const char* optimizer_name(Optimizer o) {
  switch (o) {
    case Optimizer::sgd: return "sgd";
    case Optimizer::sgd_momentum: return "sgd-momentum";
    case Optimizer::adam: return "adam";
  }
  return "?";
}

std::optional<Optimizer> parse_optimizer(std::string_view s) {
  if (s == "sgd") return Optimizer::sgd;
  if (s == "sgd-momentum") return Optimizer::sgd_momentum;
  if (s == "adam" || s == "adamw") return Optimizer::adam;
  return std::nullopt;
}

uint64_t static_bytes_per_param(DType dtype, Optimizer optimizer) {
  const uint64_t weight_and_grad = 2ULL * dtype_bytes(dtype);
  const uint64_t master = dtype == DType::fp32 ? 0 : 4;
  const uint64_t state = optimizer == Optimizer::sgd ? 0 : optimizer == Optimizer::sgd_momentum ? 4 : 8;
  return weight_and_grad + master + state;
}

uint64_t Layer::param_count() const { return std::accumulate(params.begin(), params.end(), uint64_t{0}); }
uint64_t Layer::saved_total() const { return std::accumulate(saved_bytes.begin(), saved_bytes.end(), uint64_t{0}); }
uint64_t Layer::largest_saved() const {
  return saved_bytes.empty() ? 0 : *std::max_element(saved_bytes.begin(), saved_bytes.end());
}

uint64_t Model::param_count() const {
  uint64_t n = 0;
  for (const Layer& l : layers) n += l.param_count();
  return n;
}
double Model::forward_flops() const {
  double f = 0;
  for (const Layer& l : layers) f += l.forward_flops;
  return f;
}
uint64_t Model::saved_total() const {
  uint64_t n = 0;
  for (const Layer& l : layers) n += l.saved_total();
  return n;
}

// ---- transformers -------------------------------------------------------------------------------

std::string TransformerConfig::check() const {
  // Upper bounds far above any published model, so that sizes stay within 64 bits.
  constexpr uint64_t kMaxWidth = 1ULL << 24, kMaxLayers = 4096;
  if (layers > kMaxLayers) return "layers must be at most 4096";
  for (uint64_t v : {hidden, ffn, vocab, max_positions, type_vocab, default_seq})
    if (v > kMaxWidth) return "hidden, ffn, vocab, max_positions, type_vocab and seq must be at most 2^24";
  if (layers == 0) return "layers must be at least 1";
  if (hidden == 0) return "hidden must be at least 1";
  if (heads == 0) return "heads must be at least 1";
  if (hidden % heads != 0) return "heads must divide hidden";
  if (kv_heads == 0 || heads % kv_heads != 0) return "kv_heads must be at least 1 and divide heads";
  if (ffn == 0) return "ffn must be at least 1";
  if (vocab == 0) return "vocab must be at least 1";
  return "";
}

namespace {

// Adds the parameter tensors of a linear layer (in × out weight, optional bias).
void linear(std::vector<uint64_t>& params, uint64_t in, uint64_t out, bool bias) {
  params.push_back(in * out);
  if (bias) params.push_back(out);
}

void norm(std::vector<uint64_t>& params, TransformerConfig::Norm kind, uint64_t h) {
  params.push_back(h);                                              // weight (gamma)
  if (kind == TransformerConfig::Norm::layernorm) params.push_back(h);  // bias (beta)
}

}  // namespace

Model build_transformer(const std::string& name, const TransformerConfig& c, const RunShape& shape) {
  if (std::string problem = c.check(); !problem.empty()) throw InputError(name + ": " + problem);
  const uint64_t s = shape.seq ? shape.seq : c.default_seq;
  if (s == 0) throw InputError(name + ": no sequence length (give --seq)");
  if (s > (1ULL << 24)) throw InputError(name + ": --seq must be at most 2^24");
  if (c.max_positions && s > c.max_positions)
    throw InputError(name + ": --seq " + std::to_string(s) + " is longer than its " + std::to_string(c.max_positions) +
                     " learned positions");
  if (shape.batch == 0) throw InputError(name + ": batch must be at least 1");
  if (shape.image || shape.classes)
    throw InputError(name + ": --image and --classes apply only to convolutional models");

  // Every size below is a product of at most five of these; refuse shapes whose products would
  // not fit in 64 bits (no device holds 2^60 bytes anyway).
  using u128 = unsigned __int128;
  const u128 widest = std::max({u128(c.hidden), u128(c.ffn), u128(c.vocab), u128(c.heads) * s});
  if (u128(shape.batch) * s * widest * 8 > u128(1) << 60)
    throw InputError(name + ": batch × seq too large for this model (over 2^60 bytes of activations)");

  const uint64_t b = shape.batch, h = c.hidden, a = c.heads, f = c.ffn, V = c.vocab;
  const uint64_t t = b * s;                        // tokens per batch
  const uint64_t kvd = c.kv_heads * (h / a);       // width of K and V (grouped-query attention)
  const uint64_t e = dtype_bytes(shape.dtype);     // bytes per activation element
  const uint64_t mask = 1;                         // dropout masks: one byte per element
  const uint64_t ids = 8;                          // token ids are int64
  const bool eager = c.attention == TransformerConfig::Attention::eager;

  Model m;
  m.name = name;

  // Embeddings: a lookup (no FLOPs). Backward needs the ids; BERT's norm needs its input.
  {
    Layer l;
    l.name = "embed";
    l.params.push_back(V * h);
    if (c.max_positions) l.params.push_back(c.max_positions * h);
    if (c.type_vocab) l.params.push_back(c.type_vocab * h);
    if (c.embedding_norm) norm(l.params, c.norm, h);
    l.saved_bytes.push_back(ids * t);
    if (c.type_vocab) l.saved_bytes.push_back(ids * t);
    if (c.embedding_norm) l.saved_bytes.push_back(e * t * h);
    if (c.dropout) l.saved_bytes.push_back(mask * t * h);
    l.output_bytes = e * t * h;
    m.layers.push_back(std::move(l));
  }

  // Blocks. Saved tensors follow Korthikanti et al. 2022 §4.1: for f = 4h, 16 bits, dropout and
  // eager attention they add up to s·b·h·34 + 5·a·s²·b bytes, the paper's equation (1).
  for (uint64_t i = 0; i < c.layers; ++i) {
    Layer l;
    l.name = "block." + std::to_string(i);
    norm(l.params, c.norm, h);                  // attention norm
    linear(l.params, h, h, c.bias);             // query
    linear(l.params, h, kvd, c.bias);           // key
    linear(l.params, h, kvd, c.bias);           // value
    linear(l.params, h, h, c.bias);             // output projection
    norm(l.params, c.norm, h);                  // MLP norm
    if (c.mlp == TransformerConfig::Mlp::gelu) {
      linear(l.params, h, f, c.bias);           // up
      linear(l.params, f, h, c.bias);           // down
    } else {
      linear(l.params, h, f, c.bias);           // gate
      linear(l.params, h, f, c.bias);           // up
      linear(l.params, f, h, c.bias);           // down
    }

    auto& sv = l.saved_bytes;
    sv.push_back(e * t * h);                    // attention norm input
    sv.push_back(e * t * h);                    // Q/K/V projections' input
    sv.push_back(e * t * h);                    // Q
    sv.push_back(e * t * kvd);                  // K
    sv.push_back(e * t * kvd);                  // V
    if (eager) {
      sv.push_back(e * b * a * s * s);          // softmax output
      if (c.dropout) {
        sv.push_back(mask * b * a * s * s);     // attention dropout mask
        sv.push_back(e * b * a * s * s);        // attention dropout output (input of scores × V)
      }
    } else {
      sv.push_back(4 * b * a * s);              // FlashAttention's fp32 log-sum-exp per query
    }
    sv.push_back(e * t * h);                    // output projection input (FlashAttention: its output O)
    if (c.dropout) sv.push_back(mask * t * h);  // residual dropout mask
    sv.push_back(e * t * h);                    // MLP norm input
    sv.push_back(e * t * h);                    // MLP input
    if (c.mlp == TransformerConfig::Mlp::gelu) {
      sv.push_back(e * t * f);                  // GeLU input
      sv.push_back(e * t * f);                  // down projection input (GeLU output)
    } else {
      sv.push_back(e * t * f);                  // gate output (SiLU input)
      sv.push_back(e * t * f);                  // SiLU output
      sv.push_back(e * t * f);                  // up output
      sv.push_back(e * t * f);                  // down projection input (SiLU(gate) · up)
    }
    if (c.dropout) sv.push_back(mask * t * h);  // residual dropout mask
    l.output_bytes = e * t * h;
    // Kaplan et al. 2020, Table 1: 2 FLOPs per parameter per token, plus 2·n_ctx·d_model per token
    // for the attention scores and their application to V.
    l.forward_flops = 2.0 * double(l.param_count()) * double(t) + 2.0 * double(s) * double(h) * double(t);
    m.layers.push_back(std::move(l));
  }

  // Head and loss. The logits stay referenced until backward (they are returned to the caller);
  // the cross-entropy keeps its log-softmax in fp32, as Hugging Face upcasts logits for the loss.
  Layer l;
  l.saved_bytes.push_back(e * t * h);           // head input
  l.saved_bytes.push_back(e * t * V);           // logits
  l.saved_bytes.push_back(4 * t * V);           // log-softmax (fp32)
  l.output_bytes = 4;                           // the loss, one fp32 scalar
  if (c.head == TransformerConfig::Head::causal_lm) {
    l.name = "lm_head";
    if (c.final_norm) {
      norm(l.params, c.norm, h);
      l.saved_bytes.push_back(e * t * h);       // final norm input
    }
    if (!c.tied_embeddings) l.params.push_back(V * h);
    l.forward_flops = 2.0 * double(V * h) * double(t);
  } else if (c.head == TransformerConfig::Head::bert_mlm) {
    // BERT's masked-LM head alone, as Hugging Face BertForMaskedLM builds it (BertModel without its
    // pooler, then BertOnlyMLMHead): transform (dense, GeLU, norm) and a decoder tied to the word
    // embeddings with its own bias, over every position.
    l.name = "mlm_head";
    linear(l.params, h, h, true);               // MLM transform
    norm(l.params, c.norm, h);                  // MLM transform norm
    l.params.push_back(V);                      // decoder bias (weight tied to the embeddings)
    l.saved_bytes.push_back(e * t * h);         // GeLU input
    l.saved_bytes.push_back(e * t * h);         // transform norm input
    l.saved_bytes.push_back(e * t * h);         // decoder input
    l.forward_flops = 2.0 * double(h * h + V * h) * double(t);
  } else {
    // BERT pre-training heads (Devlin et al. 2019 §3.1): pooler + next-sentence classifier on the
    // first token; masked-LM transform (dense, GeLU, norm) and a decoder tied to the word
    // embeddings with its own bias, over every position (as BertForPreTraining computes it).
    l.name = "pretraining_heads";
    linear(l.params, h, h, true);               // pooler
    linear(l.params, h, 2, true);               // next-sentence classifier
    linear(l.params, h, h, true);               // MLM transform
    norm(l.params, c.norm, h);                  // MLM transform norm
    l.params.push_back(V);                      // decoder bias (weight tied to the embeddings)
    l.saved_bytes.push_back(e * b * h);         // pooler input
    l.saved_bytes.push_back(e * b * h);         // pooler tanh output
    l.saved_bytes.push_back(e * t * h);         // GeLU input
    l.saved_bytes.push_back(e * t * h);         // transform norm input
    l.saved_bytes.push_back(e * t * h);         // decoder input
    l.forward_flops = 2.0 * double(h * h + V * h) * double(t) + 2.0 * double(h * h + 2 * h) * double(b);
  }
  m.layers.push_back(std::move(l));
  return m;
}

// ---- presets ------------------------------------------------------------------------------------

namespace {

// BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers", §3: BASE
// L=12, H=768, A=12; LARGE L=24, H=1024, A=16; FFN 4H) with the Hugging Face configs
// google-bert/bert-base-uncased and bert-large-uncased (vocab 30522, 512 positions, 2 token types,
// GeLU, dropout 0.1, post-norm LayerNorm after the embeddings and in every block).
TransformerConfig bert(uint64_t layers, uint64_t hidden, uint64_t heads) {
  TransformerConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = c.kv_heads = heads;
  c.ffn = 4 * hidden;
  c.vocab = 30522;
  c.max_positions = 512;
  c.type_vocab = 2;
  c.head = TransformerConfig::Head::bert_pretraining;
  c.embedding_norm = true;
  c.final_norm = false;
  c.default_seq = 512;
  return c;
}

// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", Table 2) with
// the Hugging Face configs openai-community/gpt2, gpt2-medium, gpt2-large (vocab 50257, 1024
// positions, FFN 4H, GeLU, dropout 0.1, pre-norm, final LayerNorm, LM head tied to the embeddings).
TransformerConfig gpt2(uint64_t layers, uint64_t hidden, uint64_t heads) {
  TransformerConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = c.kv_heads = heads;
  c.ffn = 4 * hidden;
  c.vocab = 50257;
  c.max_positions = 1024;
  c.default_seq = 1024;
  return c;
}

// Llama-3.2-1B, Hugging Face config meta-llama/Llama-3.2-1B: 16 layers, hidden 2048, 32 heads,
// 8 KV heads (head dim 64), intermediate 8192 (SwiGLU), vocab 128256, RMSNorm, rotary positions,
// no biases, no dropout, tie_word_embeddings true. Attention through PyTorch's SDPA (Flash) kernels,
// the Transformers default. Default sequence 2048.
TransformerConfig llama_3_2_1b() {
  TransformerConfig c;
  c.layers = 16;
  c.hidden = 2048;
  c.heads = 32;
  c.kv_heads = 8;
  c.ffn = 8192;
  c.vocab = 128256;
  c.norm = TransformerConfig::Norm::rmsnorm;
  c.mlp = TransformerConfig::Mlp::swiglu;
  c.attention = TransformerConfig::Attention::flash;
  c.bias = false;
  c.dropout = false;
  c.default_seq = 2048;
  return c;
}

// One table: name, source, and either a transformer configuration or a builder.
constexpr Preset kPresets[] = {
    // Convolutional networks (cnn.h, cnn.cpp, where each cites its paper and reference code).
    {"resnet18", "He et al. 2016; torchvision resnet18, 224x224", nullptr, build_resnet18},
    {"resnet34", "He et al. 2016; torchvision resnet34, 224x224", nullptr, build_resnet34},
    {"resnet50", "He et al. 2016, Table 1; torchvision resnet50 (v1.5), 224x224 images", nullptr, build_resnet50},
    {"vgg16", "Simonyan & Zisserman 2015, config D; torchvision vgg16, 224x224", nullptr, build_vgg16},
    {"mobilenet-v2", "Sandler et al. 2018; torchvision mobilenet_v2, 224x224", nullptr, build_mobilenet_v2},
    {"mobilenet-v3-small", "Howard et al. 2019; timm mobilenetv3_small_100, 224x224", nullptr, build_mobilenet_v3_small},
    {"efficientnet-b0", "Tan & Le 2019; torchvision/timm efficientnet_b0, 224x224", nullptr, build_efficientnet_b0},
    {"inception-v3", "Szegedy et al. 2016; torchvision inception_v3, no aux logits, 299x299", nullptr, build_inception_v3},
    {"xception", "Chollet 2017; timm xception (legacy_xception), 299x299", nullptr, build_xception},
    {"unet-resnet34", "Ronneberger et al. 2015; smp Unet(resnet34), 512x512, 1 class", nullptr, build_unet_resnet34},
    {"bert-base", "Devlin et al. 2019; HF google-bert/bert-base-uncased", [] { return bert(12, 768, 12); }, nullptr},
    {"bert-large", "Devlin et al. 2019; HF google-bert/bert-large-uncased", [] { return bert(24, 1024, 16); }, nullptr},
    {"gpt2-small", "Radford et al. 2019; HF openai-community/gpt2", [] { return gpt2(12, 768, 12); }, nullptr},
    {"gpt2-medium", "Radford et al. 2019; HF openai-community/gpt2-medium", [] { return gpt2(24, 1024, 16); }, nullptr},
    {"gpt2-large", "Radford et al. 2019; HF openai-community/gpt2-large", [] { return gpt2(36, 1280, 20); }, nullptr},
    {"llama-1b", "HF meta-llama/Llama-3.2-1B config.json", llama_3_2_1b, nullptr},
    // GPT-2 XL (Radford et al. 2019, Table 2: 48 layers, d_model 1600; HF
    // openai-community/gpt2-xl config.json: n_embd 1600, n_layer 48, n_head 25, n_inner null = 4H).
    {"gpt2-xl", "Radford et al. 2019; HF openai-community/gpt2-xl", [] { return gpt2(48, 1600, 25); }, nullptr},
    // XLNet (Yang et al. 2019) fine-tuned as HF XLNetForSequenceClassification, 2 classes, seq 512;
    // HF xlnet/xlnet-base-cased and xlnet/xlnet-large-cased config.json (xlnet.h, xlnet.cpp).
    {"xlnet-base", "Yang et al. 2019; HF xlnet/xlnet-base-cased, XLNetForSequenceClassification", nullptr,
     [](const RunShape& s) { return build_xlnet("xlnet-base", xlnet_base_config(), s); }},
    {"xlnet-large", "Yang et al. 2019; HF xlnet/xlnet-large-cased, XLNetForSequenceClassification", nullptr,
     [](const RunShape& s) { return build_xlnet("xlnet-large", xlnet_large_config(), s); }},
};

}  // namespace

std::span<const Preset> presets() { return kPresets; }

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

Model make_preset(std::string_view name, const RunShape& shape) {
  if (const Preset* p = find_preset(name))
    return p->config ? build_transformer(std::string(name), p->config(), shape) : p->build(shape);
  std::string known;
  for (const Preset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw InputError("unknown model '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace coloc::est
