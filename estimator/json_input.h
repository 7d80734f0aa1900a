// estimator/json_input.h — a user's JSON file (a model spec, a Hugging Face config.json) parsed
// into a document, every way it can be malformed turned into one InputError line.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace coloc::est {

/// Parses `text` (the contents of `source`, a path or "-" as the user named it). Throws
/// InputError, one line: "SOURCE: not valid JSON (...)" for a syntax error, and for a number the
/// parser cannot hold (1e400: beyond a double) "SOURCE: "n_layer": number out of range ('1e400')",
/// naming the field it belongs to (its path, "transformer.n_layer", where it is nested).
/// Nothing else escapes: nlohmann's exceptions never reach the caller.
nlohmann::json parse_json_input(std::string_view text, const std::string& source);

}  // namespace coloc::est
