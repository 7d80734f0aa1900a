// estimator/cnn.cpp — the convolutional-network builder and the CNN presets (cnn.h).
#include "cnn.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "input_error.h"

namespace coloc::est {

namespace cnn {

Conv conv(uint64_t out, uint64_t k, uint64_t stride, uint64_t groups, bool bias) {
  return Conv{out, k, k, stride, k / 2, k / 2, groups, bias};
}

namespace {
using u128 = unsigned __int128;
// No tensor of a real training run comes near this; refusing larger ones keeps every size, and
// every sum of them over a model, within 64 bits.
constexpr uint64_t kMaxTensorBytes = 1ULL << 50;
}  // namespace

Net::Net(std::string name, const RunShape& shape, const Defaults& d) : name_(std::move(name)) {
  if (shape.seq) throw InputError(name_ + ": --seq applies only to transformer models");
  if (shape.batch == 0) throw InputError(name_ + ": batch must be at least 1");
  batch_ = shape.batch;
  elem_ = dtype_bytes(shape.dtype);
  image_ = shape.image ? shape.image : d.image;
  classes_ = shape.classes ? shape.classes : d.classes;
  min_image_ = d.min_image;
  if (image_ < d.min_image)
    throw InputError(name_ + ": --image " + std::to_string(image_) + " is too small for this network (at least " +
                     std::to_string(d.min_image) + ")");
  if (image_ > (1ULL << 20)) throw InputError(name_ + ": --image must be at most 2^20");
  if (d.image_multiple > 1 && image_ % d.image_multiple != 0)
    throw InputError(name_ + ": --image must be a multiple of " + std::to_string(d.image_multiple) + " (got " +
                     std::to_string(image_) + ")");
  if (classes_ > (1ULL << 24)) throw InputError(name_ + ": --classes must be at most 2^24");
  model_.name = name_;
}

uint64_t Net::bytes(const Tensor& t, uint64_t elem) const {
  // c ≤ 2^24 and h, w ≤ 2^21 here, so one image's bytes fit in 128 bits, and so does the batch's
  // once one image is known to be under 2^50 bytes.
  const u128 per_image = u128(t.c) * t.h * t.w * elem;
  const u128 all = per_image * batch_;
  if (per_image > kMaxTensorBytes || all > kMaxTensorBytes)
    throw InputError(name_ + ": batch × image too large (a tensor of over 2^50 bytes)");
  return uint64_t(all);
}

Tensor Net::make(uint64_t c, uint64_t h, uint64_t w) {
  Tensor t{next_id_++, c, h, w};
  bytes(t, 8);  // the widest element kept (int64 indices): refuse before any size can overflow
  return t;
}

Layer& Net::cur() {
  if (!open_) throw std::logic_error("cnn::Net: an operation outside a layer");
  return model_.layers.back();
}

void Net::keep(const Tensor& t) {
  if (kept_.insert(t.id).second) cur().saved_bytes.push_back(bytes(t));
}

void Net::keep_bytes(uint64_t b) { cur().saved_bytes.push_back(b); }

uint64_t Net::out_side(uint64_t in, uint64_t k, uint64_t stride, uint64_t pad) const {
  if (in + 2 * pad < k)
    throw InputError(name_ + ": --image " + std::to_string(image_) + " is too small for this network (at least " +
                     std::to_string(min_image_) + ")");
  return (in + 2 * pad - k) / stride + 1;
}

Tensor Net::input() { return make(3, image_, image_); }

void Net::begin(std::string name) {
  if (open_) throw std::logic_error("cnn::Net: layer " + model_.layers.back().name + " not ended");
  model_.layers.emplace_back();
  model_.layers.back().name = std::move(name);
  open_ = true;
}

void Net::end(const Tensor& out) {
  cur().output_bytes = bytes(out);
  open_ = false;
}

Tensor Net::conv(const Tensor& x, const Conv& c) {
  if (c.groups == 0 || x.c % c.groups != 0 || c.out % c.groups != 0)
    throw std::logic_error("cnn::Net: groups must divide the channels");
  keep(x);
  const uint64_t oh = out_side(x.h, c.kh, c.stride, c.ph), ow = out_side(x.w, c.kw, c.stride, c.pw);
  Tensor y = make(c.out, oh, ow);
  Layer& l = cur();
  const uint64_t fan_in = x.c / c.groups * c.kh * c.kw;  // multiply-adds per output element
  l.params.push_back(fan_in * c.out);
  if (c.bias) l.params.push_back(c.out);
  l.forward_flops += 2.0 * double(fan_in) * double(c.out) * double(oh) * double(ow) * double(batch_);
  // cuDNN workspace, approximated: the algorithms that transform a tensor (FFT, Winograd) need a
  // buffer about the size of the larger of the convolution's input and output; implicit-GEMM ones
  // need none. An upper bound of what the chosen algorithm asks, not a published constant.
  l.workspace_bytes = std::max({l.workspace_bytes, bytes(x), bytes(y)});
  return y;
}

Tensor Net::bn(const Tensor& x) {
  keep(x);
  cur().params.push_back(x.c);  // weight (gamma)
  cur().params.push_back(x.c);  // bias (beta); running mean and variance are buffers
  return make(x.c, x.h, x.w);
}

Tensor Net::relu_(const Tensor& x) {
  keep(x);
  return x;
}

Tensor Net::relu6_(const Tensor& x) {
  keep(make(x.c, x.h, x.w));  // the copy of the input autograd saves
  return x;
}

Tensor Net::relu(const Tensor& x) {
  Tensor y = make(x.c, x.h, x.w);
  keep(y);
  return y;
}

Tensor Net::act_keeps_input(const Tensor& x) {
  keep(x);
  return make(x.c, x.h, x.w);
}

Tensor Net::sigmoid(const Tensor& x) {
  Tensor y = make(x.c, x.h, x.w);
  keep(y);
  return y;
}

Tensor Net::mul(const Tensor& x, const Tensor& gate) {
  keep(x);
  keep(gate);
  return make(x.c, x.h, x.w);
}

Tensor Net::add(const Tensor& a, const Tensor& b) {
  if (a.c != b.c || a.h != b.h || a.w != b.w) throw std::logic_error("cnn::Net: add of different shapes");
  return make(a.c, a.h, a.w);
}

Tensor Net::add_(const Tensor& a, const Tensor& b) {
  if (a.c != b.c || a.h != b.h || a.w != b.w) throw std::logic_error("cnn::Net: add of different shapes");
  return a;
}

Tensor Net::cat(std::initializer_list<Tensor> parts) {
  uint64_t c = 0;
  const Tensor& first = *parts.begin();
  for (const Tensor& t : parts) {
    if (t.h != first.h || t.w != first.w) throw std::logic_error("cnn::Net: cat of different sizes");
    c += t.c;
  }
  return make(c, first.h, first.w);
}

Tensor Net::max_pool(const Tensor& x, uint64_t k, uint64_t stride, uint64_t pad) {
  keep(x);
  Tensor y = make(x.c, out_side(x.h, k, stride, pad), out_side(x.w, k, stride, pad));
  keep_bytes(bytes(y, 8));  // int64 indices
  return y;
}

Tensor Net::avg_pool(const Tensor& x, uint64_t k, uint64_t stride, uint64_t pad) {
  keep(x);
  return make(x.c, out_side(x.h, k, stride, pad), out_side(x.w, k, stride, pad));
}

Tensor Net::adaptive_avg_pool(const Tensor& x, uint64_t oh, uint64_t ow) {
  if (oh != 1 || ow != 1) keep(x);  // to 1×1 PyTorch takes a mean, whose backward needs only the shape
  return make(x.c, oh, ow);
}

Tensor Net::upsample2x(const Tensor& x) { return make(x.c, 2 * x.h, 2 * x.w); }

Tensor Net::flatten(const Tensor& x) { return Tensor{x.id, x.c * x.h * x.w, 1, 1}; }

Tensor Net::linear(const Tensor& x, uint64_t out, bool bias) {
  if (x.h != 1 || x.w != 1) throw std::logic_error("cnn::Net: linear on an unflattened tensor");
  keep(x);
  cur().params.push_back(x.c * out);
  if (bias) cur().params.push_back(out);
  cur().forward_flops += 2.0 * double(x.c) * double(out) * double(batch_);
  return make(out, 1, 1);
}

Tensor Net::dropout(const Tensor& x, bool inplace) {
  if (inplace) {
    keep_bytes(bytes(x));  // the scaled Bernoulli noise the input was multiplied by
    return x;
  }
  keep_bytes(bytes(x, 1));  // a bool mask
  return make(x.c, x.h, x.w);
}

void Net::cross_entropy(const Tensor& logits) {
  keep(logits);                  // the logits, referenced until backward
  keep_bytes(bytes(logits, 4));  // log-softmax, fp32 (as autocast runs it)
  cur().output_bytes = 4;        // the loss, one fp32 scalar
  open_ = false;
}

Model Net::finish() {
  if (open_) throw std::logic_error("cnn::Net: layer " + model_.layers.back().name + " not ended");
  return std::move(model_);
}

}  // namespace cnn

using cnn::conv;
using cnn::Conv;
using cnn::Defaults;
using cnn::Net;
using cnn::Tensor;

namespace {

// Conv → BatchNorm → ReLU (in place), the unit of most torchvision CNNs.
Tensor conv_bn_relu(Net& n, const Tensor& x, const Conv& c) { return n.relu_(n.bn(n.conv(x, c))); }
// Conv → BatchNorm → ReLU6 (in place), MobileNetV2's unit (torchvision's Conv2dNormActivation).
Tensor conv_bn_relu6(Net& n, const Tensor& x, const Conv& c) { return n.relu6_(n.bn(n.conv(x, c))); }

// ---- ResNet -------------------------------------------------------------------------------------
//
// He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1, as torchvision.models
// resnet18 / resnet34 (BasicBlock) and resnet50 (Bottleneck, v1.5: the stride of a downsampling
// block is on its 3×3 convolution) build it; timm's resnet18/34/50 are the same networks.
// Convolutions have no bias and are each followed by batch norm; ReLUs are in place, so a ReLU's
// output is also the next convolution's input. The shortcut of a block that changes the width or
// the resolution is a strided 1×1 convolution + batch norm.
// Published (torchvision model cards): resnet18 11,689,512 parameters, 1.81 G multiply-adds;
// resnet34 21,797,672, 3.66 G; resnet50 25,557,032, 4.09 G (224×224).

Tensor basic_block(Net& n, const Tensor& x, uint64_t planes, uint64_t stride) {
  Tensor y = conv_bn_relu(n, x, conv(planes, 3, stride));
  y = n.bn(n.conv(y, conv(planes, 3)));
  Tensor shortcut = x;
  if (stride != 1 || x.c != planes) shortcut = n.bn(n.conv(x, conv(planes, 1, stride)));
  return n.relu_(n.add_(y, shortcut));
}

Tensor bottleneck(Net& n, const Tensor& x, uint64_t width, uint64_t stride) {
  const uint64_t out = 4 * width;
  Tensor y = conv_bn_relu(n, x, conv(width, 1));
  y = conv_bn_relu(n, y, conv(width, 3, stride));
  y = n.bn(n.conv(y, conv(out, 1)));
  Tensor shortcut = x;
  if (stride != 1 || x.c != out) shortcut = n.bn(n.conv(x, conv(out, 1, stride)));
  return n.relu_(n.add_(y, shortcut));
}

// The ResNet trunk, one layer per block: "stem" (7×7/2 convolution, batch norm, ReLU, 3×3/2 max
// pool), then "layer<stage>.<block>". Returns the stem's ReLU output and each stage's output (the
// features a U-Net decoder takes).
std::vector<Tensor> resnet_trunk(Net& n, const Tensor& images, bool bottlenecks, const uint64_t (&blocks)[4],
                                 const std::string& prefix) {
  std::vector<Tensor> features;
  n.begin(prefix + "stem");
  Tensor x = conv_bn_relu(n, images, conv(64, 7, 2));
  features.push_back(x);
  x = n.max_pool(x, 3, 2, 1);
  n.end(x);
  const uint64_t widths[4] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    for (uint64_t b = 0; b < blocks[s]; ++b) {
      n.begin(prefix + "layer" + std::to_string(s + 1) + "." + std::to_string(b));
      const uint64_t stride = s > 0 && b == 0 ? 2 : 1;
      x = bottlenecks ? bottleneck(n, x, widths[s], stride) : basic_block(n, x, widths[s], stride);
      n.end(x);
    }
    features.push_back(x);
  }
  return features;
}

// Global average pooling, the fully connected classifier and the cross-entropy loss: layer "fc".
void pooled_classifier(Net& n, const Tensor& x, const char* name = "fc") {
  n.begin(name);
  Tensor f = n.flatten(n.adaptive_avg_pool(x, 1, 1));
  n.cross_entropy(n.linear(f, n.classes()));
}

Model build_resnet(const char* name, bool bottlenecks, const uint64_t (&blocks)[4], const RunShape& shape) {
  Net n(name, shape, Defaults{});
  std::vector<Tensor> f = resnet_trunk(n, n.input(), bottlenecks, blocks, "");
  pooled_classifier(n, f.back());
  return n.finish();
}

// ---- MobileNet / EfficientNet blocks ------------------------------------------------------------

enum class Act { relu, hard_swish, silu };

// ReLU and ReLU6 run in place and keep their output; SiLU and hard-swish keep their input.
Tensor activate(Net& n, const Tensor& x, Act a) { return a == Act::relu ? n.relu_(x) : n.act_keeps_input(x); }

// Squeeze-and-excitation (Hu et al. 2018): global mean, 1×1 convolution to `reduced` channels (with
// bias), activation, 1×1 convolution back (with bias), a sigmoid or hard-sigmoid gate, and the
// input scaled by it.
Tensor squeeze_excite(Net& n, const Tensor& x, uint64_t reduced, Act act, bool hard_gate) {
  Tensor s = n.adaptive_avg_pool(x, 1, 1);
  s = activate(n, n.conv(s, conv(reduced, 1, 1, 1, true)), act);
  s = n.conv(s, conv(x.c, 1, 1, 1, true));
  s = hard_gate ? n.hardsigmoid(s) : n.sigmoid(s);
  return n.mul(x, s);
}

// timm's make_divisible (timm/layers/helpers.py): the nearest multiple of 8, at least 8, never
// more than 10% below v.
uint64_t make_divisible(double v, uint64_t divisor = 8) {
  uint64_t r = std::max<uint64_t>(divisor, uint64_t(v + double(divisor) / 2) / divisor * divisor);
  if (double(r) < 0.9 * v) r += divisor;
  return r;
}

// ---- presets ------------------------------------------------------------------------------------

}  // namespace

