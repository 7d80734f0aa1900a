// daemon/watch/process_watcher.h — notices the death of registered processes within
// milliseconds, whichever source is first: the BPF exit watcher (where the kernel and our
// privileges allow), or a pidfd per process (always; the fallback). Socket hang-ups are the
// server's own third source. Each watched pid is reported at most once.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/event_loop.h"
#include "util/result.h"
#include "watch/bpf_exit_watch.h"
#include "watch/pidfd_watch.h"

namespace coloc::watch {

/// A watched process exited.
struct Exit {
  pid_t pid = 0;
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

  /// Watches `pid` (counted: several connections may share a pid). Errors: ESRCH when the
  /// process is already gone (nothing is watched then).
  Result<void> watch(pid_t pid);
  /// Drops one count of `pid`; the last one stops watching it.
  void unwatch(pid_t pid);
  /// "bpf+pidfd", "pidfd", "bpf", with the reason when BPF was wanted but is not used.
  const std::string& description() const { return description_; }
  bool bpf_active() const { return bpf_ != nullptr; }
  bool pidfd_active() const { return use_pidfd_; }

 private:
  struct Watched {
    int count = 0;
    std::optional<PidfdWatch> pidfd;
  };
  ProcessWatcher(engine::EventLoop& loop, OnExit on_exit) : loop_(loop), on_exit_(std::move(on_exit)) {}
  void report(pid_t pid, std::optional<int> status, const char* source);

  engine::EventLoop& loop_;
  OnExit on_exit_;
  std::unique_ptr<BpfExitWatch> bpf_;
  bool use_pidfd_ = true;
  std::string description_;
  std::unordered_map<pid_t, Watched> watched_;
};

}  // namespace coloc::watch
