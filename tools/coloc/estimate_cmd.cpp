// tools/coloc/estimate_cmd.cpp — see estimate_cmd.h.
#include "estimate_cmd.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/size.h"
#include "../../estimator/analytic.h"
#include "../../estimator/input_error.h"

namespace coloc::cli {

namespace {

using nlohmann::json;
namespace est = coloc::est;

constexpr int kOk = 0, kUsage = 2;
constexpr size_t kTopLayers = 6;   // layers in the text picture
constexpr size_t kBarWidth = 32;   // characters of the largest layer's bar

int usage(const std::string& msg) {
  std::fprintf(stderr, "coloc estimate: %s\n", msg.c_str());
  return kUsage;
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  return format_size(bytes, buf, sizeof buf);
}

// 25557032 -> "25,557,032".
std::string grouped(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A whole number from `lo` to 2^32 given to `option`, or nullopt with *error set.
std::optional<uint64_t> whole_number(const std::string& option, const std::string& text, uint64_t lo, std::string* error) {
  const std::string what = option + " '" + text + "': ";
  const std::string range = "a whole number of at least " + std::to_string(lo);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    *error = what + (text[0] == '-' ? "must not be negative: " : "not a number: ") + "give " + range;
    return std::nullopt;
  }
  if (text.size() > 10 || std::stoull(text) > (1ULL << 32)) {
    *error = what + "too large (at most 2^32)";
    return std::nullopt;
  }
  const uint64_t v = std::stoull(text);
  if (v < lo) {
    *error = what + "must be " + range;
    return std::nullopt;
  }
  return v;
}

template <class T>
std::string names_of(std::initializer_list<T> values, const char* (*name)(T)) {
  std::string s;
  for (T v : values) s += (s.empty() ? "" : ", ") + std::string(name(v));
  return s;
}

// "transformer" for presets that take --seq, "cnn" for those that refuse it (they take --image).
const char* preset_kind(const est::Preset& p) {
  if (p.config) return "transformer";
  try {
    est::RunShape shape;
    shape.seq = 8;
    est::make_preset(p.name, shape);
    return "transformer";
  } catch (const est::InputError&) {
    return "cnn";
  }
}

int list_models(bool as_json) {
  json models = json::array();
  for (const est::Preset& p : est::presets())
    models.push_back({{"name", std::string(p.name)},
                      {"kind", preset_kind(p)},
                      {"params", est::make_preset(p.name, est::RunShape{}).param_count()},
                      {"source", std::string(p.source)}});
  if (as_json) {
    std::cout << json{{"models", models}}.dump(2) << "\n";
    return kOk;
  }
  std::printf("%-18s %-12s %14s  %s\n", "model", "kind", "parameters", "source");
  for (const json& m : models)
    std::printf("%-18s %-12s %14s  %s\n", m["name"].get<std::string>().c_str(), m["kind"].get<std::string>().c_str(),
                grouped(m["params"].get<uint64_t>()).c_str(), m["source"].get<std::string>().c_str());
  return kOk;
}

}  // namespace

CLI::App* EstimateCommand::add_to(CLI::App& app) {
  std::string presets;
  for (const est::Preset& p : est::presets()) presets += (presets.empty() ? "" : ", ") + std::string(p.name);
  std::string devices;
  for (const est::DeviceProfile& d : est::device_profiles()) devices += (devices.empty() ? "" : ", ") + std::string(d.name);

  cmd_ = app.add_subcommand("estimate",
                            "A training job's peak GPU memory from its model description, before it runs: model states, "
                            "activations, allocator overhead, CUDA context and library workspaces, item by item");
  cmd_->add_option("--model", model_, "A preset: " + presets + " (see --list-models)");
  cmd_->add_option("--model-file", model_file_,
                   "A Hugging Face config.json (it has \"model_type\") or a coloc model spec (JSON, see "
                   "estimator/model_spec.h)");
  cmd_->add_option("--batch", batch_, "Sequences or images per step, at least 1 (required)");
  cmd_->add_option("--seq", seq_, "Tokens per sequence, transformers only (default: the model's)");
  cmd_->add_option("--image", image_, "Image side in pixels, CNNs only (default: the model's, 224 for ImageNet)");
  cmd_->add_option("--classes", classes_, "Classifier outputs, CNNs only (default: the model's, 1000 for ImageNet)");
  cmd_->add_option("--dtype", dtype_, "fp32, or bf16 / fp16 for mixed precision (fp32 master weights) (default fp32)");
  cmd_->add_option("--optimizer", optimizer_, "sgd, sgd-momentum, adam or adamw (default adam)");
  cmd_->add_option("--allocator", allocator_,
                   "pytorch (PyTorch's caching allocator, the default) or plain (one cudaMalloc per tensor)");
  cmd_->add_option("--device-model", device_model_,
                   "The GPU, matched as part of its name: " + devices + " (default A100; sm90 has a larger cuBLAS workspace)");
  cmd_->add_flag("--json", json_, "Print every item in bytes, the inputs, the peak layer and the per-layer bytes as JSON");
  cmd_->add_flag("--list-models", list_models_, "List the preset models: name, kind, parameters, source");
  cmd_->footer(
      "The training step is the one coloc-train runs: weights, gradients, fp32 master weights (bf16/fp16) and\n"
      "optimizer state stay allocated; the forward pass keeps each layer's saved tensors; the backward pass, last\n"
      "layer first, allocates the gradient of each layer's input and one temporary, then frees what the layer\n"
      "saved. The estimate adds what the driver sees beyond tensors: the caching allocator's rounding and\n"
      "segments, the CUDA context (666,632,192 B, eager module loading: an upper bound until measured), cuBLAS\n"
      "workspaces (2 handles), the peak layer's cuDNN workspace, and a stated 5% safety margin.\n"
      "Examples: coloc estimate --model resnet50 --batch 32 --optimizer sgd-momentum\n"
      "          coloc estimate --model-file config.json --batch 8 --seq 512 --dtype bf16 --device-model H100\n"
      "Exit codes: 0 ok, 2 bad input (one line on stderr naming the field).");
  return cmd_;
}

int EstimateCommand::run() const {
  if (list_models_) return list_models(json_);

  // Inputs, each checked with a message naming it.
  if (model_.empty() == model_file_.empty())
    return usage(model_.empty() ? "--model NAME or --model-file FILE is required (see --list-models)"
                                : "--model and --model-file: give one of them, not both");
  if (batch_.empty()) return usage("--batch is required: sequences or images per step, at least 1");
  std::string error;
  est::RunShape shape;
  if (auto b = whole_number("--batch", batch_, 1, &error)) shape.batch = *b;
  else return usage(error);
  for (auto [option, text, field] : {std::tuple{"--seq", &seq_, &shape.seq}, std::tuple{"--image", &image_, &shape.image},
                                     std::tuple{"--classes", &classes_, &shape.classes}}) {
    if (text->empty()) continue;
    if (auto v = whole_number(option, *text, 1, &error)) *field = *v;
    else return usage(error);
  }
  const auto dtype = est::parse_dtype(dtype_);
  if (!dtype) return usage("--dtype '" + dtype_ + "': unknown (use fp32, bf16 or fp16)");
  shape.dtype = *dtype;
  const auto optimizer = est::parse_optimizer(optimizer_);
  if (!optimizer) return usage("--optimizer '" + optimizer_ + "': unknown (use sgd, sgd-momentum, adam or adamw)");
  const auto allocator = est::parse_allocator(allocator_);
  if (!allocator) return usage("--allocator '" + allocator_ + "': unknown (use pytorch or plain)");
  const est::DeviceProfile* device = est::find_device_profile(device_model_);
  if (!device) {
    std::string known;
    for (const est::DeviceProfile& d : est::device_profiles()) known += (known.empty() ? "" : ", ") + std::string(d.name);
    return usage("--device-model '" + device_model_ + "': unknown (known: " + known + ")");
  }

  std::error_code ec;
  if (!model_file_.empty() && !std::filesystem::is_regular_file(model_file_, ec))
    return usage("--model-file '" + model_file_ + "': " +
                 (std::filesystem::exists(model_file_, ec) ? "not a regular file" : "no such file"));

  est::Model model;
  est::Estimate e;
  try {
    if (!model_.empty()) {
      model = est::make_preset(model_, shape);
    } else {
      // A bare file name could also be a preset's: "./" makes resolve_model read the file.
      model = est::resolve_model(model_file_.find('/') == std::string::npos ? "./" + model_file_ : model_file_, shape);
    }
    est::EstimateOptions options;
    options.dtype = *dtype;
    options.optimizer = *optimizer;
    options.allocator = *allocator;
    options.device_model = std::string(device->name);
    e = est::estimate_training(model, options);
  } catch (const est::InputError& err) {
    return usage(std::string(model_.empty() ? "--model-file: " : "--model: ") + err.what());
  }

  if (json_) {
    json inputs = {{"batch", shape.batch},
                   {"seq", shape.seq ? json(shape.seq) : json(nullptr)},
                   {"image", shape.image ? json(shape.image) : json(nullptr)},
                   {"classes", shape.classes ? json(shape.classes) : json(nullptr)},
                   {"dtype", dtype_},
                   {"optimizer", optimizer_},
                   {"allocator", allocator_},
                   {"device_model", std::string(device->name)}};
    if (model_.empty()) inputs["model_file"] = model_file_;
    else inputs["model"] = model_;
    json items = json::array(), layers = json::array();
    for (const est::EstimateItem& i : e.items)
      items.push_back({{"key", i.key}, {"label", i.label}, {"bytes", i.bytes}, {"note", i.note}});
    for (const est::LayerPeak& l : e.layers)
      layers.push_back({{"layer", l.layer}, {"bytes", l.bytes}, {"workspace_bytes", l.workspace_bytes}});
    json out = {{"model", model.name},       {"params", e.params},   {"inputs", inputs},
                {"device", {{"name", std::string(device->name)}, {"sm", device->sm_major * 10 + device->sm_minor}}},
                {"items", items},            {"total_bytes", e.total_bytes},
                {"peak_layer", e.peak_layer}, {"layers", layers}};
    std::cout << out.dump(2) << "\n";
    return kOk;
  }

  // The breakdown, aligned.
  std::string shape_text = "batch " + std::to_string(shape.batch);
  if (shape.seq) shape_text += ", seq " + std::to_string(shape.seq);
  if (shape.image) shape_text += ", image " + std::to_string(shape.image);
  if (shape.classes) shape_text += ", " + std::to_string(shape.classes) + " classes";
  std::printf("coloc estimate: %s, %s, %s, %s, %s allocator, %s (sm%u%u)\n", model.name.c_str(), shape_text.c_str(),
              dtype_.c_str(), optimizer_.c_str(), allocator_.c_str(), std::string(device->name).c_str(), device->sm_major,
              device->sm_minor);
  std::printf("%s parameters; the peak is in the backward pass of %s\n\n", grouped(e.params).c_str(), e.peak_layer.c_str());
  size_t width = 5;
  for (const est::EstimateItem& i : e.items) width = std::max(width, i.label.size());
  for (const est::EstimateItem& i : e.items)
    std::printf("  %-*s %12s\n", int(width), i.label.c_str(), size_text(i.bytes).c_str());
  std::printf("  %s\n  %-*s %12s\n", std::string(width + 13, '-').c_str(), int(width), "total",
              size_text(e.total_bytes).c_str());

  // The layers whose backward holds the most, largest first.
  std::vector<const est::LayerPeak*> top;
  for (const est::LayerPeak& l : e.layers) top.push_back(&l);
  std::stable_sort(top.begin(), top.end(), [](const est::LayerPeak* a, const est::LayerPeak* b) {
    return a->bytes + a->workspace_bytes > b->bytes + b->workspace_bytes;
  });
  if (top.size() > kTopLayers) top.resize(kTopLayers);
  const uint64_t most = std::max<uint64_t>(top.front()->bytes + top.front()->workspace_bytes, 1);
  size_t name_width = 5;
  for (const est::LayerPeak* l : top) name_width = std::max(name_width, l->layer.size());
  std::printf("\nActivations live in each layer's backward pass (the %zu largest of %zu layers):\n", top.size(),
              e.layers.size());
  for (const est::LayerPeak* l : top) {
    const uint64_t bytes = l->bytes + l->workspace_bytes;
    const size_t bar = std::max<size_t>(1, size_t(double(bytes) / double(most) * kBarWidth + 0.5));
    std::printf("  %-*s %-*s %12s%s\n", int(name_width), l->layer.c_str(), int(kBarWidth), std::string(bar, '#').c_str(),
                size_text(bytes).c_str(), l->layer == e.peak_layer ? "  <- peak" : "");
  }

  std::printf("\nHow each item is counted:\n");
  for (const est::EstimateItem& i : e.items) std::printf("  %s: %s\n", i.key.c_str(), i.note.c_str());
  return kOk;
}

}  // namespace coloc::cli
