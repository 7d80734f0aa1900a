#include "report/job_recorder.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

#include "coloc/protocol.h"

namespace coloc::report {

using nlohmann::json;

Counters& Counters::operator+=(const Counters& o) {
  allocs += o.allocs;
  frees += o.frees;
  failures += o.failures;
  launches += o.launches;
  wait_memory_ns += o.wait_memory_ns;
  wait_admission_ns += o.wait_admission_ns;
  for (uint32_t i = 0; i < pages::kGateStates; ++i) {
    gate_wait_ns[i] += o.gate_wait_ns[i];
    gate_waits[i] += o.gate_waits[i];
  }
  busy_ns += o.busy_ns;
  window_launches += o.window_launches;
  window_waits += o.window_waits;
  return *this;
}

Counters counters_of(const pages::StatsPage& page, uint32_t slot, bool gated) {
  const pages::StatsSlot& st = page.slots[slot];
  Counters k;
  k.allocs = st.allocs.load(std::memory_order_relaxed);
  k.frees = st.frees.load(std::memory_order_relaxed);
  k.failures = st.failures.load(std::memory_order_relaxed);
  k.launches = st.launches.load(std::memory_order_relaxed);
  k.wait_memory_ns = st.wait_memory_ns.load(std::memory_order_relaxed);
  k.wait_admission_ns = st.wait_admission_ns.load(std::memory_order_relaxed);
  if (gated) {
    for (uint32_t i = 1; i < pages::kGateStates; ++i) {
      k.gate_wait_ns[i] = page.gates[slot].wait_ns[i].load(std::memory_order_relaxed);
      k.gate_waits[i] = page.gates[slot].waits[i].load(std::memory_order_relaxed);
    }
    // (Zero on a layout-4 page: its client does not know these words.)
    const pages::TrackStats& tr = page.track[slot];
    k.busy_ns = tr.busy_ns.load(std::memory_order_relaxed);
    k.window_launches = tr.launches.load(std::memory_order_relaxed);
    k.window_waits = tr.window_waits.load(std::memory_order_relaxed);
  }
  return k;
}

std::string iso8601_utc(int64_t unix_ms) {
  time_t secs = time_t(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(unix_ms % 1000));
  return buf;
}

JobRecorder::JobRecorder(broker::JobSerial serial, broker::JobKey key, std::string user, std::string command,
                         uint64_t cmdline_hash, std::string priority, Nanos mono_start, int64_t wall_start_ms)
    : serial_(serial),
      key_(std::move(key)),
      user_(std::move(user)),
      command_(std::move(command)),
      cmdline_hash_(cmdline_hash),
      priority_(std::move(priority)),
      mono_start_(mono_start),
      wall_start_ms_(wall_start_ms) {}

JobRecorder::Device& JobRecorder::device(const broker::Uuid& u) { return devices_[u]; }

JobRecorder::Wait* JobRecorder::pending_wait(Device& d, bool admission) {
  for (Wait& w : d.waits)
    if (!w.end && w.pending_since && w.admission == admission) return &w;
  return nullptr;
}

void JobRecorder::set_limit(Bytes limit) {
  if (limit == job_limit_) return;
  job_limit_ = limit;
  ++revision_;
}

void JobRecorder::set_capacity(const broker::Uuid& u, Bytes capacity) {
  Device& d = device(u);
  if (d.sampled || capacity == 0 || d.capacity == capacity) return;
  d.capacity = capacity;
  ++revision_;
}

void JobRecorder::on_event(const broker::Event& e) {
  using K = broker::Event::Kind;
  ++revision_;
  switch (e.kind) {
    case K::kAdmitted: {
      Device& d = device(e.device);
      if (!d.admitted_at) d.admitted_at = e.at;
      if (Wait* w = pending_wait(d, true)) {  // a wait from before a restart, granted at once after it
        w->end = std::max(e.at, w->start);
        w->outcome = broker::Reason::kNone;
        w->pending_since.reset();
        w->resumed = true;
      }
      break;
    }
    case K::kWaitBegin: {
      Device& d = device(e.device);
      if (Wait* w = pending_wait(d, e.admission)) {  // the same wait, back after a restart: one row
        w->pending_since.reset();
        w->resumed = true;
        break;
      }
      if (d.waits.size() >= kMaxListed) {
        // Bounded: drop the oldest closed wait, keeping its time in the sums.
        auto closed = std::find_if(d.waits.begin(), d.waits.end(), [](const Wait& w) { return w.end.has_value(); });
        if (closed == d.waits.end()) {
          ++d.waits_omitted;  // all open: this one is not listed (the clients still count its time)
          break;
        }
        (closed->admission ? d.omitted_wait_admission_ns : d.omitted_wait_memory_ns) += *closed->end - closed->start;
        ++d.waits_omitted;
        d.waits.erase(closed);
      }
      d.waits.push_back({e.admission, e.at, std::nullopt, broker::Reason::kNone, false, false, std::nullopt});
      break;
    }
    case K::kWaitEnd: {
      // Close the oldest open wait of the same kind on the device (one whose request is back
      // after a restart before one still pending).
      Device& d = device(e.device);
      Wait* open = nullptr;
      for (Wait& w : d.waits)
        if (!w.end && w.admission == e.admission && !w.pending_since) {
          open = &w;
          break;
        }
      if (!open) open = pending_wait(d, e.admission);
      if (open) {
        open->end = std::max(e.at, open->start);
        open->outcome = e.reason;
        if (open->pending_since) open->resumed = true;
        open->pending_since.reset();
      }
      break;
    }
    case K::kRefused: {
      Device& d = device(e.device);
      if (Wait* w = pending_wait(d, e.admission)) {  // a wait from before a restart, refused at once after it
        w->end = std::max(e.at, w->start);
        w->outcome = e.reason;
        w->pending_since.reset();
        w->resumed = true;
      }
      if (d.ooms.size() >= kMaxListed) {
        d.ooms.erase(d.ooms.begin());
        ++d.ooms_omitted;
      }
      d.ooms.push_back({e.at, e.reason, e.admission, e.bytes, e.in_use});
      break;
    }
    case K::kDriverOom:
      ++device(e.device).driver_ooms;
      break;
    case K::kJobStarted:
    case K::kJobEnded:
      break;
  }
}

void JobRecorder::sample(const broker::Uuid& u, Nanos now, const DeviceSample& s) {
  Device& d = device(u);
  const size_t stored = d.timeline.stored();
  const Bytes peak = d.peak;
  const Bytes overhead = d.driver_overhead;
  const Counters live = d.live;
  if (!d.sampled) ++revision_;
  d.sampled = true;
  d.capacity = s.capacity;
  d.limit = s.limit;
  d.reservation = std::max(d.reservation, s.reservation);
  d.peak = std::max({d.peak, s.in_use, s.peak_hint});
  d.driver_overhead = std::max(d.driver_overhead, s.driver_overhead);
  d.live = s.live;
  const Bytes predicted = d.predicted_peak;
  const std::string state = d.prediction_state, source = d.reservation_source;
  d.predicted_peak = std::max(d.predicted_peak, s.prediction.peak);
  if (!s.prediction.state.empty()) {
    d.prediction_state = s.prediction.state;
    d.confidence = s.prediction.confidence;
    if (s.prediction.period) d.period = s.prediction.period;  // the last stable phase's
    if (!d.stable_at && s.prediction.stable_since) d.stable_at = rel(*s.prediction.stable_since);
  }
  d.reservation_source = s.reservation_source;
  if (!s.fingerprint.empty()) d.fingerprint = s.fingerprint;
  if (!s.kept_outcome.empty()) {
    d.kept_outcome = s.kept_outcome;
    d.kept_wanted = s.kept_wanted;
    d.kept_available = s.kept_available;
  }
  if (predicted != d.predicted_peak || state != d.prediction_state || source != d.reservation_source) ++revision_;
  d.timeline.add(rel(now), s.in_use);
  if (stored != d.timeline.stored() || peak != d.peak || overhead != d.driver_overhead || !(live == d.live)) ++revision_;
}

JobRecorder::RunSummary JobRecorder::run_summary(Nanos now) const {
  RunSummary r;
  r.duration = rel(now);
  if (command_status_) {
    r.exit_status = *command_status_;
    r.killed = *command_status_ > 128 && *command_status_ <= 128 + 64;  // coloc run: 128 + the signal
  } else if (!processes_.empty()) {
    r.exit_status = processes_.front().exit_code;
    r.killed = processes_.front().signal.has_value();
  }
  std::optional<Nanos> first;
  for (const auto& [uuid, d] : devices_)
    if (d.admitted_at) first = first ? std::min(*first, *d.admitted_at) : *d.admitted_at;
  if (first && *first <= now) r.admitted_for = now - *first;
  bool own = false, device = false;
  for (const auto& [uuid, d] : devices_) {
    Counters c = d.folded;
    c += d.live;
    // A wait cancelled (its process's signal, or `coloc cancel`) is no out-of-memory error.
    bool refused = false;
    for (const Oom& o : d.ooms) {
      if (o.reason == broker::Reason::kCancelled || o.reason == broker::Reason::kJobCancelled) continue;
      refused = true;
      (o.reason == broker::Reason::kOwnLimit || o.reason == broker::Reason::kUserCap ? own : device) = true;
    }
    r.oom |= refused || d.driver_ooms > 0 || c.failures > 0;
    device |= d.driver_ooms > 0;
    own |= c.failures > 0 && !refused && d.driver_ooms == 0;
    if (d.sampled) r.peaks[uuid] = d.peak;
  }
  r.oom_limit = r.oom && own && !device;
  r.cancelled = cancelled_.has_value();
  return r;
}

void JobRecorder::fold(const broker::Uuid& u, const Counters& c, Bytes peak) {
  Device& d = device(u);
  Counters k = c;
  k.busy_ns = 0;  // its device time stays in the job's (the union: DeviceSample::live.busy_ns)
  d.folded += k;
  d.peak = std::max(d.peak, peak);
  ++revision_;
}

Bytes JobRecorder::peak(const broker::Uuid& u) const {
  auto it = devices_.find(u);
  return it == devices_.end() ? 0 : it->second.peak;
}

void JobRecorder::add_process(pid_t pid, const std::string& step) {
  for (ProcessExit& p : processes_)
    if (p.pid == pid && !p.exit_code && !p.signal && p.source.empty()) {
      if (p.step.empty() && !step.empty()) {
        p.step = step;
        ++revision_;
      }
      return;
    }
  ++revision_;
  if (processes_.size() >= kMaxListed) {
    // Bounded: drop the oldest ended process after the first (the first's status is the job's).
    auto ended = std::find_if(processes_.begin() + 1, processes_.end(), [](const ProcessExit& p) { return !p.source.empty(); });
    if (ended == processes_.end()) {
      ++processes_omitted_;
      return;
    }
    processes_.erase(ended);
    ++processes_omitted_;
  }
  processes_.push_back({pid, std::nullopt, std::nullopt, "", step});
}

void JobRecorder::process_exited(const ProcessExit& e) {
  for (ProcessExit& p : processes_) {
    if (p.pid != e.pid || !p.source.empty()) continue;
    std::string step = std::move(p.step);
    p = e;
    p.step = std::move(step);
    ++revision_;
    return;
  }
}

std::vector<pid_t> JobRecorder::pending_exits() const {
  std::vector<pid_t> out;
  for (const ProcessExit& p : processes_)
    if (p.source.empty()) out.push_back(p.pid);
  return out;
}

bool JobRecorder::has_process(pid_t pid) const {
  for (const ProcessExit& p : processes_)
    if (p.pid == pid) return true;
  return false;
}

void JobRecorder::close_turn(Device& d, Nanos at_rel) {
  if (!d.turn_open) return;
  const Nanos start = *d.turn_open;
  d.turn_open.reset();
  d.turns.emplace_back(start, std::max(start, at_rel));
  if (d.turns.size() <= kMaxTurns) return;
  // Bounded: merge the two neighbours with the shortest gap between them (the picture loses the
  // least there; turns_count still counts each).
  size_t best = 0;
  Nanos best_gap = ~Nanos(0);
  for (size_t i = 0; i + 1 < d.turns.size(); ++i) {
    const Nanos gap = d.turns[i + 1].first > d.turns[i].second ? d.turns[i + 1].first - d.turns[i].second : 0;
    if (gap < best_gap) {
      best_gap = gap;
      best = i;
    }
  }
  d.turns[best].second = std::max(d.turns[best].second, d.turns[best + 1].second);
  d.turns.erase(d.turns.begin() + ptrdiff_t(best) + 1);
}

void JobRecorder::turn_begin(const broker::Uuid& u, Nanos at) {
  Device& d = device(u);
  Nanos t = rel(at);
  if (!d.turns.empty()) t = std::max(t, d.turns.back().second);  // never back in time
  if (d.turn_open) close_turn(d, t);  // (a turn begins only after the last ended)
  d.turn_open = t;
  ++d.turns_count;
  ++revision_;
}

void JobRecorder::turn_end(const broker::Uuid& u, Nanos at, bool timed_out) {
  Device& d = device(u);
  if (!d.turn_open && !timed_out) return;
  close_turn(d, rel(at));
  if (timed_out) ++d.drain_timeouts;
  ++revision_;
}

void JobRecorder::set_start(Nanos mono_start, int64_t wall_start_ms) {
  mono_start_ = mono_start;
  wall_start_ms_ = wall_start_ms;
  ++revision_;
}

void JobRecorder::daemon_restarted(Nanos last_seen) {
  for (auto& [u, d] : devices_) {
    close_turn(d, rel(last_seen));
    // A client carries its StatsSlot and GateStats counters over to the new daemon's pages, but
    // not its completion tracking (TrackStats starts at zero there): what the live processes had
    // tracked before the restart stays in the report as if they had left.
    d.folded.busy_ns += d.live.busy_ns;
    d.folded.window_launches += d.live.window_launches;
    d.folded.window_waits += d.live.window_waits;
    d.live.busy_ns = d.live.window_launches = d.live.window_waits = 0;
  }
  for (auto& [u, d] : devices_)
    for (Wait& w : d.waits)
      if (!w.end && !w.pending_since) w.pending_since = std::max(last_seen, w.start);  // (an earlier restart's stays)
  ++revision_;
}

void JobRecorder::close_restart_waits() {
  for (auto& [u, d] : devices_)
    for (Wait& w : d.waits)
      if (!w.end && w.pending_since) {
        w.end = *w.pending_since;
        w.pending_since.reset();
        w.interrupted = true;
        ++revision_;
      }
}

void JobRecorder::finish_away(Nanos last_seen, int64_t last_seen_wall_ms, int64_t noticed_wall_ms) {
  daemon_restarted(last_seen);
  close_restart_waits();
  for (ProcessExit& p : processes_)
    if (p.source.empty()) p.source = "daemon-away";
  for (auto& [u, d] : devices_) {
    d.folded += d.live;  // the last counters the daemon saw
    d.live = {};
  }
  end_mono_ = std::max(last_seen, mono_start_);
  for (auto& [u, d] : devices_) close_turn(d, rel(*end_mono_));
  wall_end_ms_ = std::max(last_seen_wall_ms, wall_start_ms_);
  away_before_ms_ = std::max(noticed_wall_ms, wall_end_ms_);
  away_ = true;
  ++revision_;
}

void JobRecorder::finish(Nanos now, int64_t wall_ms) {
  ++revision_;
  end_mono_ = now;
  wall_end_ms_ = wall_ms;
  for (auto& [u, d] : devices_) {
    d.timeline.add(rel(now), 0);  // everything is released at the end
    // The processes that left folded their counters, but not their device time: the job's is the
    // union the last sample showed (Counters::busy_ns), kept.
    d.folded.busy_ns += d.live.busy_ns;
    d.live = {};
    close_turn(d, rel(now));
  }
}

namespace {
double secs(Nanos ns) { return double(ns) / 1e9; }
json bytes_or_null(Bytes b) { return b == broker::kNoLimit ? json(nullptr) : json(b); }
const char* reason_or_granted(broker::Reason r) {
  return r == broker::Reason::kNone ? "granted" : proto::reason_name(r);
}
}  // namespace

std::map<broker::Uuid, JobRecorder::Totals> JobRecorder::totals(Nanos now) const {
  const Nanos end = end_mono_ ? *end_mono_ : now;
  std::map<broker::Uuid, Totals> out;
  for (const auto& [uuid, d] : devices_) {
    Counters c = d.folded;
    c += d.live;
    Nanos wait_mem = d.omitted_wait_memory_ns, wait_adm = d.omitted_wait_admission_ns;
    for (const Wait& w : d.waits) (w.admission ? wait_adm : wait_mem) += (w.end ? *w.end : end) - w.start;
    Totals& t = out[uuid];
    t.wait_memory = std::max<Nanos>(wait_mem, Nanos(c.wait_memory_ns));
    t.wait_admission = std::max<Nanos>(wait_adm, Nanos(c.wait_admission_ns));
    t.gate_wait_ns = c.gate_wait_ns;
    t.busy_ns = c.busy_ns;
  }
  return out;
}

json JobRecorder::to_json(Nanos now) const {
  const Nanos end = end_mono_ ? *end_mono_ : now;
  json j;
  j["job"] = key_.id;
  j["uid"] = key_.uid;
  j["user"] = user_;
  j["command"] = command_;
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)cmdline_hash_);
  j["cmdline_hash"] = hash;
  j["priority"] = priority_;
  j["complete"] = end_mono_.has_value();
  j["ended_while_daemon_away"] = away_;
  j["start"] = iso8601_utc(wall_start_ms_);
  j["start_unix_ms"] = wall_start_ms_;
  if (end_mono_) {
    j["end"] = iso8601_utc(wall_end_ms_);
    j["end_unix_ms"] = wall_end_ms_;
  } else {
    j["end"] = nullptr;
    j["end_unix_ms"] = nullptr;
  }
  j["duration_s"] = secs(rel(end));
  // Ended while the daemon was away: when exactly is not known, only between the last time the
  // daemon saw the job alive (`end`, `duration_s`) and when the new daemon found it gone.
  if (away_) {
    j["ended_after"] = iso8601_utc(wall_end_ms_);
    j["ended_after_unix_ms"] = wall_end_ms_;
    j["ended_before"] = iso8601_utc(away_before_ms_);
    j["ended_before_unix_ms"] = away_before_ms_;
    j["duration_max_s"] = secs(rel(end)) + double(away_before_ms_ - wall_end_ms_) / 1e3;
  } else {
    for (const char* k : {"ended_after", "ended_after_unix_ms", "ended_before", "ended_before_unix_ms", "duration_max_s"})
      j[k] = nullptr;
  }
  j["limit"] = bytes_or_null(job_limit_);
  if (cancelled_)
    j["cancelled"] = {{"by", cancelled_->by},
                      {"uid", cancelled_->uid},
                      {"signal", cancelled_->signal},
                      {"at", iso8601_utc(cancelled_->at_ms)},
                      {"at_unix_ms", cancelled_->at_ms}};
  else
    j["cancelled"] = nullptr;

  // The job's exit status is its command's (coloc run's goodbye), else its first process's.
  json procs = json::array();
  for (const ProcessExit& p : processes_) {
    json e{{"pid", p.pid}};
    e["exit_code"] = p.exit_code ? json(*p.exit_code) : json(nullptr);
    e["signal"] = p.signal ? json(*p.signal) : json(nullptr);
    e["noticed_by"] = p.source.empty() ? json(nullptr) : json(p.source);
    e["step"] = p.step.empty() ? json(nullptr) : json(p.step);  // (Register v11, COLOC_STEP)
    procs.push_back(std::move(e));
  }
  j["processes"] = procs;
  j["processes_omitted"] = processes_omitted_;
  j["exit_status"] = nullptr;
  j["exit_signal"] = nullptr;
  if (command_status_) {  // the command's own status, as coloc run (the job's anchor) saw it
    j["exit_status"] = *command_status_;
  } else if (!processes_.empty()) {
    const ProcessExit& first = processes_.front();
    if (first.exit_code) j["exit_status"] = *first.exit_code;
    if (first.signal) j["exit_signal"] = *first.signal;
  }

  json devs = json::array();
  for (const auto& [uuid, d] : devices_) {
    Counters c = d.folded;
    c += d.live;
    Nanos wait_mem = d.omitted_wait_memory_ns, wait_adm = d.omitted_wait_admission_ns;
    json waits = json::array();
    for (const Wait& w : d.waits) {
      Nanos w_end = w.end ? *w.end : end;
      (w.admission ? wait_adm : wait_mem) += w_end - w.start;
      json e{{"kind", w.admission ? "admission" : "memory"}, {"start_s", secs(rel(w.start))}, {"end_s", secs(rel(w_end))}};
      e["outcome"] = w.interrupted ? json("daemon-restart") : w.end ? json(reason_or_granted(w.outcome)) : json("waiting");
      e["across_restart"] = w.resumed || w.pending_since.has_value();
      json reasons = json::array();
      for (uint8_t r : w.reasons) reasons.push_back(proto::wait_reason_name(proto::WaitReason(r)));
      e["reasons"] = std::move(reasons);
      waits.push_back(std::move(e));
    }
    json ooms = json::array();
    for (const Oom& o : d.ooms)
      ooms.push_back({{"t_s", secs(rel(o.at))},
                      {"reason", proto::reason_name(o.reason)},
                      {"admission", o.admission},
                      {"request", o.request},
                      {"in_use", o.in_use}});
    json tl_t = json::array(), tl_b = json::array();
    for (const TimelinePoint& p : d.timeline.points()) {
      tl_t.push_back(secs(p.t_ns));
      tl_b.push_back(p.bytes);
    }
    json dj;
    dj["uuid"] = uuid.str();
    dj["capacity"] = d.capacity;
    dj["limit"] = bytes_or_null(d.sampled ? d.limit : job_limit_);  // before admission: the job's
    dj["reservation"] = d.reservation;
    dj["reservation_source"] = d.reservation_source;
    // The fingerprint its run is filed under in the history (`coloc history`), null: none.
    dj["fingerprint"] = d.fingerprint.empty() ? json(nullptr) : json(d.fingerprint);
    // The last time the online prediction wanted a larger reservation than fitted (null: never).
    dj["reservation_kept"] = d.kept_outcome.empty() ? json(nullptr)
                                                    : json{{"outcome", d.kept_outcome},
                                                           {"wanted", d.kept_wanted},
                                                           {"available", d.kept_available}};
    dj["peak"] = d.peak;
    // The online prediction (estimator/online.h): null when no process of the job made one.
    dj["predicted_peak"] = d.predicted_peak ? json(d.predicted_peak) : json(nullptr);
    dj["prediction"] = d.prediction_state.empty()
                           ? json(nullptr)
                           : json{{"state", d.prediction_state},
                                  {"confidence", double(d.confidence) / 1000.0},
                                  {"period_ms", double(d.period) / 1e6},
                                  {"stable_s", d.stable_at ? json(secs(*d.stable_at)) : json(nullptr)}};
    dj["driver_overhead"] = d.driver_overhead;
    dj["admitted_s"] = d.admitted_at ? json(secs(rel(*d.admitted_at))) : json(nullptr);
    dj["allocations"] = c.allocs;
    dj["frees"] = c.frees;
    dj["failures"] = c.failures;
    dj["kernel_launches"] = c.launches;
    // Waiting time: the daemon's own measure of its queue, or the clients' when larger (they
    // also count time spent while the daemon was away).
    dj["wait_memory_s"] = secs(std::max<Nanos>(wait_mem, c.wait_memory_ns));
    dj["wait_admission_s"] = secs(std::max<Nanos>(wait_adm, c.wait_admission_ns));
    // The launch gate: time waited and launches that waited, by cause (the clients' measure).
    json gate_wait = json::object(), gate_waited = json::object();
    for (auto [state, name] : {std::pair{pages::GateState::kTimeslice, "quantum"},
                               std::pair{pages::GateState::kWindow, "window"},
                               std::pair{pages::GateState::kPaused, "pause"}}) {
      gate_wait[name] = secs(c.gate_wait_ns[uint32_t(state)]);
      gate_waited[name] = c.gate_waits[uint32_t(state)];
    }
    dj["gate_wait_s"] = gate_wait;
    dj["gate_waited_launches"] = gate_waited;
    // Compute: device time of the completed work (tracked while the device is timesliced), the
    // launches by the gate's state when they were made (RUN: the rest of the flushed count), and
    // when the job held the device.
    dj["gpu_time_s"] = secs(c.busy_ns);
    dj["launches_by_gate"] = {{"run", c.launches > c.window_launches ? c.launches - c.window_launches : 0},
                              {"window", c.window_launches}};
    dj["window_waits"] = c.window_waits;
    json turns = json::array();
    for (const auto& [s, e] : d.turns) turns.push_back({secs(s), secs(e)});
    if (d.turn_open) turns.push_back({secs(*d.turn_open), secs(std::max(*d.turn_open, rel(end)))});
    dj["turns"] = turns;
    dj["turns_count"] = d.turns_count;
    dj["drain_timeouts"] = d.drain_timeouts;
    dj["waits"] = waits;
    dj["waits_omitted"] = d.waits_omitted;
    dj["oom_events"] = ooms;
    dj["oom_events_omitted"] = d.ooms_omitted;
    dj["driver_ooms"] = d.driver_ooms;
    dj["timeline"] = {{"t_s", tl_t}, {"bytes", tl_b}};
    devs.push_back(std::move(dj));
  }
  j["devices"] = devs;
  return j;
}

