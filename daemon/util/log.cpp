#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace coloc::log {

namespace {
std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;
}  // namespace

std::shared_ptr<spdlog::logger> get(const std::string& name) {
  std::lock_guard lk(g_mu);
  if (auto l = spdlog::get(name)) return l;
  static auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(name, sink);
  l->set_level(g_level);
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%-5l%$ [%n] %v");
  spdlog::register_logger(l);
  return l;
}

bool set_level(const std::string& level) {
  auto lv = spdlog::level::from_str(level);
  if (lv == spdlog::level::off && level != "off") return false;
  std::lock_guard lk(g_mu);
  g_level = lv;
  spdlog::set_level(lv);
  return true;
}

}  // namespace coloc::log
