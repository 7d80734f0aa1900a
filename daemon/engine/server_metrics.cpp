// The engine's side of /metrics (metrics/exporter.h): the listener at start, the snapshots the
// exporter asks for, and the grant round trip.
#include "engine/server.h"
#include "util/log.h"

namespace coloc::engine {

Result<void> Server::open_metrics() {
  if (cfg_.metrics_listen.empty()) return {};  // off (the default): nothing listens
  auto e = metrics::Exporter::start(cfg_.metrics_listen);
  if (!e) return e.error();
  exporter_ = std::move(e.value());
  info_.metrics = exporter_->address();
  // A scrape asked for a snapshot newer than the latest (at most one per 250 ms, however many
  // scrape): built here, on the loop's thread, from what status shows; the exporter's thread
  // renders and serves it.
  auto r = loop_->add(exporter_->wanted_fd(), EPOLLIN, [this](uint32_t) {
    if (exporter_->take_wanted()) publish_metrics();
  });
  if (!r) return r.error();
  log::get("engine")->info("serving Prometheus metrics on http://{}/metrics", exporter_->address());
  return {};
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
