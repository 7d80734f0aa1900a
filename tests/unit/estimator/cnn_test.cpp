// The convolutional presets (estimator/cnn.cpp) against the published parameter counts and
// multiply-adds of their reference implementations, and the shape rules of the builder.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "../../../estimator/cnn.h"
#include "../../../estimator/input_error.h"
#include "../../../estimator/model.h"

using namespace coloc::est;

namespace {

const char* const kCnns[] = {"resnet18",        "resnet34",     "resnet50", "vgg16",         "mobilenet-v2",
                             "mobilenet-v3-small", "efficientnet-b0", "inception-v3", "xception", "unet-resnet34"};

uint64_t params_of(const char* name) { return make_preset(name, RunShape{}).param_count(); }

RunShape shape(uint64_t batch, uint64_t image = 0, uint64_t classes = 0, DType t = DType::fp32) {
  RunShape s;
  s.batch = batch;
  s.dtype = t;
  s.image = image;
  s.classes = classes;
  return s;
}

}  // namespace

TEST_SUITE("estimator") {
TEST_CASE("CNN presets have the published parameter counts") {
  // torchvision model cards (docs.pytorch.org/vision/stable/models/*.html, "num_params"):
  CHECK(params_of("resnet18") == 11689512ULL);
  CHECK(params_of("resnet34") == 21797672ULL);
  CHECK(params_of("resnet50") == 25557032ULL);
  CHECK(params_of("vgg16") == 138357544ULL);
  CHECK(params_of("mobilenet-v2") == 3504872ULL);
  CHECK(params_of("efficientnet-b0") == 5288548ULL);  // timm efficientnet_b0: 5.29 M, the same network
  // torchvision inception_v3: 27,161,264 with the auxiliary classifier, which aux_logits=False
  // leaves out: InceptionAux(768, 1000) = conv0 768·128 + BN 2·128, conv1 128·768·25 + BN 2·768,
  // fc 768·1000 + 1000 = 3,326,696.
  CHECK(params_of("inception-v3") == 27161264ULL - 3326696ULL);
  // timm mobilenetv3_small_100: 2.54 M (timm results tables); exactly torchvision's
  // mobilenet_v3_small card, 2,542,856, whose classifier 576 → 1024 → 1000 holds the same weights
  // as timm's head convolution 576 → 1024 and classifier.
  CHECK(params_of("mobilenet-v3-small") == 2542856ULL);
  // timm xception (docs/models/xception.md: Parameters 22,860,000, rounded): 22,855,952.
  CHECK(params_of("xception") == 22855952ULL);
  CHECK(std::fabs(double(params_of("xception")) - 22.86e6) <= 0.005e6);
  // segmentation_models_pytorch Unet(encoder_name="resnet34", classes=1): 24,436,369 (the ResNet-34
  // encoder without fc, 21,797,672 - 513,000; decoder 3,151,552; 3×3 head 16 → 1 with bias, 145).
  CHECK(params_of("unet-resnet34") == 24436369ULL);
  CHECK(params_of("unet-resnet34") == 21797672ULL - 513000ULL + 3151552ULL + 145ULL);
}

TEST_CASE("CNN forward FLOPs match the published multiply-adds") {
  // torchvision model cards, "GFLOPS" (multiply-adds, as torchvision counts them) at the default
  // resolution; a multiply-add is 2 FLOPs. The estimate counts convolutions and linear layers only.
  auto gmacs = [](const char* name) { return make_preset(name, shape(1)).forward_flops() / 2e9; };
  CHECK(gmacs("resnet18") == doctest::Approx(1.81).epsilon(0.005));
  CHECK(gmacs("resnet34") == doctest::Approx(3.66).epsilon(0.005));
  CHECK(gmacs("resnet50") == doctest::Approx(4.09).epsilon(0.005));
  CHECK(gmacs("vgg16") == doctest::Approx(15.47).epsilon(0.002));
  CHECK(gmacs("inception-v3") == doctest::Approx(5.71).epsilon(0.005));
  CHECK(std::fabs(gmacs("mobilenet-v2") - 0.30) <= 0.005);
  CHECK(std::fabs(gmacs("efficientnet-b0") - 0.39) <= 0.005);
  CHECK(std::fabs(gmacs("mobilenet-v3-small") - 0.06) <= 0.005);
}

TEST_CASE("saved bytes and FLOPs scale linearly with batch, parameters not at all") {
  for (const char* name : kCnns) {
    CAPTURE(name);
    Model m1 = make_preset(name, shape(1));
    Model m6 = make_preset(name, shape(6));
    CHECK(m6.saved_total() == 6 * m1.saved_total());
    CHECK(m6.forward_flops() == doctest::Approx(6 * m1.forward_flops()));
    CHECK(m6.param_count() == m1.param_count());
    REQUIRE(m6.layers.size() == m1.layers.size());
    for (size_t i = 0; i < m1.layers.size(); ++i) {
      CHECK(m6.layers[i].workspace_bytes == 6 * m1.layers[i].workspace_bytes);
      if (i + 1 < m1.layers.size()) CHECK(m6.layers[i].output_bytes == 6 * m1.layers[i].output_bytes);
    }
    // The loss is one fp32 scalar whatever the batch.
    CHECK(m6.layers.back().output_bytes == 4);
    // Every layer with a convolution has a workspace; 16-bit activations take less memory.
    CHECK(m1.layers.front().workspace_bytes > 0);
    CHECK(make_preset(name, shape(1, 0, 0, DType::bf16)).saved_total() < m1.saved_total());
  }
}

TEST_CASE("--classes changes only the classifier") {
  for (const char* name : kCnns) {
    CAPTURE(name);
    Model a = make_preset(name, shape(2));
    Model b = make_preset(name, shape(2, 0, 37));
    REQUIRE(a.layers.size() == b.layers.size());
    for (size_t i = 0; i + 1 < a.layers.size(); ++i) {
      CAPTURE(a.layers[i].name);
      CHECK(a.layers[i].name == b.layers[i].name);
      CHECK(a.layers[i].params == b.layers[i].params);
      CHECK(a.layers[i].saved_bytes == b.layers[i].saved_bytes);
      CHECK(a.layers[i].output_bytes == b.layers[i].output_bytes);
      CHECK(a.layers[i].forward_flops == b.layers[i].forward_flops);
    }
    CHECK(a.layers.back().param_count() != b.layers.back().param_count());
  }
  // The classifier of a 1000-class ResNet-18 is 512 × 1000 + 1000; of a 10-class one 512 × 10 + 10.
  CHECK(params_of("resnet18") - make_preset("resnet18", shape(1, 0, 10)).param_count() == 513000 - 5130);
}

TEST_CASE("saved tensors follow what autograd keeps") {
  // VGG-16's first stage at 224×224, fp32, one image: the input image (conv1_1's input); conv1_1's
  // output, which the in-place ReLU keeps and conv1_2 reads (once); conv1_2's output, kept by its
  // ReLU and the max pool (once); the pool's int64 indices.
  Model vgg = make_preset("vgg16", shape(1));
  const Layer& conv1 = vgg.layers[0];
  CHECK(conv1.name == "conv1");
  CHECK(conv1.saved_total() == 4 * (3 + 64 + 64) * 224 * 224 + 8 * 64 * 112 * 112);
  CHECK(conv1.output_bytes == 4 * 64 * 112 * 112);
  // Its workspace: the largest tensor of its convolutions, a 64 × 224 × 224 output.
  CHECK(conv1.workspace_bytes == 4 * 64 * 224 * 224);
  // The classifier: adaptive pool input (7×7 is not a mean, so it is kept) and output, fc inputs,
  // ReLU outputs, dropout masks (one byte), logits and the fp32 log-softmax.
  const Layer& head = vgg.layers.back();
  CHECK(head.name == "classifier");
  CHECK(head.saved_total() == 4 * 25088 * 2 + (4 + 1 + 4) * 4096 * 2 + (4 + 4) * 1000);

  // A ResNet-18 basic block without a shortcut convolution (layer1.1, 64 × 56 × 56, bf16): conv1's
  // output (bn1's input), the ReLU output (conv2's input), conv2's output (bn2's input), the block
  // output after the final ReLU. Its input was kept by the block before.
  Model r18 = make_preset("resnet18", shape(1, 0, 0, DType::bf16));
  CHECK(r18.layers[2].name == "layer1.1");
  CHECK(r18.layers[2].saved_bytes.size() == 4);
  CHECK(r18.layers[2].saved_total() == 4 * 2 * 64 * 56 * 56);

  // EfficientNet-B0's first MBConv (features.1.0: no expansion, 32 × 112 × 112, SE to 8 channels):
  // its input (the stem's SiLU output: SiLU keeps its input, so the depthwise convolution is the
  // first to keep it), the depthwise output (bn input), the bn output (SiLU input), the SiLU output
  // (kept by the SE's product), the product (the projection's input) and the projection's output
  // (bn input, 16 channels); and the SE's 1×1 tensors: the pooled input of fc1 (a mean keeps
  // nothing), fc1's output (SiLU input), the SiLU output (fc2's input), the sigmoid output (gate).
  Model eff = make_preset("efficientnet-b0", shape(1));
  const Layer& mb = eff.layers[1];
  CHECK(mb.name == "features.1.0");
  const uint64_t map = 112 * 112 * 4;
  CHECK(mb.saved_total() == (32 + 32 + 32 + 32 + 32 + 16) * map + (32 + 8 + 8 + 32) * 4);

  // MobileNetV2's stem (features.0: 3×3/2 to 32 × 112 × 112, fp32, one image): the image (the
  // convolution's input), the convolution's output (batch norm's input), and the copy of batch
  // norm's output that the in-place ReLU6 keeps (hardtanh_'s gradient is written from its input,
  // unlike relu_'s). The ReLU6 output itself is kept by features.1, whose depthwise convolution
  // reads it.
  Model mb2 = make_preset("mobilenet-v2", shape(1));
  CHECK(mb2.layers[0].name == "features.0");
  CHECK(mb2.layers[0].saved_total() == 4 * (3 * 224 * 224 + 2 * 32 * 112 * 112));
  // features.1 (t = 1: depthwise 3×3 on 32 channels, then a linear 1×1 to 16): its input (the
  // stem's ReLU6 output), the depthwise output (bn input), the ReLU6's copy of the bn output, the
  // ReLU6 output (the projection's input), the projection's output (bn input, 16 channels).
  CHECK(mb2.layers[1].saved_total() == 4 * (32 + 32 + 32 + 32 + 16) * 112 * 112);

  // U-Net's loss is over every pixel: logits and fp32 log-softmax of classes × H × W per image.
  Model unet = make_preset("unet-resnet34", shape(2, 256, 5, DType::bf16));
  CHECK(unet.layers.back().name == "segmentation_head");
  CHECK(unet.layers.back().saved_total() == 2 * (2 + 4) * 5 * 256 * 256);
  CHECK(unet.layers[unet.layers.size() - 2].name == "decoder.4");
}

TEST_CASE("default and overridden image sizes") {
  // Inception-v3 and Xception default to 299×299: their first convolution (3×3/2, unpadded) gives
  // 149×149.
  CHECK(make_preset("inception-v3", shape(1)).layers[0].output_bytes == 4 * 32 * 149 * 149);
  CHECK(make_preset("xception", shape(1)).layers[0].output_bytes == 4 * 32 * 149 * 149);
  // ResNet-50 at 224 ends in 7×7 maps; at 448 in 14×14: four times the activations of every layer.
  Model a = make_preset("resnet50", shape(1));
  Model b = make_preset("resnet50", shape(1, 448));
  CHECK(b.layers[1].saved_total() == 4 * a.layers[1].saved_total());
  CHECK(b.forward_flops() > 3.9 * a.forward_flops());
  // CIFAR-sized inputs, as the CARMA benchmark runs them.
  for (const char* name : {"resnet18", "resnet34", "efficientnet-b0", "mobilenet-v3-small"})
    CHECK(make_preset(name, shape(32, 32, 100)).layers.size() >= 3);
}

TEST_CASE("CNN shapes the network cannot take are input errors") {
  struct Min { const char* name; uint64_t image; };
  for (Min m : {Min{"resnet18", 32}, Min{"resnet50", 32}, Min{"vgg16", 32}, Min{"mobilenet-v2", 32},
                Min{"mobilenet-v3-small", 32}, Min{"efficientnet-b0", 32}, Min{"inception-v3", 75},
                Min{"xception", 71}, Min{"unet-resnet34", 32}}) {
    CAPTURE(m.name);
    CHECK(make_preset(m.name, shape(1, m.image)).layers.size() >= 3);
    CHECK_THROWS_WITH_AS(make_preset(m.name, shape(1, m.image - 1)),
                         doctest::Contains(("at least " + std::to_string(m.image)).c_str()), InputError);
  }
  CHECK_THROWS_WITH_AS(make_preset("unet-resnet34", shape(1, 500)), doctest::Contains("multiple of 32"), InputError);
  for (const char* name : kCnns) {
    CAPTURE(name);
    RunShape with_seq = shape(1);
    with_seq.seq = 128;
    CHECK_THROWS_WITH_AS(make_preset(name, with_seq),
                         doctest::Contains((std::string(name) + ": --seq applies only to transformer models").c_str()), InputError);
    CHECK_THROWS_WITH_AS(make_preset(name, shape(0)), doctest::Contains("batch must be at least 1"), InputError);
    // Sizes past 64 bits are refused, not wrapped.
    CHECK_THROWS_AS(make_preset(name, shape(1ULL << 62)), InputError);
    CHECK_THROWS_AS(make_preset(name, shape(1ULL << 20, 1ULL << 16)), InputError);
    CHECK_THROWS_AS(make_preset(name, shape(1, 1ULL << 40)), InputError);
    CHECK_THROWS_AS(make_preset(name, shape(1, 0, 1ULL << 40)), InputError);
  }
  // Transformers refuse the CNN options.
  CHECK_THROWS_WITH_AS(make_preset("gpt2-small", shape(1, 224)), doctest::Contains("--image"), InputError);
}
}
