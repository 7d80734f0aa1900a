// daemon/engine/server_estimate.cpp — the engine's side of estimation (issue 12): a job's run
// history at its admission and at its end, and its online prediction on the sampling timer.
//
// Precedence of a job's reservation on a device: its declared limit (`--mem`), then its history
// (applied at Attach, before the job allocates anything), then its declared estimate (Register
// v10: COLOC_MEM_ESTIMATE, `coloc run --estimate-from`; also at Attach), then its own online
// prediction (raised on the sampling timer once stable). A stable prediction above a history or
// declared estimate raises it too (that run needs more than they say); nothing but `--mem` caps
// it, and nothing lowers a reservation while the job runs. The broker keeps the source
// (JobDevice::source); a restart keeps history, estimate and online reservations alike.
#include <algorithm>
#include <cstdint>

#include "engine/server.h"
#include "history/history_store.h"
#include "util/clock.h"
#include "util/log.h"

namespace coloc::engine {

namespace {

/// One process's prediction on one slot, read under the page's seqlock (pages.h EstimateStats);
/// nullopt while the client writes it (read again next time) or when it reports nothing.
struct Read {
  uint16_t state = 0;
  uint16_t confidence = 0;
  uint64_t peak = 0, period = 0, since = 0;
};
std::optional<Read> read_estimate(const pages::StatsPage& page, uint32_t slot) {
  const pages::EstimateStats& e = page.est[slot];
  const uint32_t q1 = e.seq.load(std::memory_order_acquire);
  if (q1 == 0 || (q1 & 1u)) return std::nullopt;
  Read r;
  r.state = e.state.load(std::memory_order_relaxed);
  r.confidence = e.confidence.load(std::memory_order_relaxed);
  r.peak = e.predicted_peak.load(std::memory_order_relaxed);
  r.period = e.period_ns.load(std::memory_order_relaxed);
  r.since = e.stable_since_ns.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.seq.load(std::memory_order_relaxed) != q1) return std::nullopt;
  if (r.state > 3) return std::nullopt;  // untrusted: a value no client writes
  r.confidence = std::min<uint16_t>(r.confidence, 1000);
  return r;
}

const char* state_word(uint16_t s) {
  switch (s) {
    case 1: return "stable";
    case 2: return "changing";
    case 3: return "none";
    default: return "learning";
  }
}

const char* kept_word(broker::ReservationChange::Outcome o) {
  switch (o) {
    case broker::ReservationChange::kKeptNoRoom: return "kept: does not fit now";
    case broker::ReservationChange::kKeptUserCap: return "kept: over the user's cap";
    case broker::ReservationChange::kKeptOthersWait: return "kept: other jobs wait for memory there";
    default: return "";
  }
}

}  // namespace

void Server::note_fingerprint(const broker::Job& job, const proto::RegisterMsg& r, uint16_t version,
                              const std::string& command) {
  // Only a v9 client hashes its environment: an older one's job gets no history (its footprint
  // could depend on variables we cannot see).
  if (version < 9 || !(r.flags & proto::kRegEnvHash)) return;
  JobPrint p;
  p.uid = job.key.uid;
  p.command_hash = r.cmdline_hash;
  p.env_hash = r.env_hash;
  p.command = command;
  prints_.emplace(job.serial, std::move(p));
}

Server::HistoryFootprint Server::history_footprint(broker::JobSerial job, const broker::Uuid& uuid,
                                                   broker::Bytes capacity) {
  auto it = prints_.find(job);
  if (it == prints_.end()) return {};
  std::string model;
  if (memory_reader_)
    if (auto m = memory_reader_->model(uuid)) model = *m;
  // A driver that cannot name the model: its capacity stands for it (a rerun on the same kind
  // of device still matches; a different kind with the same capacity is close enough).
  if (model.empty()) model = "capacity " + std::to_string(capacity);
  it->second.models[uuid] = model;
  if (!history_) return {};
  auto known = history_->lookup({it->second.uid, it->second.command_hash, it->second.env_hash, model});
  if (!known) return {};
  log::limited(log::get("engine"), spdlog::level::info, "history uid " + std::to_string(it->second.uid),
               "job {}: its history ({} runs, p95 {} MiB) says {} MiB on {}", it->first, known->runs,
               known->p95 >> 20, known->estimate >> 20, uuid.str());
  return {known->estimate, Nanos(known->run_ms) * 1'000'000};
}

