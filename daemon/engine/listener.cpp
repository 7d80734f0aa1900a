#include "engine/listener.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "coloc/wire.h"
#include "util/fs.h"
#include "util/log.h"

namespace coloc::engine {

namespace {

constexpr int kAcceptsPerWakeup = 64;  // fairness with the connections' own events

std::string directory_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void Listener::set_limits(size_t max_per_user, std::optional<gid_t> admin_gid) {
  settings_.max_per_user = std::max<size_t>(1, max_per_user);
  settings_.admin_gid = admin_gid;
  cap_ = settings_.max_per_user;
  if (fd_limit_ > 0) cap_ = std::min(cap_, std::max<size_t>(8, fd_limit_ > 64 ? (fd_limit_ - 64) / 4 : 0));
}

size_t raise_descriptor_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  return rl.rlim_cur == RLIM_INFINITY ? size_t(-1) : size_t(rl.rlim_cur);
}

Result<void> check_listen_socket(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Error::from_errno("is not open");
  if (!S_ISSOCK(st.st_mode)) return Error{ENOTSOCK, "is not a socket"};
  int domain = 0, type = 0, listening = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return Error::from_errno("getsockopt SO_DOMAIN");
  if (domain != AF_UNIX)
    return Error{EAFNOSUPPORT, "is not a Unix socket (address family " + std::to_string(domain) +
                                   "); colocd listens on a path: use ListenSequentialPacket=/run/coloc/colocd.sock"};
  len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return Error::from_errno("getsockopt SO_TYPE");
  if (type != SOCK_SEQPACKET) {
    const char* what = type == SOCK_STREAM ? "a SOCK_STREAM socket (ListenStream=)"
                       : type == SOCK_DGRAM ? "a SOCK_DGRAM socket (ListenDatagram=)"
                                            : "not a SOCK_SEQPACKET socket";
    return Error{EPROTOTYPE, std::string("is ") + what +
                                 "; colocd's protocol is SOCK_SEQPACKET: use ListenSequentialPacket= in the socket unit"};
  }
  len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0)
    return Error::from_errno("getsockopt SO_ACCEPTCONN");
  if (!listening) return Error{EINVAL, "is a SOCK_SEQPACKET socket that is not listening (a connection, or never listen()ed)"};
  return {};
}

Result<std::unique_ptr<Listener>> Listener::open(Settings settings, EventLoop& loop, OnAccept on_accept,
                                                 MakeRoom make_room, UniqueFd inherited) {
  if (settings.max_per_user == 0) return Error{EINVAL, "max_connections_per_user must be at least 1"};
  std::unique_ptr<Listener> l(new Listener(std::move(settings), loop, std::move(on_accept), std::move(make_room)));
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) l->fd_limit_ = rl.rlim_cur == RLIM_INFINITY ? 0 : size_t(rl.rlim_cur);
  // No one user may take more than a quarter of what the descriptor limit leaves after colocd's
  // own (a few dozen): one user alone never brings colocd to its limit.
  l->set_limits(l->settings_.max_per_user, l->settings_.admin_gid);
  if (inherited.valid()) {
    if (auto r = l->adopt_socket(std::move(inherited)); !r) return r.error();
  } else if (auto r = l->bind_socket(); !r) {
    return r.error();
  }
  if (!l->reopen_reserve()) return Error::from_errno("open /dev/null (the descriptor kept for the descriptor limit)");
  l->watch_directory();
  return l;
}

Listener::~Listener() {
  if (token_) loop_.remove(token_);
  if (inotify_token_) loop_.remove(inotify_token_);
}

