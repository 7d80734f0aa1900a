#include "metrics/exporter.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "util/log.h"

namespace coloc::metrics {

using Clock = std::chrono::steady_clock;

namespace {

void signal_fd(int fd) {
  uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}

bool drain_fd(int fd) {
  uint64_t n = 0;
  return ::read(fd, &n, sizeof n) == ssize_t(sizeof n) && n > 0;
}

std::string sockaddr_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
}

std::string response_head(const char* status, size_t length, const char* extra = "") {
  return std::string("HTTP/1.1 ") + status +
         "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " + std::to_string(length) +
         "\r\nConnection: close\r\n" + extra + "\r\n";
}

}  // namespace

struct Exporter::Conn {
  UniqueFd fd;
  enum class State { kReading, kWaiting, kWriting } state = State::kReading;
  std::string in;
  Clock::time_point accepted;
  Clock::time_point deadline;
  uint64_t waits_for = 0;  ///< kWaiting: a snapshot of a later generation than this
  bool head_only = false;  ///< kWaiting: a HEAD request
  std::string head;
  std::shared_ptr<const std::string> body;  ///< null: head only
  size_t sent = 0;  ///< bytes of head + body sent
};

Result<std::unique_ptr<Exporter>> Exporter::start(const std::string& listen, Limits limits) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos)
    return Error{EINVAL, "metrics_listen \"" + listen + "\": expected HOST:PORT, e.g. 127.0.0.1:9479"};
  std::string host = listen.substr(0, colon), port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) > 65535)
    return Error{EINVAL, "metrics_listen \"" + listen + "\": the port must be a number from 0 to 65535"};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Error{EINVAL, "metrics_listen \"" + listen + "\": " + ::gai_strerror(rc)};
  Error last{EADDRNOTAVAIL, "metrics_listen \"" + listen + "\": no address to bind"};
  UniqueFd fd;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    UniqueFd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last = Error::from_errno("metrics_listen \"" + listen + "\": socket");
      continue;
    }
    int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(s.get(), 128) != 0) {
      last = Error::from_errno("metrics_listen \"" + listen + "\": bind");
      continue;
    }
    fd = std::move(s);
    break;
  }
  ::freeaddrinfo(res);
  if (!fd.valid()) return last;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  std::unique_ptr<Exporter> e(new Exporter(std::move(fd), sockaddr_text(ss), limits));
  e->log_ = log::get("metrics");
  if (!e->wake_.valid() || !e->wanted_.valid()) return Error::from_errno("metrics: eventfd");
  e->thread_ = std::thread([p = e.get()] { p->serve(); });
  return e;
}

Exporter::Exporter(UniqueFd listen, std::string address, Limits limits)
    : listen_(std::move(listen)),
      wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      wanted_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      address_(std::move(address)),
      limits_(limits) {}

Exporter::~Exporter() {
  stop_ = true;
  if (wake_.valid()) signal_fd(wake_.get());
  if (thread_.joinable()) thread_.join();
}

bool Exporter::take_wanted() { return drain_fd(wanted_.get()); }

void Exporter::publish(std::shared_ptr<const Snapshot> s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    snapshot_ = std::move(s);
    published_ = Clock::now();
    ++generation_;
    asked_ = false;
  }
  signal_fd(wake_.get());
}

ExporterStats Exporter::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::shared_ptr<const std::string> Exporter::latest_text() {
  std::shared_ptr<const Snapshot> snap;
  uint64_t gen = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    snap = snapshot_;
    gen = generation_;
  }
  if (!snap) return nullptr;
  if (gen != text_gen_ || !text_) {
    text_ = std::make_shared<const std::string>(render(*snap));
    text_gen_ = gen;
  }
  return text_;
}