void Server::estimate_sample(Nanos t) {
  for (auto it = pending_restores_.begin(); it != pending_restores_.end();) {
    auto job = broker_.jobs().find(it->first);
    if (job == broker_.jobs().end()) {
      it = pending_restores_.erase(it);
      continue;
    }
    it->second = restore_now(job->second, std::move(it->second));
    it = it->second.empty() ? pending_restores_.erase(it) : std::next(it);
  }
  std::vector<std::tuple<broker::JobSerial, uint32_t, broker::Bytes>> predictions;
  for (const auto& [serial, job] : broker_.jobs()) {
    for (const auto& [dev, jd] : job.devices) {
      if (!jd.admitted) continue;
      broker::Bytes sum = 0;
      bool all = true, any = false;
      for (broker::ClientId id : job.clients) {
        const broker::Client* c = broker_.find_client(id);
        auto conn = by_client_.find(id);
        if (!c || conn == by_client_.end()) continue;
        for (uint32_t s = 0; s < pages::kSlots; ++s) {
          if (!c->slots[s].attached || c->slots[s].device != dev) continue;
          any = true;
          std::optional<Read> r;
          if (pages::layout_for_protocol(conn->second->version) >= pages::kEstimateLayout) r = read_estimate(*c->stats, s);
          // Only a stable prediction counts (a client's own word that it found its period): a
          // number kept from an earlier phase, or any number beside "none", does not.
          if (!r || r->peak == 0 || r->state != 1) {
            all = false;
            continue;
          }
          sum = std::min(sum + std::min(r->peak, broker_.devices()[dev].capacity), broker_.devices()[dev].capacity);
        }
      }
      // Only the whole job's prediction: a process without one would make the sum too low. Given
      // again while it is above the reservation (one kept for want of room is raised once the
      // room is there; whether it may raise it at all is the broker's rule).
      if (any && all && sum > 0 && (sum != jd.predicted || jd.reserved < sum))
        predictions.emplace_back(serial, dev, sum);
    }
  }
  for (auto [serial, dev, bytes] : predictions) {
    broker::ReservationChange ch;
    if (!broker_.set_prediction(serial, dev, bytes, t, &ch)) continue;
    const auto key = std::make_pair(serial, dev);
    if (*kept_word(ch.outcome)) {
      auto prev = kept_.find(key);
      if (prev == kept_.end() || prev->second.outcome != ch.outcome)
        log::limited(log::get("engine"), spdlog::level::info, "prediction kept",
                     "job serial {}: its online prediction ({} MiB) does not raise its reservation on {} ({}; {} MiB "
                     "available); it grows by ordinary grants",
                     serial, ch.wanted >> 20, broker_.devices()[dev].uuid.str(), kept_word(ch.outcome),
                     ch.available >> 20);
      kept_[key] = ch;
    }
  }
}

