// interpose/signal_wait.cpp — see signal_wait.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "signal_wait.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "glibc_compat.h"
#include "log.h"

namespace coloc::interpose {

SignalWindow::SignalWindow() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old_);
  sigfillset(&inside_);
  // Only what the thread accepted before the wait may interrupt it.
  if (!sigismember(&old_, SIGINT)) sigdelset(&inside_, SIGINT);
  if (!sigismember(&old_, SIGTERM)) sigdelset(&inside_, SIGTERM);
}

SignalWindow::~SignalWindow() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

bool SignalWindow::stop_pending() {
  sigset_t pending;
  if (sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
}

namespace {

// ppoll on up to two descriptors (negative ones are ignored) with `mask`: a bit per ready one,
// 0 when the time passed, -1 when a handler interrupted it.
int poll_masked(int fd0, int fd1, int timeout_ms, const sigset_t* mask) {
  if (timeout_ms < 0 || timeout_ms > SignalWindow::kSliceMs) timeout_ms = SignalWindow::kSliceMs;
  timespec ts{timeout_ms / 1000, long(timeout_ms % 1000) * 1000000L};
  pollfd p[2] = {{fd0, POLLIN, 0}, {fd1, POLLIN, 0}};  // ppoll ignores negative descriptors
  int saved = errno;
  int rc = ::ppoll(p, 2, &ts, mask);
  int err = errno;
  errno = saved;
  if (rc < 0) return err == EINTR ? -1 : 0;  // ENOMEM and the like: treat as time passing
  return (p[0].revents ? 1 : 0) | (p[1].revents ? 2 : 0);
}

int poll_masked(int fd, int timeout_ms, const sigset_t* mask) {
  int r = poll_masked(fd, -1, timeout_ms, mask);
  return r < 0 ? -1 : (r ? 1 : 0);
}

}  // namespace

void SignalWindow::set_notice(uint64_t after_ns, NoticeFn say, void* ctx) {
  notice_ = say;
  notice_ctx_ = ctx;
  notice_start_ns_ = monotonic_ns();
  notice_at_ns_ = notice_start_ns_ + after_ns;
  noticed_ = false;
  notice_done_ = false;
}

void SignalWindow::check_notice() {
  if (!notice_ || notice_done_) return;
  uint64_t now = monotonic_ns();
  if (now < notice_at_ns_) return;
  noticed_ = true;
  const uint64_t again = notice_(notice_ctx_, now - notice_start_ns_);
  if (again == 0) notice_done_ = true;
  else notice_at_ns_ = now + again;
}

int SignalWindow::wait(int fd, int timeout_ms) {
  if (stopped_ || stop_pending()) {
    stopped_ = true;
    return -1;
  }
  int r = poll_masked(fd, timeout_ms, &inside_);
  if (r < 0) stopped_ = true;  // only SIGINT/SIGTERM can interrupt it (the mask)
  check_notice();
  return r;
}

int SignalWindow::wait_uninterrupted(int fd, int timeout_ms) {
  sigset_t all;
  sigfillset(&all);
  int r = poll_masked(fd, timeout_ms, &all) > 0 ? 1 : 0;
  check_notice();
  return r;
}

int SignalWindow::wait_either(int fd0, int fd1, int timeout_ms, bool interruptible) {
  if (!interruptible) {
    sigset_t all;
    sigfillset(&all);
    int r = poll_masked(fd0, fd1, timeout_ms, &all);
    check_notice();
    return r < 0 ? 0 : r;
  }
  if (stopped_ || stop_pending()) {
    stopped_ = true;
    return -1;
  }
  int r = poll_masked(fd0, fd1, timeout_ms, &inside_);
  if (r < 0) stopped_ = true;
  check_notice();
  return r;
}

int SignalWindow::wait_futex(const void* word, uint32_t expected, int timeout_ms) {
  if (stopped_ || stop_pending()) {
    stopped_ = true;
    return -1;
  }
  if (timeout_ms < 0 || timeout_ms > kSliceMs) timeout_ms = kSliceMs;
  timespec ts{timeout_ms / 1000, long(timeout_ms % 1000) * 1000000L};
  int saved = errno;
  // The kernel's mask, set directly: glibc's pthread_sigmask would leave its own SIGCANCEL and
  // SIGSETXID deliverable, and their handlers' EINTR would read as a stop. Everything blocked but
  // the SIGINT/SIGTERM the thread accepted before the window (as inside_ for ppoll).
  uint64_t inside = ~uint64_t(0), window = 0;
  for (int sig : {SIGINT, SIGTERM})
    if (!sigismember(&inside_, sig)) inside &= ~(uint64_t(1) << (sig - 1));
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &inside, &window, sizeof inside);
  long rc = ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
  int err = errno;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &window, nullptr, sizeof window);
  errno = saved;
  check_notice();
  if (rc == 0 || err == EAGAIN) return 1;  // woken, or the word had changed already
  if (err == EINTR) {                      // only SIGINT/SIGTERM were deliverable: one was
    stopped_ = true;
    return -1;
  }
  return 0;  // ETIMEDOUT
}

bool SignalWindow::sleep(uint64_t ns) {
  uint64_t end = monotonic_ns() + ns;
  for (;;) {
    uint64_t now = monotonic_ns();
    if (now >= end) return true;
    uint64_t left_ms = (end - now + 999999) / 1000000;
    if (wait(-1, int(left_ms > uint64_t(kSliceMs) ? kSliceMs : left_ms)) < 0) return false;
  }
}

}  // namespace coloc::interpose
