#include "watch/process_watcher.h"

#include <signal.h>
#include <sys/epoll.h>

#include <cerrno>

#include "util/log.h"

namespace coloc::watch {

Result<std::unique_ptr<ProcessWatcher>> ProcessWatcher::start(Mode mode, engine::EventLoop& loop, OnExit on_exit) {
  std::unique_ptr<ProcessWatcher> w(new ProcessWatcher(loop, std::move(on_exit)));
  auto lg = log::get("watch");
  w->use_pidfd_ = mode != Mode::kBpf;
  if (mode != Mode::kPidfd) {
    ProcessWatcher* self = w.get();
    auto bpf = BpfExitWatch::open([self](pid_t pid, int status) { self->report(pid, status, "bpf"); });
    if (bpf) {
      w->bpf_ = std::move(bpf.value());
      BpfExitWatch* b = w->bpf_.get();
      if (auto r = loop.add(b->fd(), EPOLLIN, [b](uint32_t) { b->drain(); }); !r) return r.error();
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
  for (auto& [pid, w] : watched_)
    if (w.pidfd) loop_.remove(w.pidfd->fd());
  if (bpf_) loop_.remove(bpf_->fd());
}

Result<void> ProcessWatcher::watch(pid_t pid) {
  auto it = watched_.find(pid);
  if (it != watched_.end()) {
    ++it->second.count;
    return {};
  }
  Watched w;
  w.count = 1;
  if (use_pidfd_) {
    auto p = PidfdWatch::open(pid);
    if (!p) return p.error();
    w.pidfd = std::move(p.value());
    int fd = w.pidfd->fd();
    if (auto r = loop_.add(fd, EPOLLIN, [this, pid](uint32_t) {
          auto it2 = watched_.find(pid);
          std::optional<int> status;
          if (it2 != watched_.end() && it2->second.pidfd) status = it2->second.pidfd->exit_status();
          report(pid, status, "pidfd");
        });
        !r)
      return r.error();
  }
  if (bpf_) {
    if (auto r = bpf_->watch(pid); !r) {
      if (w.pidfd) loop_.remove(w.pidfd->fd());
      return r.error();
    }
    // It may have died before the map entry existed: a pidfd or a signal-0 probe tells.
    if (!use_pidfd_ && ::kill(pid, 0) != 0 && errno == ESRCH) {
      bpf_->unwatch(pid);
      return Error{ESRCH, "process " + std::to_string(pid) + " is gone"};
    }
  }
  watched_.emplace(pid, std::move(w));
  return {};
}

void ProcessWatcher::unwatch(pid_t pid) {
  auto it = watched_.find(pid);
  if (it == watched_.end()) return;
  if (--it->second.count > 0) return;
  if (it->second.pidfd) loop_.remove(it->second.pidfd->fd());
  if (bpf_) bpf_->unwatch(pid);
  watched_.erase(it);
}

void ProcessWatcher::report(pid_t pid, std::optional<int> status, const char* source) {
  auto it = watched_.find(pid);
  if (it == watched_.end()) return;  // already reported (or never watched)
  if (it->second.pidfd) loop_.remove(it->second.pidfd->fd());
  if (bpf_) bpf_->unwatch(pid);
  watched_.erase(it);
  log::get("watch")->debug("process {} exited (noticed by {})", pid, source);
  on_exit_(Exit{pid, status, source});
}

}  // namespace coloc::watch