void Server::fill_prediction(const broker::Job& job, uint32_t dev, report::DeviceSample& ds) const {
  auto jit = job.devices.find(dev);
  if (jit == job.devices.end()) return;
  ds.reservation_source = broker::footprint_name(jit->second.source);
  if (auto p = prints_.find(job.serial); p != prints_.end())
    if (auto m = p->second.models.find(broker_.devices()[dev].uuid); m != p->second.models.end())
      ds.fingerprint = history::Fingerprint{p->second.uid, p->second.command_hash, p->second.env_hash, m->second}.id();
  if (auto k = kept_.find({job.serial, dev}); k != kept_.end()) {
    ds.kept_outcome = kept_word(k->second.outcome);
    ds.kept_wanted = k->second.wanted;
    ds.kept_available = k->second.available;
  }
  report::PredictionSample& p = ds.prediction;
  uint16_t worst = 1;  // stable unless a process says otherwise
  bool any = false;
  uint32_t confidence = 1000;
  for (broker::ClientId id : job.clients) {
    const broker::Client* c = broker_.find_client(id);
    auto conn = by_client_.find(id);
    if (!c || conn == by_client_.end()) continue;
    if (pages::layout_for_protocol(conn->second->version) < pages::kEstimateLayout) continue;
    for (uint32_t s = 0; s < pages::kSlots; ++s) {
      if (!c->slots[s].attached || c->slots[s].device != dev) continue;
      auto r = read_estimate(*c->stats, s);
      if (!r) continue;
      any = true;
      if (r->state == 1) p.peak += std::min(r->peak, ds.capacity ? ds.capacity : r->peak);  // stable ones only
      p.period = std::max<Nanos>(p.period, r->period);
      confidence = std::min<uint32_t>(confidence, r->confidence);
      if (r->state != 1 && (worst == 1 || r->state == 0)) worst = r->state;
      // The client's CLOCK_MONOTONIC is ours (one machine); a stamp from the future is ignored.
      if (r->state == 1 && r->since > 0 && r->since <= uint64_t(now()))
        p.stable_since = p.stable_since ? std::max<Nanos>(*p.stable_since, Nanos(r->since)) : Nanos(r->since);
    }
  }
  if (!any) return;
  p.state = state_word(worst);
  p.confidence = confidence;
  if (worst != 1) p.stable_since.reset();
}

void Server::record_history(broker::JobSerial serial) {
  pending_restores_.erase(serial);
  for (auto it = kept_.begin(); it != kept_.end();) it = it->first.first == serial ? kept_.erase(it) : std::next(it);
  auto pit = prints_.find(serial);
  if (pit == prints_.end()) return;
  JobPrint print = std::move(pit->second);
  prints_.erase(pit);
  auto rec = recorders_.find(serial);
  if (!history_ || rec == recorders_.end() || print.models.empty()) return;
  const report::JobRecorder::RunSummary run = rec->second.run_summary(now());
  // One record per device model: the job's peak on its devices of that model (the largest).
  std::map<std::string, broker::Bytes> peaks;
  for (const auto& [uuid, model] : print.models)
    if (auto p = run.peaks.find(uuid); p != run.peaks.end()) peaks[model] = std::max(peaks[model], p->second);
  for (const auto& [model, peak] : peaks) {
    if (peak == 0) continue;
    history::RunRecord r;
    r.fp = {print.uid, print.command_hash, print.env_hash, model};
    r.command = print.command;
    r.ended_wall_ms = wall_ms();
    r.duration_ms = uint64_t(run.admitted_for / 1'000'000);
    r.exit_status = run.exit_status;
    r.end = run.cancelled    ? history::RunEnd::kCancelled
            : run.killed     ? history::RunEnd::kKilled
            : run.oom_limit  ? history::RunEnd::kOomLimit
            : run.oom        ? history::RunEnd::kOomDevice
                             : history::RunEnd::kClean;
    r.peak = peak;
    history_->record(std::move(r));
  }
}

}  // namespace coloc::engine

namespace coloc::engine {

namespace {
std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
std::optional<uint64_t> parse_hex64(const nlohmann::json& j) {
  if (!j.is_string() || j.get<std::string>().size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : j.get<std::string>()) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | uint64_t(d);
  }
  return v;
}
}  // namespace

