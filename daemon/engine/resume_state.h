// daemon/engine/resume_state.h — what a restarted colocd expects: the processes that were
// registered when the previous run stopped (even by SIGKILL), kept in <state-dir>/clients as
// "pid start-time" lines (start time: /proc/PID/stat field 22, so a reused pid does not count).
// While expected processes are alive and have not re-registered, the broker holds new requests
// (see Broker::hold_until), so re-registering jobs find the memory they had.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "util/result.h"

namespace coloc::engine {

/// The start time of process `pid` in clock ticks since boot, or nullopt when it is gone.
std::optional<uint64_t> process_start_time(pid_t pid);

/// A process's start time (clock ticks since boot, as process_start_time gives it) on the
/// daemon's clocks: {CLOCK_MONOTONIC ns, Unix ms}, given both clocks' readings `mono_now` (ns)
/// and `wall_now_ms` taken now. Exact to a clock tick (10 ms); a start before the monotonic
/// clock's zero is clamped to 0.
std::pair<uint64_t, int64_t> start_on_daemon_clocks(uint64_t start_ticks, uint64_t mono_now, int64_t wall_now_ms);

class ResumeState {
 public:
  explicit ResumeState(std::string path) : path_(std::move(path)) {}

  /// Reads the file of the previous run: the processes listed there that are still alive (same
  /// start time) become expected. A missing file means nothing is expected.
  Result<void> load();
  /// A process registered again (or exited): no longer expected.
  void settle(pid_t pid);
  /// True when process `pid` of start time `start` (clock ticks since boot) was registered with
  /// the previous colocd and has not re-registered yet.
  bool is_expected(pid_t pid, uint64_t start) const {
    auto it = expected_.find(pid);
    return it != expected_.end() && it->second == start;
  }
  /// Expected processes that have died meanwhile are dropped; returns how many remain.
  size_t expected();

  /// The live set changed: `add`/`remove` one registered process (counted per pid).
  void add(pid_t pid, uint64_t start_time);
  void remove(pid_t pid);
  /// The start time recorded for a live registered process (nullopt when it is not registered).
  std::optional<uint64_t> start_time(pid_t pid) const {
    auto it = live_.find(pid);
    return it == live_.end() ? std::nullopt : std::optional<uint64_t>(it->second.first);
  }
  /// Writes the live set if it changed since the last save (a temporary file, then rename).
  Result<void> save_if_dirty();

 private:
  std::string path_;
  std::map<pid_t, uint64_t> expected_;
  std::map<pid_t, std::pair<uint64_t, int>> live_;  ///< pid -> (start time, connections)
  bool dirty_ = false;
};

}  // namespace coloc::engine
