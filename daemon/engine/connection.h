// daemon/engine/connection.h — one accepted client socket: who is on the other end
// (SO_PEERCRED, taken once at accept), non-blocking receive of one datagram at a time with any
// unasked descriptors closed, and non-blocking send with a bounded queue for a slow reader.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broker/types.h"
#include "engine/client_pages.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine {

/// What receive() found.
struct Received {
  enum class Kind {
    kMessage,    ///< `len` bytes in the buffer
    kNone,       ///< nothing more to read now
    kHangup,     ///< the peer closed its end (or sent an empty datagram)
    kOversized,  ///< longer than the buffer (dropped)
    kError,      ///< recvmsg failed (`err`)
  } kind = Kind::kNone;
  size_t len = 0;
  int err = 0;
  int unasked_fds = 0;  ///< descriptors that came with it, already closed
};

class Connection {
 public:
  enum class Role { kNew, kJob, kAdmin };

  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Takes ownership of an accepted socket whose peer is `peer` (SO_PEERCRED, read at accept).
  /// `id` names the connection for its whole life (never reused, unlike its descriptor number);
  /// `exempt`: root or the admin group (no per-user caps).
  Connection(UniqueFd fd, const ucred& peer, uint64_t id, bool exempt)
      : fd_(std::move(fd)), id_(id), cred_(peer), exempt_(exempt) {}

  int fd() const { return fd_.get(); }
  uint64_t id() const { return id_; }
  bool exempt() const { return exempt_; }
  pid_t pid() const { return cred_.pid; }
  uid_t uid() const { return cred_.uid; }
  gid_t gid() const { return cred_.gid; }
  /// The peer's supplementary groups (SO_PEERGROUPS), read on first use.
  const std::vector<gid_t>& groups();
  std::string describe() const;  ///< "pid 123 uid 1000"

  /// Reads one datagram into buf (cap bytes) without blocking.
  Received receive(void* buf, size_t cap);
  /// Sends one datagram (with descriptors, e.g. the pages) without blocking; queues it when the
  /// socket is full. Errors: the peer is gone, or the queue would exceed its bound (a client that
  /// does not read its replies).
  Result<void> send(const void* data, size_t len, std::vector<int> fds = {});
  /// Sends what is queued; true when the queue is empty afterwards.
  Result<bool> flush();
  bool has_queued() const { return !queue_.empty(); }

  // State kept by the server.
  uint64_t token = 0;       ///< its watch in the event loop
  uint64_t start_time = 0;  ///< the peer process's start time (ProcKey), read at Register
  Role role = Role::kNew;
  uint16_t version = 0;  ///< the protocol version of its Register / first Admin
  std::optional<broker::ClientId> client;
  std::unique_ptr<ClientPages> pages;
  broker::JobSerial job = 0;
  bool said_goodbye = false;
  std::optional<int> exit_status;  ///< from Goodbye

 private:
  struct Pending {
    std::vector<unsigned char> bytes;
    std::vector<int> fds;  ///< dup'ed: closed after sending
  };
  Result<bool> send_now(const unsigned char* data, size_t len, const std::vector<int>& fds);

  UniqueFd fd_;
  uint64_t id_ = 0;
  ucred cred_{};
  bool exempt_ = false;
  std::optional<std::vector<gid_t>> groups_;
  std::deque<Pending> queue_;
  size_t queued_bytes_ = 0;
};

}  // namespace coloc::engine