Model build_resnet18(const RunShape& shape) {
  const uint64_t blocks[4] = {2, 2, 2, 2};
  return build_resnet("resnet18", false, blocks, shape);
}
Model build_resnet34(const RunShape& shape) {
  const uint64_t blocks[4] = {3, 4, 6, 3};
  return build_resnet("resnet34", false, blocks, shape);
}
Model build_resnet50(const RunShape& shape) {
  const uint64_t blocks[4] = {3, 4, 6, 3};
  return build_resnet("resnet50", true, blocks, shape);
}

// VGG-16: Simonyan & Zisserman 2015, "Very Deep Convolutional Networks for Large-Scale Image
// Recognition", Table 1 configuration D, as torchvision.models.vgg16 builds it (no batch norm):
// thirteen 3×3 convolutions with bias and in-place ReLU in five stages, each ending in a 2×2/2 max
// pool; adaptive average pooling to 7×7; classifier 25088 → 4096 → 4096 → classes, each hidden
// layer followed by an in-place ReLU and dropout (p 0.5, not in place).
// Published (torchvision model card): 138,357,544 parameters, 15.47 G multiply-adds (224×224).
Model build_vgg16(const RunShape& shape) {
  Net n("vgg16", shape, Defaults{});
  Tensor x = n.input();
  const uint64_t stages[5][2] = {{2, 64}, {2, 128}, {3, 256}, {3, 512}, {3, 512}};  // convolutions, width
  for (int s = 0; s < 5; ++s) {
    n.begin("conv" + std::to_string(s + 1));
    for (uint64_t i = 0; i < stages[s][0]; ++i) x = n.relu_(n.conv(x, conv(stages[s][1], 3, 1, 1, true)));
    x = n.max_pool(x, 2, 2, 0);
    n.end(x);
  }
  n.begin("classifier");
  x = n.flatten(n.adaptive_avg_pool(x, 7, 7));
  x = n.dropout(n.relu_(n.linear(x, 4096)));
  x = n.dropout(n.relu_(n.linear(x, 4096)));
  n.cross_entropy(n.linear(x, n.classes()));
  return n.finish();
}

