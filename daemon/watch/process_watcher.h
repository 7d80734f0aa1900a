// daemon/watch/process_watcher.h — notices the death of registered processes within
// milliseconds, whichever source is first: the BPF exit watcher (where the kernel and our
// privileges allow), or a pidfd per process (always; the fallback). Socket hang-ups are the
// server's own third source. Each watched process is reported at most once.
//
// A process is named by its pid *and* its start time (ProcKey), never by its pid alone: pids are
// reused, and between a registration and its watch, or between an exit and its report, the pid
// may already belong to another process. A watch of a process that is no longer the one its key
// names fails (ESRCH), and an exit of an earlier holder of a pid never reaches a later one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/event_loop.h"
#include "util/result.h"
#include "watch/bpf_exit_watch.h"
#include "watch/pidfd_watch.h"

namespace coloc::watch {

/// One process: its pid and its start time (/proc/PID/stat field 22, clock ticks since boot, as
/// engine::process_start_time reads it).
struct ProcKey {
  pid_t pid = 0;
  uint64_t start = 0;
  auto operator<=>(const ProcKey&) const = default;
};

/// A watched process exited.
struct Exit {
  pid_t pid = 0;
  uint64_t start = 0;              ///< its start time (ProcKey::start)
  std::optional<int> wait_status;  ///< wait(2) status when known
  const char* source = "";         ///< "bpf" or "pidfd"
};

class ProcessWatcher {
 public:
  enum class Mode {
    kAuto,   ///< BPF and pidfds; pidfds alone when BPF cannot load (logged)
    kBpf,    ///< BPF only (start fails without it); for tests of the BPF path
    kPidfd,  ///< pidfds only (--no-bpf)
  };
  using OnExit = std::function<void(const Exit&)>;

  /// Registers its descriptors in `loop`. Errors: kBpf mode without BPF.
  static Result<std::unique_ptr<ProcessWatcher>> start(Mode mode, engine::EventLoop& loop, OnExit on_exit);
  ~ProcessWatcher();

  /// Watches the process `key` names (counted: several connections may share a process).
  /// Errors: ESRCH when it is already gone, or when its pid now names another process (nothing
  /// is watched then).
  Result<void> watch(ProcKey key);
  /// Drops one count of `key`; the last one stops watching it.
  void unwatch(ProcKey key);
  /// "bpf+pidfd", "pidfd", "bpf", with the reason when BPF was wanted but is not used.
  const std::string& description() const { return description_; }
  bool bpf_active() const { return bpf_ != nullptr; }
  bool pidfd_active() const { return use_pidfd_; }

 private:
  struct Watched {
    int count = 0;
    std::optional<PidfdWatch> pidfd;
    engine::EventLoop::Token token = 0;  ///< the pidfd's watch in the loop (0: none)
  };
  /// Drops one of `pid`'s keys from the BPF map's count; the last one removes the pid.
  void forget_bpf(pid_t pid);
  ProcessWatcher(engine::EventLoop& loop, OnExit on_exit) : loop_(loop), on_exit_(std::move(on_exit)) {}
  /// An exit seen by `source`: reported when `key` is watched. A BPF event names the start time
  /// it read (0 when the kernel has none to give: then the pid alone decides).
  void report(ProcKey key, std::optional<int> status, const char* source);

  engine::EventLoop& loop_;
  OnExit on_exit_;
  std::unique_ptr<BpfExitWatch> bpf_;
  engine::EventLoop::Token bpf_token_ = 0;
  bool use_pidfd_ = true;
  std::string description_;
  std::map<ProcKey, Watched> watched_;
  std::unordered_map<pid_t, int> bpf_pids_;  ///< keys per pid in the BPF map (two, briefly, when a pid is reused)
};

}  // namespace coloc::watch
