// coloc/wire.h — the client side of the colocd socket: connect (with back-off), send and receive
// one message, receive the page fds (SCM_RIGHTS), map the pages, fingerprint the command line.
// Used by libcoloc.so, the coloc CLI, the test client and the benchmark.
//
// Rules for this header (it is compiled into libcoloc.so, inside other people's processes):
//   header-only; glibc, the C++ standard headers and inline xxHash only; no exceptions, no
//   allocation, no logging, no signals changed. Every function is noexcept and returns 0 or a
//   negative errno value. Every descriptor is created close-on-exec. A descriptor received that
//   the caller did not ask for is closed at once.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "coloc/pages.h"
#include "coloc/protocol.h"

namespace coloc::wire {

/// Monotonic clock in ns (CLOCK_MONOTONIC).
inline uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

/// How long a connect waits for colocd to take the connection (its listen queue is full when it
/// is stalled or flooded), and how long a client waits for a Register or admin reply: a live
/// colocd answers in microseconds.
inline constexpr int kConnectTimeoutMs = 10000;

/// Connects a SOCK_SEQPACKET socket to `path`, waiting up to `timeout_ms` (> 0) while the
/// daemon's listen queue is full. On success stores the descriptor in *fd and returns 0; else
/// -errno: -ENAMETOOLONG when the path does not fit sockaddr_un; -ENOENT or -ECONNREFUSED when no
/// daemon listens there; -EAGAIN when the queue stayed full for `timeout_ms` (a daemon is there
/// but does not accept).
inline int connect_socket(const char* path, int* fd, int timeout_ms = kConnectTimeoutMs) noexcept {
  if (!path || !fd) return -EINVAL;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t n = std::strlen(path);
  if (n == 0) return -EINVAL;
  if (n >= sizeof addr.sun_path) return -ENAMETOOLONG;
  std::memcpy(addr.sun_path, path, n + 1);
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  // A Unix socket's connect waits on a full listen queue for the send timeout (then EAGAIN).
  timeval tv{};
  tv.tv_sec = timeout_ms > 0 ? timeout_ms / 1000 : 0;
  tv.tv_usec = timeout_ms > 0 ? (timeout_ms % 1000) * 1000 : 1000;
  (void)::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc;
  do rc = ::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  while (rc < 0 && errno == EINTR);
  if (rc < 0) {
    int e = errno;
    ::close(s);
    return -e;
  }
  timeval none{};
  (void)::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  *fd = s;
  return 0;
}

/// Exponential back-off with jitter for reconnecting: 10 ms, 20 ms, ... capped at `max_ns`
/// (default 500 ms), each delay scaled by a random factor in [0.5, 1.0] so that many clients
/// of a restarted daemon do not reconnect in lock step.
struct Backoff {
  uint64_t initial_ns = 10'000'000;
  uint64_t max_ns = 500'000'000;
  uint64_t current_ns = 0;
  uint64_t rng = 0;

