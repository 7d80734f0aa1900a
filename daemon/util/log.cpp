#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <time.h>

#include <mutex>

namespace coloc::log {

namespace {
std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
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

bool Limiter::allow(std::string_view cause, uint64_t now_ns, uint64_t* suppressed) {
  if (now_ns == 0) now_ns = monotonic_ns();
  *suppressed = 0;
  auto it = causes_.find(cause);
  if (it == causes_.end()) {
    if (causes_.size() >= kMaxCauses) {
      // Forget the causes whose window is over and that held nothing back (nothing is lost).
      for (auto i = causes_.begin(); i != causes_.end();)
        i = (now_ns - i->second.start >= interval_ && i->second.held == 0) ? causes_.erase(i) : std::next(i);
      if (causes_.size() >= kMaxCauses) {  // still full: a flood of distinct causes
        ++suppressed_total_;
        return false;
      }
    }
    it = causes_.emplace(std::string(cause), Window{now_ns, 0, 0}).first;
  }
  Window& w = it->second;
  if (now_ns - w.start >= interval_) {
    w.start = now_ns;
    w.written = 0;
  }
  if (w.written >= burst_) {
    ++w.held;
    ++suppressed_total_;
    return false;
  }
  ++w.written;
  *suppressed = w.held;
  w.held = 0;
  return true;
}

Limiter& peer_limiter() {
  static Limiter l(10'000'000'000ull, 20);
  return l;
}

}  // namespace coloc::log