// MobileNetV2: Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks",
// Table 2, as torchvision.models.mobilenet_v2 builds it (width 1.0): a 3×3/2 stem to 32 channels;
// inverted residual blocks (1×1 expansion unless t = 1, 3×3 depthwise, linear 1×1 projection; a
// residual when the stride is 1 and the width unchanged), convolutions without bias, batch norm,
// ReLU6 in place (torchvision's Conv2dNormActivation; autograd keeps a copy of its input, see
// Net::relu6_); a 1×1 convolution to 1280; global average
// pooling, dropout 0.2 (not in place) and the classifier. Layers follow torchvision's `features.N`.
// Published (torchvision model card): 3,504,872 parameters, 0.30 G multiply-adds (224×224).
Model build_mobilenet_v2(const RunShape& shape) {
  Net n("mobilenet-v2", shape, Defaults{});
  n.begin("features.0");
  Tensor x = conv_bn_relu6(n, n.input(), conv(32, 3, 2));
  n.end(x);
  const uint64_t settings[7][4] = {{1, 16, 1, 1},  {6, 24, 2, 2},  {6, 32, 3, 2},  {6, 64, 4, 2},
                                   {6, 96, 3, 1},  {6, 160, 3, 2}, {6, 320, 1, 1}};  // t, c, n, s
  int index = 1;
  for (const auto& st : settings) {
    for (uint64_t i = 0; i < st[2]; ++i) {
      n.begin("features." + std::to_string(index++));
      const uint64_t stride = i == 0 ? st[3] : 1, hidden = x.c * st[0];
      Tensor y = x;
      if (st[0] != 1) y = conv_bn_relu6(n, y, conv(hidden, 1));
      y = conv_bn_relu6(n, y, conv(hidden, 3, stride, hidden));
      y = n.bn(n.conv(y, conv(st[1], 1)));
      if (stride == 1 && x.c == st[1]) y = n.add(y, x);
      n.end(y);
      x = y;
    }
  }
  n.begin("features.18");
  x = conv_bn_relu6(n, x, conv(1280, 1));
  n.end(x);
  n.begin("classifier");
  x = n.dropout(n.flatten(n.adaptive_avg_pool(x, 1, 1)));
  n.cross_entropy(n.linear(x, n.classes()));
  return n.finish();
}

