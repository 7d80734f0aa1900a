// daemon/util/log.h — one named spdlog logger per daemon module ("engine", "broker", "watch",
// "report", "config"), all writing to stderr (journald picks it up), sharing one level; and the
// rate limit for lines a peer can trigger.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace coloc::log {

/// The logger named `name`, created on first use with the shared stderr sink and level.
std::shared_ptr<spdlog::logger> get(const std::string& name);

/// Sets the level of every logger, present and future. Accepts spdlog's names ("trace", "debug",
/// "info", "warn", "error", "critical", "off"); returns false for anything else.
bool set_level(const std::string& level);

/// Rate limit per cause: at most `burst` lines per `interval_ns` for one cause; the lines held
/// back are counted, and the next line written for that cause says how many there were. A cause
/// is a short key naming what happened and who made it happen ("malformed uid 1000"), so one
/// noisy peer cannot silence the lines of another. At most kMaxCauses causes are tracked; past
/// that, the quiet ones are forgotten first.
class Limiter {
 public:
  static constexpr size_t kMaxCauses = 4096;
  Limiter(uint64_t interval_ns, uint32_t burst) : interval_(interval_ns), burst_(burst) {}
  /// True when a line for `cause` may be written at `now_ns` (CLOCK_MONOTONIC; 0 = read the clock
  /// now); then *suppressed holds the number of lines of that cause held back since the last one
  /// written.
  bool allow(std::string_view cause, uint64_t now_ns, uint64_t* suppressed);
  /// Lines held back so far, over every cause.
  uint64_t suppressed_total() const { return suppressed_total_; }

 private:
  struct Window {
    uint64_t start = 0;
    uint32_t written = 0;
    uint64_t held = 0;
  };
  uint64_t interval_;
  uint32_t burst_;
  std::map<std::string, Window, std::less<>> causes_;
  uint64_t suppressed_total_ = 0;
};

/// The daemon's limiter for peer-triggered lines: 20 lines per cause per 10 s.
Limiter& peer_limiter();

/// Writes a peer-triggered line through peer_limiter(): `cause` as in Limiter; a line written
/// after some were held back ends with "(N more like this in the last 10 s were not logged)".
template <class... Args>
void limited(const std::shared_ptr<spdlog::logger>& lg, spdlog::level::level_enum level, std::string_view cause,
             fmt::format_string<Args...> format, Args&&... args) {
  if (!lg->should_log(level)) return;
  uint64_t held = 0;
  if (!peer_limiter().allow(cause, 0, &held)) return;
  std::string text = fmt::format(format, std::forward<Args>(args)...);
  if (held) text += fmt::format(" ({} more like this were not logged)", held);
  lg->log(level, "{}", text);
}

}  // namespace coloc::log
