// tools/coloc/daemon_client.h — one admin request to colocd over its socket, the answer
// reassembled from its chunks.
#pragma once

#include <string>

#include "coloc/protocol.h"

namespace coloc::cli {

/// The outcome of a request.
struct Answer {
  enum class Kind {
    kOk,           ///< `text` is the JSON answer
    kRefused,      ///< the daemon said no: `status` and `text` (a sentence) say why
    kUnreachable,  ///< no daemon at the socket (`text` says what failed)
    kProtocol,     ///< the daemon answered something we cannot read
  } kind = Kind::kOk;
  proto::AdminStatus status = proto::AdminStatus::kOk;
  std::string text;
};

/// Sends `msg` to the daemon at `socket` and waits up to `timeout_ms` for the whole answer.
Answer admin_request(const std::string& socket, const proto::AdminMsg& msg, int timeout_ms = 10000);

/// The socket to use: `flag` if given, else $COLOC_SOCKET, else the default.
std::string resolve_socket(const std::string& flag);

}  // namespace coloc::cli
