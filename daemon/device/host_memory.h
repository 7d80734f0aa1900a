// daemon/device/host_memory.h — the host memory a suspension may use (issue 29): a checkpoint moves
// a job's device bytes into the job's own host memory, so before it colocd checks that the host
// has them to spare (MemAvailable less a reserve) and that the job's cgroup may grow by them
// (memory.max less memory.current, cgroup v2). Parsers are pure; the readers take a root directory
// so tests can point them at a fake /proc and /sys/fs/cgroup.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coloc::device {

/// MemTotal and MemAvailable from /proc/meminfo's text, in bytes (the file says kB = KiB);
/// nullopt when either line is missing or malformed.
struct MemInfo {
  uint64_t total = 0;
  uint64_t available = 0;
};
std::optional<MemInfo> parse_meminfo(std::string_view text);

/// The cgroup v2 path of a process from /proc/PID/cgroup's text (the "0::/path" line), or
/// nullopt (cgroup v1 only, or malformed).
std::optional<std::string> parse_cgroup_path(std::string_view text);

/// memory.max's text: a byte count (*limit set), or "max" (no limit: *limit nullopt). Returns
/// false when malformed.
bool parse_memory_max(std::string_view text, std::optional<uint64_t>* limit);

/// What a suspension of `bytes` may use: the host's MemAvailable less `reserve_fraction` (0..1) of
/// MemTotal, and, when the process's cgroup has a memory.max, that less its memory.current.
struct HostRoom {
  uint64_t host = 0;                  ///< MemAvailable − reserve, 0 when below (bytes)
  std::optional<uint64_t> cgroup;     ///< memory.max − memory.current (bytes); nullopt: no limit or unknown
  std::string cgroup_path;            ///< the cgroup whose limit binds, for messages ("" when none)
  /// The least of the two.
  uint64_t room() const { return cgroup && *cgroup < host ? *cgroup : host; }
};

/// Reads the room for process `pid` under `proc_root` ("/proc") and `cgroup_root`
/// ("/sys/fs/cgroup"): the tightest memory.max − memory.current of its cgroup and its ancestors.
/// nullopt when /proc/meminfo cannot be read; a cgroup that cannot be read counts as no limit.
std::optional<HostRoom> host_room(pid_t pid, double reserve_fraction, const std::string& proc_root = "/proc",
                                  const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace coloc::device