nlohmann::json Server::estimate_state(const broker::Job& job) const {
  nlohmann::json out = nlohmann::json::object();
  if (auto p = prints_.find(job.serial); p != prints_.end()) {
    nlohmann::json models = nlohmann::json::object();
    for (const auto& [uuid, model] : p->second.models) models[uuid.str()] = model;
    out["fingerprint"] = {{"command_hash", hex64(p->second.command_hash)},
                          {"env_hash", hex64(p->second.env_hash)},
                          {"command", p->second.command},
                          {"models", models}};
  }
  nlohmann::json res = nlohmann::json::array();
  for (const auto& [dev, jd] : job.devices)
    if (jd.admitted && (jd.source == broker::Footprint::kHistory || jd.source == broker::Footprint::kEstimate ||
                        jd.source == broker::Footprint::kOnline))
      res.push_back({{"uuid", broker_.devices()[dev].uuid.str()},
                     {"bytes", jd.reserved},
                     {"source", broker::footprint_name(jd.source)}});
  if (!res.empty()) out["reservations"] = res;
  // The queue's state (issue 28): expected ends and backfills, and the promise a device made to
  // the head of its queue, in Unix ms (a monotonic time means nothing after a reboot).
  const Nanos t = now();
  const int64_t wall = wall_ms();
  auto unix_ms = [&](Nanos at) { return wall + (at >= t ? int64_t((at - t) / 1'000'000) : -int64_t((t - at) / 1'000'000)); };
  nlohmann::json queue = nlohmann::json::array();
  for (const auto& [dev, jd] : job.devices) {
    if (!jd.admitted || (jd.expected_end == broker::kNever && !jd.backfilled)) continue;
    nlohmann::json q{{"uuid", broker_.devices()[dev].uuid.str()},
                     {"expected_end_unix_ms", jd.expected_end == broker::kNever ? nlohmann::json() : nlohmann::json(unix_ms(jd.expected_end))},
                     {"backfilled", jd.backfilled}};
    if (jd.backfilled)
      if (auto p = broker_.promise_of(dev))
        q["promise"] = {{"uid", p->first.uid}, {"job", p->first.id}, {"shadow_unix_ms", unix_ms(p->second)}};
    queue.push_back(std::move(q));
  }
  if (!queue.empty()) out["queue"] = queue;
  return out.empty() ? nlohmann::json() : out;
}

