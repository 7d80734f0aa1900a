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

Result<EventLoop::Token> EventLoop::add(int fd, uint32_t events, Callback cb) {
  const Token token = next_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Error::from_errno("epoll_ctl add");
  entries_[token] = {fd, std::make_shared<Callback>(std::move(cb))};
  return token;
}

Result<void> EventLoop::modify(Token token, uint32_t events) {
  auto it = entries_.find(token);
  if (it == entries_.end()) return Error{ENOENT, "epoll_ctl mod: no such watch"};
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_MOD, it->second.fd, &ev) != 0) return Error::from_errno("epoll_ctl mod");
  return {};
}

void EventLoop::remove(Token token) {
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  entries_.erase(it);
}

Result<int> EventLoop::run_once(int timeout_ms) {
  epoll_event events[kBatch];
  int n = ::epoll_wait(epfd_.get(), events, kBatch, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    return Error::from_errno("epoll_wait");
  }
  for (int i = 0; i < n; ++i) {
    auto it = entries_.find(events[i].data.u64);
    if (it == entries_.end()) {  // removed by an earlier callback of this batch
      ++stale_;
      continue;
    }
    std::shared_ptr<Callback> cb = it->second.cb;  // keeps it alive if it removes itself
    (*cb)(events[i].events);
  }
  return n;
}

}  // namespace coloc::engine
