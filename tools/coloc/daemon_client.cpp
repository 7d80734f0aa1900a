#include "daemon_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include "coloc/wire.h"
#include "util/log.h"

namespace coloc::cli {

namespace {
std::string fmt_seconds(int ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", double(ms) / 1000.0);
  return b;
}
}  // namespace

namespace {

std::string connect_failure(int rc) {
  if (rc == -ENOENT || rc == -ECONNREFUSED)
    return std::string(std::strerror(-rc)) + " (is colocd running? set COLOC_SOCKET or --socket)";
  if (rc == -EAGAIN)
    return "it did not take the connection within " + std::to_string(wire::kConnectTimeoutMs / 1000) +
           " s (its listen queue is full: colocd is stalled or flooded)";
  return std::strerror(-rc);
}

std::string no_answer(const std::string& socket, int timeout_ms) {
  return "colocd at " + socket + " did not answer within " + fmt_seconds(timeout_ms) + " (stalled or flooded?)";
}

}  // namespace

std::string resolve_socket(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("COLOC_SOCKET"); env && *env) return env;
  return proto::kDefaultSocket;
}

Answer admin_request(const std::string& socket, const proto::AdminMsg& msg, int timeout_ms) {
  Answer a;
  int fd = -1;
  if (int rc = wire::connect_socket(socket.c_str(), &fd); rc != 0) {
    a.kind = Answer::Kind::kUnreachable;
    a.text = "cannot reach colocd at " + socket + ": " + connect_failure(rc);
    return a;
  }
  proto::Status st;
  // Admin requests and replies are the same in every version since v1: sent as v2, so that a colocd
  // of protocol v2 (older than this coloc) still answers coloc status, jobs, report and set. Pause
  // and resume are v6 ops: sent as v6; policy and a weight are v7: sent as v7 (an older colocd
  // refuses the version, and says so).
  const bool v7 = msg.op > proto::last_admin_op(6) || msg.weight != 0 || msg.mode != 0 || msg.quantum_ms != 0 ||
                  (msg.op == uint32_t(proto::AdminOp::kSet) && (msg.set_fields & proto::kSetWeight));
  // A policy's target is v8: sent as v8. The history ops are v9: sent as v9; cancel and the ended
  // jobs are v13: sent as v13; suspend is v14: sent as v14.
  const uint16_t kAdminVersion = msg.op > proto::last_admin_op(13) ? 14
                                 : msg.op > proto::last_admin_op(12) ? 13
                                 : msg.op > proto::last_admin_op(8) ? 9
                                 : msg.target_pct != 0            ? 8
                                 : v7                             ? 7
                                 : msg.op > proto::last_admin_op(2) ? 6
                                                                    : 2;
  if (int rc = wire::send(fd, msg, 1, kAdminVersion, &st); rc != 0) {
    ::close(fd);
    a.kind = rc == -EINVAL ? Answer::Kind::kProtocol : Answer::Kind::kUnreachable;
    a.text = rc == -EINVAL ? std::string("invalid request: ") + proto::error_name(st.error) + " (" + st.field + ")"
                           : std::string("cannot talk to colocd at ") + socket + ": " + std::strerror(-rc);
    return a;
  }
  std::vector<unsigned char> buf(proto::kMaxMessage);
  for (;;) {
    proto::Message m;
    int rc = wire::recv_message(fd, &m, buf.data(), buf.size(), timeout_ms, nullptr, 0, nullptr, &st);
    if (rc != 0) {
      a.kind = rc == -EPROTO ? Answer::Kind::kProtocol : Answer::Kind::kUnreachable;
      a.text = rc == -EPROTO ? std::string("unreadable answer from colocd: ") + proto::error_name(st.error)
               : rc == -ETIMEDOUT ? no_answer(socket, timeout_ms)
                                  : "colocd at " + socket + " closed the connection: " + std::strerror(-rc);
      break;
    }
    if (m.type() == proto::MsgType::kError) {
      a.kind = Answer::Kind::kProtocol;
      a.text = std::string("colocd refused the request: ") + m.body.error.text;
      break;
    }
    if (m.type() != proto::MsgType::kAdminReply || m.h.seq != 1) continue;
    a.status = proto::AdminStatus(m.body.admin_reply.status);
    a.text.append(m.payload, m.payload_len);
    if (!(m.body.admin_reply.flags & proto::kAdminMore)) {
      a.kind = a.status == proto::AdminStatus::kOk ? Answer::Kind::kOk : Answer::Kind::kRefused;
      break;
    }
  }
  ::close(fd);
  return a;
}

namespace {

int register_anchor_as(const std::string& socket, const AnchorSpec& spec, std::string* why, int timeout_ms, bool resume,
                       bool* busy, uint16_t version, proto::RegisterReplyMsg* reply);

}  // namespace

int register_anchor(const std::string& socket, const AnchorSpec& spec, std::string* why, int timeout_ms, bool resume,
                    bool* busy, proto::RegisterReplyMsg* reply) {
  return register_anchor_as(socket, spec, why, timeout_ms, resume, busy, proto::kVersion, reply);
}

