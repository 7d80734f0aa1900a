// estimator/analytic.h — a training job's peak device memory from its model description, before
// it runs (`coloc estimate`, `coloc run --estimate-from`).
//
// The estimate is what the driver sees, item by item (in this order):
//   weights, gradients, fp32 master weights (mixed precision), optimizer state   — model states
//   peak activations, per layer (the layer whose backward pass holds the peak)   — autograd
//   the caching allocator's rounding and segment overhead                        — PyTorch
//   the CUDA context                                                             — driver
//   library workspaces (cuBLAS per handle and stream, cuDNN convolutions)         — libraries
//   a safety margin, stated as such
// and their sum, total_bytes. Every constant cites its source in analytic.cpp.
//
// The training step is the one coloc-train runs (tools/workload/trainer.h): weights, masters,
// gradients and optimizer state stay allocated; the forward pass allocates each layer's saved
// tensors; the backward pass, last layer first, allocates the gradient of the layer's input and a
// temporary the size of its largest saved tensor, then frees the temporary, the layer's saved
// tensors and the gradient of its output.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model.h"

namespace coloc::est {

/// How tensors reach the driver. pytorch: PyTorch's CUDACachingAllocator with default settings
/// (512 B blocks, 2 MiB small segments, 20 MiB segments for 1–10 MiB, larger rounded to 2 MiB,
/// freed blocks cached). plain: one driver allocation per tensor, freed at once (cudaMalloc).
enum class Allocator { pytorch, plain };
/// "pytorch", "plain".
const char* allocator_name(Allocator a);
/// Parses "pytorch" or "plain"; nullopt when unknown.
std::optional<Allocator> parse_allocator(std::string_view s);

/// What the estimate needs to know of a device model.
struct DeviceProfile {
  std::string_view name;           ///< e.g. "A100", matched case-insensitively as a substring of NVML's name
  unsigned sm_major = 8;           ///< compute capability major (9 = Hopper: larger cuBLAS workspace)
  unsigned sm_minor = 0;           ///< compute capability minor (sm86 = 8, 6)
  std::string_view source;         ///< where its numbers come from
};
/// Every known device model, the default ("A100") first.
std::span<const DeviceProfile> device_profiles();
/// The profile whose name occurs in `nvml_name` (case-insensitive: "NVIDIA H200" → H200), or
/// nullptr when none does.
const DeviceProfile* find_device_profile(std::string_view nvml_name);

/// Options of one estimate. `model` carries batch, sequence, image size and dtype already.
struct EstimateOptions {
  DType dtype = DType::fp32;             ///< must be the dtype the model was built with
  Optimizer optimizer = Optimizer::adam;
  Allocator allocator = Allocator::pytorch;
  std::string device_model = "A100";     ///< a name find_device_profile() knows
  /// CUDA_MODULE_LOADING=LAZY (PyTorch's default since 1.13). Only the context item's note says
  /// it: a training job loads most kernels either way, so both count the eager context.
  bool lazy_loading = true;
  /// Count the cuBLAS and cuDNN workspaces (and their allocator segments). false leaves them out:
  /// what coloc-train allocates on simgpu, which has neither library.
  bool libraries = true;
};

/// One line of the breakdown.
struct EstimateItem {
  std::string key;     ///< stable JSON key: "weights", "gradients", "master_weights",
                       ///< "optimizer_state", "activations", "allocator", "cuda_context",
                       ///< "cublas_workspace", "cudnn_workspace", "safety_margin"
  std::string label;   ///< what a person reads: "optimizer state (adam: 2 fp32 moments)"
  uint64_t bytes = 0;
  std::string note;    ///< how it was counted, and its source, in one line
};

/// The activations held at each layer's backward pass (for the per-layer picture).
struct LayerPeak {
  std::string layer;
  uint64_t bytes = 0;   ///< activations and gradients live while this layer's backward runs
  uint64_t workspace_bytes = 0;  ///< its cuDNN workspace (0 when libraries are not counted)
};

struct Estimate {
  std::vector<EstimateItem> items;   ///< in the order above; items of 0 bytes are kept
  uint64_t total_bytes = 0;          ///< the sum of items' bytes
  std::string peak_layer;            ///< the layer whose backward pass holds the peak (workspace included)
  std::vector<LayerPeak> layers;     ///< per layer, in model order
  uint64_t params = 0;               ///< parameter elements

  /// The item with `key`, or nullptr.
  const EstimateItem* item(std::string_view key) const;
};

/// The estimate for training `model` under `options`: every item in bytes (sources in
/// analytic.cpp). activations = the most bytes live in one layer's backward pass (its workspace
/// apart, in cudnn_workspace); allocator = the bytes the allocator holds from the driver at its
/// peak, by PyTorch's documented rules (or cuMemAlloc's rounding for Allocator::plain), less every
/// tensor item; safety_margin = 5% of the rest, rounded up. Throws InputError for an unknown device
/// model (listing the known ones) or a model without layers.
Estimate estimate_training(const Model& model, const EstimateOptions& options);

/// The model `what` names: a preset name, or the path of a file that is a Hugging Face
/// config.json (it has "model_type") or a coloc model spec (model_spec.h). Throws InputError when
/// it is neither, or cannot be read or built at `shape`.
Model resolve_model(const std::string& what, const RunShape& shape);

}  // namespace coloc::est
