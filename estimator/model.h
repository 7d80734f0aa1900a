// estimator/model.h — what one training iteration of a model asks of a GPU: the parameter
// tensors of each layer, the tensors autograd keeps from the forward pass for the backward pass,
// and the FLOPs of each layer. Built from published architectures (presets), from the
// architecture numbers of a transformer, or from a JSON spec (model_spec.h).
//
// Sources of the accounting (cited again where used in model.cpp):
//   - training FLOPs: forward = 2 FLOPs per parameter per token plus the attention term
//     2·n_ctx·d_model per token per layer, backward = 2 × forward, i.e. C ≈ 6·N·tokens
//     (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1 and §2.1);
//     convolutions: 2·k²·C_in·C_out·H_out·W_out per image (one multiply-add = 2 FLOPs).
//   - activations kept for backward: Korthikanti et al. 2022, "Reducing Activation Recomputation in
//     Large Transformer Models", §4.1 (s·b·h·(34 + 5·a·s/h) bytes per layer at 16 bits), split
//     into its tensors and generalised to grouped-query attention, SwiGLU MLPs, no dropout,
//     fp32 and FlashAttention (which keeps its output and the log-sum-exp instead of the s² scores;
//     Dao et al. 2022, "FlashAttention", §3.1). Small per-token statistics (layer-norm mean/rstd)
//     are left out, as that paper does.
//   - static memory per parameter: weights + gradients + optimizer state; with 16-bit training an
//     fp32 master copy as mixed precision keeps it (Micikevicius et al. 2018, "Mixed Precision
//     Training"; Rajbhandari et al. 2020, "ZeRO", §3.1: 2 + 2 + 12 bytes per parameter with Adam).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coloc::est {

/// Element type of weights and activations. fp32 trains in full precision; bf16 and fp16 train in
/// mixed precision (16-bit weights, gradients and activations; fp32 master weights).
enum class DType { fp32, bf16, fp16 };
/// Bytes per element: 4 for fp32, 2 for bf16 and fp16.
unsigned dtype_bytes(DType t);
/// "fp32", "bf16", "fp16".
const char* dtype_name(DType t);
/// Parses a dtype name; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view s);

/// Optimizer, for the state it keeps per parameter: sgd none, sgd-momentum one fp32 buffer,
/// adam (and adamw, same memory) two fp32 moments (exp_avg, exp_avg_sq), as torch.optim keeps them.
enum class Optimizer { sgd, sgd_momentum, adam };
/// "sgd", "sgd-momentum", "adam".
const char* optimizer_name(Optimizer o);
/// Parses "sgd", "sgd-momentum", "adam" or "adamw"; nullopt when unknown.
std::optional<Optimizer> parse_optimizer(std::string_view s);

/// One layer as training sees it. All sizes are for the whole batch.
struct Layer {
  std::string name;
  /// Element count of each parameter tensor this layer owns (weights, biases). A tied weight
  /// appears once, in the layer that owns it.
  std::vector<uint64_t> params;
  /// Bytes of each tensor autograd keeps from the forward pass until this layer's backward.
  std::vector<uint64_t> saved_bytes;
  /// Bytes of the layer's output; the backward pass materializes its gradient.
  uint64_t output_bytes = 0;
  /// Forward FLOPs; the backward pass counts twice as many.
  double forward_flops = 0;
  /// Bytes of transient library workspace the layer's kernels take while they run and free right
  /// after (cuDNN convolution workspaces); 0 = none. Not allocated by coloc-train (simgpu has no
  /// cuDNN); `coloc estimate` adds it at the layer's backward pass.
  uint64_t workspace_bytes = 0;

  /// Parameter elements of the layer (sum of `params`).
  uint64_t param_count() const;
  /// Bytes of all its saved tensors (sum of `saved_bytes`).
  uint64_t saved_total() const;
  /// The largest saved tensor: the backward pass of this layer holds one temporary gradient this
  /// large (an approximation: the gradient of its largest intermediate).
  uint64_t largest_saved() const;
};

/// A model ready to train at one batch size and dtype.
struct Model {
  std::string name;
  std::vector<Layer> layers;