// MobileNetV3-Small: Howard et al. 2019, "Searching for MobileNetV3", Table 2, as timm builds
// mobilenetv3_small_100 (timm/models/mobilenetv3.py _gen_mobilenet_v3, blocks from
// _efficientnet_blocks.py): a 3×3/2 stem to 16 channels with hard-swish; a depthwise-separable
// block and inverted residuals (expansion widths make_divisible(in × ratio)) with ReLU in the first
// two stages and hard-swish after, squeeze-and-excitation (reduction make_divisible(width / 4), ReLU,
// hard-sigmoid gate) where the paper has it; a 1×1 convolution to 576 with hard-swish; then timm's
// "efficient head": global pooling first, a 1×1 convolution 576 → 1024 with bias and hard-swish,
// and the classifier (timm's default drop_rate is 0: no dropout). Layers follow timm's
// `blocks.<stage>.<index>`. Convolutions have no bias except the SE and head ones.
// Published: timm 2.54 M parameters; torchvision's mobilenet_v3_small, the same weights in other
// modules (its classifier 576 → 1024 → classes is timm's head convolution), 2,542,856.
Model build_mobilenet_v3_small(const RunShape& shape) {
  Net n("mobilenet-v3-small", shape, Defaults{});
  n.begin("conv_stem");
  Tensor x = activate(n, n.bn(n.conv(n.input(), conv(16, 3, 2))), Act::hard_swish);
  n.end(x);

  // blocks.0.0: depthwise-separable, 3×3/2, SE, ReLU; no residual (stride 2).
  n.begin("blocks.0.0");
  Tensor y = n.relu_(n.bn(n.conv(x, conv(16, 3, 2, 16))));
  y = squeeze_excite(n, y, make_divisible(16 * 0.25), Act::relu, true);
  x = n.bn(n.conv(y, conv(16, 1)));
  n.end(x);

  struct Ir {
    uint64_t stage, k, stride;
    double exp;
    uint64_t out;
    bool se;
    Act act;
  };
  const Ir irs[] = {
      {1, 3, 2, 4.5, 24, false, Act::relu},       {1, 3, 1, 3.67, 24, false, Act::relu},
      {2, 5, 2, 4, 40, true, Act::hard_swish},    {2, 5, 1, 6, 40, true, Act::hard_swish},
      {2, 5, 1, 6, 40, true, Act::hard_swish},    {3, 5, 1, 3, 48, true, Act::hard_swish},
      {3, 5, 1, 3, 48, true, Act::hard_swish},    {4, 5, 2, 6, 96, true, Act::hard_swish},
      {4, 5, 1, 6, 96, true, Act::hard_swish},    {4, 5, 1, 6, 96, true, Act::hard_swish},
  };
  uint64_t stage = 0, index = 0;
  for (const Ir& b : irs) {
    index = b.stage == stage ? index + 1 : 0;
    stage = b.stage;
    n.begin("blocks." + std::to_string(stage) + "." + std::to_string(index));
    const uint64_t mid = make_divisible(double(x.c) * b.exp);
    y = activate(n, n.bn(n.conv(x, conv(mid, 1))), b.act);
    y = activate(n, n.bn(n.conv(y, conv(mid, b.k, b.stride, mid))), b.act);
    if (b.se) y = squeeze_excite(n, y, make_divisible(double(mid) * 0.25), Act::relu, true);
    y = n.bn(n.conv(y, conv(b.out, 1)));
    if (b.stride == 1 && x.c == b.out) y = n.add(y, x);
    n.end(y);
    x = y;
  }

  n.begin("blocks.5.0");
  x = activate(n, n.bn(n.conv(x, conv(576, 1))), Act::hard_swish);
  n.end(x);

  n.begin("head");
  x = n.adaptive_avg_pool(x, 1, 1);
  x = n.flatten(activate(n, n.conv(x, conv(1024, 1, 1, 1, true)), Act::hard_swish));
  n.cross_entropy(n.linear(x, n.classes()));
  return n.finish();
}

