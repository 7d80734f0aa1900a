// daemon/device/outside_processes.h — the processes that use a device without being under coloc,
// as `coloc status` and `coloc top` show them: from the driver's per-process list
// (MemoryReader::processes, NVML's nvmlDeviceGetComputeRunningProcesses_v3), less colocd's own
// clients, each with its user and command read from /proc.
//
// Everything /proc gives is untrusted text (any user names their process as they like):
// sanitize_command makes it safe to print on a terminal and to put in JSON. Called on the
// daemon's loop thread only; /proc is read once per process (cached by pid and start time while
// the driver lists it: a pid reused by another user's process is read again, never shown as the
// first one's), and at most kMaxPerDevice processes per device are resolved.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "broker/types.h"
#include "device/memory_reader.h"

namespace coloc::device {

/// What /proc says of a process.
struct ProcInfo {
  std::optional<uint32_t> uid;  ///< its real uid (/proc/PID/status "Uid:"); nullopt: not readable
  std::string user;             ///< the uid's user name (getpwuid_r), or the number; "" without a uid
  std::string command;          ///< sanitize_command(cmdline), or "[comm]"; "" when unreadable
  /// Its start time (/proc/PID/stat, clock ticks since boot): with the pid, names the process
  /// (a pid is reused). nullopt: not readable.
  std::optional<uint64_t> start_time;
};

/// The start time of `proc_root`/PID (field 22 of its stat), nullopt when it is gone or unreadable.
std::optional<uint64_t> read_start_time(int32_t pid, const std::string& proc_root = "/proc");

/// One process outside coloc on a device.
struct OutsideProcess {
  int32_t pid = 0;
  ProcInfo info;
  broker::Bytes used = broker::kUnknown;  ///< the driver's figure (bytes), kUnknown when it gives none
};

/// The processes outside coloc on one device: the largest `shown` (by used bytes, then pid), and
/// how many more there are.
struct OutsideList {
  std::vector<OutsideProcess> shown;
  size_t more = 0;
};

/// The longest command kept (bytes, after sanitizing).
inline constexpr size_t kMaxCommandBytes = 160;

/// `raw` made safe to show: NULs (cmdline's argument separators) become spaces, trailing ones
/// dropped; control characters (C0, DEL, C1), invalid UTF-8 and Unicode's bidirectional
/// overrides and isolates become '?'; cut at a character boundary to at most `max_bytes` bytes,
/// with "..." in place of the cut's last three.
std::string sanitize_command(std::string_view raw, size_t max_bytes = kMaxCommandBytes);

/// Reads /proc/PID (`proc_root`/PID: tests use another root): the real uid and its user name, and
/// the command line
/// (its arguments joined by spaces), or "[comm]" when the command line is empty (a kernel thread,
/// a zombie). A process that is gone, or hidden from colocd, gives {nullopt, ""}; so does one
/// whose pid changed hands while it was read (its start time before and after differ).
ProcInfo read_proc_info(int32_t pid, const std::string& proc_root = "/proc");

class OutsideProcesses {
 public:
  /// At most this many processes per device are kept (the rest are counted in `more`).
  static constexpr size_t kMaxPerDevice = 64;

  explicit OutsideProcesses(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}

  /// Device `uuid`'s processes from a reading of the driver's list `procs`: those whose pid is not
  /// in `coloc_pids` (colocd's clients) and not 0.
  void update(const broker::Uuid& uuid, const std::vector<ProcessMemory>& procs, const std::set<int32_t>& coloc_pids);
  /// Device `uuid`'s list is not known (the reader cannot tell): find() answers nullptr.
  void forget(const broker::Uuid& uuid);
  /// The last list of `uuid`; nullptr when it was never read or the last reading failed.
  const OutsideList* find(const broker::Uuid& uuid) const;

 private:
  void prune_cache();

  std::string proc_root_;
  std::map<broker::Uuid, OutsideList> lists_;
  std::map<broker::Uuid, std::set<int32_t>> pids_;  ///< every outside pid of each device (shown or not)
  std::map<int32_t, ProcInfo> cache_;               ///< /proc read once per process (pid, start time) while listed
};

}  // namespace coloc::device
