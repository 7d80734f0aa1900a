#include "metrics/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace coloc::metrics {

using nlohmann::json;

namespace {

/// Every family, in the order rendered: name, type, help.
struct Family {
  const char* name;
  const char* type;
  const char* help;
};
constexpr Family kFamilies[] = {
    // ---- the daemon ----
    {"coloc_clients", "gauge", "Processes registered with colocd (job processes and coloc run anchors)."},
    {"coloc_jobs", "gauge", "Jobs colocd keeps books for."},
    {"coloc_waiting_requests", "gauge", "Requests parked for memory or admission, on all devices."},
    {"coloc_holding_for_restart", "gauge", "1 while colocd holds new growth after a restart until known processes re-register."},
    {"coloc_metrics_snapshot_seconds", "gauge", "How long colocd's event loop took to build the snapshot this scrape shows."},
    {"coloc_admissions_total", "counter", "Jobs admitted on a device."},
    {"coloc_memory_waits_total", "counter", "Requests parked until memory frees, by kind (growth, admission)."},
    {"coloc_memory_wait_seconds_total", "counter", "Time the parked requests that were answered since waited, by kind."},
    {"coloc_refusals_total", "counter", "Requests refused (an out-of-memory error for the job), by the protocol's reason."},
    {"coloc_sigkill_releases_total", "counter", "Job processes that died by SIGKILL; colocd released what they held."},
    {"coloc_suspensions_total", "counter", "Jobs suspended to host memory (coloc suspend, or preempted for a high job)."},
    {"coloc_suspension_bytes_total", "counter", "Bytes suspensions moved from device to host memory."},
    {"coloc_suspended_seconds_total", "counter", "Time suspended jobs spent suspended (counted as each suspension ends)."},
    {"coloc_grant_round_trip_seconds", "histogram",
     "From colocd receiving a grow or attach request to sending its answer, for answers that did not wait."},
    // ---- devices: gpu (NVML's index), UUID ----
    {"coloc_device_info", "gauge", "1 per device: where its gpu index comes from (nvml, colocd) and its compute policy."},
    {"coloc_device_capacity_bytes", "gauge", "Device memory capacity."},
    {"coloc_device_headroom_bytes", "gauge", "Memory colocd never grants (--headroom)."},
    {"coloc_device_usable_bytes", "gauge", "Capacity minus headroom minus memory used outside coloc."},
    {"coloc_device_committed_bytes", "gauge", "Grants plus unused reservations: what colocd has promised."},
    {"coloc_device_granted_bytes", "gauge", "Memory granted to jobs (driver overhead not included)."},
    {"coloc_device_available_bytes", "gauge", "Usable minus committed: what a new request can get now."},
    {"coloc_device_in_use_bytes", "gauge", "Memory coloc's jobs have allocated."},
    {"coloc_device_outside_bytes", "gauge", "Memory used outside coloc (other processes)."},
    {"coloc_device_driver_overhead_bytes", "gauge", "What the driver holds for coloc's processes beyond their ledgers."},
    {"coloc_device_waiting_requests", "gauge", "Requests parked for memory or admission on the device."},
    {"coloc_device_over_committed", "gauge", "1 when commitments exceed usable memory."},
    {"coloc_driver_ooms_total", "counter", "Out-of-memory errors the driver gave jobs inside their grants."},
    {"coloc_outside_process_memory_bytes", "gauge",
     "Device memory of a process outside coloc, as the driver counts it (the largest per device)."},
    // ---- jobs: coloc_job, user, gpu, UUID ----
    {"coloc_job_limit_bytes", "gauge", "The job's limit on the device (absent: no limit)."},
    {"coloc_job_reservation_bytes", "gauge", "Memory reserved for the job on the device."},
    {"coloc_job_granted_bytes", "gauge", "Memory granted to the job on the device."},
    {"coloc_job_in_use_bytes", "gauge", "Memory the job has allocated on the device."},
    {"coloc_job_peak_bytes", "gauge", "The job's peak in use on the device."},
    {"coloc_job_predicted_peak_bytes", "gauge", "The job's online prediction of its peak (absent until stable)."},
    {"coloc_job_driver_overhead_bytes", "gauge", "What the driver holds for the job beyond its ledger."},
    {"coloc_job_gpu_share_ratio", "gauge", "The job's share of the device's time over the last 10 s (timesliced devices)."},
    {"coloc_job_gpu_time_seconds_total", "counter", "Device time of the job's completed work (tracked while timesliced): the union of its processes' busy intervals."},
    {"coloc_job_waiting", "gauge",
     "The job's position in the device's queue while a request of it waits there, by reason (Priority, Queue, "
     "Resources, Outside, UserCap, Restart); absent otherwise."},
    {"coloc_job_wait_seconds_total", "counter",
     "Time the job waited on the device, by cause (memory, admission, quantum, window, pause)."},
};

void number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void number(std::string& out, uint64_t v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

/// Label pairs, already escaped: {name="value",...}.
using Labels = std::vector<std::pair<const char*, std::string>>;

void labels(std::string& out, const Labels& ls) {
  if (ls.empty()) return;
  out += '{';
  for (size_t i = 0; i < ls.size(); ++i) {
    if (i) out += ',';
    out += ls[i].first;
    out += "=\"";
    out += ls[i].second;
    out += '"';
  }
  out += '}';
}

/// The text of a JSON scalar as a label value ("" for null).
std::string text(const json& j) {
  if (j.is_string()) return label_value(j.get<std::string>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_boolean()) return j.get<bool>() ? "true" : "false";
  return "";
}

/// Collects the samples of each family, then writes the families in kFamilies' order.
class Writer {
 public:
  Writer() {
    for (const Family& f : kFamilies) body_[f.name];
  }
  std::string& family(const char* name) { return body_.at(name); }
  void sample(const char* name, const Labels& ls, uint64_t v, const char* suffix = "") { head(name, ls, suffix), number(family(name), v), family(name) += '\n'; }
  void sample(const char* name, const Labels& ls, double v, const char* suffix = "") { head(name, ls, suffix), number(family(name), v), family(name) += '\n'; }
  /// A JSON figure: a non-negative integer or a number; null (or missing, or another type) writes nothing.
  void sample(const char* name, const Labels& ls, const json& obj, const char* key) {
    if (!obj.is_object()) return;
    auto it = obj.find(key);
    if (it == obj.end()) return;
    if (it->is_number_unsigned()) sample(name, ls, it->get<uint64_t>());
    else if (it->is_number_integer() && it->get<int64_t>() >= 0) sample(name, ls, uint64_t(it->get<int64_t>()));
    else if (it->is_number_float()) sample(name, ls, it->get<double>());
    else if (it->is_boolean()) sample(name, ls, uint64_t(it->get<bool>() ? 1 : 0));
  }
  std::string finish() {
    std::string out;
    for (const Family& f : kFamilies) {
      out += "# HELP ";
      out += f.name;
      out += ' ';
      out += f.help;
      out += "\n# TYPE ";
      out += f.name;
      out += ' ';
      out += f.type;
      out += '\n';
      out += body_.at(f.name);
    }
    return out;
  }

 private:
  void head(const char* name, const Labels& ls, const char* suffix) {
    std::string& b = family(name);
    b += name;
    b += suffix;
    labels(b, ls);
    b += ' ';
  }
  std::map<std::string, std::string> body_;
};

const json& field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

}  // namespace

std::string label_value(const std::string& v, size_t max) {
  std::string out;
  for (char ch : v) {
    if (out.size() >= max) break;
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else if (c < 0x20 || c >= 0x7f) out += '?';
    else out += ch;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> families() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Family& f : kFamilies) out.emplace_back(f.name, f.type);
  return out;
}

std::string render(const Snapshot& s) {
  Writer w;
  const json& st = s.status;
  const json& daemon = field(st, "daemon");
  const json& devices = field(st, "devices");
  const json& jobs = field(st, "jobs");

  // ---- the daemon ----
  w.sample("coloc_clients", {}, daemon, "clients");
  if (jobs.is_array()) w.sample("coloc_jobs", {}, uint64_t(jobs.size()));
  w.sample("coloc_waiting_requests", {}, daemon, "waiting_requests");
  w.sample("coloc_holding_for_restart", {}, daemon, "holding_for_restart");
  w.sample("coloc_metrics_snapshot_seconds", {}, s.build_seconds);
  const Values& c = s.counters;
  w.sample("coloc_admissions_total", {}, c.admissions);
  for (uint32_t k = 0; k < 2; ++k) {
    w.sample("coloc_memory_waits_total", {{"kind", kWaitKindNames[k]}}, c.waits[k]);
    w.sample("coloc_memory_wait_seconds_total", {{"kind", kWaitKindNames[k]}}, c.wait_seconds[k]);
  }
  for (uint32_t r = 1; r <= kMaxReason; ++r)
    w.sample("coloc_refusals_total", {{"reason", proto::reason_name(proto::Reason(r))}}, c.refusals[r]);
  w.sample("coloc_sigkill_releases_total", {}, c.sigkill_releases);
  w.sample("coloc_suspensions_total", {}, c.suspensions);
  w.sample("coloc_suspension_bytes_total", {}, c.suspension_bytes);
  w.sample("coloc_suspended_seconds_total", {}, c.suspended_seconds);
  for (uint32_t r = 0; r < 2; ++r) {
    const Histogram& h = c.grant_round_trip[r];
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kGrantBuckets.size(); ++b) {
      cumulative += h.counts[b];
      std::string le;
      if (b < kGrantBuckets.size()) number(le, kGrantBuckets[b]);
      else le = "+Inf";
      w.sample("coloc_grant_round_trip_seconds", {{"request", kRequestNames[r]}, {"le", le}}, cumulative, "_bucket");
    }
    w.sample("coloc_grant_round_trip_seconds", {{"request", kRequestNames[r]}}, h.sum, "_sum");
    w.sample("coloc_grant_round_trip_seconds", {{"request", kRequestNames[r]}}, h.count, "_count");
  }