Result<void> Listener::bind_socket() {
  const std::string& path = settings_.path;
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) return Error{ENAMETOOLONG, "--socket " + path + ": path empty or too long"};
  if (auto r = mkdir_p(directory_of(path), 0755); !r) return r;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Error{EEXIST, path + " exists and is not a socket"};
    int probe = -1;
    if (wire::connect_socket(path.c_str(), &probe, 1000) == 0) {
      ::close(probe);
      return Error{EADDRINUSE, "another colocd is listening on " + path};
    }
    ::unlink(path.c_str());  // stale, from a daemon that was killed
  }
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Error::from_errno("socket");
  UniqueFd sock(fd);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return Error::from_errno("bind " + path);
  // Any user may connect (and register their own processes); who may do what is decided per
  // request from SO_PEERCRED.
  if (::chmod(path.c_str(), settings_.mode) != 0) return Error::from_errno("chmod " + path);
  if (::listen(fd, 4096) != 0) return Error::from_errno("listen " + path);
  if (::stat(path.c_str(), &st) != 0) return Error::from_errno("stat " + path);
  auto token = loop_.add(fd, EPOLLIN, [this, fd](uint32_t) {
    on_readable(fd);
    if (after_events_) after_events_();
  });
  if (!token) return token.error();
  // The socket bound before (after a rebind): what is queued on it is still accepted, then it goes.
  if (fd_.valid()) {
    const int old = fd_.get();
    for (int i = 0; i < 4096; ++i) {
      int c = ::accept4(old, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) break;
      take(c, false);
    }
    loop_.remove(token_);
  }
  fd_ = std::move(sock);
  token_ = token.value();
  inode_ = st.st_ino;
  dev_ = st.st_dev;
  paused_ = false;
  return {};
}

Result<void> Listener::adopt_socket(UniqueFd sock) {
  const int fd = sock.get();
  if (auto r = check_listen_socket(fd); !r) return Error{r.error().err, "the inherited socket " + r.error().what};
  // systemd hands the socket over blocking: one accept with nothing queued would stall the loop.
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return Error::from_errno("fcntl O_NONBLOCK (inherited socket)");
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return Error::from_errno("fcntl FD_CLOEXEC (inherited socket)");
  auto lg = log::get("engine");
  sockaddr_un addr{};
  socklen_t len = sizeof addr;
  std::string path;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && len > offsetof(sockaddr_un, sun_path) &&
      addr.sun_path[0] != '\0')
    path.assign(addr.sun_path, strnlen(addr.sun_path, len - offsetof(sockaddr_un, sun_path)));
  if (path.empty()) {
    lg->warn("the socket from the service manager has no path (abstract or unnamed): clients cannot find it by --socket");
  } else {
    if (path != settings_.path)
      lg->info("the socket from the service manager is {} (--socket/socket = {} is not used)", path, settings_.path);
    settings_.path = path;
  }
  struct stat st;
  if (!path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    inode_ = st.st_ino;
    dev_ = st.st_dev;
  } else if (!path.empty()) {
    inherited_path_ok_ = false;
    lg->warn("the socket from the service manager is bound to {}, which does not name it now: new clients cannot "
             "connect ('systemctl restart colocd.socket colocd' makes it again; jobs keep running)",
             path);
  }
  auto token = loop_.add(fd, EPOLLIN, [this, fd](uint32_t) {
    on_readable(fd);
    if (after_events_) after_events_();
  });
  if (!token) return token.error();
  fd_ = std::move(sock);
  token_ = token.value();
  inherited_ = true;
  lg->info("listening on the socket passed by the service manager ({}): it is never bound again or removed by colocd",
           path.empty() ? std::string("no path") : path);
  return {};
}

void Listener::watch_directory() {
  if (inherited_ && (settings_.path.empty() || settings_.path[0] != '/')) return;
  if (!inotify_.valid()) {
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      log::get("engine")->warn("inotify is not available ({}): a deleted socket is noticed by the sample timer only",
                               std::strerror(errno));
      return;
    }
    inotify_.reset(fd);
    auto token = loop_.add(fd, EPOLLIN, [this](uint32_t) { on_directory_event(); });
    if (!token) {
      inotify_.reset();
      return;
    }
    inotify_token_ = token.value();
  }
  const std::string dir = directory_of(settings_.path);
  if (::inotify_add_watch(inotify_.get(), dir.c_str(),
                          IN_DELETE | IN_MOVED_FROM | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF) < 0)
    log::get("engine")->warn("cannot watch {} ({}): a deleted socket is noticed by the sample timer only", dir,
                             std::strerror(errno));
}