void Exporter::serve() {
  std::vector<std::unique_ptr<Conn>> conns;
  Clock::time_point accept_paused_until{}, last_warned{};
  std::vector<pollfd> pfds;

  auto answer = [&](Conn& c, const char* status, std::shared_ptr<const std::string> body, bool head_only,
                    const char* extra = "") {
    c.head = response_head(status, body ? body->size() : 0, extra);
    c.body = head_only ? nullptr : std::move(body);
    c.sent = 0;
    c.state = Conn::State::kWriting;
    c.deadline = Clock::now() + limits_.response_timeout;
    std::lock_guard<std::mutex> lk(mu_);
    if (status[0] == '2') ++stats_.served;
    else if (status[0] == '4') ++stats_.bad_requests;
  };
  auto text_answer = [&](Conn& c, const char* status, const char* text, bool head_only, const char* extra = "") {
    answer(c, status, std::make_shared<const std::string>(text), head_only, extra);
  };
  // The request head is complete (or too large): answer it, or wait for a fresh snapshot.
  auto on_request = [&](Conn& c, bool complete) {
    if (!complete) return text_answer(c, "431 Request Header Fields Too Large", "request too large\n", false);
    const std::string line = c.in.substr(0, c.in.find_first_of("\r\n"));
    const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 7, "HTTP/1.") != 0)
      return text_answer(c, "400 Bad Request", "bad request\n", false);
    const std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    const bool head_only = method == "HEAD";
    if (method != "GET" && !head_only)
      return text_answer(c, "405 Method Not Allowed", "only GET and HEAD\n", false, "Allow: GET, HEAD\r\n");
    if (target != "/metrics") return text_answer(c, "404 Not Found", "not found: colocd serves /metrics\n", head_only);
    bool fresh = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Fresh enough: younger than `fresh`, or than 20 times what it cost the loop to build (so
      // the loop spends at most 5% of its time on snapshots, however many jobs it has).
      fresh = snapshot_ && Clock::now() - published_ <= std::max<Clock::duration>(
                                                           limits_.fresh, std::chrono::duration_cast<Clock::duration>(
                                                                              std::chrono::duration<double>(
                                                                                  20 * snapshot_->build_seconds)));
      if (!fresh) {
        c.waits_for = generation_;
        // (asked before and never answered within publish_wait: the loop may have missed it; ask again)
        if (!asked_ || Clock::now() - asked_at_ >= limits_.publish_wait) {
          asked_ = true;
          asked_at_ = Clock::now();
          ++stats_.snapshots_asked;
          signal_fd(wanted_.get());
        }
      }
    }
    if (fresh) return answer(c, "200 OK", latest_text(), head_only);
    c.state = Conn::State::kWaiting;
    c.head_only = head_only;
    c.deadline = Clock::now() + limits_.publish_wait;
  };
  auto finish_wait = [&](Conn& c) {
    const bool head_only = c.head_only;
    auto text = latest_text();
    if (!text) return text_answer(c, "503 Service Unavailable", "no snapshot yet: try again\n", head_only);
    answer(c, "200 OK", std::move(text), head_only);
  };
  // Reads what there is; false when the connection is done with (closed, error).
  auto on_readable = [&](Conn& c) {
    char buf[4096];
    for (;;) {
      const size_t room = limits_.max_request + 1 - std::min(c.in.size(), limits_.max_request + 1);
      if (room == 0) {
        on_request(c, false);
        return true;
      }
      ssize_t n = ::recv(c.fd.get(), buf, std::min(room, sizeof buf), MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      const size_t from = c.in.size() > 3 ? c.in.size() - 3 : 0;
      c.in.append(buf, size_t(n));
      const size_t end = std::min(c.in.find("\r\n\r\n", from), c.in.find("\n\n", from));
      if (end != std::string::npos && end <= limits_.max_request) {
        on_request(c, true);
        return true;
      }
    }
  };
  // Sends what the socket takes; false when done (all sent, or an error).
  auto on_writable = [&](Conn& c) {
    for (;;) {
      const size_t body = c.body ? c.body->size() : 0;
      if (c.sent >= c.head.size() + body) return false;
      iovec iov[2];
      int n = 0;
      if (c.sent < c.head.size()) iov[n++] = {const_cast<char*>(c.head.data() + c.sent), c.head.size() - c.sent};
      const size_t body_off = c.sent > c.head.size() ? c.sent - c.head.size() : 0;
      if (body > body_off) iov[n++] = {const_cast<char*>(c.body->data() + body_off), body - body_off};
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = size_t(n);
      ssize_t w = ::sendmsg(c.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.sent += size_t(w);
    }
  };

  while (!stop_) {
    const Clock::time_point now = Clock::now();
    // At the cap, the oldest connection still reading its request after idle_evict gives its place
    // to a newcomer: idle or slow connections (one peer's hundreds) cannot keep a scraper out.
    Clock::time_point evictable_at = Clock::time_point::max();
    if (conns.size() >= limits_.max_connections)
      for (auto& c : conns)
        if (c->state == Conn::State::kReading) evictable_at = std::min(evictable_at, c->accepted + limits_.idle_evict);
    const bool room = conns.size() < limits_.max_connections || now >= evictable_at;
    const bool can_accept = room && now >= accept_paused_until;
    pfds.clear();
    pfds.push_back({wake_.get(), POLLIN, 0});
    pfds.push_back({can_accept ? listen_.get() : -1, POLLIN, 0});
    Clock::time_point next = Clock::time_point::max();
    if (!can_accept && room) next = accept_paused_until;
    if (!room) next = evictable_at;
    for (auto& c : conns) {
      short ev = c->state == Conn::State::kReading ? POLLIN : c->state == Conn::State::kWriting ? POLLOUT : 0;
      pfds.push_back({c->fd.get(), ev, 0});
      next = std::min(next, c->deadline);
    }
    int timeout = -1;
    if (next != Clock::time_point::max())
      timeout = int(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, 60000));
    if (::poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR) {
      log_->error("metrics: poll: {}; /metrics is no longer served", std::strerror(errno));
      return;
    }
    if (pfds[0].revents & POLLIN) drain_fd(wake_.get());
    // Connections first (their pollfds follow the first two, in order), then new ones.
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = *conns[i];
      const short re = pfds[i + 2].revents;
      bool keep = true;
      if (c.state == Conn::State::kReading && (re & (POLLIN | POLLHUP | POLLERR))) keep = on_readable(c);
      if (keep && c.state == Conn::State::kWriting && (re & (POLLOUT | POLLHUP | POLLERR) || c.sent == 0))
        keep = on_writable(c);
      // Gone while it waited for a snapshot (reset): poll would report it on every round.
      if (c.state == Conn::State::kWaiting && (re & (POLLHUP | POLLERR))) keep = false;
      if (!keep) c.fd.reset();
    }
    // Waiting scrapes: a snapshot came, or the wait is over (they get the latest there is).
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      gen = generation_;
    }
    const Clock::time_point t = Clock::now();
    for (auto& c : conns) {
      if (!c->fd.valid() || c->state != Conn::State::kWaiting) continue;
      if (gen > c->waits_for || t >= c->deadline) {
        finish_wait(*c);
        if (!on_writable(*c)) c->fd.reset();
      }
    }
    for (auto& c : conns) {
      if (!c->fd.valid() || c->state == Conn::State::kWaiting || t < c->deadline) continue;
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.timed_out;
      c->fd.reset();
    }
    for (auto& c : conns)
      if (c->fd.valid() && c->state == Conn::State::kWriting && c->sent >= c->head.size() + (c->body ? c->body->size() : 0)) {
        ::shutdown(c->fd.get(), SHUT_WR);
        c->fd.reset();
      }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const auto& c) { return !c->fd.valid(); }), conns.end());
    // Closes the oldest connection reading its request since idle_evict or longer; false: none.
    // (dry_run: only says whether there is one)
    auto evict_one = [&](bool dry_run) {
      const Clock::time_point cut = Clock::now() - limits_.idle_evict;
      auto oldest = conns.end();
      for (auto it = conns.begin(); it != conns.end(); ++it)
        if ((*it)->state == Conn::State::kReading && (*it)->accepted <= cut &&
            (oldest == conns.end() || (*it)->accepted < (*oldest)->accepted))
          oldest = it;
      if (oldest == conns.end()) return false;
      if (dry_run) return true;
      conns.erase(oldest);
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.evicted;
      return true;
    };
    if (can_accept && (pfds[1].revents & POLLIN)) {
      while (conns.size() < limits_.max_connections || evict_one(true)) {
        int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // Out of descriptors: the pending ones wait in the backlog; try again shortly.
            // (log::limited's limiter belongs to the loop's thread: this one keeps its own pace)
            if (Clock::now() - last_warned > std::chrono::seconds(10)) {
              log_->warn("metrics: accept: {} (trying again in 100 ms)", std::strerror(errno));
              last_warned = Clock::now();
            }
            accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
          }
          break;
        }
        if (conns.size() >= limits_.max_connections) evict_one(false);  // (after the accept: one came)
        auto c = std::make_unique<Conn>();
        c->fd.reset(fd);
        c->accepted = Clock::now();
        c->deadline = c->accepted + limits_.request_timeout;
        conns.push_back(std::move(c));
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.accepted;
      }
    }
  }
}

}  // namespace coloc::metrics
