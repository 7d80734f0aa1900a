#include "engine/helper_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mutex>

extern char** environ;

namespace coloc::engine {

namespace {

// Killed or abandoned helpers not reaped yet: their pidfds, tried again (WNOHANG) whenever any
// helper's event runs. Only the loop's thread touches it; the mutex keeps tests honest.
std::mutex g_unreaped_mu;
std::vector<UniqueFd> g_unreaped;

bool reap(int pidfd, siginfo_t* info) {
  siginfo_t si{};
  if (::waitid(P_PIDFD, id_t(pidfd), &si, WEXITED | WNOHANG) != 0) return errno == ECHILD;  // gone already
  if (si.si_pid == 0) return false;  // still running
  if (info) *info = si;
  return true;
}

void reap_abandoned() {
  std::lock_guard<std::mutex> lk(g_unreaped_mu);
  for (auto it = g_unreaped.begin(); it != g_unreaped.end();) it = reap(it->get(), nullptr) ? g_unreaped.erase(it) : it + 1;
}

void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

size_t HelperProcess::unreaped() {
  std::lock_guard<std::mutex> lk(g_unreaped_mu);
  return g_unreaped.size();
}

Result<std::unique_ptr<HelperProcess>> HelperProcess::start(EventLoop& loop, const std::vector<std::string>& argv,
                                                            int timeout_ms, Done done) {
  reap_abandoned();
  if (argv.empty() || timeout_ms <= 0) return Error{EINVAL, "helper: no program or no deadline"};
  std::unique_ptr<HelperProcess> h(new HelperProcess(loop));
  h->done_ = std::move(done);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Error::from_errno("helper: pipe");
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Error::from_errno("helper: pipe");
  UniqueFd err_r(err[0]), err_w(err[1]);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Error{rc, "helper: cannot start " + argv[0]};
  h->pid_ = pid;
  out_w.reset();
  err_w.reset();
  int pidfd = int(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    Error e = Error::from_errno("helper: pidfd_open");
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);  // our own child, just killed and never in a driver call yet
    return e;
  }
  h->pidfd_.reset(pidfd);
  h->out_ = std::move(out_r);
  h->err_ = std::move(err_r);
  set_nonblock(h->out_.get());
  set_nonblock(h->err_.get());
  h->timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  HelperProcess* self = h.get();
  auto arm = [&](int ms) {
    itimerspec its{};
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = long(ms % 1000) * 1'000'000;
    return ::timerfd_settime(self->timer_.get(), 0, &its, nullptr) == 0;
  };
  auto watch = [&](int fd, EventLoop::Token* token, std::function<void(uint32_t)> cb) {
    auto t = loop.add(fd, EPOLLIN, std::move(cb));
    if (!t) return false;
    *token = t.value();
    return true;
  };
  // From here on the destructor cleans up (kills it, hands its pidfd to the reaper).
  if (!h->timer_.valid() || !arm(timeout_ms) ||
      !watch(h->out_.get(), &h->out_token_, [self](uint32_t) { self->on_output(self->out_.get(), &self->outcome_.out, kMaxOutput, false); }) ||
      !watch(h->err_.get(), &h->err_token_, [self](uint32_t) { self->on_output(self->err_.get(), &self->outcome_.err, kMaxErr, true); }) ||
      !watch(h->pidfd_.get(), &h->pid_token_, [self](uint32_t) { self->on_exit(); }) ||
      !watch(h->timer_.get(), &h->timer_token_, [self](uint32_t) { self->on_timer(); }))
    return Error::from_errno("helper: cannot watch its descriptors");
  return h;
}

void HelperProcess::on_output(int fd, std::string* into, size_t cap, bool keep_tail) {
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      if (keep_tail) {
        into->append(buf, size_t(n));
        if (into->size() > cap) into->erase(0, into->size() - cap);
      } else {
        size_t room = into->size() < cap ? cap - into->size() : 0;
        into->append(buf, std::min(room, size_t(n)));
        if (size_t(n) > room) outcome_.truncated = true;
      }
      continue;
    }
    if (n == 0) {  // end of file: stop watching it (a grandchild may keep its end open no longer)
      EventLoop::Token& t = fd == out_.get() ? out_token_ : err_token_;
      if (t) loop_.remove(std::exchange(t, 0));
    }
    return;  // EAGAIN, or EOF handled
  }
}

void HelperProcess::on_exit() {
  siginfo_t si{};
  if (!reap(pidfd_.get(), &si)) return;  // spurious
  // Whatever it wrote before it ended is in the pipes now.
  if (out_token_) on_output(out_.get(), &outcome_.out, kMaxOutput, false);
  if (err_token_) on_output(err_.get(), &outcome_.err, kMaxErr, true);
  if (si.si_code == CLD_EXITED) {
    outcome_.exit_code = si.si_status;
  } else {
    outcome_.signal = si.si_status;
  }
  pidfd_.reset();
  finish();
}

void HelperProcess::on_timer() {
  uint64_t ticks;
  while (::read(timer_.get(), &ticks, sizeof ticks) > 0) {
  }
  if (finished_) return;
  if (!killed_) {
    killed_ = true;
    outcome_.timed_out = true;
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    itimerspec its{};
    its.it_value.tv_sec = kKillGraceMs / 1000;
    its.it_value.tv_nsec = long(kKillGraceMs % 1000) * 1'000'000;
    ::timerfd_settime(timer_.get(), 0, &its, nullptr);
    return;
  }
  // It did not die: report it stuck, and let the reaper have its pidfd.
  outcome_.stuck = true;
  {
    std::lock_guard<std::mutex> lk(g_unreaped_mu);
    g_unreaped.push_back(std::move(pidfd_));
  }
  finish();
}

void HelperProcess::drop_watches() {
  for (EventLoop::Token* t : {&pid_token_, &out_token_, &err_token_, &timer_token_})
    if (*t) loop_.remove(std::exchange(*t, 0));
}

void HelperProcess::finish() {
  if (finished_) return;
  finished_ = true;
  drop_watches();
  reap_abandoned();
  Done done = std::move(done_);
  Outcome outcome = outcome_;
  if (done) done(outcome);  // may destroy this object: nothing of it is used after
}

HelperProcess::~HelperProcess() {
  drop_watches();
  if (pidfd_.valid()) {
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    if (!reap(pidfd_.get(), nullptr)) {
      std::lock_guard<std::mutex> lk(g_unreaped_mu);
      g_unreaped.push_back(std::move(pidfd_));
    }
  }
}

}  // namespace coloc::engine
