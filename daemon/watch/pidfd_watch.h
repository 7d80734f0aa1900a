// daemon/watch/pidfd_watch.h — one pidfd per watched process (pidfd_open, Linux 5.3): readable
// when the process has exited, even when it is not our child. Where the kernel can tell
// (PIDFD_GET_INFO with PIDFD_INFO_EXIT, Linux 6.15, once the process is reaped), the exit status.
#pragma once

#include <sys/types.h>

#include <optional>

#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::watch {

class PidfdWatch {
 public:
  /// Opens a pidfd for `pid`. Errors: ESRCH when the process is already gone.
  static Result<PidfdWatch> open(pid_t pid);
  int fd() const { return fd_.get(); }
  pid_t pid() const { return pid_; }
  /// True once the process has exited (non-blocking poll).
  bool exited() const;
  /// The wait(2)-style status, when the kernel can tell.
  std::optional<int> exit_status() const;

 private:
  UniqueFd fd_;
  pid_t pid_ = 0;
};

}  // namespace coloc::watch
