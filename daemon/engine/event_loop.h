// daemon/engine/event_loop.h — the daemon's one epoll loop: descriptors with a callback each.
// Single-threaded: callbacks run on the caller of run_once(), one at a time.
#pragma once

#include <sys/epoll.h>

#include <functional>
#include <memory>
#include <unordered_map>

#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine {

class EventLoop {
 public:
  /// Called with the epoll event bits (EPOLLIN, EPOLLOUT, EPOLLHUP, ...).
  using Callback = std::function<void(uint32_t events)>;

  static Result<EventLoop> create();

  /// Watches `fd` for `events`; replaces nothing (the fd must not be watched yet).
  Result<void> add(int fd, uint32_t events, Callback cb);
  /// Changes the events watched on `fd`.
  Result<void> modify(int fd, uint32_t events);
  /// Stops watching `fd` (safe to call from its own callback; the fd is not closed).
  void remove(int fd);
  /// Waits up to `timeout_ms` (-1 = forever) and runs the callbacks of ready descriptors.
  /// Returns the number of events handled, or an Error from epoll_wait (EINTR is not an error).
  Result<int> run_once(int timeout_ms);
  size_t size() const { return callbacks_.size(); }

 private:
  UniqueFd epfd_;
  std::unordered_map<int, std::shared_ptr<Callback>> callbacks_;
};

}  // namespace coloc::engine