  /// The next delay in ns.
  uint64_t next() noexcept {
    current_ns = current_ns == 0 ? initial_ns : (current_ns * 2 > max_ns ? max_ns : current_ns * 2);
    if (rng == 0) rng = now_ns() ^ (uint64_t(::getpid()) << 32) ^ 0x9e3779b97f4a7c15ull;
    rng ^= rng << 13;  // xorshift64
    rng ^= rng >> 7;
    rng ^= rng << 17;
    uint64_t half = current_ns / 2;
    return half + (half ? rng % (half + 1) : 0);
  }
  void reset() noexcept { current_ns = 0; }
};

/// Sleeps `ns` nanoseconds (restarting after signals).
inline void sleep_ns(uint64_t ns) noexcept {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/// Connects to `path`, retrying with `backoff` while the daemon is absent (ENOENT, ECONNREFUSED,
/// EAGAIN) until `timeout_ns` has passed. Returns 0 (descriptor in *fd), -ETIMEDOUT, or the
/// first error that retrying cannot fix.
inline int connect_retry(const char* path, uint64_t timeout_ns, int* fd, Backoff* backoff = nullptr) noexcept {
  Backoff local;
  Backoff& b = backoff ? *backoff : local;
  const uint64_t deadline = now_ns() + timeout_ns;
  for (;;) {
    int rc = connect_socket(path, fd);
    if (rc == 0) {
      b.reset();
      return 0;
    }
    if (rc != -ENOENT && rc != -ECONNREFUSED && rc != -EAGAIN) return rc;
    uint64_t now = now_ns();
    if (now >= deadline) return -ETIMEDOUT;
    uint64_t d = b.next();
    sleep_ns(d < deadline - now ? d : deadline - now);
  }
}

/// Sends one datagram (MSG_NOSIGNAL: a closed peer gives -EPIPE, never SIGPIPE). Blocks while the
/// socket buffer is full. Returns 0 or -errno.
inline int send_bytes(int fd, const void* buf, size_t len) noexcept {
  for (;;) {
    ssize_t n = ::send(fd, buf, len, MSG_NOSIGNAL);
    if (n == ssize_t(len)) return 0;
    if (n >= 0) return -EMSGSIZE;  // a seqpacket send is all or nothing
    if (errno == EINTR) continue;
    return -errno;
  }
}

/// Encodes `msg` (protocol.h encode()) and sends it. -EINVAL when the message is invalid (the
/// reason in *status when given), else as send_bytes().
template <class T>
inline int send(int fd, const T& msg, uint32_t seq, uint16_t version = proto::kVersion,
                proto::Status* status = nullptr) noexcept {
  alignas(8) unsigned char buf[sizeof(T)];
  proto::Encoded e = proto::encode(msg, seq, buf, sizeof buf, version);
  if (status) *status = e.status;
  if (!e.status) return -EINVAL;
  return send_bytes(fd, buf, e.size);
}

/// Closes every descriptor carried by SCM_RIGHTS in `msg` from index `keep` on; stores up to
/// `keep` of them (in order) in fds[] and their number in *nfds.
inline void take_fds(msghdr* msg, int* fds, size_t keep, size_t* nfds) noexcept {
  size_t got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(c);
    for (size_t i = 0; i < n; ++i) {
      int f;
      std::memcpy(&f, data + i * sizeof(int), sizeof f);
      if (got < keep && fds) fds[got++] = f;
      else ::close(f);
    }
  }
  if (nfds) *nfds = got;
}

/// Receives one datagram into buf (cap bytes), waiting up to `timeout_ms` (-1 = forever).
/// Descriptors that arrive with it: up to `max_fds` go to fds[] (count in *nfds), the rest are
/// closed. Returns 0 (length in *len), -ETIMEDOUT, -ECONNRESET when the peer closed the
/// connection, -EMSGSIZE when the datagram was longer than cap (it is dropped), or -errno.
inline int recv_bytes(int fd, void* buf, size_t cap, size_t* len, int timeout_ms, int* fds = nullptr,
                      size_t max_fds = 0, size_t* nfds = nullptr) noexcept {
  if (nfds) *nfds = 0;
  if (timeout_ms >= 0) {
    pollfd p{fd, POLLIN, 0};
    int rc;
    do rc = ::poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) return -errno;
    if (rc == 0) return -ETIMEDOUT;
  }
  alignas(cmsghdr) unsigned char ctrl[CMSG_SPACE(sizeof(int) * 8)];
  iovec iov{buf, cap};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  ssize_t n;
  do n = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  take_fds(&m, fds, (m.msg_flags & MSG_TRUNC) ? 0 : max_fds, nfds);
  if (n == 0) return -ECONNRESET;
  if (m.msg_flags & MSG_TRUNC) return -EMSGSIZE;
  *len = size_t(n);
  return 0;
}

/// Receives and decodes one message from the daemon. `buf` must hold proto::kMaxMessage bytes and
/// outlive *out (an AdminReply's payload points into it). Returns as recv_bytes(), or -EPROTO when
/// the message does not decode (the reason in *status when given).
inline int recv_message(int fd, proto::Message* out, void* buf, size_t cap, int timeout_ms, int* fds = nullptr,
                        size_t max_fds = 0, size_t* nfds = nullptr, proto::Status* status = nullptr) noexcept {
  size_t len = 0;
  int rc = recv_bytes(fd, buf, cap, &len, timeout_ms, fds, max_fds, nfds);
  if (rc != 0) return rc;
  proto::Status s = proto::decode(buf, len, proto::Receiver::kClient, out);
  if (status) *status = s;
  if (!s) {
    if (fds && nfds)
      for (size_t i = 0; i < *nfds; ++i) ::close(fds[i]);
    if (nfds) *nfds = 0;
    return -EPROTO;
  }
  return 0;
}

/// The two pages of a registered process, mapped.
struct Pages {
  const pages::ControlPage* control = nullptr;  ///< read-only mapping
  pages::StatsPage* stats = nullptr;            ///< read-write mapping
};