void Listener::on_directory_event() {
  alignas(inotify_event) char buf[4096];
  bool ours = false, directory_gone = false;
  const std::string name = base_of(settings_.path);
  for (;;) {
    ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* e = reinterpret_cast<inotify_event*>(p);
      if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) directory_gone = true;
      else if (e->len && name == e->name) ours = true;
      p += sizeof(inotify_event) + e->len;
    }
  }
  if (ours || directory_gone) check();
  if (directory_gone) watch_directory();  // the directory is back (check() made it): watch it anew
}

void Listener::check() {
  struct stat st;
  const bool present = ::lstat(settings_.path.c_str(), &st) == 0;
  if (inherited_) {
    // The socket unit's path: not colocd's to bind again (the unit holds the socket and would not
    // know a new one). Say so when the path stops or starts naming the socket; go on accepting.
    if (settings_.path.empty() || inode_ == 0) {
      if (paused_) resume();
      return;
    }
    const bool ok = present && st.st_ino == inode_ && st.st_dev == dev_ && S_ISSOCK(st.st_mode);
    if (ok != inherited_path_ok_) {
      inherited_path_ok_ = ok;
      if (!ok)
        log::get("engine")->warn(
            "the socket {} (the service manager's) was {}: colocd keeps accepting on the socket it holds, but new "
            "clients cannot reach it by its path until 'systemctl restart colocd.socket colocd' (jobs keep running)",
            settings_.path, present ? "replaced" : "deleted");
      else
        log::get("engine")->info("the socket {} names the service manager's socket again", settings_.path);
    }
    if (paused_) resume();
    return;
  }
  if (!present || st.st_ino != inode_ || st.st_dev != dev_ || !S_ISSOCK(st.st_mode))
    rebind(present ? "replaced" : "deleted");
  if (paused_) resume();
}

void Listener::rebind(const char* why) {
  auto lg = log::get("engine");
  auto r = bind_socket();
  if (!r) {
    log::limited(lg, spdlog::level::err, "rebind", "the socket {} was {} and cannot be bound again: {}", settings_.path,
                 why, r.error().message());
    return;
  }
  ++counters_.rebinds;
  lg->warn("the socket {} was {} under a running colocd: bound it again (mode {:o}); new jobs reach this colocd",
           settings_.path, why, unsigned(settings_.mode));
}

void Listener::unlink_path() {
  if (inherited_) return;  // the socket unit's: it outlives this colocd (and queues for the next)
  struct stat st;
  if (::lstat(settings_.path.c_str(), &st) == 0 && st.st_ino == inode_ && st.st_dev == dev_)
    ::unlink(settings_.path.c_str());
}

bool Listener::reopen_reserve() {
  if (reserve_.valid()) return true;
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  reserve_.reset(fd);
  return true;
}

bool Listener::exempt(int fd, const ucred& peer) const {
  if (peer.uid == 0) return true;
  if (!settings_.admin_gid) return false;
  if (peer.gid == *settings_.admin_gid) return true;
  std::vector<gid_t> groups(64);
  socklen_t len = socklen_t(groups.size() * sizeof(gid_t));
  int rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(len / sizeof(gid_t) + 1);
    len = socklen_t(groups.size() * sizeof(gid_t));
    rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  }
  if (rc != 0) return false;
  groups.resize(len / sizeof(gid_t));
  return std::find(groups.begin(), groups.end(), *settings_.admin_gid) != groups.end();
}

