#include "engine/event_loop.h"

#include <cerrno>
#include <memory>

namespace coloc::engine {

Result<EventLoop> EventLoop::create() {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return Error::from_errno("epoll_create1");
  EventLoop loop;
  loop.epfd_.reset(fd);
  return loop;
}

Result<void> EventLoop::add(int fd, uint32_t events, Callback cb) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Error::from_errno("epoll_ctl add");
  callbacks_[fd] = std::make_shared<Callback>(std::move(cb));
  return {};
}

Result<void> EventLoop::modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) return Error::from_errno("epoll_ctl mod");
  return {};
}

void EventLoop::remove(int fd) {
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  callbacks_.erase(fd);
}

Result<int> EventLoop::run_once(int timeout_ms) {
  epoll_event events[64];
  int n = ::epoll_wait(epfd_.get(), events, 64, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    return Error::from_errno("epoll_wait");
  }
  for (int i = 0; i < n; ++i) {
    auto it = callbacks_.find(events[i].data.fd);
    if (it == callbacks_.end()) continue;  // removed by an earlier callback of this batch
    std::shared_ptr<Callback> cb = it->second;  // keeps it alive if it removes itself
    (*cb)(events[i].events);
  }
  return n;
}

}  // namespace coloc::engine
