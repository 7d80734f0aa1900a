// estimator/resolve.cpp — resolve_model (analytic.h): a preset name, a Hugging Face config.json
// (hf_config.h) or a coloc model spec (model_spec.h).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "analytic.h"
#include "hf_config.h"
#include "input_error.h"
#include "model_spec.h"

namespace coloc::est {

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

  std::ifstream in(what, std::ios::binary);
  if (!in) throw InputError(what + ": cannot read the model file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(what + ": cannot read the model file");
  const std::string text = buffer.str();

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    for (char& ch : msg)
      if (ch == '\n') ch = ' ';
    throw InputError(what + ": not valid JSON (" + msg + ")");
  }
  if (doc.is_object() && doc.contains("model_type")) return build_from_hf(parse_hf_config(text, what), shape);
  return build_from_spec(parse_model_spec(text, what), shape);
}

}  // namespace coloc::est
