#include "watch/process_watcher.h"

#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

#include "engine/resume_state.h"
#include "util/log.h"

namespace coloc::watch {

namespace {
/// BPF reports the kernel's start_boottime in ns; /proc gives it in clock ticks (USER_HZ).
uint64_t ns_to_ticks(uint64_t ns) {
  static const uint64_t per_tick = [] {
    long hz = ::sysconf(_SC_CLK_TCK);
    return uint64_t(1000000000 / (hz > 0 ? hz : 100));
  }();
  return ns / per_tick;
}
}  // namespace

Result<std::unique_ptr<ProcessWatcher>> ProcessWatcher::start(Mode mode, engine::EventLoop& loop, OnExit on_exit) {
  std::unique_ptr<ProcessWatcher> w(new ProcessWatcher(loop, std::move(on_exit)));
  auto lg = log::get("watch");
  w->use_pidfd_ = mode != Mode::kBpf;
  if (mode != Mode::kPidfd) {
    ProcessWatcher* self = w.get();
    auto bpf = BpfExitWatch::open([self](pid_t pid, uint64_t start_ns, int status) {
      self->report({pid, start_ns ? ns_to_ticks(start_ns) : 0}, status, "bpf");
    });
    if (bpf) {
      w->bpf_ = std::move(bpf.value());
      BpfExitWatch* b = w->bpf_.get();
      auto token = loop.add(b->fd(), EPOLLIN, [b](uint32_t) { b->drain(); });
      if (!token) return token.error();
      w->bpf_token_ = token.value();
      w->description_ = mode == Mode::kBpf ? "bpf" : "bpf+pidfd";
      lg->info("process watcher: BPF sched_process_exit tracepoint{}", mode == Mode::kBpf ? "" : ", with pidfds");
    } else if (mode == Mode::kBpf) {
      return Error{bpf.error().err, "BPF process watcher: " + bpf.error().message()};
    } else {
      w->description_ = "pidfd (bpf unavailable: " + bpf.error().message() + ")";
      lg->warn("process watcher: BPF is not available ({}); using pidfds", bpf.error().message());
    }
  } else {
    w->description_ = "pidfd";
    lg->info("process watcher: pidfds (BPF disabled)");
  }
  return w;
}

ProcessWatcher::~ProcessWatcher() {
  for (auto& [key, w] : watched_)
    if (w.token) loop_.remove(w.token);
  if (bpf_token_) loop_.remove(bpf_token_);
}

Result<void> ProcessWatcher::watch(ProcKey key) {
  auto it = watched_.find(key);
  if (it != watched_.end()) {
    ++it->second.count;
    return {};
  }
  auto gone = [&] { return Error{ESRCH, "process " + std::to_string(key.pid) + " is gone"}; };
  Watched w;
  w.count = 1;
  if (use_pidfd_) {
    auto p = PidfdWatch::open(key.pid);
    if (!p) return p.error();
    // The pidfd names whichever process has the pid now: it must be the one the key names, and
    // still running (a pid freed after the start time was read would name a later process).
    auto start = engine::process_start_time(key.pid);
    if (!start || *start != key.start || p.value().exited()) return gone();
    w.pidfd = std::move(p.value());
    int fd = w.pidfd->fd();
    auto token = loop_.add(fd, EPOLLIN, [this, key](uint32_t) {
      auto it2 = watched_.find(key);
      std::optional<int> status;
      if (it2 != watched_.end() && it2->second.pidfd) status = it2->second.pidfd->exit_status();
      report(key, status, "pidfd");
    });
    if (!token) return token.error();
    w.token = token.value();
  }
  if (bpf_) {
    if (bpf_pids_[key.pid]++ == 0) {
      if (auto r = bpf_->watch(key.pid); !r) {
        bpf_pids_.erase(key.pid);
        if (w.token) loop_.remove(w.token);
        return r.error();
      }
    }
    // It may have died before the map entry existed: a pidfd or a probe of its start time tells.
    if (!use_pidfd_) {
      auto start = engine::process_start_time(key.pid);
      if (!start || *start != key.start) {
        forget_bpf(key.pid);
        return gone();
      }
    }
  }
  watched_.emplace(key, std::move(w));
  return {};
}

void ProcessWatcher::forget_bpf(pid_t pid) {
  auto it = bpf_pids_.find(pid);
  if (it == bpf_pids_.end()) return;
  if (--it->second > 0) return;
  bpf_pids_.erase(it);
  bpf_->unwatch(pid);
}

void ProcessWatcher::unwatch(ProcKey key) {
  auto it = watched_.find(key);
  if (it == watched_.end()) return;
  if (--it->second.count > 0) return;
  if (it->second.token) loop_.remove(it->second.token);
  if (bpf_) forget_bpf(key.pid);
  watched_.erase(it);
}

void ProcessWatcher::report(ProcKey key, std::optional<int> status, const char* source) {
  auto it = watched_.find(key);
  if (key.start == 0) {  // a BPF event without a start time: the pid's only watch, if it has one
    it = watched_.lower_bound(ProcKey{key.pid, 0});
    const bool one = it != watched_.end() && it->first.pid == key.pid &&
                     (std::next(it) == watched_.end() || std::next(it)->first.pid != key.pid);
    if (!one) it = watched_.end();
  }
  if (it == watched_.end()) return;  // already reported, never watched, or an earlier process with that pid
  const ProcKey k = it->first;
  if (it->second.token) loop_.remove(it->second.token);
  if (bpf_) forget_bpf(k.pid);
  watched_.erase(it);
  log::get("watch")->debug("process {} exited (noticed by {})", k.pid, source);
  on_exit_(Exit{k.pid, k.start, status, source});
}

}  // namespace coloc::watch
