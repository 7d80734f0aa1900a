// estimator/cnn.h — convolutional networks as training sees them: a small builder that follows the
// activation shape (channels × height × width) through a network, records the tensors PyTorch's
// autograd keeps for the backward pass, and groups the operations into `Layer`s; and the CNN
// presets built with it (ResNet-18/34/50, VGG-16, MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
// Inception-v3, Xception, U-Net with a ResNet-34 encoder). Each preset cites its paper and the
// reference implementation whose module structure it follows (cnn.cpp).
//
// What each operation keeps for backward (what autograd saves in PyTorch, derivatives.yaml):
//   Conv2d its input; BatchNorm its input (plus per-channel statistics, left out); ReLU in place
//   its output, which is its input tensor (the batch norm's output) modified in place; ReLU6 in
//   place a copy of its input (hardtanh's gradient is written from `self`);
//   ReLU not in place its output (a new tensor); SiLU, hard-swish, GELU and hard-sigmoid their input
//   (in place, autograd keeps a copy of the input instead: the same bytes); sigmoid its output; an
//   elementwise product both operands; max pooling its input and int64 indices of the output's
//   shape; average pooling its input; adaptive average pooling its input, except to 1×1, which
//   PyTorch computes as a mean over H and W and which keeps nothing (AdaptiveAveragePooling.cpp);
//   Linear its input; dropout a one-byte mask (in place: a scaled noise tensor of the input's dtype);
//   addition, concatenation, flattening and nearest upsampling nothing. A tensor kept by several
//   operations counts once, in the first layer (in forward order) that keeps it: the one whose
//   backward pass runs last, so the tensor lives until then.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>

#include "model.h"

namespace coloc::est {

namespace cnn {

/// An activation tensor of the batch: an identity (the same tensor modified in place keeps its id)
/// and its shape per image, channels × height × width. Linear layers' tensors are c × 1 × 1.
struct Tensor {
  uint64_t id = 0;
  uint64_t c = 0, h = 0, w = 0;
};

/// A 2-D convolution: `out` channels, a kh × kw kernel, stride, zero padding ph/pw, groups
/// (groups = input channels: depthwise), and a bias.
struct Conv {
  uint64_t out = 0;
  uint64_t kh = 1, kw = 1;
  uint64_t stride = 1;
  uint64_t ph = 0, pw = 0;
  uint64_t groups = 1;
  bool bias = false;
};
/// A square k × k convolution with "same" padding (k / 2), as most reference code writes it.
Conv conv(uint64_t out, uint64_t k, uint64_t stride = 1, uint64_t groups = 1, bool bias = false);

/// The defaults a network declares: its input side and classes when RunShape leaves them 0, and
/// the smallest input side it takes.
struct Defaults {
  uint64_t image = 224;
  uint64_t min_image = 32;
  uint64_t classes = 1000;
  uint64_t image_multiple = 1;  ///< the side must be a multiple of this (U-Net: 32)
};

/// Builds a Model operation by operation. Checks the RunShape on construction (InputError for a
/// sequence length, batch 0, an image smaller than the network takes, sizes past 64 bits).
/// Operations add to the current layer (begin() starts one, end() closes it with its output).
class Net {
 public:
  Net(std::string name, const RunShape& shape, const Defaults& defaults);

  uint64_t image() const { return image_; }
  uint64_t classes() const { return classes_; }

  /// The input images, 3 × image × image.
  Tensor input();

  /// Starts a layer called `name`; the previous one must have been ended.
  void begin(std::string name);
  /// Ends the current layer; `out` is its output (its gradient is materialized in backward).
  void end(const Tensor& out);

