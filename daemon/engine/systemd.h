// daemon/engine/systemd.h — colocd under systemd: the listening socket it may be handed (socket
// activation, deploy/systemd/colocd.socket) and the readiness it reports (Type=notify).
//
// Both use libsystemd (sd_listen_fds, sd_notify; Debian libsystemd-dev): the library is what
// systemd documents for these protocols, handles their details (LISTEN_PID, abstract notify
// sockets, the variables' removal) and is on every Debian system. Without LISTEN_FDS or
// NOTIFY_SOCKET in the environment nothing here does anything, so colocd started by hand, by a
// test, or under another supervisor behaves as before. docs/daemon.md ("Under systemd") has why.
#pragma once

#include <string>

#include "broker/types.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine::systemd {

/// The listening socket systemd passed (LISTEN_FDS=1, LISTEN_PID = this process, fd 3), checked
/// (check_listen_socket in engine/listener.h): an AF_UNIX SOCK_SEQPACKET socket, listening. Returns an invalid UniqueFd when
/// none was passed to this process (no LISTEN_FDS, or LISTEN_PID names another process: then
/// `note` says so, for the log). Either way LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are
/// removed from the environment, so nothing colocd starts inherits them.
/// Errors (more than one descriptor, a descriptor that is not such a socket) say what the socket
/// unit must change; colocd then exits 2 (a configuration error: systemd does not restart it).
/// Call first in main(), before any thread starts (it changes the environment).
Result<UniqueFd> take_listen_socket(std::string* note);

/// Rate limit of status lines: a changed line goes out at most once per `interval`, and a
/// change held back goes out at the first call after it. Pure (tested in tests/unit/daemon/).
class StatusThrottle {
 public:
  explicit StatusThrottle(broker::Nanos interval = 1'000'000'000) : interval_(interval) {}
  /// True when a line may go out at `now` (the interval since the last one has passed).
  bool due(broker::Nanos now) const { return !sent_any_ || now - last_ >= interval_; }
  /// Whether `line` should be sent at `now`: due and different from the last one sent. When
  /// true, it counts as sent.
  bool take(broker::Nanos now, const std::string& line) {
    if (!due(now) || (sent_any_ && line == last_line_)) return false;
    sent_any_ = true;
    last_ = now;
    last_line_ = line;
    return true;
  }
  /// Records a line sent outside take() (READY=1's).
  void sent(broker::Nanos now, const std::string& line) {
    sent_any_ = true;
    last_ = now;
    last_line_ = line;
  }

 private:
  broker::Nanos interval_;
  broker::Nanos last_ = 0;
  bool sent_any_ = false;
  std::string last_line_;
};

/// The service manager's notification socket ($NOTIFY_SOCKET): READY=1 once colocd serves,
/// STATUS= lines on changes (at most one a second), STOPPING=1 when it stops. Every call is a
/// no-op without $NOTIFY_SOCKET. A failed send is logged once and otherwise ignored: readiness
/// is the service manager's business, never a reason to stop serving.
class Notifier {
 public:
  Notifier();
  /// Whether $NOTIFY_SOCKET is set (systemd started colocd with Type=notify).
  bool enabled() const { return enabled_; }
  /// READY=1 with STATUS=`status`.
  void ready(broker::Nanos now, const std::string& status);
  /// Whether a status line would go out now (so the caller builds one only then).
  bool status_due(broker::Nanos now) const { return enabled_ && throttle_.due(now); }
  /// STATUS=`status` if it changed and a line is due (StatusThrottle).
  void status(broker::Nanos now, const std::string& status);
  /// STOPPING=1 with STATUS=`status`.
  void stopping(const std::string& status);
  /// STATUS=`status` now, unthrottled (a failed start, before exiting).
  void final_status(const std::string& status);

 private:
  void send(const std::string& text);
  bool enabled_ = false;
  bool warned_ = false;
  StatusThrottle throttle_;
};

}  // namespace coloc::engine::systemd
