#include "report/job_recorder.h"

#include <time.h>

#include <algorithm>
#include <cstdio>

namespace coloc::report {

using nlohmann::json;

Counters& Counters::operator+=(const Counters& o) {
  allocs += o.allocs;
  frees += o.frees;
  failures += o.failures;
  launches += o.launches;
  wait_memory_ns += o.wait_memory_ns;
  wait_admission_ns += o.wait_admission_ns;
  return *this;
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

void JobRecorder::on_event(const broker::Event& e) {
  using K = broker::Event::Kind;
  switch (e.kind) {
    case K::kAdmitted: {
      Device& d = device(e.device);
      if (!d.admitted_at) d.admitted_at = e.at;
      break;
    }
    case K::kWaitBegin:
      device(e.device).waits.push_back({e.admission, e.at, std::nullopt, broker::Reason::kNone});
      break;
    case K::kWaitEnd: {
      // Close the oldest open wait of the same kind on the device.
      Device& d = device(e.device);
      for (Wait& w : d.waits) {
        if (!w.end && w.admission == e.admission) {
          w.end = e.at;
          w.outcome = e.reason;
          break;
        }
      }
      break;
    }
    case K::kRefused:
      device(e.device).ooms.push_back({e.at, e.reason, e.admission, e.bytes, e.in_use});
      break;
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
  d.capacity = s.capacity;
  d.limit = s.limit;
  d.reservation = std::max(d.reservation, s.reservation);
  d.peak = std::max({d.peak, s.in_use, s.peak_hint});
  d.live = s.live;
  d.timeline.add(rel(now), s.in_use);
}

void JobRecorder::fold(const broker::Uuid& u, const Counters& c, Bytes peak) {
  Device& d = device(u);
  d.folded += c;
  d.peak = std::max(d.peak, peak);
}

Bytes JobRecorder::peak(const broker::Uuid& u) const {
  auto it = devices_.find(u);
  return it == devices_.end() ? 0 : it->second.peak;
}

void JobRecorder::add_process(pid_t pid) {
  for (const ProcessExit& p : processes_)
    if (p.pid == pid && !p.exit_code && !p.signal && p.source.empty()) return;
  processes_.push_back({pid, std::nullopt, std::nullopt, ""});
}

void JobRecorder::process_exited(const ProcessExit& e) {
  for (ProcessExit& p : processes_) {
    if (p.pid != e.pid || !p.source.empty()) continue;
    p = e;
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

void JobRecorder::finish(Nanos now, int64_t wall_ms) {
  end_mono_ = now;
  wall_end_ms_ = wall_ms;
  for (auto& [u, d] : devices_) {
    d.timeline.add(rel(now), 0);  // everything is released at the end
    d.live = {};
  }
}

namespace {
double secs(Nanos ns) { return double(ns) / 1e9; }
json bytes_or_null(Bytes b) { return b == broker::kNoLimit ? json(nullptr) : json(b); }
const char* reason_or_granted(broker::Reason r) {
  return r == broker::Reason::kNone ? "granted" : proto::reason_name(r);
}
}  // namespace

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

  // The job's exit status is its first process's (the command coloc run started).
  json procs = json::array();
  for (const ProcessExit& p : processes_) {
    json e{{"pid", p.pid}};
    e["exit_code"] = p.exit_code ? json(*p.exit_code) : json(nullptr);
    e["signal"] = p.signal ? json(*p.signal) : json(nullptr);
    e["noticed_by"] = p.source.empty() ? json(nullptr) : json(p.source);
    procs.push_back(std::move(e));
  }
  j["processes"] = procs;
  j["exit_status"] = nullptr;
  j["exit_signal"] = nullptr;
  if (!processes_.empty()) {
    const ProcessExit& first = processes_.front();
    if (first.exit_code) j["exit_status"] = *first.exit_code;
    if (first.signal) j["exit_signal"] = *first.signal;
  }

  json devs = json::array();
  for (const auto& [uuid, d] : devices_) {
    Counters c = d.folded;
    c += d.live;
    Nanos wait_mem = 0, wait_adm = 0;
    json waits = json::array();
    for (const Wait& w : d.waits) {
      Nanos w_end = w.end ? *w.end : end;
      (w.admission ? wait_adm : wait_mem) += w_end - w.start;
      json e{{"kind", w.admission ? "admission" : "memory"}, {"start_s", secs(rel(w.start))}, {"end_s", secs(rel(w_end))}};
      e["outcome"] = w.end ? json(reason_or_granted(w.outcome)) : json("waiting");
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
    dj["limit"] = bytes_or_null(d.limit);
    dj["reservation"] = d.reservation;
    dj["peak"] = d.peak;
    dj["admitted_s"] = d.admitted_at ? json(secs(rel(*d.admitted_at))) : json(nullptr);
    dj["allocations"] = c.allocs;
    dj["frees"] = c.frees;
    dj["failures"] = c.failures;
    dj["kernel_launches"] = c.launches;
    // Waiting time: the daemon's own measure of its queue, or the clients' when larger (they
    // also count time spent while the daemon was away).
    dj["wait_memory_s"] = secs(std::max<Nanos>(wait_mem, c.wait_memory_ns));
    dj["wait_admission_s"] = secs(std::max<Nanos>(wait_adm, c.wait_admission_ns));
    dj["waits"] = waits;
    dj["oom_events"] = ooms;
    dj["driver_ooms"] = d.driver_ooms;
    dj["timeline"] = {{"t_s", tl_t}, {"bytes", tl_b}};
    devs.push_back(std::move(dj));
  }
  j["devices"] = devs;
  return j;
}

}  // namespace coloc::report
