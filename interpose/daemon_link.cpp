// interpose/daemon_link.cpp — see daemon_link.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "daemon_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "coloc/wire.h"
#include "glibc_compat.h"
#include "quiet_thread.h"
#include "log.h"
#include "options.h"

namespace coloc::interpose {

namespace {

constexpr uint64_t kMs = 1000000ull;
constexpr uint64_t kRegisterTimeoutNs = 10000 * kMs;  // a live daemon answers in microseconds
constexpr uint64_t kCancelGraceNs = 5000 * kMs;       // the reply that must follow a Cancel
constexpr int kIdlePollMs = 1000;                     // the link thread's look at "am I alone?"
#if defined(COLOC_SANITIZED)
constexpr size_t kLinkStack = 4u << 20;
#else
constexpr size_t kLinkStack = 256u << 10;
#endif

constinit RateLimit g_reconnect_warnings{30000 * kMs};
constinit std::atomic<bool> g_warned_malformed{false};

void* link_main(void* self) {
  static_cast<DaemonLink*>(self)->run();
  return nullptr;
}

void set_why(char* why, size_t cap, const char* fmt, const char* a = "", const char* b = "") {
  if (why && cap) std::snprintf(why, cap, fmt, a, b);
}

void drain(int efd) {
  if (efd < 0) return;
  uint64_t v;
  while (::read(efd, &v, sizeof v) == ssize_t(sizeof v)) {
  }
}

// Encodes `m` and sends it without blocking. True when the datagram went out whole.
template <class T>
bool send_now(int fd, const T& m, uint32_t seq, uint16_t version) {
  alignas(8) unsigned char buf[sizeof(T)];
  proto::Encoded e = proto::encode(m, seq, buf, sizeof buf, version);
  if (!e.status) return false;
  ssize_t n;
  do n = ::send(fd, buf, e.size, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == ssize_t(e.size);
}

// fstat through the system call (glibc's fstat is versioned GLIBC_2.33: glibc_compat.h).
bool identify(int fd, uint64_t* dev, uint64_t* ino) {
  struct stat st{};
  if (fd < 0 || ::syscall(SYS_fstat, fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  *dev = uint64_t(st.st_dev);
  *ino = uint64_t(st.st_ino);
  return true;
}

bool same_socket(int fd, uint64_t dev, uint64_t ino) {
  uint64_t d = 0, i = 0;
  return identify(fd, &d, &i) && d == dev && i == ino;
}

}  // namespace

// ---- registration -------------------------------------------------------------------------------

int DaemonLink::register_on(int fd, bool resume, SignalWindow* w, uint64_t deadline_ns, char* why, size_t cap) {
  proto::RegisterMsg m;
  std::memset(&m, 0, sizeof m);
  owner_->fill_register(resume, &m);
  const uint32_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  proto::Status st;
  if (int rc = wire::send(fd, m, seq, version_.load(std::memory_order_relaxed), &st); rc != 0) {
    if (rc == -EINVAL) set_why(why, cap, "cannot encode the registration (%s: %s)", proto::error_name(st.error), st.field);
    else set_why(why, cap, "%s", std::strerror(-rc));
    // Closed before we could even say who we are: as a close before the answer.
    return rc == -EPIPE ? -ECONNRESET : rc;
  }
  for (;;) {
    uint64_t now = monotonic_ns();
    if (now >= deadline_ns) {
      set_why(why, cap, "colocd did not answer the registration");
      return -ETIMEDOUT;
    }
    int ms = int((deadline_ns - now) / kMs) + 1;
    int ready;
    if (w) {
      ready = w->wait(fd, ms);
    } else {
      pollfd p{fd, POLLIN, 0};
      ready = ::poll(&p, 1, ms > 1000 ? 1000 : ms) > 0 ? 1 : 0;
    }
    if (ready < 0) {
      set_why(why, cap, "interrupted by a signal");
      return -EINTR;
    }
    if (ready == 0) continue;
    proto::Message msg;
    alignas(8) unsigned char buf[1024];
    int fds[2] = {-1, -1};
    size_t nfds = 0;
    proto::Status ps;
    int rc = wire::recv_message(fd, &msg, buf, sizeof buf, 0, fds, 2, &nfds, &ps);
    if (rc == -ETIMEDOUT || rc == -EAGAIN) continue;
    if (rc != 0) {
      set_why(why, cap, rc == -ECONNRESET ? "colocd closed the connection" : "%s", std::strerror(-rc));
      return rc == -EPROTO ? -EPROTO : (rc == -ECONNRESET ? -ECONNRESET : rc);
    }
    if (msg.type() == proto::MsgType::kError) {
      const proto::ErrorMsg& e = msg.body.error;
      set_why(why, cap, "colocd refused the registration: %s", e.text);
      uint16_t mine = version_.load(std::memory_order_relaxed);
      if (e.code == uint32_t(proto::ErrorCode::kVersion) && e.max_version >= proto::kMinVersion && e.max_version < mine) {
        version_.store(e.max_version, std::memory_order_relaxed);  // an older daemon: speak its version
        return -EAGAIN;
      }
      return -EPERM;
    }
    if (msg.type() != proto::MsgType::kRegisterReply || msg.h.seq != seq) {
      for (size_t i = 0; i < nfds; ++i) ::close(fds[i]);
      continue;
    }
    if (nfds != 2) {
      for (size_t i = 0; i < nfds; ++i) ::close(fds[i]);
      set_why(why, cap, "colocd's answer carried no pages");
      return -EPROTO;
    }
    if (!owner_->adopt(msg.body.register_reply, fds[0], fds[1], resume)) {
      set_why(why, cap, "colocd's pages are not usable");
      return -EPROTO;
    }
    if (msg.body.register_reply.grant_step > 0)
      grant_step_.store(msg.body.register_reply.grant_step, std::memory_order_relaxed);
    return 0;
  }
}

int DaemonLink::start_thread(char* why, size_t cap) {
  // The link thread: every signal blocked, detached.
  const int err = start_quiet_thread(link_main, this, kLinkStack);
  if (err == 0) return 0;
  // Without the thread nobody would read the replies (or reconnect): give the connection up (no
  // other thread uses the descriptor yet).
  state_.store(kClosed, std::memory_order_release);
  int fd = fd_.exchange(-1, std::memory_order_acq_rel);
  if (fd >= 0) ::close(fd);
  set_why(why, cap, "cannot start the link thread: %s", std::strerror(err));
  return -err;
}

int DaemonLink::start_busy(const char* what, char* why, size_t cap) {
  lost_at_ns_.store(monotonic_ns(), std::memory_order_relaxed);
  state_.store(kLost, std::memory_order_release);
  logf(LogLevel::warn,
       "colocd at %s %s: registering in the background; a first CUDA context waits until colocd answers (up to "
       "COLOC_WAIT_TIMEOUT; with COLOC_ON_FULL=fail it fails at once)",
       path_, what);
  return start_thread(why, cap);
}

int DaemonLink::start(const char* path, bool retry, uint64_t deadline_ns, LinkOwner* owner, SignalWindow& w,
                      char* why, size_t cap) {
  owner_ = owner;
  size_t n = std::strlen(path);
  if (n == 0 || n >= sizeof path_) {
    set_why(why, cap, "the socket path is empty or too long");
    return -ENAMETOOLONG;
  }
  std::memcpy(path_, path, n + 1);
  wire::Backoff backoff;
  bool announced = false;  // the one line saying what we wait for, printed before the first wait
  for (;;) {
    int fd = -1;
    int rc = wire::connect_socket(path_, &fd);
    if (rc == 0) {
      rc = register_on(fd, false, &w, monotonic_ns() + kRegisterTimeoutNs, why, cap);
      if (rc == 0) {
        identify(fd, &fd_dev_, &fd_ino_);
        fd_.store(fd, std::memory_order_release);
        registered_.store(true, std::memory_order_release);
        state_.store(kConnected, std::memory_order_release);
        return start_thread(why, cap);
      }
      ::close(fd);
      if (rc == -EAGAIN) continue;  // an older daemon: register again at its version
      if (rc == -EINTR) return rc;
      // A colocd is there but did not answer, or closed the connection unanswered (at its cap of
      // connections, say): as during a restart, never standalone: retry in the background.
      if (rc == -ETIMEDOUT) return start_busy("did not answer the registration within 10 s", why, cap);
      if (rc == -ECONNRESET) return start_busy("closed the connection before answering the registration", why, cap);
      return rc;
    }
    if (rc == -EAGAIN)  // its listen queue stayed full for the whole connect timeout: busy, not absent
      return start_busy("did not take the connection within 10 s (its listen queue is full)", why, cap);
    bool absent = rc == -ENOENT || rc == -ECONNREFUSED;
    set_why(why, cap, "%s", std::strerror(-rc));
    if (!absent || !retry) return rc;
    uint64_t now = monotonic_ns();
    if (now >= deadline_ns) return -ETIMEDOUT;
    if (!announced) {
      announced = true;
      logf(LogLevel::warn,
           "COLOC_REQUIRE_DAEMON=%s: waiting up to %.3g s (COLOC_WAIT_TIMEOUT) for colocd at %s (%s); cuInit "
           "returns when it answers, or fails then",
           options().require_daemon_text, double(deadline_ns - now) / 1e9, path_, why && why[0] ? why : "not reachable");
    }
    uint64_t d = backoff.next();
    if (!w.sleep(d < deadline_ns - now ? d : deadline_ns - now)) {
      set_why(why, cap, "interrupted by a signal");
      return -EINTR;
    }
  }
}

// ---- requests -----------------------------------------------------------------------------------

DaemonLink::Pending* DaemonLink::acquire() {
  MutexLock g(table_mutex_);
  Pending* pick = nullptr;
  for (Pending& p : pending_) {
    if (p.state.load(std::memory_order_relaxed) != kEntryFree) continue;
    if (p.efd >= 0) {  // one with its eventfd already made
      pick = &p;
      break;
    }
    if (!pick) pick = &p;
  }
  if (!pick) return nullptr;
  if (pick->efd < 0) pick->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // -1: waits poll by time
  pick->seq = 0;
  pick->state.store(kEntryWaiting, std::memory_order_release);
  return pick;
}

void DaemonLink::release(Pending* p) {
  MutexLock g(table_mutex_);
  drain(p->efd);
  p->state.store(kEntryFree, std::memory_order_release);
}

void DaemonLink::notify(Pending* p) {
  if (p->efd < 0) return;
  uint64_t one = 1;
  ssize_t n = ::write(p->efd, &one, sizeof one);
  (void)n;  // a full counter is still readable
}

void DaemonLink::read_replies(int fd) {
  for (;;) {
    proto::Message m;
    proto::Status ps;
    alignas(8) unsigned char buf[1024];
    int rc = wire::recv_message(fd, &m, buf, sizeof buf, 0, nullptr, 0, nullptr, &ps);
    if (rc == 0) {
      dispatch(m);
      continue;
    }
    if (rc == -EPROTO || rc == -EMSGSIZE) {
      if (!g_warned_malformed.exchange(true, std::memory_order_relaxed))
        logf(LogLevel::warn, "ignoring a malformed message from colocd (%s %s)", proto::error_name(ps.error), ps.field);
      continue;
    }
    if (rc != -ETIMEDOUT && rc != -EAGAIN && rc != -EINTR) lose(rc == -ECONNRESET ? "colocd went away" : std::strerror(-rc));
    return;
  }
}

void DaemonLink::hand_over(const Pending* leaving) {
  MutexLock g(table_mutex_);
  for (Pending& p : pending_)
    if (&p != leaving && p.state.load(std::memory_order_relaxed) == kEntrySent) {
      notify(&p);
      return;
    }
}

bool DaemonLink::wait_entry(Pending* p, SignalWindow& w, uint64_t deadline_ns, bool interruptible) {
  for (;;) {
    if (p->state.load(std::memory_order_acquire) != kEntrySent) return true;
    int ms = SignalWindow::kSliceMs;
    if (deadline_ns) {
      uint64_t now = monotonic_ns();
      if (now >= deadline_ns) return false;
      uint64_t left = (deadline_ns - now) / kMs + 1;
      if (left < uint64_t(ms)) ms = int(left);
    }
    int r;
    if (reader_mutex_.try_lock()) {  // lead: read the socket until our reply is there
      int fd = fd_.load(std::memory_order_acquire);
      bool live = state_.load(std::memory_order_acquire) == kConnected;
      r = p->state.load(std::memory_order_acquire) != kEntrySent ? 0
                                                                 : w.wait_either(live ? fd : -1, p->efd, ms, interruptible);
      if (r > 0 && (r & 1)) read_replies(fd);
      reader_mutex_.unlock();
      hand_over(p);  // someone else may be waiting for a reply that is still to come
    } else {
      r = interruptible ? w.wait(p->efd, ms) : w.wait_uninterrupted(p->efd, ms);
      if (r > 0) r = 2;
    }
    if (r < 0) return false;
    if (r & 2) drain(p->efd);
  }
}

template <class T>
DaemonLink::Outcome DaemonLink::request_impl(const T& m, LinkReply* reply, SignalWindow& w, uint64_t deadline_ns) {
  Pending* e = acquire();
  if (!e) return Outcome::closed;  // 64 requests in flight from one process: the daemon would refuse it
  bool cancelled = false;
  uint64_t cancel_deadline = 0;
  for (;;) {
    uint32_t st = e->state.load(std::memory_order_acquire);
    if (st == kEntryDone) {
      *reply = e->reply;
      release(e);
      return Outcome::replied;
    }
    if (st == kEntryLost) {
      release(e);
      return Outcome::lost;
    }
    if (st == kEntryWaiting) {  // not sent yet
      uint8_t cs = state_.load(std::memory_order_acquire);
      if (cs != kConnected) {
        release(e);
        return cs == kLost ? Outcome::lost : Outcome::closed;
      }
      int rc = -ENOTCONN;
      pthread_rwlock_rdlock(&conn_lock_);
      if (state_.load(std::memory_order_acquire) == kConnected) {
        int fd = fd_.load(std::memory_order_relaxed);
        if (!same_socket(fd, fd_dev_, fd_ino_)) {
          rc = -EBADF;  // the application closed our socket (its number may be another file now)
        } else {
          e->seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
          e->state.store(kEntrySent, std::memory_order_release);
          rc = wire::send(fd, m, e->seq, version_.load(std::memory_order_relaxed));
        }
      }
      pthread_rwlock_unlock(&conn_lock_);
      if (rc == -EINVAL) {  // cannot be encoded: a bug of ours, never the daemon's fault
        release(e);
        return Outcome::closed;
      }
      if (rc == -EBADF) {
        lose("its socket was closed by the application");
        uint32_t waiting = kEntryWaiting;  // never sent: the reconnect will send it
        e->state.compare_exchange_strong(waiting, kEntryLost, std::memory_order_acq_rel);
      } else if (rc != 0 && rc != -ENOTCONN) {
        lose(std::strerror(-rc));  // the daemon is going away (marks e lost)
      }
      continue;
    }
    // Sent: wait for the reply.
    if (cancelled) {
      if (!wait_entry(e, w, cancel_deadline, false)) {
        release(e);  // no reply to the Cancel: the connection is gone or going
        return w.stopped() ? Outcome::stopped : Outcome::timed_out;
      }
      continue;
    }
    if (!wait_entry(e, w, deadline_ns, true)) {
      // A stop signal or our deadline: cancel, then read the reply that must still come (refused
      // "cancelled", or a grant that raced with the Cancel).
      proto::CancelMsg c;
      std::memset(&c, 0, sizeof c);
      c.target_seq = e->seq;
      c.why = uint32_t(w.stopped() ? proto::CancelWhy::kSignal : proto::CancelWhy::kTimeout);
      post_impl(c);
      cancelled = true;
      cancel_deadline = monotonic_ns() + kCancelGraceNs;
    }
  }
}

DaemonLink::Outcome DaemonLink::request(const proto::AttachMsg& m, LinkReply* reply, SignalWindow& w,
                                        uint64_t deadline_ns) {
  return request_impl(m, reply, w, deadline_ns);
}

DaemonLink::Outcome DaemonLink::request(const proto::GrowMsg& m, LinkReply* reply, SignalWindow& w,
                                        uint64_t deadline_ns) {
  return request_impl(m, reply, w, deadline_ns);
}

DaemonLink::Outcome DaemonLink::wait_connected(SignalWindow& w, uint64_t deadline_ns) {
  Pending* e = acquire();
  for (;;) {
    uint8_t cs = state_.load(std::memory_order_acquire);
    Outcome o = Outcome::replied;
    bool done = true;
    if (cs == kConnected) o = Outcome::replied;
    else if (cs != kLost) o = Outcome::closed;
    else if (deadline_ns && monotonic_ns() >= deadline_ns) o = Outcome::timed_out;
    else done = false;
    if (!done) {
      int r = w.wait(e ? e->efd : -1, SignalWindow::kSliceMs);
      if (r < 0) {
        o = Outcome::stopped;
        done = true;
      } else if (r > 0) {
        drain(e->efd);
      }
    }
    if (done) {
      if (e) release(e);
      return o;
    }
  }
}

// ---- one-way messages ---------------------------------------------------------------------------

template <class T>
bool DaemonLink::post_impl(const T& m) {
  if (state_.load(std::memory_order_acquire) != kConnected) return false;
  if (pthread_rwlock_tryrdlock(&conn_lock_) != 0) return false;  // the link thread is switching
  bool ok = false;
  int fd = fd_.load(std::memory_order_relaxed);
  if (state_.load(std::memory_order_acquire) == kConnected && same_socket(fd, fd_dev_, fd_ino_))
    ok = send_now(fd, m, seq_.fetch_add(1, std::memory_order_relaxed) + 1, version_.load(std::memory_order_relaxed));
  pthread_rwlock_unlock(&conn_lock_);
  return ok;
}

bool DaemonLink::post(const proto::ShrinkMsg& m) { return post_impl(m); }
bool DaemonLink::post(const proto::DriverOomMsg& m) { return post_impl(m); }
bool DaemonLink::post(const proto::GoodbyeMsg& m) { return post_impl(m); }
bool DaemonLink::post(const proto::ContextFootprintMsg& m) { return post_impl(m); }

void DaemonLink::close_for_exit() {
  state_.store(kClosed, std::memory_order_release);
  MutexLock g(table_mutex_);
  for (Pending& p : pending_)
    if (p.state.load(std::memory_order_relaxed) != kEntryFree) notify(&p);
}

void DaemonLink::reset_in_child() {
  // The parent's descriptors: closing the child's copies leaves the parent's connection untouched.
  int fd = fd_.exchange(-1, std::memory_order_relaxed);
  if (fd >= 0) ::close(fd);
  state_.store(kIdle, std::memory_order_relaxed);
  registered_.store(false, std::memory_order_relaxed);
  pthread_rwlock_init(&conn_lock_, nullptr);
  table_mutex_.reinit_in_child();
  reader_mutex_.reinit_in_child();
  for (Pending& p : pending_) {
    if (p.efd >= 0) ::close(p.efd);  // shared with the parent's: never ours to write
    p.efd = -1;
    p.seq = 0;
    p.state.store(kEntryFree, std::memory_order_relaxed);
  }
}

// ---- the link thread ----------------------------------------------------------------------------

void DaemonLink::dispatch(const proto::Message& m) {
  if (m.type() == proto::MsgType::kError) {
    logf(LogLevel::warn, "colocd: %s", m.body.error.text);
    return;  // it closes the connection next: the hang-up follows
  }
  bool attach = m.type() == proto::MsgType::kAttachReply;
  if (!attach && m.type() != proto::MsgType::kGrowReply) return;  // nothing else comes unasked
  MutexLock g(table_mutex_);
  for (Pending& p : pending_) {
    if (p.state.load(std::memory_order_acquire) != kEntrySent || p.seq != m.h.seq) continue;  // seq was written before kEntrySent
    if (attach) p.reply.attach = m.body.attach_reply;
    else p.reply.grow = m.body.grow_reply;
    p.state.store(kEntryDone, std::memory_order_release);
    notify(&p);
    return;
  }
}

void DaemonLink::lose(const char* why) {
  pthread_rwlock_wrlock(&conn_lock_);
  bool was = state_.load(std::memory_order_relaxed) == kConnected;
  if (was) state_.store(kLost, std::memory_order_release);
  pthread_rwlock_unlock(&conn_lock_);
  if (!was) return;
  // The next daemon may be newer than the one that made us speak an older version: start from ours.
  version_.store(proto::kVersion, std::memory_order_relaxed);
  lost_at_ns_.store(monotonic_ns(), std::memory_order_relaxed);
  {
    MutexLock g(table_mutex_);
    for (Pending& p : pending_) {
      uint32_t sent = kEntrySent;
      p.state.compare_exchange_strong(sent, kEntryLost, std::memory_order_acq_rel);
      if (p.state.load(std::memory_order_relaxed) != kEntryFree) notify(&p);
    }
  }
  if (owner_) owner_->on_lost();
  if (owner_ && owner_->holds_grants())
    logf(LogLevel::warn, "lost the connection to colocd (%s): running on the current grants, reconnecting", why);
  else  // nothing to run on: the first context (admission) waits for the reconnect
    logf(LogLevel::warn,
         "lost the connection to colocd (%s): reconnecting; no device is attached yet, so a first CUDA context "
         "waits until colocd is back (with COLOC_ON_FULL=fail it fails at once)",
         why);
}

bool DaemonLink::reconnect() {
  int nfd = -1;
  if (wire::connect_socket(path_, &nfd) != 0) return false;
  char why[200] = {};
  // The first registration, when colocd was busy at start-up; else the re-registration of our ledger.
  const bool resume = registered_.load(std::memory_order_acquire);
  int rc = register_on(nfd, resume, nullptr, monotonic_ns() + kRegisterTimeoutNs, why, sizeof why);
  if (rc != 0) {
    ::close(nfd);
    uint64_t suppressed = 0;
    if (rc != -EAGAIN && g_reconnect_warnings.allow(monotonic_ns(), &suppressed))
      logf(LogLevel::warn, "could not re-register with colocd: %s; trying again", why);
    return false;
  }
  uint64_t new_dev = 0, new_ino = 0;
  identify(nfd, &new_dev, &new_ino);
  pthread_rwlock_wrlock(&conn_lock_);
  if (state_.load(std::memory_order_relaxed) == kClosed) {  // the process is exiting meanwhile
    pthread_rwlock_unlock(&conn_lock_);
    ::close(nfd);
    return false;
  }
  int old = fd_.exchange(nfd, std::memory_order_acq_rel);
  uint64_t old_dev = fd_dev_, old_ino = fd_ino_;
  fd_dev_ = new_dev;
  fd_ino_ = new_ino;
  state_.store(kConnected, std::memory_order_release);
  pthread_rwlock_unlock(&conn_lock_);
  // Only our own socket is closed (an application that closed it may have reused the number), and
  // only when no leader can be reading it.
  {
    MutexLock g(reader_mutex_);
    if (same_socket(old, old_dev, old_ino)) ::close(old);
  }
  {
    MutexLock g(table_mutex_);
    for (Pending& p : pending_)
      if (p.state.load(std::memory_order_relaxed) != kEntryFree) notify(&p);  // re-send, or go on
  }
  // Once per reconnect, after the one "lost the connection" line: the user saw the loss.
  uint64_t lost = lost_at_ns_.load(std::memory_order_relaxed);
  uint64_t now = monotonic_ns();
  const double after = lost && now > lost ? double(now - lost) / 1e9 : 0.0;
  registered_.store(true, std::memory_order_release);
  if (resume)
    logf(LogLevel::warn, "reconnected to colocd after %.1f s: registered again with the same ledger; growth and "
         "admission go on as before", after);
  else
    logf(LogLevel::warn, "registered with colocd at %s after %.1f s", path_, after);
  return true;
}

// Whether `tid`'s thread of this process has exited (a zombie, or gone).
bool thread_exited(long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command may hold spaces and parentheses
  return !p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X';
}

bool DaemonLink::last_thread() const {
  // Every other thread of the process has exited (the main thread stays a zombie until the last
  // one ends): /proc/self/task, read with getdents64 into a stack buffer (no allocation).
  int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  const long self = ::syscall(SYS_gettid);
  bool alone = true;
  alignas(8) char buf[4096];
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n && alone;) {
      struct Dirent {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const auto* d = reinterpret_cast<const Dirent*>(buf + off);
      off += d->reclen;
      if (d->name[0] < '0' || d->name[0] > '9') continue;
      long tid = std::strtol(d->name, nullptr, 10);
      if (tid != self && !thread_exited(tid)) alone = false;
    }
    if (!alone) break;
  }
  ::close(dir);
  return alone;
}

void DaemonLink::run() {
  prctl(PR_SET_NAME, "coloc-link", 0, 0, 0);
  wire::Backoff backoff;
  uint64_t next_try = 0;
  for (;;) {
    uint8_t st = state_.load(std::memory_order_acquire);
    if (st == kClosed || st == kIdle) return;
    if (st == kLost) {
      uint64_t now = monotonic_ns();
      if (now < next_try) {
        uint64_t d = next_try - now;
        wire::sleep_ns(d < 1000 * kMs ? d : 1000 * kMs);
        continue;
      }
      if (reconnect()) {
        backoff.reset();
      } else {
        next_try = monotonic_ns() + backoff.next();
        if (last_thread()) return;
      }
      continue;
    }
    int fd = fd_.load(std::memory_order_acquire);
    pollfd p{fd, 0, 0};  // no events asked: poll reports a hang-up, an error or a closed descriptor
    int rc = ::poll(&p, 1, kIdlePollMs);
    if (rc == 0) {
      if (last_thread()) return;  // the application is gone (pthread_exit): never keep it alive
      continue;
    }
    if (rc < 0) continue;
    if (p.revents & POLLNVAL) lose("its socket was closed by the application");
    else if (p.revents & (POLLHUP | POLLERR)) lose("colocd went away");
  }
}

}  // namespace coloc::interpose