// EfficientNet-B0: Tan & Le 2019, "EfficientNet: Rethinking Model Scaling for Convolutional Neural
// Networks", Table 1, as torchvision.models.efficientnet_b0 builds it (timm's efficientnet_b0 has
// the same parameters): a 3×3/2 stem to 32 channels; MBConv blocks (1×1 expansion unless the ratio is
// 1, k×k depthwise, squeeze-and-excitation reducing to input/4 channels with SiLU and a sigmoid gate,
// linear 1×1 projection, a residual when the stride is 1 and the width unchanged), batch norm and
// SiLU (in place: autograd keeps a copy of its input); a 1×1 convolution to 1280; global pooling,
// dropout 0.2 (in place) and the classifier. Stochastic depth on the residual keeps only an N×1×1×1
// mask and is left out. Layers follow torchvision's `features.<stage>.<block>`.
// Published (torchvision model card): 5,288,548 parameters, 0.39 G multiply-adds (224×224).
Model build_efficientnet_b0(const RunShape& shape) {
  Net n("efficientnet-b0", shape, Defaults{});
  n.begin("features.0");
  Tensor x = activate(n, n.bn(n.conv(n.input(), conv(32, 3, 2))), Act::silu);
  n.end(x);
  const uint64_t stages[7][5] = {{1, 3, 1, 16, 1}, {6, 3, 2, 24, 2},  {6, 5, 2, 40, 2}, {6, 3, 2, 80, 3},
                                 {6, 5, 1, 112, 3}, {6, 5, 2, 192, 4}, {6, 3, 1, 320, 1}};  // ratio, k, s, out, n
  for (int s = 0; s < 7; ++s) {
    const auto& st = stages[s];
    for (uint64_t i = 0; i < st[4]; ++i) {
      n.begin("features." + std::to_string(s + 1) + "." + std::to_string(i));
      const uint64_t stride = i == 0 ? st[2] : 1, mid = x.c * st[0];
      Tensor y = x;
      if (st[0] != 1) y = activate(n, n.bn(n.conv(y, conv(mid, 1))), Act::silu);
      y = activate(n, n.bn(n.conv(y, conv(mid, st[1], stride, mid))), Act::silu);
      y = squeeze_excite(n, y, std::max<uint64_t>(1, x.c / 4), Act::silu, false);
      y = n.bn(n.conv(y, conv(st[3], 1)));
      if (stride == 1 && x.c == st[3]) y = n.add(y, x);
      n.end(y);
      x = y;
    }
  }
  n.begin("features.8");
  x = activate(n, n.bn(n.conv(x, conv(1280, 1))), Act::silu);
  n.end(x);
  n.begin("classifier");
  x = n.dropout(n.flatten(n.adaptive_avg_pool(x, 1, 1)), true);
  n.cross_entropy(n.linear(x, n.classes()));
  return n.finish();
}