namespace {

// At `version`; a colocd that refuses it but speaks v3 (anchors) or later is asked again in its
// newest version (a coloc newer than the node's colocd).
int register_anchor_as(const std::string& socket, const AnchorSpec& spec, std::string* why, int timeout_ms, bool resume,
                       bool* busy, uint16_t version, proto::RegisterReplyMsg* reply) {
  int fd = -1;
  bool busy_local = false;
  bool& is_busy = busy ? *busy : busy_local;
  is_busy = false;
  if (int rc = wire::connect_socket(socket.c_str(), &fd); rc != 0) {
    *why = "cannot reach colocd at " + socket + ": " + connect_failure(rc);
    is_busy = rc == -EAGAIN;
    return -1;
  }
  proto::RegisterMsg r;
  std::memset(&r, 0, sizeof r);
  r.limit = spec.limit;
  r.priority = uint8_t(spec.priority);
  r.on_full = uint8_t(spec.on_full);
  r.flags = uint16_t(proto::kRegAnchor | (resume ? proto::kRegResume : 0));
  r.wait_timeout_ns = spec.wait_timeout_ns;
  proto::set_string(r.job, spec.job.c_str());
  std::string raw;  // NUL-separated, as /proc/PID/cmdline holds it
  for (const std::string& a : spec.command) raw.append(a).push_back('\0');
  wire::Cmdline cmd;
  wire::describe_cmdline(raw.data(), raw.size(), &cmd);
  r.cmdline_hash = cmd.hash;
  r.env_hash = wire::env_fingerprint([](const char* n) { return ::getenv(n); });
  r.flags = uint16_t(r.flags | proto::kRegEnvHash);
  if (spec.estimate > 0) {
    r.estimate = spec.estimate;
    r.flags = uint16_t(r.flags | proto::kRegEstimate);
  }
  std::memcpy(r.cmdline, cmd.text, sizeof r.cmdline);
  if (!spec.step.empty() && version >= 11) {  // (v11) the Slurm step the anchor stands for
    proto::set_string(r.step, spec.step.c_str());
    r.flags = uint16_t(r.flags | proto::kRegStep);
  }
  proto::Status st;
  if (int rc = wire::send(fd, r, 1, version, &st); rc != 0) {
    ::close(fd);
    *why = rc == -EINVAL ? std::string("invalid registration: ") + proto::error_name(st.error) + " (" + st.field + ")"
                         : std::string("colocd at ") + socket + " closed the connection before answering: " +
                               std::strerror(-rc);
    is_busy = rc != -EINVAL;
    return -1;
  }
  std::vector<unsigned char> buf(proto::kMaxMessage);
  for (;;) {
    proto::Message m;
    int fds[2] = {-1, -1};
    size_t nfds = 0;
    int rc = wire::recv_message(fd, &m, buf.data(), buf.size(), timeout_ms, fds, 2, &nfds, &st);
    for (size_t i = 0; i < nfds; ++i) ::close(fds[i]);  // the anchor reads and writes no page
    if (rc != 0) {
      ::close(fd);
      *why = rc == -EPROTO ? std::string("unreadable answer from colocd: ") + proto::error_name(st.error)
             : rc == -ETIMEDOUT ? no_answer(socket, timeout_ms)
                                : "colocd at " + socket + " closed the connection before answering: " + std::strerror(-rc);
      is_busy = rc != -EPROTO;
      return -1;
    }
    if (m.type() == proto::MsgType::kError) {
      ::close(fd);
      *why = std::string("colocd refused the registration: ") + m.body.error.text;
      const proto::ErrorMsg& e = m.body.error;
      if (e.code == uint32_t(proto::ErrorCode::kVersion) && e.max_version >= 3 && e.max_version < version)
        return register_anchor_as(socket, spec, why, timeout_ms, resume, busy, e.max_version, reply);
      return -1;
    }
    if (m.type() == proto::MsgType::kRegisterReply && m.h.seq == 1) {
      if (reply) *reply = m.body.register_reply;
      return fd;
    }
  }
}

}  // namespace

void anchor_goodbye(int fd, int exit_status) {
  if (fd < 0) return;
  proto::GoodbyeMsg g;
  std::memset(&g, 0, sizeof g);
  g.exit_status = exit_status;
  g.has_status = 1;
  (void)wire::send(fd, g, 2);
  ::close(fd);
}

int hold_anchor(int end_fd, int anchor, const std::string& socket, const AnchorSpec& spec,
                const std::function<void()>& on_registered) {
  int backoff_ms = 50;
  bool registered = anchor >= 0;  // else colocd was busy at the start: the first registration is still to come
  for (;;) {
    pollfd p[2] = {{end_fd, POLLIN, 0}, {anchor, POLLIN, 0}};
    int rc = ::poll(p, anchor >= 0 ? 2 : 1, anchor >= 0 ? -1 : backoff_ms);
    if (rc < 0 && errno != EINTR) break;
    if (rc > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) break;  // the job's end
    if (rc > 0 && anchor >= 0 && p[1].revents) {
      // colocd sends the anchor nothing: readable means it closed the connection (or refuses us).
      char b[256];
      ssize_t n = ::recv(anchor, b, sizeof b, MSG_DONTWAIT);
      if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
        log::get("cli")->info("colocd went away; registering the job's anchor again when it is back");
        ::close(anchor);
        anchor = -1;
      }
      continue;
    }
    if (anchor < 0 && rc == 0) {
      std::string why;
      anchor = register_anchor(socket, spec, &why, 2000, registered);
      registered |= anchor >= 0;
      if (anchor < 0) backoff_ms = std::min(backoff_ms * 2, 2000);
      else backoff_ms = 50;
      if (anchor >= 0 && on_registered) on_registered();
    }
  }
  return anchor;
}

}  // namespace coloc::cli
