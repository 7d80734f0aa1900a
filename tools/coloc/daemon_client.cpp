#include "daemon_client.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "coloc/wire.h"

namespace coloc::cli {

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
    a.text = "cannot reach colocd at " + socket + ": " + std::strerror(-rc) +
             (rc == -ENOENT || rc == -ECONNREFUSED ? " (is colocd running? set COLOC_SOCKET or --socket)" : "");
    return a;
  }
  proto::Status st;
  if (int rc = wire::send(fd, msg, 1, proto::kVersion, &st); rc != 0) {
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
               : rc == -ETIMEDOUT ? "colocd at " + socket + " did not answer in time"
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

}  // namespace coloc::cli
