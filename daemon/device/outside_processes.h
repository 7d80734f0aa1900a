// daemon/device/outside_processes.h — the processes that use a device without being under coloc,
// as `coloc status` and `coloc top` show them: from the driver's per-process list
// (MemoryReader::processes, NVML's nvmlDeviceGetComputeRunningProcesses_v3), less colocd's own
// clients, each with its user and command read from /proc.
//
// Everything /proc gives is untrusted text (any user names their process as they like):
// sanitize_command makes it safe to print on a terminal and to put in JSON. OutsideProcesses is
// used on the daemon's loop thread only; /proc is read once per process (cached by pid and start
// time while the driver lists it: a pid reused by another user's process is read again, never
// shown as the first one's), and at most kMaxPerDevice processes per device are resolved.
//
// No process outside coloc can stall the loop. On the loop colocd reads only /proc/PID/status,
// stat and comm, which the kernel serves without the process's mmap lock: a process first seen
// shows "[comm]" at once. Its /proc/PID/cmdline is read under that lock (access_remote_vm), which
// the process's owner can hold for as long as they like (a mapping backed by a FUSE file system
// that never answers: the trick that makes `ps` hang). So the command line is read on a worker
// thread of OutsideProcesses' own (started at the first request), from a bounded queue
// (kMaxQueued: more requests are dropped and asked again at a later update), and a later
// update() takes what it finished, without ever waiting for it, in place of "[comm]" while the
// pid's start time is still the one asked for. A worker stuck on one process delays only the
// other processes' command lines (they stay "[comm]"), never the loop; and it does not delay
// colocd's exit: the destructor tells it to stop and leaves it (detached) instead of joining it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
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

/// Reads what of /proc/PID (`proc_root`/PID: tests use another root) a process cannot make colocd
/// wait for (status, stat, comm; never cmdline): the real uid and its user name, the start time,
/// and the command "[comm]" (read_cmdline gives the command line). A process that is gone, or
/// hidden from colocd, gives {nullopt, ""}; so does one whose pid changed hands while it was read
/// (its start time before and after differ).
ProcInfo read_proc_info(int32_t pid, const std::string& proc_root = "/proc");

/// The command line of /proc/PID, sanitized (its arguments joined by spaces); "" when it is empty
/// (a kernel thread, a zombie) or unreadable; nullopt when the pid's start time after the read is
/// not `start_time` (the pid changed hands, or the process is gone). It may block without bound
/// (the kernel reads it under the process's mmap lock, which the process's owner can hold): never
/// on the loop's thread. OutsideProcesses calls it on its worker thread.
std::optional<std::string> read_cmdline(int32_t pid, uint64_t start_time, const std::string& proc_root = "/proc");

class OutsideProcesses {
 public:
  /// At most this many processes per device are kept (the rest are counted in `more`).
  static constexpr size_t kMaxPerDevice = 64;

  /// At most this many command lines wait for the worker; a request over it is dropped (and made
  /// again at a later update).
  static constexpr size_t kMaxQueued = 256;

  explicit OutsideProcesses(std::string proc_root = "/proc");
  /// Tells the worker to stop and detaches it: never waits for one stuck in a read.
  ~OutsideProcesses();
  OutsideProcesses(const OutsideProcesses&) = delete;
  OutsideProcesses& operator=(const OutsideProcesses&) = delete;

  /// Device `uuid`'s processes from a reading of the driver's list `procs`: those whose pid is not
  /// in `coloc_pids` (colocd's clients) and not 0. Takes first the command lines the worker has
  /// read since (into every device's list), and asks it for those of processes first seen.
  void update(const broker::Uuid& uuid, const std::vector<ProcessMemory>& procs, const std::set<int32_t>& coloc_pids);
  /// Device `uuid`'s list is not known (the reader cannot tell): find() answers nullptr.
  void forget(const broker::Uuid& uuid);
  /// The last list of `uuid`; nullptr when it was never read or the last reading failed.
  const OutsideList* find(const broker::Uuid& uuid) const;

  /// Tests only (it waits): up to `bound` for the worker to have read every command line asked for
  /// (the next update() shows them). false: it has not (stuck, or still reading). true when there
  /// is no worker.
  bool wait_idle(std::chrono::milliseconds bound) const;

 private:
  struct Worker;  ///< the worker's state, shared with its thread (outside_processes.cpp)
  struct Entry {
    ProcInfo info;
    bool command_read = false;  ///< the worker answered for this process (command line or not)
    bool requested = false;     ///< its command line is asked for and not answered yet
  };

  /// Asks the worker for (pid, start)'s command line (starting it the first time); false when it
  /// was not taken (the queue is full, or no thread could be started).
  bool request(int32_t pid, uint64_t start);
  /// Takes the worker's answers into the cache and the lists. Never waits (a mutex held briefly).
  void take_results();
  void prune_cache();

  std::string proc_root_;
  std::map<broker::Uuid, OutsideList> lists_;
  std::map<broker::Uuid, std::set<int32_t>> pids_;  ///< every outside pid of each device (shown or not)
  std::map<int32_t, Entry> cache_;                  ///< /proc read once per process (pid, start time) while listed
  std::shared_ptr<Worker> worker_;                  ///< nullptr until the first request
  bool no_worker_ = false;                          ///< its thread could not be started: commands stay "[comm]"
};

}  // namespace coloc::device
