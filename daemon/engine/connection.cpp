#include "engine/connection.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "coloc/wire.h"

namespace coloc::engine {

namespace {
constexpr size_t kMaxQueuedBytes = 16u << 20;  // an admin reply of many thousand jobs fits
}

Connection::~Connection() {
  for (Pending& p : queue_)
    for (int f : p.fds) ::close(f);
}

const std::vector<gid_t>& Connection::groups() {
  if (!groups_) {
    std::vector<gid_t> g(64);
    socklen_t len = socklen_t(g.size() * sizeof(gid_t));
    int rc = ::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERGROUPS, g.data(), &len);
    if (rc != 0 && errno == ERANGE) {
      g.resize(len / sizeof(gid_t) + 1);
      len = socklen_t(g.size() * sizeof(gid_t));
      rc = ::getsockopt(fd_.get(), SOL_SOCKET, SO_PEERGROUPS, g.data(), &len);
    }
    g.resize(rc == 0 ? len / sizeof(gid_t) : 0);
    groups_ = std::move(g);
  }
  return *groups_;
}

std::string Connection::describe() const {
  return "pid " + std::to_string(cred_.pid) + " uid " + std::to_string(cred_.uid);
}

Received Connection::receive(void* buf, size_t cap) {
  Received r;
  alignas(cmsghdr) unsigned char ctrl[CMSG_SPACE(sizeof(int) * 16)];
  iovec iov{buf, cap};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  ssize_t n;
  do n = ::recvmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return r;
    r.kind = Received::Kind::kError;
    r.err = errno;
    return r;
  }
  // The daemon never asks for descriptors: close whatever came.
  size_t got = 0;
  wire::take_fds(&m, nullptr, 0, &got);
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) r.unasked_fds += int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  if (m.msg_flags & MSG_CTRUNC) r.unasked_fds = r.unasked_fds ? r.unasked_fds : 1;
  if (n == 0) {
    r.kind = Received::Kind::kHangup;
    return r;
  }
  if (m.msg_flags & MSG_TRUNC) {
    r.kind = Received::Kind::kOversized;
    return r;
  }
  r.kind = Received::Kind::kMessage;
  r.len = size_t(n);
  return r;
}

Result<bool> Connection::send_now(const unsigned char* data, size_t len, const std::vector<int>& fds) {
  iovec iov{const_cast<unsigned char*>(data), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) unsigned char ctrl[CMSG_SPACE(sizeof(int) * 4)];
  if (!fds.empty()) {
    m.msg_control = ctrl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do n = ::sendmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    return Error::from_errno("send to " + describe());
  }
  return true;
}

Result<void> Connection::send(const void* data, size_t len, std::vector<int> fds) {
  auto* bytes = static_cast<const unsigned char*>(data);
  if (queue_.empty()) {
    auto sent = send_now(bytes, len, fds);
    if (!sent) return sent.error();
    if (sent.value()) return {};
  }
  if (queued_bytes_ + len > kMaxQueuedBytes)
    return Error{ENOBUFS, describe() + " does not read its replies (" + std::to_string(queued_bytes_) + " bytes queued)"};
  Pending p;
  p.bytes.assign(bytes, bytes + len);
  for (int f : fds) {
    int d = ::fcntl(f, F_DUPFD_CLOEXEC, 0);
    if (d < 0) {
      for (int x : p.fds) ::close(x);
      return Error::from_errno("dup a page descriptor");
    }
    p.fds.push_back(d);
  }
  queued_bytes_ += len;
  queue_.push_back(std::move(p));
  return {};
}

Result<bool> Connection::flush() {
  while (!queue_.empty()) {
    Pending& p = queue_.front();
    auto sent = send_now(p.bytes.data(), p.bytes.size(), p.fds);
    if (!sent) return sent.error();
    if (!sent.value()) return false;
    for (int f : p.fds) ::close(f);
    queued_bytes_ -= p.bytes.size();
    queue_.pop_front();
  }
  return true;
}

}  // namespace coloc::engine
