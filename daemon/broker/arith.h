// daemon/broker/arith.h — saturating byte arithmetic and the MiB figures of the broker's log lines
// (internal to daemon/broker/).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "broker/types.h"

namespace coloc::broker {

/// a + b, at most 2^64 - 1.
inline Bytes sat_add(Bytes a, Bytes b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
/// a - b, at least 0.
inline Bytes sat_sub(Bytes a, Bytes b) { return a > b ? a - b : 0; }

/// "1234.5 MiB", or "none" for kNoLimit.
inline std::string mib(Bytes b) {
  if (b == kNoLimit) return "none";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  return buf;
}

}  // namespace coloc::broker