void Server::restore_estimate(const broker::Job& job, const nlohmann::json& state, Nanos t) {
  if (state.contains("queue") && state["queue"].is_array()) {
    const int64_t wall = wall_ms();
    // (A time more than a year away is no time colocd wrote: clamped, so nothing overflows.)
    constexpr int64_t kYearMs = 366LL * 86'400'000;
    auto mono = [&](int64_t unix_ms) {
      const int64_t d = std::clamp<int64_t>(unix_ms - std::clamp<int64_t>(wall, -kYearMs * 100, kYearMs * 100), -kYearMs, kYearMs);
      return d >= 0 ? t + Nanos(d) * 1'000'000 : t - std::min<Nanos>(t, Nanos(-d) * 1'000'000);
    };
    size_t n = 0;
    for (const nlohmann::json& q : state["queue"]) {
      if (++n > proto::kMaxDevices) break;
      broker::Uuid u;
      if (!q.is_object() || !q.contains("uuid") || !q["uuid"].is_string() || !broker::Uuid::parse(q["uuid"].get<std::string>(), &u))
        continue;
      uint32_t dev = 0;
      while (dev < broker_.devices().size() && !(broker_.devices()[dev].uuid == u)) ++dev;
      if (dev == broker_.devices().size()) continue;
      const nlohmann::json end = q.contains("expected_end_unix_ms") ? q["expected_end_unix_ms"] : nlohmann::json();
      const Nanos expected = end.is_number_integer() && !end.is_number_unsigned() ? mono(end.get<int64_t>())
                             : end.is_number_unsigned() && end.get<uint64_t>() < uint64_t(INT64_MAX) ? mono(int64_t(end.get<uint64_t>()))
                                                                                                     : broker::kNever;
      const bool backfilled = q.contains("backfilled") && q["backfilled"].is_boolean() && q["backfilled"].get<bool>();
      broker_.restore_queue_state(job.serial, dev, expected, backfilled);
      if (q.contains("promise") && q["promise"].is_object()) {
        const nlohmann::json& p = q["promise"];
        if (p.contains("uid") && p["uid"].is_number_unsigned() && p["uid"].get<uint64_t>() <= UINT32_MAX &&
            p.contains("job") && p["job"].is_string() && p.contains("shadow_unix_ms") &&
            p["shadow_unix_ms"].is_number_integer() && p["shadow_unix_ms"].get<double>() < 9e18)
          broker_.restore_promise(dev, broker::JobKey{uint32_t(p["uid"].get<uint64_t>()), p["job"].get<std::string>()},
                                  mono(p["shadow_unix_ms"].get<int64_t>()));
      }
    }
  }
  // The saved state is colocd's own file, but read it as carefully as any input.
  if (state.contains("fingerprint") && state["fingerprint"].is_object() && !prints_.count(job.serial)) {
    const nlohmann::json& f = state["fingerprint"];
    auto cmd = parse_hex64(f.value("command_hash", nlohmann::json()));
    auto env = parse_hex64(f.value("env_hash", nlohmann::json()));
    if (cmd && env && f.contains("command") && f["command"].is_string()) {
      JobPrint p;
      p.uid = job.key.uid;
      p.command_hash = *cmd;
      p.env_hash = *env;
      p.command = f["command"].get<std::string>();
      if (f.contains("models") && f["models"].is_object())
        for (auto it = f["models"].begin(); it != f["models"].end() && p.models.size() < proto::kMaxDevices; ++it)
          if (broker::Uuid u; broker::Uuid::parse(it.key(), &u) && it.value().is_string())
            p.models[u] = it.value().get<std::string>().substr(0, 256);
      prints_[job.serial] = std::move(p);
    }
  }
  if (!state.contains("reservations") || !state["reservations"].is_array()) return;
  std::vector<PendingRestore> pending;
  for (const nlohmann::json& r : state["reservations"]) {
    if (pending.size() >= proto::kMaxDevices) break;
    if (!r.is_object() || !r.contains("uuid") || !r["uuid"].is_string() || !r.contains("bytes") ||
        !r["bytes"].is_number_unsigned())
      continue;
    PendingRestore p;
    if (!broker::Uuid::parse(r["uuid"].get<std::string>(), &p.uuid)) continue;
    const std::string src = r.value("source", "");
    p.source = src == "history"    ? broker::Footprint::kHistory
               : src == "estimate" ? broker::Footprint::kEstimate
               : src == "online"   ? broker::Footprint::kOnline
                                   : broker::Footprint::kNone;
    if (p.source == broker::Footprint::kNone) continue;
    p.bytes = r["bytes"].get<uint64_t>();
    pending.push_back(p);
  }
  // The process that brought the saved state back may be the job's anchor, attached nowhere:
  // what cannot be restored yet waits for the job's processes (estimate_sample).
  pending = restore_now(job, std::move(pending));
  if (!pending.empty()) pending_restores_[job.serial] = std::move(pending);
}

std::vector<Server::PendingRestore> Server::restore_now(const broker::Job& job, std::vector<PendingRestore> pending) {
  std::vector<PendingRestore> left;
  for (const PendingRestore& p : pending) {
    bool done = false;
    for (uint32_t dev = 0; dev < broker_.devices().size() && !done; ++dev) {
      if (!(broker_.devices()[dev].uuid == p.uuid)) continue;
      broker::ReservationChange ch;
      done = broker_.restore_reservation(job.serial, dev, p.bytes, p.source, &ch);
      if (done && ch.outcome == broker::ReservationChange::kRaised)
        log::get("engine")->info("job {}: reservation on {} back to {} MiB from its {} (before the restart)",
                                 job.key.str(), p.uuid.str(), ch.after >> 20, broker::footprint_name(p.source));
    }
    if (!done) left.push_back(p);
  }
  return left;
}

}  // namespace coloc::engine