  Tensor conv(const Tensor& x, const Conv& c);
  Tensor bn(const Tensor& x);
  /// ReLU in place: keeps its output, which is x (derivatives.yaml's relu_ uses `result`).
  Tensor relu_(const Tensor& x);
  /// ReLU6 in place (hardtanh_): keeps a copy of its input, and returns x modified in place.
  /// PyTorch's derivatives.yaml gives hardtanh's gradient from `self` and has no in-place entry
  /// from `result` (as relu_ and leaky_relu_ have), so autograd saves the original input of the
  /// in-place op: one more tensor of x's size.
  Tensor relu6_(const Tensor& x);
  /// ReLU not in place: keeps its output, a new tensor.
  Tensor relu(const Tensor& x);
  /// SiLU, hard-swish, GELU (in place or not): keeps its input; the output is a new tensor.
  Tensor act_keeps_input(const Tensor& x);
  /// Sigmoid: keeps its output.
  Tensor sigmoid(const Tensor& x);
  /// Hard-sigmoid: keeps its input.
  Tensor hardsigmoid(const Tensor& x) { return act_keeps_input(x); }
  /// x * gate, gate broadcast over H and W (squeeze-and-excitation): keeps both.
  Tensor mul(const Tensor& x, const Tensor& gate);
  /// a + b: keeps nothing; a new tensor.
  Tensor add(const Tensor& a, const Tensor& b);
  /// a += b: keeps nothing; the result is a.
  Tensor add_(const Tensor& a, const Tensor& b);
  /// Concatenation along channels: keeps nothing; a new tensor.
  Tensor cat(std::initializer_list<Tensor> parts);
  /// Max pooling k × k: keeps its input and int64 indices.
  Tensor max_pool(const Tensor& x, uint64_t k, uint64_t stride, uint64_t pad);
  /// Average pooling k × k: keeps its input.
  Tensor avg_pool(const Tensor& x, uint64_t k, uint64_t stride, uint64_t pad);
  /// Adaptive average pooling to oh × ow: keeps its input unless the output is 1 × 1 (a mean).
  Tensor adaptive_avg_pool(const Tensor& x, uint64_t oh, uint64_t ow);
  /// Nearest-neighbour 2× upsampling: keeps nothing.
  Tensor upsample2x(const Tensor& x);
  /// Flattens to (c·h·w) × 1 × 1: a view, the same tensor.
  Tensor flatten(const Tensor& x);
  /// Fully connected layer on a flattened tensor: keeps its input.
  Tensor linear(const Tensor& x, uint64_t out, bool bias = true);
  /// Dropout: keeps a one-byte mask (not in place, a new output) or, in place, a noise tensor of the
  /// activations' dtype (the output is x).
  Tensor dropout(const Tensor& x, bool inplace = false);
  /// Cross-entropy on logits (per image, or per pixel for segmentation): keeps the logits and the
  /// log-softmax in fp32. Ends the current layer; its output is the fp32 loss scalar.
  void cross_entropy(const Tensor& logits);

  /// The finished model (every layer ended).
  Model finish();

 private:
  uint64_t bytes(const Tensor& t, uint64_t elem) const;
  uint64_t bytes(const Tensor& t) const { return bytes(t, elem_); }
  Tensor make(uint64_t c, uint64_t h, uint64_t w);
  void keep(const Tensor& t);
  void keep_bytes(uint64_t b);
  uint64_t out_side(uint64_t in, uint64_t k, uint64_t stride, uint64_t pad) const;
  Layer& cur();

  std::string name_;
  uint64_t batch_, elem_, image_, classes_, min_image_;
  uint64_t next_id_ = 1;
  std::set<uint64_t> kept_;
  Model model_;
  bool open_ = false;
};

}  // namespace cnn

// The presets (cnn.cpp). Each takes RunShape::image and ::classes (0 = its default) and throws
// InputError for a sequence length, batch 0, or an image smaller than it takes.
Model build_resnet18(const RunShape& shape);
Model build_resnet34(const RunShape& shape);
// build_resnet50 is declared in model.h.
Model build_vgg16(const RunShape& shape);
Model build_mobilenet_v2(const RunShape& shape);
Model build_mobilenet_v3_small(const RunShape& shape);
Model build_efficientnet_b0(const RunShape& shape);
Model build_inception_v3(const RunShape& shape);
Model build_xception(const RunShape& shape);
Model build_unet_resnet34(const RunShape& shape);

}  // namespace coloc::est