namespace {

// Inception-v3's BasicConv2d: a convolution without bias (kh × kw, stride, padding), batch norm,
// ReLU in place.
Tensor basic_conv(Net& n, const Tensor& x, uint64_t out, uint64_t k, uint64_t stride = 1, uint64_t pad = 0) {
  return conv_bn_relu(n, x, Conv{out, k, k, stride, pad, pad, 1, false});
}
// The factorized ones: 1×7, 7×1, 1×3, 3×1 with "same" padding, stride 1.
Tensor basic_conv_hw(Net& n, const Tensor& x, uint64_t out, uint64_t kh, uint64_t kw) {
  return conv_bn_relu(n, x, Conv{out, kh, kw, 1, kh / 2, kw / 2, 1, false});
}

// torchvision InceptionA (35×35): 1×1; 1×1 → 5×5; 1×1 → 3×3 → 3×3; 3×3 average pool → 1×1.
Tensor inception_a(Net& n, const Tensor& x, uint64_t pool_features) {
  Tensor b1 = basic_conv(n, x, 64, 1);
  Tensor b5 = basic_conv(n, basic_conv(n, x, 48, 1), 64, 5, 1, 2);
  Tensor b3 = basic_conv(n, basic_conv(n, basic_conv(n, x, 64, 1), 96, 3, 1, 1), 96, 3, 1, 1);
  Tensor bp = basic_conv(n, n.avg_pool(x, 3, 1, 1), pool_features, 1);
  return n.cat({b1, b5, b3, bp});
}

// InceptionB (35 → 17): 3×3/2; 1×1 → 3×3 → 3×3/2; 3×3/2 max pool.
Tensor inception_b(Net& n, const Tensor& x) {
  Tensor b3 = basic_conv(n, x, 384, 3, 2);
  Tensor bd = basic_conv(n, basic_conv(n, basic_conv(n, x, 64, 1), 96, 3, 1, 1), 96, 3, 2);
  Tensor bp = n.max_pool(x, 3, 2, 0);
  return n.cat({b3, bd, bp});
}

// InceptionC (17×17, factorized 7×7): 1×1; 1×1 → 1×7 → 7×1; 1×1 → 7×1 → 1×7 → 7×1 → 1×7;
// average pool → 1×1.
Tensor inception_c(Net& n, const Tensor& x, uint64_t c7) {
  auto c1x7 = [&](const Tensor& t, uint64_t out) { return basic_conv_hw(n, t, out, 1, 7); };
  auto c7x1 = [&](const Tensor& t, uint64_t out) { return basic_conv_hw(n, t, out, 7, 1); };
  Tensor b1 = basic_conv(n, x, 192, 1);
  Tensor b7 = c7x1(c1x7(basic_conv(n, x, c7, 1), c7), 192);
  Tensor bd = c1x7(c7x1(c1x7(c7x1(basic_conv(n, x, c7, 1), c7), c7), c7), 192);
  Tensor bp = basic_conv(n, n.avg_pool(x, 3, 1, 1), 192, 1);
  return n.cat({b1, b7, bd, bp});
}

// InceptionD (17 → 8): 1×1 → 3×3/2; 1×1 → 1×7 → 7×1 → 3×3/2; 3×3/2 max pool.
Tensor inception_d(Net& n, const Tensor& x) {
  Tensor b3 = basic_conv(n, basic_conv(n, x, 192, 1), 320, 3, 2);
  Tensor b7 = basic_conv(n, x, 192, 1);
  b7 = basic_conv_hw(n, b7, 192, 1, 7);
  b7 = basic_conv_hw(n, b7, 192, 7, 1);
  b7 = basic_conv(n, b7, 192, 3, 2);
  Tensor bp = n.max_pool(x, 3, 2, 0);
  return n.cat({b3, b7, bp});
}

// InceptionE (8×8, expanded filter bank): 1×1; 1×1 → (1×3 | 3×1); 1×1 → 3×3 → (1×3 | 3×1);
// average pool → 1×1.
Tensor inception_e(Net& n, const Tensor& x) {
  Tensor b1 = basic_conv(n, x, 320, 1);
  Tensor b3 = basic_conv(n, x, 384, 1);
  Tensor b3a = basic_conv_hw(n, b3, 384, 1, 3), b3b = basic_conv_hw(n, b3, 384, 3, 1);
  Tensor bd = basic_conv(n, basic_conv(n, x, 448, 1), 384, 3, 1, 1);
  Tensor bda = basic_conv_hw(n, bd, 384, 1, 3), bdb = basic_conv_hw(n, bd, 384, 3, 1);
  Tensor bp = basic_conv(n, n.avg_pool(x, 3, 1, 1), 192, 1);
  // The inner concatenations of the 3×3 branches are part of the outer one: no tensor of their own
  // is kept, and the outer output has the same bytes.
  return n.cat({b1, b3a, b3b, bda, bdb, bp});
}

}  // namespace