/// Maps the pages from a RegisterReply's descriptors (control first, stats second), checks their
/// size, magic and layout version, and closes both descriptors whatever happens (the mappings
/// keep the memory alive). Returns 0, -EPROTO for a wrong size/magic/layout, or -errno from mmap.
inline int map_pages(int control_fd, int stats_fd, Pages* out) noexcept {
  int rc = 0;
  void* c = MAP_FAILED;
  void* s = MAP_FAILED;
  struct stat st_c{}, st_s{};
  if (::fstat(control_fd, &st_c) != 0 || ::fstat(stats_fd, &st_s) != 0) {
    rc = -errno;
  } else if (size_t(st_c.st_size) != pages::kPageSize || size_t(st_s.st_size) != pages::kPageSize) {
    rc = -EPROTO;
  } else {
    c = ::mmap(nullptr, pages::kPageSize, PROT_READ, MAP_SHARED, control_fd, 0);
    if (c == MAP_FAILED) rc = -errno;
    s = rc ? MAP_FAILED : ::mmap(nullptr, pages::kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, stats_fd, 0);
    if (!rc && s == MAP_FAILED) rc = -errno;
  }
  ::close(control_fd);
  ::close(stats_fd);
  if (rc == 0) {
    auto* cp = static_cast<const pages::ControlPage*>(c);
    auto* sp = static_cast<pages::StatsPage*>(s);
    if (cp->magic != pages::kControlMagic || cp->layout_version < pages::kMinLayoutVersion ||
        cp->layout_version > pages::kLayoutVersion ||
        cp->slot_count != pages::kSlots || sp->magic != pages::kStatsMagic ||
        sp->layout_version != cp->layout_version || sp->slot_count != pages::kSlots)
      rc = -EPROTO;
  }
  if (rc != 0) {
    if (c != MAP_FAILED) ::munmap(c, pages::kPageSize);
    if (s != MAP_FAILED) ::munmap(s, pages::kPageSize);
    return rc;
  }
  out->control = static_cast<const pages::ControlPage*>(c);
  out->stats = static_cast<pages::StatsPage*>(s);
  return 0;
}

/// Unmaps both pages (safe on an empty Pages).
inline void unmap_pages(Pages* p) noexcept {
  if (p->control) ::munmap(const_cast<pages::ControlPage*>(p->control), pages::kPageSize);
  if (p->stats) ::munmap(p->stats, pages::kPageSize);
  p->control = nullptr;
  p->stats = nullptr;
}

/// The command line of this process: its fingerprint and a printable, truncated text.
struct Cmdline {
  uint64_t hash = 0;                   ///< XXH3-64 of the raw NUL-separated argv (all of it)
  char text[proto::kCmdlineSize] = {};  ///< argv joined by spaces; control bytes as '?'; "..." when cut
};

/// The environment variables that change a job's device-memory footprint, hashed into
/// Register::env_hash (v9): the caching allocator's settings, cuBLAS's workspace size, and lazy or
/// eager module loading (eager loading holds every kernel image in device memory).
inline constexpr const char* kFootprintEnv[] = {"PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                                                "CUDA_MODULE_LOADING"};

/// XXH3-64 of the kFootprintEnv variables as `lookup(name)` gives them (nullptr = unset; unset
/// and set-but-empty hash differently). Pass ::getenv for this process's environment.
template <class Lookup>
inline uint64_t env_fingerprint(Lookup lookup) noexcept {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  for (const char* name : kFootprintEnv) {
    const char* v = lookup(name);
    XXH3_64bits_update(&st, name, std::strlen(name));
    if (v) {
      XXH3_64bits_update(&st, "=", 1);
      XXH3_64bits_update(&st, v, std::strlen(v));
    }
    XXH3_64bits_update(&st, "", 1);  // the terminator keeps "A=bc" apart from "A=b" + "c..."
  }
  return XXH3_64bits_digest(&st);
}

/// Fingerprint and text of a raw NUL-separated argv (`len` bytes, as /proc/PID/cmdline holds it).
inline void describe_cmdline(const char* raw, size_t len, Cmdline* out) noexcept {
  out->hash = XXH3_64bits(raw, len);
  std::memset(out->text, 0, sizeof out->text);
  while (len > 0 && raw[len - 1] == '\0') --len;  // trailing terminator(s)
  const size_t room = sizeof out->text - 1;
  size_t o = 0;
  for (size_t i = 0; i < len && o < room; ++i) {
    unsigned char ch = static_cast<unsigned char>(raw[i]);
    out->text[o++] = ch == 0 ? ' ' : (ch < 0x20 || ch == 0x7f) ? '?' : char(ch);
  }
  if (len > o) {  // cut: mark it, and never leave half a UTF-8 sequence before the mark
    size_t end = room - 3;
    while (end > 0 && (static_cast<unsigned char>(out->text[end]) & 0xC0) == 0x80) --end;
    std::memcpy(out->text + end, "...", 3);
    std::memset(out->text + end + 3, 0, sizeof out->text - end - 3);
  }
}

/// Reads /proc/self/cmdline (up to 64 KiB hashed) into *out. Returns 0 or -errno.
inline int read_cmdline(Cmdline* out) noexcept {
  static constexpr size_t kMax = 65536;
  int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  // Hash in a streaming fashion so arbitrarily long command lines need no big buffer; keep the
  // first part for the text.
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  char head[proto::kCmdlineSize + 4];
  size_t head_len = 0, total = 0;
  char chunk[4096];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    XXH3_64bits_update(&st, chunk, size_t(n));
    size_t take = sizeof head - head_len < size_t(n) ? sizeof head - head_len : size_t(n);
    std::memcpy(head + head_len, chunk, take);
    head_len += take;
    total += size_t(n);
    if (total >= kMax) break;
  }
  ::close(fd);
  describe_cmdline(head, head_len, out);
  out->hash = XXH3_64bits_digest(&st);
  return 0;
}

}  // namespace coloc::wire
