#include "watch/pidfd_watch.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace coloc::watch {

namespace {
// From linux/pidfd.h (6.15); the installed headers may be older.
struct PidfdInfo {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
};
static_assert(sizeof(PidfdInfo) == 64, "PIDFD_INFO_SIZE_VER0");
constexpr uint64_t kPidfdInfoExit = 1ull << 3;
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);
}  // namespace

Result<PidfdWatch> PidfdWatch::open(pid_t pid) {
  int fd = int(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return Error::from_errno("pidfd_open " + std::to_string(pid));
  PidfdWatch w;
  w.fd_.reset(fd);
  w.pid_ = pid;
  return w;
}

bool PidfdWatch::exited() const {
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

std::optional<int> PidfdWatch::exit_status() const {
  PidfdInfo info{};
  info.mask = kPidfdInfoExit;
  if (::ioctl(fd_.get(), kPidfdGetInfo, &info) != 0) return std::nullopt;
  if (!(info.mask & kPidfdInfoExit)) return std::nullopt;
  return info.exit_code;
}

}  // namespace coloc::watch