// Inception-v3: Szegedy et al. 2016, "Rethinking the Inception Architecture for Computer Vision",
// Table 1, as torchvision.models.inception_v3 builds it with aux_logits=False (and
// transform_input=False): BasicConv2d units (convolution without bias, batch norm with eps 0.001,
// ReLU in place), the stem Conv2d_1a..4a with two 3×3/2 max pools, Mixed_5b..5d (InceptionA),
// Mixed_6a (B), Mixed_6b..6e (C), Mixed_7a (D), Mixed_7b..7c (E); global pooling, dropout 0.5 and
// the classifier. Average pools in the branches are 3×3/1 with padding 1 (count_include_pad).
// Published (torchvision model card): 27,161,264 parameters with the auxiliary classifier
// (InceptionAux: 1×1 conv 768 → 128 + BN, 5×5 conv 128 → 768 + BN, fc 768 → 1000: 3,326,696), so
// 23,834,568 without it; 5.71 G multiply-adds (299×299). Smallest input 75×75 (torchvision).
Model build_inception_v3(const RunShape& shape) {
  Net n("inception-v3", shape, Defaults{299, 75, 1000, 1});
  Tensor x = n.input();
  n.begin("Conv2d_1a_3x3");
  x = basic_conv(n, x, 32, 3, 2);
  n.end(x);
  n.begin("Conv2d_2a_3x3");
  x = basic_conv(n, x, 32, 3);
  n.end(x);
  n.begin("Conv2d_2b_3x3");  // and maxpool1
  x = n.max_pool(basic_conv(n, x, 64, 3, 1, 1), 3, 2, 0);
  n.end(x);
  n.begin("Conv2d_3b_1x1");
  x = basic_conv(n, x, 80, 1);
  n.end(x);
  n.begin("Conv2d_4a_3x3");  // and maxpool2
  x = n.max_pool(basic_conv(n, x, 192, 3), 3, 2, 0);
  n.end(x);
  auto module = [&](const char* name, auto&& body) {
    n.begin(name);
    x = body();
    n.end(x);
  };
  module("Mixed_5b", [&] { return inception_a(n, x, 32); });
  module("Mixed_5c", [&] { return inception_a(n, x, 64); });
  module("Mixed_5d", [&] { return inception_a(n, x, 64); });
  module("Mixed_6a", [&] { return inception_b(n, x); });
  module("Mixed_6b", [&] { return inception_c(n, x, 128); });
  module("Mixed_6c", [&] { return inception_c(n, x, 160); });
  module("Mixed_6d", [&] { return inception_c(n, x, 160); });
  module("Mixed_6e", [&] { return inception_c(n, x, 192); });
  module("Mixed_7a", [&] { return inception_d(n, x); });
  module("Mixed_7b", [&] { return inception_e(n, x); });
  module("Mixed_7c", [&] { return inception_e(n, x); });
  n.begin("fc");
  x = n.flatten(n.dropout(n.adaptive_avg_pool(x, 1, 1)));
  n.cross_entropy(n.linear(x, n.classes()));
  return n.finish();
}

namespace {

// Xception's separable convolution: a 3×3 depthwise convolution, then a 1×1 pointwise one, both
// without bias and with no norm between them.
Tensor separable(Net& n, const Tensor& x, uint64_t out) { return n.conv(n.conv(x, conv(x.c, 3, 1, x.c)), conv(out, 1)); }

// timm's xception Block: `reps` × (ReLU, separable convolution, batch norm), the first ReLU not in
// place when the block starts with one (it must not overwrite the block input the shortcut reads);
// a 3×3/2 max pool (padding 1) when strided; the shortcut is a strided 1×1 convolution + batch norm
// when the width or resolution changes, added in place.
Tensor xception_block(Net& n, const Tensor& x, uint64_t out, uint64_t reps, uint64_t stride, bool start_with_relu,
                      bool grow_first) {
  Tensor y = x;
  for (uint64_t i = 0; i < reps; ++i) {
    const uint64_t outc = grow_first ? out : (i + 1 < reps ? x.c : out);
    if (i == 0) {
      if (start_with_relu) y = n.relu(y);
    } else {
      y = n.relu_(y);
    }
    y = n.bn(separable(n, y, outc));
  }
  if (stride != 1) y = n.max_pool(y, 3, stride, 1);
  Tensor shortcut = x;
  if (out != x.c || stride != 1) shortcut = n.bn(n.conv(x, conv(out, 1, stride)));
  return n.add_(y, shortcut);
}

}  // namespace

