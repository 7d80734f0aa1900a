// daemon/util/clock.h — the wall clock as the daemon's reports and saved state use it.
#pragma once

#include <chrono>
#include <cstdint>

namespace coloc {

/// Milliseconds since the Unix epoch (CLOCK_REALTIME).
inline int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace coloc
