// colocd's event loop, its rate limit for peer-triggered log lines, and the process watcher's
// keys: descriptor numbers and pids are reused, and nothing may be found by number alone.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <vector>

#include "engine/event_loop.h"
#include "engine/resume_state.h"
#include "util/log.h"
#include "watch/process_watcher.h"

using coloc::engine::EventLoop;

namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, &a) == 0); }
};

}  // namespace

TEST_CASE("event loop: a stale hang-up of a closed connection never reaches the connection that reused its fd") {
  auto made = EventLoop::create();
  REQUIRE(made.ok());
  EventLoop loop = std::move(made.value());
  // Two connections whose peers hang up: both are ready in the same epoll_wait batch.
  Pair x, y;
  ::close(x.b);
  ::close(y.b);
  struct Watch {
    int fd;
    EventLoop::Token token;
  };
  Watch w[2] = {{x.a, 0}, {y.a, 0}};
  int calls = 0;
  bool new_called = false;
  int reused_fd = -1;
  int keep_peer = -1;
  for (int i = 0; i < 2; ++i) {
    auto t = loop.add(w[i].fd, EPOLLIN | EPOLLRDHUP, [&, i](uint32_t ev) {
      ++calls;
      CHECK((ev & (EPOLLHUP | EPOLLRDHUP)) != 0);
      // The first callback of the batch closes the other connection (as a drop does), and a new
      // connection is accepted on the very same descriptor number before the batch goes on.
      Watch& other = w[1 - i];
      Pair fresh;  // (made first, so that neither end takes the number about to be freed)
      loop.remove(other.token);
      ::close(other.fd);
      REQUIRE(::dup3(fresh.a, other.fd, O_CLOEXEC) == other.fd);
      ::close(fresh.a);
      keep_peer = fresh.b;  // the new connection's peer stays open: it has no event of its own
      reused_fd = other.fd;
      auto nt = loop.add(other.fd, EPOLLIN | EPOLLRDHUP, [&](uint32_t) { new_called = true; });
      REQUIRE(nt.ok());
      loop.remove(w[i].token);  // and the first one is done too
      ::close(w[i].fd);
    });
    REQUIRE(t.ok());
    w[i].token = t.value();
  }
  auto n = loop.run_once(1000);
  REQUIRE(n.ok());
  CHECK(n.value() == 2);   // both hang-ups were in the batch
  CHECK(calls == 1);       // the second was for a connection closed meanwhile
  CHECK_FALSE(new_called); // and it did not reach the connection now on its number
  CHECK(loop.stale_events() == 1);
  CHECK(reused_fd >= 0);
  // The new connection is watched under its own token and hears its own events.
  REQUIRE(::send(keep_peer, "x", 1, 0) == 1);
  auto n2 = loop.run_once(1000);
  REQUIRE(n2.ok());
  CHECK(new_called);
  ::close(keep_peer);
  ::close(reused_fd);
}

TEST_CASE("event loop: tokens are never reused; modify and remove of an unknown token are harmless") {
  auto made = EventLoop::create();
  REQUIRE(made.ok());
  EventLoop loop = std::move(made.value());
  Pair p;
  auto t1 = loop.add(p.a, EPOLLIN, [](uint32_t) {});
  REQUIRE(t1.ok());
  loop.remove(t1.value());
  auto t2 = loop.add(p.a, EPOLLIN, [](uint32_t) {});
  REQUIRE(t2.ok());
  CHECK(t2.value() != t1.value());
  CHECK_FALSE(loop.modify(t1.value(), EPOLLIN).ok());
  loop.remove(t1.value());  // no effect on the live watch of the same fd
  CHECK(loop.size() == 1);
  auto dup = loop.add(p.a, EPOLLIN, [](uint32_t) {});
  CHECK_FALSE(dup.ok());  // the fd is watched already
  CHECK(dup.error().err == EEXIST);
  ::close(p.a);
  ::close(p.b);
}

