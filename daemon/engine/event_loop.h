// daemon/engine/event_loop.h — the daemon's one epoll loop: descriptors with a callback each.
// Single-threaded: callbacks run on the caller of run_once(), one at a time.
//
// Every watched descriptor is named by a Token, never by its number. A descriptor number is
// reused by the kernel as soon as it is closed, so within one epoll_wait batch an event of a
// connection closed by an earlier callback can carry the number of a connection accepted since;
// the event's data is the token (which is never reused), so such a stale event reaches nobody.
#pragma once

#include <sys/epoll.h>

#include <cstdint>
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
  /// Names one add(): unique over the loop's lifetime (1, 2, 3, ...; 0 is never a token).
  using Token = uint64_t;
  /// Most events taken from the kernel per run_once().
  static constexpr int kBatch = 64;

  static Result<EventLoop> create();

  /// Watches `fd` for `events` and returns its token. The fd must not be watched yet (EEXIST).
  Result<Token> add(int fd, uint32_t events, Callback cb);
  /// Changes the events watched under `token`. Errors: ENOENT for an unknown token.
  Result<void> modify(Token token, uint32_t events);
  /// Stops watching (safe from the token's own callback; the fd is not closed). Events of this
  /// token already taken from the kernel are dropped, even if the fd's number is watched again.
  /// Unknown tokens are ignored.
  void remove(Token token);
  /// Waits up to `timeout_ms` (-1 = forever) and runs the callbacks of ready descriptors, at most
  /// kBatch. Returns the number of events taken, or an Error from epoll_wait (EINTR is not one).
  Result<int> run_once(int timeout_ms);
  /// Descriptors watched now.
  size_t size() const { return entries_.size(); }
  /// Events taken from the kernel whose token was removed by an earlier callback of their batch
  /// (dropped), since the loop was created.
  uint64_t stale_events() const { return stale_; }

 private:
  struct Entry {
    int fd = -1;
    std::shared_ptr<Callback> cb;
  };
  UniqueFd epfd_;
  std::unordered_map<Token, Entry> entries_;
  Token next_ = 1;
  uint64_t stale_ = 0;
};

}  // namespace coloc::engine
