// daemon/util/log.h — one named spdlog logger per daemon module ("engine", "broker", "watch",
// "report", "config"), all writing to stderr (journald picks it up), sharing one level.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace coloc::log {

/// The logger named `name`, created on first use with the shared stderr sink and level.
std::shared_ptr<spdlog::logger> get(const std::string& name);

/// Sets the level of every logger, present and future. Accepts spdlog's names ("trace", "debug",
/// "info", "warn", "error", "critical", "off"); returns false for anything else.
bool set_level(const std::string& level);

}  // namespace coloc::log
