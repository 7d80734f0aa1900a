#include "engine/systemd.h"

#include <fcntl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "engine/listener.h"
#include "util/log.h"

namespace coloc::engine::systemd {

Result<UniqueFd> take_listen_socket(std::string* note) {
  const char* fds = std::getenv("LISTEN_FDS");
  const char* pid = std::getenv("LISTEN_PID");
  if (fds && pid && std::strtol(pid, nullptr, 10) != long(::getpid()) && note)
    *note = std::string("LISTEN_FDS is set for pid ") + pid + ", not this one (" + std::to_string(::getpid()) +
            "): ignored, colocd binds its own socket";
  // Checks LISTEN_PID, sets close-on-exec on the descriptors, and (1) removes the variables.
  const int n = ::sd_listen_fds(1);
  if (n < 0) return Error{-n, "LISTEN_FDS/LISTEN_PID from the service manager are malformed"};
  if (n == 0) return UniqueFd();
  if (n > 1) {
    for (int i = 1; i < n; ++i) ::close(SD_LISTEN_FDS_START + i);
    return Error{EINVAL, "the service manager passed " + std::to_string(n) +
                             " sockets (LISTEN_FDS); colocd takes exactly one: give colocd.socket a single "
                             "ListenSequentialPacket= line"};
  }
  UniqueFd fd(SD_LISTEN_FDS_START);
  if (auto r = check_listen_socket(fd.get()); !r)
    return Error{r.error().err, "the socket passed by the service manager (LISTEN_FDS, fd 3) " + r.error().what};
  return fd;
}

Notifier::Notifier() {
  const char* s = std::getenv("NOTIFY_SOCKET");
  enabled_ = s && *s;
}

void Notifier::send(const std::string& text) {
  if (!enabled_) return;
  const int r = ::sd_notify(0, text.c_str());
  if (r < 0 && !warned_) {
    warned_ = true;
    log::get("engine")->warn("cannot notify the service manager ($NOTIFY_SOCKET): {} (told once)", std::strerror(-r));
  }
}

void Notifier::ready(broker::Nanos now, const std::string& status) {
  if (!enabled_) return;
  send("READY=1\nSTATUS=" + status);
  throttle_.sent(now, status);
}

void Notifier::status(broker::Nanos now, const std::string& status) {
  if (enabled_ && throttle_.take(now, status)) send("STATUS=" + status);
}

void Notifier::stopping(const std::string& status) { send("STOPPING=1\nSTATUS=" + status); }

void Notifier::final_status(const std::string& status) { send("STATUS=" + status); }

}  // namespace coloc::engine::systemd