size_t Listener::connections_of(uid_t uid) const {
  auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

void Listener::connection_closed(uid_t uid) {
  if (auto it = per_uid_.find(uid); it != per_uid_.end() && --it->second == 0) per_uid_.erase(it);
  if (paused_) resume();
}

void Listener::pause() {
  if (paused_) return;
  paused_ = true;
  ++counters_.paused;
  (void)loop_.modify(token_, 0);
  log::limited(log::get("engine"), spdlog::level::warn, "accept paused",
               "no file descriptor left (RLIMIT_NOFILE {}): not accepting until a connection closes", fd_limit_);
}

void Listener::resume() {
  if (!paused_) return;
  if (!reopen_reserve() && !make_room_()) return;  // still none: the next close or check() tries again
  reopen_reserve();
  paused_ = false;
  (void)loop_.modify(token_, EPOLLIN);
}

void Listener::take(int fd, bool at_limit) {
  UniqueFd conn(fd);
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) return;  // gone already
  const bool free_pass = exempt(fd, peer);
  auto lg = log::get("engine");
  if (at_limit && !free_pass) {
    ++counters_.refused_limit;
    log::limited(lg, spdlog::level::warn, "limit uid " + std::to_string(peer.uid),
                 "at the descriptor limit (RLIMIT_NOFILE {}): refused a connection of pid {} uid {} (only root and "
                 "admin connections are taken now)",
                 fd_limit_, peer.pid, peer.uid);
    return;
  }
  if (!free_pass && connections_of(peer.uid) >= cap_) {
    ++counters_.refused_cap;
    log::limited(lg, spdlog::level::warn, "cap uid " + std::to_string(peer.uid),
                 "uid {} holds {} connections, its cap (max_connections_per_user): refused a connection of pid {}",
                 peer.uid, connections_of(peer.uid), peer.pid);
    return;
  }
  ++counters_.accepted;
  ++per_uid_[peer.uid];
  on_accept_(std::move(conn), peer, free_pass);
}

bool Listener::at_descriptor_limit(int listen_fd) {
  // The reserve pays for one accept: a root or admin peer is kept (and an unregistered connection
  // of someone else is closed to win the reserve back), anyone else is closed again at once.
  if (!reserve_.valid() && !reopen_reserve() && !make_room_()) {
    pause();
    return false;
  }
  reserve_.reset();
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const bool reserve_back = reopen_reserve();
    if (e == EAGAIN || e == EWOULDBLOCK) return false;  // nothing was queued after all
    if (e == EMFILE || e == ENFILE || !reserve_back) {   // not even the reserve sufficed
      pause();
      return false;
    }
    return true;  // the peer gave up meanwhile (ECONNABORTED, ...): go on
  }
  ucred peer{};
  socklen_t len = sizeof peer;
  const bool keep = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && exempt(fd, peer);
  if (keep) (void)make_room_();
  take(fd, !keep);
  if (!reopen_reserve()) {
    pause();
    return false;
  }
  return true;
}

void Listener::on_readable(int listen_fd) {
  if (listen_fd != fd_.get()) return;  // an old socket, drained at the rebind
  for (int i = 0; i < kAcceptsPerWakeup; ++i) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      take(fd, false);
      continue;
    }
    switch (errno) {
      case EAGAIN:
#if EAGAIN != EWOULDBLOCK
      case EWOULDBLOCK:
#endif
        return;
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        continue;
      case EMFILE:
      case ENFILE:
        log::limited(log::get("engine"), spdlog::level::warn, "descriptor limit",
                     "at the descriptor limit (RLIMIT_NOFILE {}, {} connections): taking only root and admin "
                     "connections until some close",
                     fd_limit_, counters_.accepted);
        if (!at_descriptor_limit(listen_fd)) return;
        continue;
      default:
        log::limited(log::get("engine"), spdlog::level::warn, "accept", "accept: {}", std::strerror(errno));
        return;
    }
  }
}

}  // namespace coloc::engine