TEST_CASE("log limiter: a burst per cause per interval, then a count of what was held back") {
  coloc::log::Limiter lim(1000, 3);  // 3 lines per 1000 ns
  uint64_t held = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK(lim.allow("flood uid 65534", 10 + i, &held));
    CHECK(held == 0);
  }
  for (int i = 0; i < 100; ++i) CHECK_FALSE(lim.allow("flood uid 65534", 20 + i, &held));
  // Another cause is not silenced by the first one's flood.
  CHECK(lim.allow("malformed uid 1000", 30, &held));
  CHECK(held == 0);
  CHECK(lim.suppressed_total() == 100);
  // The next interval: the first line written says how many were held back.
  CHECK(lim.allow("flood uid 65534", 1500, &held));
  CHECK(held == 100);
  CHECK(lim.allow("flood uid 65534", 1501, &held));
  CHECK(held == 0);
}

TEST_CASE("log limiter: distinct causes are bounded; quiet ones are forgotten first") {
  coloc::log::Limiter lim(1000, 1);
  uint64_t held = 0;
  for (size_t i = 0; i < coloc::log::Limiter::kMaxCauses; ++i) CHECK(lim.allow("c" + std::to_string(i), 5, &held));
  // Full, and every window still open: a new cause is held back (counted), never grows the table.
  CHECK_FALSE(lim.allow("one more", 6, &held));
  CHECK(lim.suppressed_total() == 1);
  // Once their windows are over, old causes make room.
  CHECK(lim.allow("one more", 2000, &held));
}

namespace {

/// A child that waits until its stdin closes, then exits with `code`.
struct Child {
  pid_t pid = -1;
  int hold = -1;
  explicit Child(int code) {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(p[1]);
      char c;
      while (::read(p[0], &c, 1) > 0) {
      }
      ::_exit(code);
    }
    ::close(p[0]);
    hold = p[1];
  }
  void release() {
    if (hold >= 0) ::close(hold);
    hold = -1;
  }
  ~Child() {
    release();
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

TEST_CASE("process watcher: a process is named by pid and start time; a stale key is refused, an exit reaches only its own key") {
  using coloc::watch::Exit;
  using coloc::watch::ProcessWatcher;
  using coloc::watch::ProcKey;
  // kBpf alone: the BPF event's start time must match /proc's exactly (no pidfd to fall back on).
  for (ProcessWatcher::Mode mode : {ProcessWatcher::Mode::kPidfd, ProcessWatcher::Mode::kAuto, ProcessWatcher::Mode::kBpf}) {
    CAPTURE(int(mode));
    auto made = EventLoop::create();
    REQUIRE(made.ok());
    EventLoop loop = std::move(made.value());
    std::vector<Exit> exits;
    auto w = ProcessWatcher::start(mode, loop, [&](const Exit& e) { exits.push_back(e); });
    if (mode == ProcessWatcher::Mode::kBpf && !w.ok()) {
      MESSAGE("BPF is not available here: " << w.error().message());
      continue;
    }
    REQUIRE(w.ok());
    Child child(7);
    auto start = coloc::engine::process_start_time(child.pid);
    REQUIRE(start.has_value());
    // The pid with another start time is another process (as after a reuse): not watched.
    auto wrong = w.value()->watch(ProcKey{child.pid, *start + 1});
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.error().err == ESRCH);
    REQUIRE(w.value()->watch(ProcKey{child.pid, *start}).ok());
    child.release();
    for (int i = 0; i < 200 && exits.empty(); ++i) REQUIRE(loop.run_once(50).ok());
    REQUIRE(exits.size() == 1);
    CHECK(exits[0].pid == child.pid);
    CHECK(exits[0].start == *start);
    // Reported once, whichever source saw it first.
    for (int i = 0; i < 5; ++i) REQUIRE(loop.run_once(10).ok());
    CHECK(exits.size() == 1);
    if (exits[0].wait_status) CHECK(WEXITSTATUS(*exits[0].wait_status) == 7);
  }
}
