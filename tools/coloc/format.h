// tools/coloc/format.h — the CLI's tables, from the daemon's JSON answers (shapes in
// docs/ARCHITECTURE.md). Pure functions: JSON in, text out.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace coloc::cli {

/// "80.00 GiB"; "none" for null (no limit).
std::string bytes_text(const nlohmann::json& v);
/// "3.2 s", "1 min 04 s", "2 h 05 min".
std::string duration_text(double seconds);

/// `coloc status`: each device with capacity, headroom, granted, in use, and its jobs.
std::string status_table(const nlohmann::json& status);
/// `coloc jobs`: one line per job.
std::string jobs_table(const nlohmann::json& jobs);
/// `coloc report JOB`: summary, per-device table, OOM events and waits.
std::string report_table(const nlohmann::json& report);

}  // namespace coloc::cli
