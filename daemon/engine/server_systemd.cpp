// colocd and the service manager (engine/systemd.h): the STATUS= line `systemctl status colocd`
// shows, sent at READY=1 and then on changes, at most once a second.
#include "engine/server.h"

#include <fmt/format.h>

#include <algorithm>

namespace coloc::engine {

std::string Server::service_status() {
  size_t devices = broker_.devices().size();
  if (memory_reader_)  // a GPU node serves its devices before any job brings them to the books
    if (auto d = memory_reader_->devices()) devices = std::max(devices, d->size());
  const size_t jobs = broker_.jobs().size();
  std::string s = fmt::format("serving {} device{}, {} job{}", devices, devices == 1 ? "" : "s", jobs,
                              jobs == 1 ? "" : "s");
  if (broker_.holding())
    if (size_t n = resume_.expected(); n > 0)
      s += fmt::format("; restart: waiting for {} process{} to re-register", n, n == 1 ? "" : "es");
  return s;
}

void Server::notify_tick(Nanos t) {
  if (notifier_.status_due(t)) notifier_.status(t, service_status());
}

}  // namespace coloc::engine