// ---- state across a daemon restart ---------------------------------------------------------------

namespace {

json counters_state(const Counters& c) {
  json a = json::array({c.allocs, c.frees, c.failures, c.launches, c.wait_memory_ns, c.wait_admission_ns});
  for (uint64_t v : c.gate_wait_ns) a.push_back(v);
  for (uint64_t v : c.gate_waits) a.push_back(v);
  a.push_back(c.busy_ns);
  a.push_back(c.window_launches);
  a.push_back(c.window_waits);
  return a;
}

json opt_u64(const std::optional<Nanos>& v) { return v ? json(*v) : json(nullptr); }

std::string uuid_hex(const broker::Uuid& u) {
  std::string s;
  char b[3];
  for (uint8_t x : u.bytes) {
    std::snprintf(b, sizeof b, "%02x", x);
    s += b;
  }
  return s;
}

/// Reads a state() document; every accessor throws StateError naming the field.
struct StateError {
  std::string what;
};

struct Reader {
  const json& j;
  std::string where;
  const json& at(const char* k) const {
    if (!j.is_object() || !j.contains(k)) throw StateError{where + "." + k + " is missing"};
    return j[k];
  }
  uint64_t u64(const char* k) const { return as_u64(at(k), where + "." + k); }
  int64_t i64(const char* k) const {
    const json& v = at(k);
    if (!v.is_number_integer()) throw StateError{where + "." + k + " is not an integer"};
    return v.get<int64_t>();
  }
  std::string str(const char* k) const {
    const json& v = at(k);
    if (!v.is_string()) throw StateError{where + "." + k + " is not a string"};
    return v.get<std::string>();
  }
  bool boolean(const char* k) const {
    const json& v = at(k);
    if (!v.is_boolean()) throw StateError{where + "." + k + " is not a boolean"};
    return v.get<bool>();
  }
  const json& array(const char* k, size_t max) const {
    const json& v = at(k);
    if (!v.is_array()) throw StateError{where + "." + k + " is not an array"};
    if (v.size() > max) throw StateError{where + "." + k + " has more than " + std::to_string(max) + " entries"};
    return v;
  }
  std::optional<uint64_t> opt_u64(const char* k) const {
    const json& v = at(k);
    if (v.is_null()) return std::nullopt;
    return as_u64(v, where + "." + k);
  }
  static uint64_t as_u64(const json& v, const std::string& name) {
    if (!v.is_number_unsigned()) throw StateError{name + " is not a non-negative integer"};
    return v.get<uint64_t>();
  }
};

Counters counters_from(const json& v, const std::string& name) {
  // 6 counters; 6 + 2 per gate state since the launch gate; 3 more since completion tracking
  // (states saved before either have 6 or kWithGates).
  constexpr size_t kWithGates = 6 + 2 * pages::kGateStates, kWithTracking = kWithGates + 3;
  if (!v.is_array() || (v.size() != 6 && v.size() != kWithGates && v.size() != kWithTracking))
    throw StateError{name + " is not an array of 6, " + std::to_string(kWithGates) + " or " +
                     std::to_string(kWithTracking) + " counters"};
  Counters c;
  c.allocs = Reader::as_u64(v[0], name);
  c.frees = Reader::as_u64(v[1], name);
  c.failures = Reader::as_u64(v[2], name);
  c.launches = Reader::as_u64(v[3], name);
  c.wait_memory_ns = Reader::as_u64(v[4], name);
  c.wait_admission_ns = Reader::as_u64(v[5], name);
  if (v.size() >= kWithGates)
    for (uint32_t i = 0; i < pages::kGateStates; ++i) {
      c.gate_wait_ns[i] = Reader::as_u64(v[6 + i], name);
      c.gate_waits[i] = Reader::as_u64(v[6 + pages::kGateStates + i], name);
    }
  if (v.size() == kWithTracking) {
    c.busy_ns = Reader::as_u64(v[kWithGates], name);
    c.window_launches = Reader::as_u64(v[kWithGates + 1], name);
    c.window_waits = Reader::as_u64(v[kWithGates + 2], name);
  }
  return c;
}

broker::Reason reason_from(uint64_t v, const std::string& name) {
  if (v > uint64_t(broker::Reason::kBadRequest)) throw StateError{name + " is not a known reason"};
  return broker::Reason(v);
}

broker::Uuid uuid_from(const std::string& hex, const std::string& name) {
  broker::Uuid u;
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw StateError{name + " is not 32 lowercase hex digits"};
  for (size_t i = 0; i < 16; ++i) u.bytes[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return u;
}

}  // namespace

json JobRecorder::state() const {
  json procs = json::array();
  for (const ProcessExit& p : processes_)
    procs.push_back({p.pid, p.exit_code ? json(*p.exit_code) : json(nullptr), p.signal ? json(*p.signal) : json(nullptr),
                     p.source, p.step});
  json devs = json::array();
  for (const auto& [uuid, d] : devices_) {
    json waits = json::array();
    for (const Wait& w : d.waits)
      waits.push_back({w.admission, w.start, opt_u64(w.end), uint32_t(w.outcome), w.interrupted, w.resumed,
                       opt_u64(w.pending_since), w.reasons});
    json ooms = json::array();
    for (const Oom& o : d.ooms) ooms.push_back({o.at, uint32_t(o.reason), o.admission, o.request, o.in_use});
    json turns = json::array();
    for (const auto& [s, e] : d.turns) turns.push_back({s, e});
    devs.push_back({{"uuid", uuid_hex(uuid)},
                    {"capacity", d.capacity},
                    {"limit", d.limit},
                    {"reservation", d.reservation},
                    {"reservation_source", d.reservation_source},
                    {"predicted_peak", d.predicted_peak},
                    {"prediction_state", d.prediction_state},
                    {"confidence", d.confidence},
                    {"period", d.period},
                    {"stable_at", opt_u64(d.stable_at)},
                    {"peak", d.peak},
                    {"driver_overhead", d.driver_overhead},
                    {"sampled", d.sampled},
                    {"timeline", d.timeline.state()},
                    {"folded", counters_state(d.folded)},
                    {"live", counters_state(d.live)},
                    {"waits", waits},
                    {"ooms", ooms},
                    {"driver_ooms", d.driver_ooms},
                    {"admitted_at", opt_u64(d.admitted_at)},
                    {"waits_omitted", d.waits_omitted},
                    {"omitted_wait_memory_ns", d.omitted_wait_memory_ns},
                    {"omitted_wait_admission_ns", d.omitted_wait_admission_ns},
                    {"ooms_omitted", d.ooms_omitted},
                    {"turns", turns},
                    {"turn_open", opt_u64(d.turn_open)},
                    {"turns_count", d.turns_count},
                    {"drain_timeouts", d.drain_timeouts}});
  }
  return {{"uid", key_.uid},
          {"job", key_.id},
          {"user", user_},
          {"command", command_},
          {"cmdline_hash", cmdline_hash_},
          {"priority", priority_},
          {"mono_start", mono_start_},
          {"wall_start_ms", wall_start_ms_},
          {"limit", job_limit_},
          {"processes", procs},
          {"processes_omitted", processes_omitted_},
          {"cancelled", cancelled_ ? json{cancelled_->uid, cancelled_->by, cancelled_->signal, cancelled_->at_ms} : json(nullptr)},
          {"devices", devs}};
}

void JobRecorder::note_wait_reason(const broker::Uuid& device, bool admission, proto::WaitReason reason) {
  auto it = devices_.find(device);
  if (it == devices_.end()) return;
  for (Wait& w : it->second.waits) {
    if (w.end || w.admission != admission) continue;
    if ((w.reasons.empty() || w.reasons.back() != uint8_t(reason)) && w.reasons.size() < kMaxReasons)
      w.reasons.push_back(uint8_t(reason));
    return;
  }
}

void JobRecorder::cancelled(uid_t uid, std::string user, int signal, int64_t wall_ms) {
  if (!cancelled_) cancelled_ = Cancel{uid, std::move(user), signal, wall_ms};
}

Result<JobRecorder> JobRecorder::from_state(const json& state, broker::JobSerial serial) {
  try {
    Reader r{state, "recorder"};
    broker::JobKey key{uint32_t(r.u64("uid")), r.str("job")};
    if (key.id.empty()) throw StateError{"recorder.job is empty"};
    JobRecorder rec(serial, key, r.str("user"), r.str("command"), r.u64("cmdline_hash"), r.str("priority"),
                    r.u64("mono_start"), r.i64("wall_start_ms"));
    // (Older daemons wrote no "cancelled".)
    if (auto c = state.find("cancelled"); c != state.end() && !c->is_null()) {
      if (!c->is_array() || c->size() != 4 || !(*c)[1].is_string() || !(*c)[2].is_number_integer() ||
          !(*c)[3].is_number_integer())
        throw StateError{"recorder.cancelled is not [uid, user, signal, Unix ms]"};
      rec.cancelled_ = Cancel{uid_t(Reader::as_u64((*c)[0], "recorder.cancelled")), (*c)[1].get<std::string>(),
                              (*c)[2].get<int>(), (*c)[3].get<int64_t>()};
    }
    const json& procs = r.array("processes", kMaxListed);
    for (size_t i = 0; i < procs.size(); ++i) {
      std::string name = "recorder.processes[" + std::to_string(i) + "]";
      const json& p = procs[i];
      // (Older daemons wrote the first four: no step.)
      if (!p.is_array() || (p.size() != 4 && p.size() != 5) || !p[0].is_number_integer() || p[0].get<int64_t>() <= 0 ||
          !(p[1].is_null() || p[1].is_number_integer()) || !(p[2].is_null() || p[2].is_number_integer()) ||
          !p[3].is_string() ||
          (p.size() == 5 && (!p[4].is_string() || !(p[4].get<std::string>().empty() ||
                                                    proto::valid_step(p[4].get<std::string>().c_str())))))
        throw StateError{name + " is not [pid, exit code|null, signal|null, source, step]"};
      ProcessExit e;
      e.pid = pid_t(p[0].get<int64_t>());
      if (!p[1].is_null()) e.exit_code = p[1].get<int>();
      if (!p[2].is_null()) e.signal = p[2].get<int>();
      e.source = p[3].get<std::string>();
      if (p.size() == 5) e.step = p[4].get<std::string>();
      rec.processes_.push_back(std::move(e));
    }
    rec.processes_omitted_ = r.u64("processes_omitted");
    if (state.contains("limit")) rec.job_limit_ = r.u64("limit");  // (not in states of older daemons)
    const json& devs = r.array("devices", proto::kMaxDevices * 64);
    for (size_t i = 0; i < devs.size(); ++i) {
      Reader dr{devs[i], "recorder.devices[" + std::to_string(i) + "]"};
      broker::Uuid uuid = uuid_from(dr.str("uuid"), dr.where + ".uuid");
      Device& d = rec.devices_[uuid];
      d.capacity = dr.u64("capacity");
      d.limit = dr.u64("limit");
      d.reservation = dr.u64("reservation");
      d.peak = dr.u64("peak");
      if (devs[i].contains("predicted_peak")) {  // (older daemons: none)
        d.reservation_source = dr.str("reservation_source");
        d.predicted_peak = dr.u64("predicted_peak");
        d.prediction_state = dr.str("prediction_state");
        d.confidence = uint32_t(std::min<uint64_t>(dr.u64("confidence"), 1000));
        d.period = dr.u64("period");
        d.stable_at = dr.opt_u64("stable_at");
      }
      if (devs[i].contains("driver_overhead")) d.driver_overhead = dr.u64("driver_overhead");  // (older daemons: none)
      d.sampled = devs[i].contains("sampled") ? dr.boolean("sampled") : d.capacity > 0;  // (older daemons)
      std::string why;
      if (!d.timeline.restore(dr.at("timeline"), &why)) throw StateError{dr.where + "." + why};
      d.folded = counters_from(dr.at("folded"), dr.where + ".folded");
      d.live = counters_from(dr.at("live"), dr.where + ".live");
      const json& waits = dr.array("waits", kMaxListed);
      for (size_t k = 0; k < waits.size(); ++k) {
        std::string name = dr.where + ".waits[" + std::to_string(k) + "]";
        const json& w = waits[k];
        // (Older daemons wrote the first five, or seven: no reasons.)
        if (!w.is_array() || (w.size() != 5 && w.size() != 7 && w.size() != 8) || !w[0].is_boolean() ||
            !w[4].is_boolean() || (w.size() >= 7 && !w[5].is_boolean()) ||
            (w.size() == 8 && (!w[7].is_array() || w[7].size() > kMaxReasons)))
          throw StateError{name + " is not [admission, start, end|null, outcome, interrupted, resumed, pending since|null, reasons]"};
        Wait x;
        x.admission = w[0].get<bool>();
        x.start = Reader::as_u64(w[1], name);
        if (!w[2].is_null()) x.end = std::max(Reader::as_u64(w[2], name), x.start);
        x.outcome = reason_from(Reader::as_u64(w[3], name), name);
        x.interrupted = w[4].get<bool>();
        if (w.size() >= 7) {
          x.resumed = w[5].get<bool>();
          if (!w[6].is_null()) x.pending_since = std::max(Reader::as_u64(w[6], name), x.start);
          if (x.end) x.pending_since.reset();
        }
        if (w.size() == 8)
          for (const json& reason : w[7]) {
            uint64_t v = Reader::as_u64(reason, name + ".reasons");
            if (v >= proto::kWaitReasons) throw StateError{name + ".reasons holds " + std::to_string(v) + ", not a wait reason"};
            x.reasons.push_back(uint8_t(v));
          }
        d.waits.push_back(x);
      }
      const json& ooms = dr.array("ooms", kMaxListed);
      for (size_t k = 0; k < ooms.size(); ++k) {
        std::string name = dr.where + ".ooms[" + std::to_string(k) + "]";
        const json& o = ooms[k];
        if (!o.is_array() || o.size() != 5 || !o[2].is_boolean())
          throw StateError{name + " is not [at, reason, admission, request, in use]"};
        d.ooms.push_back({Reader::as_u64(o[0], name), reason_from(Reader::as_u64(o[1], name), name), o[2].get<bool>(),
                          Reader::as_u64(o[3], name), Reader::as_u64(o[4], name)});
      }
      d.driver_ooms = dr.u64("driver_ooms");
      d.admitted_at = dr.opt_u64("admitted_at");
      d.waits_omitted = dr.u64("waits_omitted");
      d.omitted_wait_memory_ns = dr.u64("omitted_wait_memory_ns");
      d.omitted_wait_admission_ns = dr.u64("omitted_wait_admission_ns");
      d.ooms_omitted = dr.u64("ooms_omitted");
      if (devs[i].contains("turns")) {  // (older daemons: no turns)
        const json& turns = dr.array("turns", kMaxTurns);
        for (size_t k = 0; k < turns.size(); ++k) {
          std::string name = dr.where + ".turns[" + std::to_string(k) + "]";
          const json& t = turns[k];
          if (!t.is_array() || t.size() != 2) throw StateError{name + " is not [start, end]"};
          const Nanos s = Reader::as_u64(t[0], name), e = Reader::as_u64(t[1], name);
          if (e < s || (!d.turns.empty() && s < d.turns.back().second))
            throw StateError{name + " is not a turn after the one before it"};
          d.turns.emplace_back(s, e);
        }
        d.turn_open = dr.opt_u64("turn_open");
        if (d.turn_open && !d.turns.empty() && *d.turn_open < d.turns.back().second)
          throw StateError{dr.where + ".turn_open is before the last turn's end"};
        d.turns_count = std::max<uint64_t>(dr.u64("turns_count"), d.turns.size() + (d.turn_open ? 1 : 0));
        d.drain_timeouts = dr.u64("drain_timeouts");
      }
    }
    return rec;
  } catch (const StateError& e) {
    return Error{EINVAL, e.what};
  } catch (const json::exception& e) {  // a value out of range for its field
    return Error{EINVAL, std::string("recorder: ") + e.what()};
  }
}

}  // namespace coloc::report