  // ---- devices ----
  std::map<std::string, std::string> gpu_of;  // UUID -> gpu label
  if (devices.is_array())
    for (const json& d : devices) {
      const std::string uuid = text(field(d, "uuid"));
      const std::string gpu = text(field(d, "index"));
      gpu_of[uuid] = gpu;
      const Labels dl = {{"gpu", gpu}, {"UUID", uuid}};
      Labels info = dl;
      info.emplace_back("index_from", text(field(d, "index_from")));
      info.emplace_back("compute_policy", text(field(field(d, "policy"), "mode")));
      w.sample("coloc_device_info", info, uint64_t(1));
      w.sample("coloc_device_capacity_bytes", dl, d, "capacity");
      w.sample("coloc_device_headroom_bytes", dl, d, "headroom");
      w.sample("coloc_device_usable_bytes", dl, d, "usable");
      w.sample("coloc_device_committed_bytes", dl, d, "committed");
      w.sample("coloc_device_granted_bytes", dl, d, "granted");
      w.sample("coloc_device_available_bytes", dl, d, "available");
      w.sample("coloc_device_in_use_bytes", dl, d, "in_use");
      w.sample("coloc_device_outside_bytes", dl, d, "outside");
      w.sample("coloc_device_driver_overhead_bytes", dl, d, "driver_overhead");
      w.sample("coloc_device_waiting_requests", dl, d, "waiting_requests");
      w.sample("coloc_device_over_committed", dl, d, "over_committed");
      w.sample("coloc_driver_ooms_total", dl, d, "driver_ooms");
      // The processes outside coloc (when colocd knows them): the largest, at most kMaxOutsideProcesses.
      const json& procs = field(d, "outside_processes");
      if (procs.is_array()) {
        std::vector<const json*> list;
        for (const json& p : procs)
          if (p.is_object() && field(p, "used_bytes").is_number()) list.push_back(&p);
        std::stable_sort(list.begin(), list.end(), [](const json* a, const json* b) {
          return field(*a, "used_bytes").get<double>() > field(*b, "used_bytes").get<double>();
        });
        if (list.size() > kMaxOutsideProcesses) list.resize(kMaxOutsideProcesses);
        for (const json* p : list) {
          Labels pl = dl;
          pl.emplace_back("pid", text(field(*p, "pid")));
          pl.emplace_back("user", text(field(*p, "user")));
          pl.emplace_back("command", label_value(field(*p, "command").is_string() ? field(*p, "command").get<std::string>() : "", 64));
          w.sample("coloc_outside_process_memory_bytes", pl, *p, "used_bytes");
        }
      }
    }

