// estimator/resolve.cpp — resolve_model (analytic.h): a preset name, a Hugging Face config.json
// (hf_config.h) or a coloc model spec (model_spec.h).
#include <filesystem>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "analytic.h"
#include "hf_config.h"
#include "input_error.h"
#include "json_input.h"
#include "model_spec.h"

namespace coloc::est {

namespace {
// A config.json is a few KB and a spec of thousands of layers under 1 MiB; a larger file would
// only cost seconds and gigabytes to parse.
constexpr size_t kMaxModelFileBytes = 4u << 20;
}  // namespace

Model resolve_model(const std::string& what, const RunShape& shape) {
  if (find_preset(what)) return make_preset(what, shape);

  std::error_code ec;
  const auto status = std::filesystem::status(what, ec);
  if (what.empty() || !std::filesystem::exists(status)) {
    std::string known;
    for (const Preset& p : presets()) known += (known.empty() ? "" : ", ") + std::string(p.name);
    throw InputError("unknown model '" + what + "' (known: " + known + "); or give a file");
  }
  if (std::filesystem::is_directory(status)) throw InputError(what + ": is a directory, not a model file");
  // A FIFO or a device (/dev/zero) would block or never end.
  if (!std::filesystem::is_regular_file(status)) throw InputError(what + ": not a regular file, not a model file");

  std::ifstream in(what, std::ios::binary);
  if (!in) throw InputError(what + ": cannot read the model file");
  std::string text(kMaxModelFileBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  if (in.bad()) throw InputError(what + ": cannot read the model file");
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxModelFileBytes)
    throw InputError(what + ": over 4 MiB: too large for a config.json or a model spec");

  nlohmann::json doc;
  doc = parse_json_input(text, what);
  if (doc.is_object() && doc.contains("model_type")) return build_from_hf(parse_hf_config(text, what), shape);
  return build_from_spec(parse_model_spec(text, what), shape);
}

}  // namespace coloc::est
