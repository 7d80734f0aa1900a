// The engine's side of /metrics (metrics/exporter.h): the listener at start, the snapshots the
// exporter asks for, and the grant round trip.
#include <arpa/inet.h>
#include <netinet/in.h>

#include "engine/server.h"
#include "util/log.h"

namespace coloc::engine {

Result<void> Server::open_metrics(const std::string& listen) {
  if (listen.empty()) return {};  // off (the default): nothing listens
  auto e = metrics::Exporter::start(listen);
  if (!e) return e.error();
  std::unique_ptr<metrics::Exporter> fresh = std::move(e.value());
  // A scrape asked for a snapshot newer than the latest (at most one per 250 ms, however many
  // scrape): built here, on the loop's thread, from what status shows; the exporter's thread
  // renders and serves it.
  auto r = loop_->add(fresh->wanted_fd(), EPOLLIN, [this](uint32_t) {
    if (exporter_ && exporter_->take_wanted()) publish_metrics();
  });
  if (!r) return r.error();
  exporter_ = std::move(fresh);
  exporter_token_ = r.value();
  info_.metrics = exporter_->address();
  log::get("engine")->info("serving Prometheus metrics on http://{}/metrics", exporter_->address());
  return {};
}

void Server::close_metrics() {
  if (!exporter_) return;
  loop_->remove(exporter_token_);
  exporter_token_ = 0;
  const std::string was = exporter_->address();
  exporter_.reset();
  info_.metrics.clear();
  log::get("engine")->info("stopped serving Prometheus metrics on http://{}/metrics", was);
}

namespace {

/// True when `listen`'s host is an IPv4 or (bracketed) IPv6 address: binding it resolves nothing.
bool numeric_host(const std::string& listen) {
  auto hp = config::parse_host_port(listen, "metrics_listen");  // (the config's own grammar)
  if (!hp) return false;
  const std::string& host = hp.value().first;
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

bool Server::switch_metrics(const std::string& from, const std::string& to) {
  auto lg = log::get("engine");
  // A host name would be resolved on the loop (getaddrinfo can wait seconds on DNS): only an
  // address changes live; a name is taken at start.
  if (!to.empty() && !numeric_host(to)) {
    lg->error("SIGHUP: metrics_listen '{}': a host name needs a restart (resolving it would stall colocd); keeping '{}'",
              to, from);
    return false;
  }
  // The old listener closes first: the new address may be the same port on another host address
  // (127.0.0.1:9479 -> 0.0.0.0:9479), which could not be bound beside it.
  close_metrics();
  auto r = open_metrics(to);
  if (r) return true;
  lg->error("SIGHUP: metrics_listen: cannot serve '{}': {}; keeping '{}'", to, r.error().message(), from);
  if (from.empty()) return false;
  if (!numeric_host(from)) {
    lg->error("SIGHUP: metrics_listen: '{}' is a host name, not bound again here; /metrics is off until a reload "
              "or restart binds it", from);
    return false;
  }
  if (auto back = open_metrics(from); !back)
    lg->error("SIGHUP: metrics_listen: cannot serve '{}' again either: {}; /metrics is off until a reload binds it",
              from, back.error().message());
  return false;
}

void Server::publish_metrics() {
  const Nanos t = now();
  auto s = std::make_shared<metrics::Snapshot>();
  s->status = admin_->status(t);  // the very document `coloc status --json` shows
  for (const auto& [serial, rec] : recorders_) {
    if (rec.finished()) continue;  // ended: its series are gone
    auto& job = s->jobs[rec.key().str()];
    for (const auto& [uuid, tot] : rec.totals(t)) {
      metrics::JobDeviceTotals& m = job[uuid.str()];
      auto gate = [&](pages::GateState g) { return double(tot.gate_wait_ns[uint32_t(g)]) / 1e9; };
      m.wait_seconds = {double(tot.wait_memory) / 1e9, double(tot.wait_admission) / 1e9,
                        gate(pages::GateState::kTimeslice), gate(pages::GateState::kWindow),
                        gate(pages::GateState::kPaused)};
      m.gpu_seconds = double(tot.busy_ns) / 1e9;
    }
  }
  s->counters = metrics_.values();
  s->build_seconds = double(now() - t) / 1e9;
  exporter_->publish(std::move(s));
}

void Server::note_request(broker::ClientId client, uint32_t seq, metrics::Request kind, Nanos received) {
  if (rtt_pending_.size() < 4096) rtt_pending_.push_back({client, seq, kind, received});
}

void Server::note_answer(const broker::Reply& r) {
  for (size_t i = 0; i < rtt_pending_.size(); ++i) {
    const PendingAnswer& p = rtt_pending_[i];
    if (p.client != r.client || p.seq != r.seq) continue;
    const Nanos t = now();
    metrics_.observe(p.kind, t > p.received ? t - p.received : 0);
    rtt_pending_[i] = rtt_pending_.back();
    rtt_pending_.pop_back();
    return;
  }
}

}  // namespace coloc::engine
