// daemon/engine/helper_process.h — a helper program colocd runs without ever waiting on it: the
// checkpoint helper (coloc-ckpt, issue 29), whose calls into the driver can hang. A thread stuck in
// the driver cannot be cancelled; a process can be killed, and the loop goes on meanwhile.
//
// The helper starts with posix_spawn (its own process group, stdin /dev/null, default signal
// dispositions, an empty signal mask); its stdout and stderr come back through pipes the loop
// watches, its end through a pidfd. Past its deadline it gets SIGKILL. `done` runs once, on the
// loop's thread, when it has ended and been reaped, or, when it does not end within kKillGrace of
// the SIGKILL (a process in uninterruptible sleep inside a driver call dies only when the call
// returns), with `stuck` set: it is then reaped later, by the next helper's events, never waited on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/event_loop.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine {

class HelperProcess {
 public:
  struct Outcome {
    int exit_code = -1;      ///< its exit status; -1 when a signal ended it or it is stuck
    int signal = 0;          ///< the signal that ended it, or 0
    bool timed_out = false;  ///< it ran past its deadline and was sent SIGKILL
    bool stuck = false;      ///< it had not ended kKillGrace after the SIGKILL
    std::string out;         ///< its stdout, at most kMaxOutput bytes
    std::string err;         ///< the last kMaxErr bytes of its stderr
    bool truncated = false;  ///< stdout went past kMaxOutput (the rest was read and dropped)
  };
  using Done = std::function<void(const Outcome&)>;

  static constexpr size_t kMaxOutput = 64 * 1024;
  static constexpr size_t kMaxErr = 4 * 1024;
  static constexpr int kKillGraceMs = 5000;

  /// Starts `argv` (argv[0] a path; not searched in PATH) with colocd's environment, killed after
  /// `timeout_ms` (> 0). Errors: the pipes, the timer, posix_spawn (ENOENT, EACCES: it did not
  /// start), pidfd_open. `done` may destroy the HelperProcess: nothing of it is touched after.
  static Result<std::unique_ptr<HelperProcess>> start(EventLoop& loop, const std::vector<std::string>& argv,
                                                      int timeout_ms, Done done);
  /// Sends SIGKILL if it still runs and stops watching; it is reaped later (never waited on here).
  ~HelperProcess();
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// True until `done` has run.
  bool running() const { return !finished_; }
  /// Helpers killed or abandoned and not reaped yet (process-wide).
  static size_t unreaped();

 private:
  explicit HelperProcess(EventLoop& loop) : loop_(loop) {}
  void on_output(int fd, std::string* into, size_t cap, bool keep_tail);
  void on_exit();
  void on_timer();
  void finish();
  void drop_watches();

  EventLoop& loop_;
  pid_t pid_ = -1;
  UniqueFd pidfd_, out_, err_, timer_;
  EventLoop::Token pid_token_ = 0, out_token_ = 0, err_token_ = 0, timer_token_ = 0;
  Outcome outcome_;
  Done done_;
  bool killed_ = false, finished_ = false;
};

}  // namespace coloc::engine