// Xception: Chollet 2017, "Xception: Deep Learning with Depthwise Separable Convolutions", Figure 5,
// as timm's 'xception' (legacy_xception in timm >= 0.9, timm/models/xception.py, the Keras weights'
// port) builds it: entry flow (3×3/2 conv to 32 and 3×3 conv to 64, unpadded, each with batch norm
// and ReLU; blocks 1-3 to 128, 256, 728 channels, each halving the resolution), middle flow (blocks
// 4-11: 728 channels, three separable convolutions, identity shortcut), exit flow (block 12 to 1024,
// separable convolutions to 1536 and 2048 with batch norm and ReLU), global pooling and the
// classifier (timm's default drop_rate 0: no dropout). Default 299×299; smallest input 71×71 (the
// paper's Keras application requires it).
// Published: timm 22.86 M parameters (22,855,952).
Model build_xception(const RunShape& shape) {
  Net n("xception", shape, Defaults{299, 71, 1000, 1});
  n.begin("conv1");
  Tensor x = conv_bn_relu(n, n.input(), Conv{32, 3, 3, 2, 0, 0, 1, false});
  n.end(x);
  n.begin("conv2");
  x = conv_bn_relu(n, x, Conv{64, 3, 3, 1, 0, 0, 1, false});
  n.end(x);
  struct B { uint64_t out, reps, stride; bool start_with_relu, grow_first; };
  std::vector<B> blocks = {{128, 2, 2, false, true}, {256, 2, 2, true, true}, {728, 2, 2, true, true}};
  for (int i = 0; i < 8; ++i) blocks.push_back({728, 3, 1, true, true});
  blocks.push_back({1024, 2, 2, true, false});
  for (size_t i = 0; i < blocks.size(); ++i) {
    const B& b = blocks[i];
    n.begin("block" + std::to_string(i + 1));
    x = xception_block(n, x, b.out, b.reps, b.stride, b.start_with_relu, b.grow_first);
    n.end(x);
  }
  n.begin("conv3");
  x = n.relu_(n.bn(separable(n, x, 1536)));
  n.end(x);
  n.begin("conv4");
  x = n.relu_(n.bn(separable(n, x, 2048)));
  n.end(x);
  pooled_classifier(n, x);
  return n.finish();
}

// U-Net with a ResNet-34 encoder: Ronneberger et al. 2015, "U-Net: Convolutional Networks for
// Biomedical Image Segmentation", as segmentation_models_pytorch builds
// Unet(encoder_name="resnet34") (smp/decoders/unet): the torchvision ResNet-34 trunk without its
// classifier as the encoder; a decoder of five blocks with channels (256, 128, 64, 32, 16), each a
// nearest 2× upsampling, a concatenation with the encoder feature of that resolution (layer3,
// layer2, layer1, the stem's ReLU output; none for the last), and two 3×3 conv-BN-ReLU units
// (convolutions without bias, ReLU in place); a 3×3 segmentation head (with bias) to `classes`
// channels at full resolution; cross-entropy over every pixel. smp requires sides divisible by 32.
// Defaults: 1 class (smp's default) and 512×512 images (smp has no default size; 512 is the usual
// segmentation crop, and what the CARMA benchmark's UNet ran).
// Published: smp's Unet("resnet34", classes=1) has 24,436,369 parameters (the encoder's
// 21,284,672 — torchvision resnet34's 21,797,672 less its 513,000-parameter fc — the decoder's
// 3,151,552 and the head's 145).
Model build_unet_resnet34(const RunShape& shape) {
  Net n("unet-resnet34", shape, Defaults{512, 32, 1, 32});
  const uint64_t blocks[4] = {3, 4, 6, 3};
  std::vector<Tensor> f = resnet_trunk(n, n.input(), false, blocks, "encoder.");
  // f: stem ReLU output (1/2), layer1 (1/4), layer2 (1/8), layer3 (1/16), layer4 (1/32).
  const uint64_t channels[5] = {256, 128, 64, 32, 16};
  Tensor x = f[4];
  for (int i = 0; i < 5; ++i) {
    n.begin("decoder." + std::to_string(i));
    x = n.upsample2x(x);
    if (i < 4) x = n.cat({x, f[3 - i]});
    x = conv_bn_relu(n, x, conv(channels[i], 3));
    x = conv_bn_relu(n, x, conv(channels[i], 3));
    n.end(x);
  }
  n.begin("segmentation_head");
  n.cross_entropy(n.conv(x, conv(n.classes(), 3, 1, 1, true)));
  return n.finish();
}

}  // namespace coloc::est