  /// Parameter elements over all layers: the model's published parameter count.
  uint64_t param_count() const;
  /// Forward FLOPs of one iteration, all layers together.
  double forward_flops() const;
  /// Bytes of activations kept for the backward pass, all layers together.
  uint64_t saved_total() const;
};

/// How a model is run: batch size (sequences or images, >= 1), sequence length in tokens for
/// transformers (>= 1), dtype, and for convolutional models the input resolution and the number of
/// classes of the classifier (or segmentation head).
struct RunShape {
  uint64_t batch = 1;
  uint64_t seq = 0;      ///< tokens per sequence (transformers); 0 = the model's default
  DType dtype = DType::fp32;
  uint64_t image = 0;    ///< image side in pixels, square RGB (CNNs); 0 = the model's default
  uint64_t classes = 0;  ///< classifier outputs (CNNs); 0 = the model's default (1000 for ImageNet)
};

/// A decoder or encoder transformer, by the numbers its published configuration gives.
struct TransformerConfig {
  enum class Norm { layernorm, rmsnorm };          ///< layernorm: weight + bias; rmsnorm: weight
  enum class Mlp { gelu, swiglu };                 ///< gelu: up, act, down; swiglu: gate, up, down
  enum class Attention { eager, flash };           ///< eager keeps the s×s scores; flash does not
  /// causal_lm: next-token LM head; bert_pretraining: BERT's pooler, MLM and NSP heads
  /// (BertForPreTraining); bert_mlm: BERT's MLM head only, no pooler (BertForMaskedLM)
  enum class Head { causal_lm, bert_pretraining, bert_mlm };

  uint64_t layers = 0;
  uint64_t hidden = 0;
  uint64_t heads = 0;
  uint64_t kv_heads = 0;          ///< key/value heads (grouped-query attention); = heads for MHA
  uint64_t ffn = 0;               ///< MLP inner size
  uint64_t vocab = 0;
  uint64_t max_positions = 0;     ///< learned position embeddings; 0 = rotary (no parameters)
  uint64_t type_vocab = 0;        ///< token-type embeddings (BERT: 2); 0 = none
  Norm norm = Norm::layernorm;
  Mlp mlp = Mlp::gelu;
  Attention attention = Attention::eager;
  Head head = Head::causal_lm;
  bool bias = true;               ///< linear layers have biases
  bool tied_embeddings = true;    ///< the LM head reuses the token embedding matrix
  bool dropout = true;            ///< training keeps dropout masks (1 byte per element)
  bool embedding_norm = false;    ///< a norm after the embeddings (BERT)
  bool final_norm = true;         ///< a norm before the head (GPT-2, Llama)
  uint64_t default_seq = 0;       ///< sequence length when RunShape::seq is 0

  /// Empty when the numbers are consistent, else what is wrong ("heads must divide hidden").
  std::string check() const;
};

/// Builds a transformer at `shape`. Throws InputError when config.check() fails or the sequence
/// is longer than max_positions.
Model build_transformer(const std::string& name, const TransformerConfig& config, const RunShape& shape);

/// ResNet-50 (v1.5, as torchvision builds it), by default on 224×224 RGB images and 1000 classes
/// (RunShape::image and ::classes change them). Throws InputError when shape.seq is set. Defined
/// in cnn.cpp with the other convolutional presets (cnn.h).
Model build_resnet50(const RunShape& shape);

/// A preset: a published architecture. Exactly one of `config` and `build` is set.
struct Preset {
  std::string_view name;
  std::string_view source;          ///< where the configuration comes from (paper, reference code)
  TransformerConfig (*config)();    ///< a transformer's configuration (build_transformer), or nullptr
  Model (*build)(const RunShape&);  ///< any other architecture's builder (CNNs, XLNet), or nullptr
};
/// Every preset, in the order --help lists them.
std::span<const Preset> presets();
/// The preset called `name`, or nullptr.
const Preset* find_preset(std::string_view name);
/// Builds the preset `name` at `shape`. Throws InputError for an unknown name (listing the known
/// ones) or a shape the model cannot take.
Model make_preset(std::string_view name, const RunShape& shape);

/// Bytes allocated once per parameter element for training: weights and gradients at the dtype,
/// an fp32 master copy for 16-bit dtypes, and the optimizer's fp32 state.
uint64_t static_bytes_per_param(DType dtype, Optimizer optimizer);

}  // namespace coloc::est