  // ---- jobs, per device ----
  if (jobs.is_array())
    for (const json& j : jobs) {
      const std::string id = text(field(j, "job")), user = text(field(j, "user"));
      const std::string key = (field(j, "uid").is_number() ? std::to_string(field(j, "uid").get<uint64_t>()) : "") + ":" +
                              (field(j, "job").is_string() ? field(j, "job").get<std::string>() : "");
      const auto totals = s.jobs.find(key);
      const json& devs = field(j, "devices");
      if (!devs.is_array()) continue;
      for (const json& d : devs) {
        const std::string uuid = text(field(d, "uuid"));
        auto g = gpu_of.find(uuid);
        const Labels jl = {{"coloc_job", id}, {"user", user}, {"gpu", g != gpu_of.end() ? g->second : ""}, {"UUID", uuid}};
        w.sample("coloc_job_limit_bytes", jl, d, "limit");
        w.sample("coloc_job_reservation_bytes", jl, d, "reserved");
        w.sample("coloc_job_granted_bytes", jl, d, "granted");
        w.sample("coloc_job_in_use_bytes", jl, d, "in_use");
        w.sample("coloc_job_peak_bytes", jl, d, "peak");
        w.sample("coloc_job_predicted_peak_bytes", jl, d, "predicted_peak");
        w.sample("coloc_job_driver_overhead_bytes", jl, d, "driver_overhead");
        w.sample("coloc_job_gpu_share_ratio", jl, d, "gpu_share");
        if (const json& q = field(d, "queue"); q.is_object()) {
          Labels ql = jl;
          ql.push_back({"reason", text(field(q, "reason"))});
          w.sample("coloc_job_waiting", ql, q, "position");
        }
        JobDeviceTotals t;
        if (totals != s.jobs.end())
          if (auto it = totals->second.find(field(d, "uuid").is_string() ? field(d, "uuid").get<std::string>() : "");
              it != totals->second.end())
            t = it->second;
        w.sample("coloc_job_gpu_time_seconds_total", jl, t.gpu_seconds);
        for (size_t k = 0; k < kWaitCauses.size(); ++k) {
          Labels wl = jl;
          wl.emplace_back("cause", kWaitCauses[k]);
          w.sample("coloc_job_wait_seconds_total", wl, t.wait_seconds[k]);
        }
      }
    }
  return w.finish();
}

}  // namespace coloc::metrics
