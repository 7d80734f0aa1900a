#include "engine/admin.h"

#include <cmath>

#include <pwd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "broker/arith.h"
#include "coloc/version.h"
#include "util/fs.h"
#include "util/log.h"

namespace coloc::engine {

using nlohmann::json;
using proto::AdminStatus;

namespace {

json bytes_or_null(broker::Bytes b) { return b == broker::kNoLimit ? json(nullptr) : json(b); }

}  // namespace

std::string user_name(uid_t uid) {
  // Cached for a minute: status names every job's user, and each getpwuid_r reads the passwd
  // database (or asks NSS: LDAP, sssd) anew. At 1,000 jobs the lookups were most of a status
  // document's cost (docs/performance.md). A renamed user shows under the new name within a minute.
  using Clock = std::chrono::steady_clock;
  constexpr auto kFresh = std::chrono::seconds(60);
  constexpr size_t kMaxCached = 4096;
  struct Entry {
    std::string name;
    Clock::time_point at;
  };
  static std::mutex mu;
  static std::unordered_map<uid_t, Entry> cache;
  const Clock::time_point t = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(uid); it != cache.end() && t - it->second.at < kFresh) return it->second.name;
  }
  struct passwd pw, *out = nullptr;
  char buf[4096];
  const int rc = ::getpwuid_r(uid, &pw, buf, sizeof buf, &out);
  std::string name = rc == 0 && out ? out->pw_name : std::to_string(uid);
  if (rc != 0) return name;  // a lookup that failed (NSS down, a timeout) is not remembered
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxCached) cache.clear();
  cache[uid] = {name, t};
  return name;
}

bool Admin::is_admin(const Caller& c) const {
  if (c.uid == 0) return true;
  if (!info_.admin_gid) return false;
  if (c.gid == *info_.admin_gid) return true;
  return std::find(c.groups.begin(), c.groups.end(), *info_.admin_gid) != c.groups.end();
}

bool Admin::may_be_high(const Caller& c) const {
  if (is_admin(c)) return true;
  if (!info_.high_priority_gid) return false;
  if (c.gid == *info_.high_priority_gid) return true;
  return std::find(c.groups.begin(), c.groups.end(), *info_.high_priority_gid) != c.groups.end();
}

std::string Admin::high_priority_holders() const {
  std::string groups;
  if (info_.admin_gid) groups = "the admin group " + info_.admin_group;
  if (info_.high_priority_gid)
    groups += (groups.empty() ? "" : " and ") + std::string("the high-priority group ") + info_.high_priority_group;
  return groups.empty() ? std::string("no other user") : groups;
}

json Admin::queue_json(const broker::Broker::QueueEntry& e, uint32_t device, broker::Nanos now) const {
  const broker::Waiter& w = *e.waiter;
  json behind = nullptr, behind_user = nullptr, held_by = nullptr;
  if (e.blocker)
    if (auto it = broker_.jobs().find(e.blocker); it != broker_.jobs().end()) {
      behind = it->second.key.id;
      behind_user = user_name(it->second.key.uid);
    }
  if (e.reason == proto::WaitReason::kResources) {
    std::vector<std::pair<broker::Bytes, const broker::Job*>> holders;
    for (const auto& [serial, j] : broker_.jobs()) {
      auto it = j.devices.find(device);
      if (it == j.devices.end() || !it->second.admitted || serial == w.job) continue;
      const broker::Bytes c = std::max(it->second.reserved, it->second.granted);
      if (c > 0) holders.push_back({c, &j});
    }
    std::stable_sort(holders.begin(), holders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    held_by = json::array();
    for (size_t i = 0; i < holders.size() && i < 3; ++i)
      held_by.push_back({{"job", holders[i].second->key.id},
                         {"user", user_name(holders[i].second->key.uid)},
                         {"bytes", holders[i].first}});
  }
  const char* source = "growth";
  if (w.admission) {
    const broker::Footprint f = broker_.waiting_footprint(w, device).second;
    source = f == broker::Footprint::kNone ? "context" : broker::footprint_name(f);
  }
  json start_s = nullptr, start_ms = nullptr;
  if (e.start != broker::kNever) {
    const broker::Nanos in = e.start > now ? e.start - now : 0;
    start_s = double(in) / 1e9;
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    start_ms = int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000 + int64_t(in / 1'000'000);
  }
  const bool short_of = e.reason == proto::WaitReason::kResources || e.reason == proto::WaitReason::kOutside;
  return {{"reason", proto::wait_reason_name(e.reason)},
          {"position", e.position},
          {"behind", behind},
          {"behind_user", behind_user},
          {"missing", short_of ? json(e.missing) : json(nullptr)},
          {"held_by", held_by},
          {"asks", e.need},
          {"asks_source", source},
          {"estimated_start_s", start_s},
          {"estimated_start_ms", start_ms}};
}

json Admin::job_json(const broker::Job& job, broker::Nanos now, std::vector<uint32_t>* dev_indices) const {
  const report::JobRecorder* rec = nullptr;
  if (auto it = recorders_.find(job.serial); it != recorders_.end()) rec = &it->second;
  bool any_growth_wait = false, any_admission_wait = false;
  std::optional<broker::Nanos> waiting_since;
  for (const broker::Waiter& w : broker_.waiters()) {
    if (w.job != job.serial) continue;
    (w.admission ? any_admission_wait : any_growth_wait) = true;
    waiting_since = waiting_since ? std::min(*waiting_since, w.since) : w.since;
  }
  json devs = json::array();
  json job_queue = nullptr;  // the first device's where it waits
  broker::Bytes in_use = 0, peak = 0, granted = 0, reserved = 0, overhead = 0;
  // Per device the job is admitted on, or waiting for admission on.
  std::map<uint32_t, std::string> states;
  for (auto& [dev, jd] : job.devices) states[dev] = "running";
  for (const broker::Waiter& w : broker_.waiters()) {
    if (w.job != job.serial) continue;
    if (w.admission) {
      for (const broker::AttachNeed& n : w.devices)
        if (!states.count(n.device) || !job.devices.at(n.device).admitted) states[n.device] = "admission-pending";
    } else {
      states[broker_.find_client(w.client)->slots[w.slot].device] = "waiting";
    }
  }
  for (auto& [dev, state] : states) {
    const broker::Device& d = broker_.devices()[dev];
    broker::Bytes dev_in_use = 0;
    for (broker::ClientId id : job.clients) {
      const broker::Client* c = broker_.find_client(id);
      for (uint32_t s = 0; s < pages::kSlots; ++s)
        if (c->slots[s].attached && c->slots[s].device == dev) dev_in_use += broker_.client_in_use(*c, s);
    }
    auto jd_it = job.devices.find(dev);
    // The books' granted holds the driver overhead too (broker.h); shown apart.
    broker::Bytes o = jd_it != job.devices.end() ? jd_it->second.overhead : 0;
    broker::Bytes g = jd_it != job.devices.end() ? jd_it->second.granted - o : 0;
    broker::Bytes r = jd_it != job.devices.end() ? jd_it->second.reserved : 0;
    broker::Bytes p = std::max(rec ? rec->peak(d.uuid) : 0, dev_in_use);
    const bool admitted = jd_it != job.devices.end() && jd_it->second.admitted;
    // Its place in the device's queue, while a request of it waits there.
    json queue = nullptr;
    if (state != "running")
      for (const broker::Broker::QueueEntry& e : broker_.queue(dev, now))
        if (e.waiter->job == job.serial) {
          queue = queue_json(e, dev, now);
          if (job_queue.is_null()) job_queue = queue;
          break;
        }
    devs.push_back({{"uuid", d.uuid.str()},
                    {"queue", queue},
                    {"backfilled", admitted && jd_it->second.backfilled},
                    // Where the reservation came from (--mem, history, estimate, online, none), and the
                    // job's online prediction of its peak here (null until stable).
                    {"reservation_source", admitted ? broker::footprint_name(jd_it->second.source) : "none"},
                    {"predicted_peak", admitted && jd_it->second.predicted ? json(jd_it->second.predicted) : json(nullptr)},
                    {"state", state},
                    {"compute_state", compute_state(job, &d.uuid)},
                    {"gpu_share", gpu_share_json(job.serial, d.uuid)},
                    {"limit", bytes_or_null(broker_.limit_on(job, dev))},
                    {"reserved", r},
                    {"granted", g},
                    {"in_use", dev_in_use},
                    {"driver_overhead", o},
                    {"peak", p}});
    if (dev_indices) dev_indices->push_back(dev);
    in_use += dev_in_use;
    peak += p;
    granted += g;
    reserved += r;
    overhead += o;
  }
  json pids = json::array();
  for (broker::ClientId id : job.clients)  // the job's processes; not its anchor (coloc run)
    if (const broker::Client* c = broker_.find_client(id); !c->anchor) pids.push_back(c->pid);
  json j{{"job", job.key.id},
         {"uid", job.key.uid},
         {"user", user_name(job.key.uid)},
         {"priority", proto::priority_name(job.priority)},
         {"state", job.suspension != broker::Suspension::kNone ? broker::suspension_name(job.suspension)
                   : any_growth_wait                          ? "waiting"
                   : any_admission_wait                       ? "admission-pending"
                                                              : "running"},
         {"queue", job_queue},
         {"compute_state", compute_state(job, nullptr)},
         {"weight", scheduler_.weight(job.serial)},
         {"paused_by", gates_.paused(job.serial) == compute::PausedBy::kNobody
                           ? json(nullptr)
                           : json(compute::paused_by_name(gates_.paused(job.serial)))},
         {"ungated_processes", gates_.ungated(job.serial)},
         {"limit", bytes_or_null(job.limit)},
         // Its declared estimate per device (coloc run --estimate-from; null = none).
         {"estimate", job.estimate ? json(job.estimate) : json(nullptr)},
         {"on_full", job.on_full == proto::OnFull::kWait ? "wait" : "fail"},
         {"pids", pids},
         {"in_use", in_use},
         {"peak", peak},
         {"granted", granted},
         {"driver_overhead", overhead},
         {"reserved", reserved},
         // What its processes' stats pages claim beyond what they hold (bytes; 0 for an honest
         // job): colocd counts no more than they hold (Broker::client_in_use).
         {"overclaimed", broker_.overclaimed(job)},
         {"devices", devs}};
  // Its suspension (issue 29): {suspension, suspendable, not_suspendable, suspend_error}.
  if (suspension_info_) j.update(suspension_info_(job, now));
  return j;
}

void Admin::add_outside_processes(json& device, const broker::Uuid& uuid) const {
  const device::OutsideList* list = info_.outside_processes ? info_.outside_processes(uuid) : nullptr;
  if (!list) {
    device["outside_processes"] = nullptr;  // not known: no NVML, or its process list failed
    device["outside_processes_more"] = 0;
    return;
  }
  json procs = json::array();
  for (const device::OutsideProcess& p : list->shown)
    procs.push_back({{"pid", p.pid},
                     {"uid", p.info.uid ? json(*p.info.uid) : json(nullptr)},
                     {"user", p.info.uid ? json(p.info.user) : json(nullptr)},
                     {"command", p.info.command.empty() ? json(nullptr) : json(p.info.command)},
                     {"used_bytes", p.used == broker::kUnknown ? json(nullptr) : json(p.used)}});
  device["outside_processes"] = std::move(procs);
  device["outside_processes_more"] = list->more;
}

json Admin::status(broker::Nanos now) const {
  json devices = json::array();
  std::vector<json> jobs_by_device(broker_.devices().size(), json::array());
  json jobs = json::array();
  for (auto& [serial, job] : broker_.jobs()) {
    std::vector<uint32_t> dev_of;
    json jj = job_json(job, now, &dev_of);
    // Time waited for memory and admission per device so far (coloc top's WAITED).
    std::map<broker::Uuid, report::JobRecorder::Totals> totals;
    if (auto rec = recorders_.find(serial); rec != recorders_.end()) totals = rec->second.totals(now);
    for (size_t k = 0; k < dev_of.size(); ++k) {
      json entry = jj["devices"][k];
      if (auto t = totals.find(broker_.devices()[dev_of[k]].uuid); t != totals.end())
        entry["waited_s"] = double(t->second.wait_memory + t->second.wait_admission) / 1e9;
      else
        entry["waited_s"] = 0.0;
      entry["job"] = jj["job"];
      entry["uid"] = jj["uid"];
      entry["user"] = jj["user"];
      entry["priority"] = jj["priority"];
      entry["weight"] = jj["weight"];  // (compute_state and gpu_share: the device's own, from job_json)
      jobs_by_device[dev_of[k]].push_back(std::move(entry));
    }
    jobs.push_back(std::move(jj));
  }
  // One device's entry in status (the same fields for a device of the books and one only NVML
  // lists).
  struct Figures {
    bool idle;
    broker::Bytes capacity, headroom, outside, usable, committed, granted, in_use, overhead, available;
    size_t waiting;
    uint64_t driver_ooms, ledger_mismatches;
  };
  auto push_device = [&](const broker::Uuid& uuid, const DeviceRow* row, const Figures& f, json device_jobs) {
    devices.push_back({{"uuid", uuid.str()},
                       {"index", row && row->index ? json(*row->index) : json(nullptr)},
                       {"index_from", row && row->index_from ? json(row->index_from) : json(nullptr)},
                       {"policy", policy_json(uuid)},
                       {"holder", holder_json(uuid)},
                       {"idle", f.idle},
                       {"capacity", f.capacity},
                       {"headroom", f.headroom},
                       {"outside", f.outside},
                       {"usable", f.usable},
                       {"committed", f.committed},
                       {"granted", f.granted},
                       {"in_use", f.in_use},
                       {"driver_overhead", f.overhead},
                       {"available", f.available},
                       // Commitments beyond usable: memory really in use beyond the books (e.g. a
                       // late resume, or outside use that grew); nothing more is granted there.
                       {"over_committed", f.committed > f.usable},
                       {"waiting_requests", f.waiting},
                       {"driver_ooms", f.driver_ooms},
                       {"ledger_mismatches", f.ledger_mismatches},
                       {"jobs", std::move(device_jobs)}});
    add_outside_processes(devices.back(), uuid);
  };
  std::map<uint32_t, const DeviceRow*> row_of;  // by broker device
  const std::vector<DeviceRow> rows = device_rows();
  for (const DeviceRow& r : rows)
    if (r.broker_device) row_of[*r.broker_device] = &r;
  for (uint32_t i = 0; i < broker_.devices().size(); ++i) {
    const broker::Device& d = broker_.devices()[i];
    broker::Bytes granted = 0;
    for (auto& [serial, job] : broker_.jobs())
      if (auto it = job.devices.find(i); it != job.devices.end()) granted += it->second.granted - it->second.overhead;
    // Idle: no process attached and no admission waiting for it. colocd learns of devices from
    // its clients and never forgets one; an idle device's figures are the last ones it had.
    bool waited_for = false;
    for (const broker::Waiter& w : broker_.waiters())
      for (const broker::AttachNeed& n : w.devices) waited_for |= n.device == i;
    // Requests parked for memory here: growths on it, admissions that need it (metrics too).
    size_t waiting = 0;
    for (const broker::Waiter& w : broker_.waiters())
      if (w.admission ? std::any_of(w.devices.begin(), w.devices.end(), [&](const broker::AttachNeed& n) { return n.device == i; })
                      : broker_.find_client(w.client)->slots[w.slot].device == i)
        ++waiting;
    // An idle device no job holds anything on, that colocd can no longer see, drops out.
    if (d.attachments.empty() && !waited_for && d.committed == 0 && jobs_by_device[i].empty() && info_.unseen &&
        info_.unseen(i))
      continue;
    const DeviceRow* row = row_of.count(i) ? row_of.at(i) : nullptr;
    push_device(d.uuid, row, {d.attachments.empty() && !waited_for, d.capacity, d.headroom, d.outside, broker_.usable(i),
                              d.committed, granted, broker_.in_use(i), broker_.overhead(i), broker_.available(i), waiting,
                              d.driver_ooms, d.ledger_mismatches},
                std::move(jobs_by_device[i]));
  }
  // Devices NVML lists that no coloc process has used since colocd started: idle in the books,
  // shown with what the driver says is used on them (all outside coloc) and by whom.
  for (const DeviceRow& r : rows) {
    if (r.broker_device || !info_.unmet_device) continue;
    const std::optional<device::DeviceMemory> mem = info_.unmet_device(r.uuid);
    if (!mem) continue;
    const broker::Bytes capacity = mem->total, headroom = broker_.headroom_for(capacity);
    const broker::Bytes outside = capacity > mem->free ? capacity - mem->free : 0;
    const broker::Bytes usable = capacity > headroom + outside ? capacity - headroom - outside : 0;
    push_device(r.uuid, &r, {true, capacity, headroom, outside, usable, 0, 0, 0, 0, usable, 0, 0, 0}, json::array());
  }
  json daemon{{"protocol", proto::kVersion},
              {"min_protocol", proto::kMinVersion},
              {"pid", info_.pid},
              {"epoch", info_.epoch},
              {"socket", info_.socket},
              {"state_dir", info_.state_dir},
              {"watcher", info_.watcher},
              {"policy", broker_.policy().name()},
              {"grant_step", broker_.config().grant_step},
              {"uptime_s", double(now - info_.started) / 1e9},
              {"holding_for_restart", broker_.holding()},
              {"clients", broker_.clients().size()},
              {"waiting_requests", broker_.waiters().size()},
              {"fd_limit", info_.fd_limit},
              {"metrics", info_.metrics.empty() ? json(nullptr) : json(info_.metrics)},
              {"admin_group", info_.admin_gid ? json(info_.admin_group) : json(nullptr)},
              {"high_priority_group", info_.high_priority_gid ? json(info_.high_priority_group) : json(nullptr)}};
  if (info_.connections) daemon["connections"] = info_.connections();
  // What `coloc doctor` checks: the release version, and whether colocd watches exits through BPF
  // and reads the devices itself (NVML).
  daemon["version"] = kReleaseVersion;
  daemon["bpf_exit_watch"] = info_.watcher.rfind("bpf", 0) == 0;
  daemon["nvml"] = {{"available", !info_.memory_reader.empty()},
                    {"error", info_.memory_reader_error.empty() ? json(nullptr) : json(info_.memory_reader_error)}};
  return json{{"daemon", daemon}, {"devices", devices}, {"jobs", jobs}, {"policies", policies_json()}};
}

Admin::Found Admin::find_job(const std::string& name, const Caller& caller) const {
  Found f;
  std::string id = name;
  std::optional<uid_t> uid;
  if (auto colon = name.find(':'); colon != std::string::npos && colon > 0) {
    std::string u = name.substr(0, colon);
    if (std::all_of(u.begin(), u.end(), [](char c) { return c >= '0' && c <= '9'; }) && u.size() < 10) {
      uid = uid_t(std::stoul(u));
      id = name.substr(colon + 1);
    }
  }
  if (uid) {
    f.job = broker_.find_job({*uid, id});
  } else {
    f.job = broker_.find_job({caller.uid, id});
    if (!f.job) {
      int matches = 0;
      for (auto& [serial, job] : broker_.jobs())
        if (job.key.id == id) {
          ++matches;
          f.job = &job;
        }
      if (matches > 1) {
        f.job = nullptr;
        f.status = AdminStatus::kAmbiguous;
        f.why = "job '" + id + "' exists for several users: name it as UID:" + id;
        return f;
      }
    }
  }
  if (!f.job) {
    f.status = AdminStatus::kNotFound;
    f.why = "no running job '" + name + "'";
  }
  return f;
}

Admin::Found Admin::find_own_job(const std::string& name, const Caller& caller, const char* doing) const {
  Found f = find_job(name, caller);
  if (f.job && !is_admin(caller) && f.job->key.uid != caller.uid) {
    f.status = AdminStatus::kNotAllowed;
    f.why = "job '" + f.job->key.id + "' belongs to " + user_name(f.job->key.uid) + "; only root or the admin group may " +
            doing + " other users' jobs";
    f.job = nullptr;
  }
  return f;
}

AdminAnswer Admin::set(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now) {
  Found f = find_own_job(msg.job, caller, "change");
  if (!f.job) return {f.status, f.why};
  const broker::Job& job = *f.job;
  const bool admin = is_admin(caller);
  if ((msg.set_fields & proto::kSetMem) && !admin && msg.mem > job.limit)
    return {AdminStatus::kNotAllowed, "only root or the admin group may raise a job's limit"};
  // Raising a priority needs an admin; raising it to high, what registration would have granted
  // (root, --admin-group, --high-priority-group).
  if ((msg.set_fields & proto::kSetPriority) && !admin && msg.priority > uint8_t(job.priority) &&
      !(msg.priority == uint8_t(proto::Priority::kHigh) && may_be_high(caller)))
    return {AdminStatus::kNotAllowed, "only root or the admin group may raise a job's priority (and members of the "
                                      "high-priority group to high)"};
  if ((msg.set_fields & proto::kSetWeight) && !admin && msg.weight > scheduler_.weight(job.serial))
    return {AdminStatus::kNotAllowed, "only root or the admin group may raise a job's weight (it is " +
                                          std::to_string(scheduler_.weight(job.serial)) + ")"};
  const broker::JobSerial serial = job.serial;
  auto lg = log::get("engine");
  std::vector<broker::ReservationChange> changes;
  if (msg.set_fields & proto::kSetMem) {
    broker_.set_limit(serial, msg.mem, now, &changes);
    lg->info("uid {} set the limit of job {} to {}", caller.uid, msg.job, broker::mib(msg.mem));
  }
  if (msg.set_fields & proto::kSetPriority) {
    broker_.set_priority(serial, proto::Priority(msg.priority), now);
    if (auto it = recorders_.find(serial); it != recorders_.end())
      it->second.set_priority(proto::priority_name(proto::Priority(msg.priority)));
    lg->info("uid {} set the priority of job {} to {}", caller.uid, msg.job,
             proto::priority_name(proto::Priority(msg.priority)));
  }
  if (msg.set_fields & proto::kSetWeight) {
    const uint32_t was = scheduler_.weight(serial);
    scheduler_.set_weight(serial, msg.weight);
    lg->info("uid {} set the weight of job {} to {} (was {})", caller.uid, msg.job, unsigned(msg.weight), was);
  }
  json reply = job_json(broker_.jobs().at(serial), now);
  if (msg.set_fields & proto::kSetMem) reply["reservation_changes"] = reservation_changes_json(changes);
  return {AdminStatus::kOk, reply.dump()};
}

AdminAnswer Admin::pause(const proto::AdminMsg& msg, const Caller& caller, bool pause, broker::Nanos now) {
  Found f = find_own_job(msg.job, caller, "pause or resume");
  if (!f.job) return {f.status, f.why};
  const broker::Job& job = *f.job;
  const bool admin = is_admin(caller);
  const compute::PausedBy was = gates_.paused(job.serial);
  if (!pause && was == compute::PausedBy::kAdmin && !admin)
    return {AdminStatus::kNotAllowed, "job '" + job.key.id + "' was paused by an admin; only root or the admin group may resume it"};
  // `coloc resume` ends a suspension too (and says which it ended).
  bool suspension_ended = false;
  if (!pause && resume_) {
    AdminAnswer a = resume_(job, caller, admin, now, &suspension_ended);
    if (a.status != AdminStatus::kOk) return a;
  }
  // An admin's pause stays an admin's when its owner pauses it again.
  compute::PausedBy now_by = !pause ? compute::PausedBy::kNobody
                             : admin ? compute::PausedBy::kAdmin
                             : was == compute::PausedBy::kAdmin ? was : compute::PausedBy::kOwner;
  if (now_by != was) {
    gates_.set_paused(job.serial, job.key, now_by);
    if (pause)
      log::get("engine")->info("uid {} paused job {}{}", caller.uid, job.key.str(), admin ? " (as admin)" : "");
    else
      log::get("engine")->info("uid {} resumed job {}", caller.uid, job.key.str());
  }
  json reply = job_json(job, now);
  reply["was"] = was == compute::PausedBy::kNobody ? json(nullptr) : json(compute::paused_by_name(was));
  if (!pause) {
    json ended = json::array();
    if (was != compute::PausedBy::kNobody) ended.push_back("pause");
    if (suspension_ended) ended.push_back("suspension");
    reply["ended"] = ended;
  }
  return {AdminStatus::kOk, reply.dump()};
}

AdminAnswer Admin::suspend(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now) {
  Found f = find_own_job(msg.job, caller, "suspend");
  if (!f.job) return {f.status, f.why};
  if (!suspend_) return {AdminStatus::kInternal, "this colocd cannot suspend jobs"};
  return suspend_(*f.job, caller, is_admin(caller), now);
}

json Admin::reservation_changes_json(const std::vector<broker::ReservationChange>& changes) const {
  json out = json::array();
  for (const broker::ReservationChange& ch : changes) {
    const char* outcome = "unchanged";
    switch (ch.outcome) {
      case broker::ReservationChange::kUnchanged: outcome = "unchanged"; break;
      case broker::ReservationChange::kLowered: outcome = "lowered"; break;
      case broker::ReservationChange::kRaised: outcome = "raised"; break;
      case broker::ReservationChange::kKeptNoRoom: outcome = "kept: does not fit now"; break;
      case broker::ReservationChange::kKeptUserCap: outcome = "kept: over the user's cap"; break;
      case broker::ReservationChange::kKeptOthersWait: outcome = "kept: other jobs wait for memory there"; break;
    }
    out.push_back({{"uuid", broker_.devices()[ch.device].uuid.str()},
                   {"outcome", outcome},
                   {"before", ch.before},
                   {"after", ch.after},
                   {"wanted", ch.wanted},
                   {"available", ch.available}});
  }
  return out;
}

AdminAnswer Admin::report(const std::string& name, const Caller& caller, broker::Nanos now, bool newest_of_name) {
  const bool admin = is_admin(caller);
  Found f = find_job(name, caller);
  if (f.status == AdminStatus::kAmbiguous) return {f.status, f.why};
  if (f.job) {
    if (!admin && f.job->key.uid != caller.uid)
      return {AdminStatus::kNotAllowed, "the report of job '" + f.job->key.id + "' belongs to " +
                                            user_name(f.job->key.uid)};
    if (auto it = recorders_.find(f.job->serial); it != recorders_.end()) return {AdminStatus::kOk, it->second.to_json(now).dump()};
  }
  // An ended job: its report file(s).
  std::string id = name;
  std::optional<uid_t> uid;
  if (auto colon = name.find(':'); colon != std::string::npos && colon > 0 &&
                                   std::all_of(name.begin(), name.begin() + ptrdiff_t(colon), [](char c) { return c >= '0' && c <= '9'; })) {
    uid = uid_t(std::stoul(name.substr(0, colon)));
    id = name.substr(colon + 1);
  }
  // The reports filed under `id`, newest first; each one's text, owner and name (its file name
  // without ".json": what `coloc report` takes to show exactly that one).
  struct Filed {
    std::string text, name;
    uid_t owner;
  };
  auto filed = [&](const std::string& job_id) {
    std::vector<Filed> out;
    // The writer's reports of this id not yet on disk, taken first: the loop never waits for the
    // writer. One being written may be on disk too by now; it is listed once.
    const std::vector<std::string> unwritten = writer_ ? writer_->unwritten(job_id) : std::vector<std::string>();
    for (const std::string& path : store_.find(job_id)) {
      auto read = read_regular_file(path, report::ReportWriter::kMaxReportBytes);  // never a FIFO's read
      if (!read) continue;
      std::string text = std::move(read).value();
      if (std::find(unwritten.begin(), unwritten.end(), text) != unwritten.end()) continue;
      json j = json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.is_object() || j.value("job", std::string()) != job_id) continue;
      std::string base = path.substr(path.rfind('/') + 1);
      out.push_back({std::move(text), base.substr(0, base.size() - 5), j.value("uid", uid_t(-1))});
    }
    // Not on disk yet, or held in memory for want of disk space (report_writer.h): the newest.
    for (std::string text : unwritten) {
      json j = json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;
      const uid_t owner = j.value("uid", uid_t(-1));
      out.insert(out.begin(), {std::move(text), report::ReportStore::sanitize(job_id), owner});
    }
    return out;
  };
  // The answer: the report, naming the other reports of the same id and owner (when there are).
  auto answer = [&](const std::vector<Filed>& all, size_t shown) -> AdminAnswer {
    json others_named = json::array();
    for (size_t i = all.size(); i-- > 0;)
      if (i != shown && all[i].owner == all[shown].owner) others_named.push_back(all[i].name);
    if (others_named.empty()) return {AdminStatus::kOk, all[shown].text};
    json j = json::parse(all[shown].text);
    j["report_name"] = all[shown].name;
    j["other_reports"] = std::move(others_named);
    return {AdminStatus::kOk, j.dump()};
  };
  bool others = false;
  std::optional<size_t> fallback;
  const std::vector<Filed> all = filed(id);
  for (size_t i = 0; i < all.size(); ++i) {
    const uid_t owner = all[i].owner;
    if (uid && owner != *uid) continue;
    if (owner == caller.uid) return answer(all, i);
    if (admin) {
      if (uid) return answer(all, i);
      if (!fallback) fallback = i;
      else if (all[*fallback].owner != owner)
        return {AdminStatus::kAmbiguous, "reports of job '" + id + "' exist for several users: name it as UID:" + id};
      continue;
    }
    others = true;
  }
  if (fallback) return answer(all, *fallback);
  // One report by its file's name: "ID.json", "ID.2", "ID.2.json" (the second report filed under
  // job id ID: a reused id, or a job that ran again while colocd was away).
  std::string ref = id;
  if (ref.size() > 5 && ref.compare(ref.size() - 5, 5, ".json") == 0) ref.resize(ref.size() - 5);
  std::vector<std::pair<std::string, std::string>> candidates = {{ref, ref}};  // (job id, file name)
  if (auto dot = ref.rfind('.'); dot != std::string::npos && dot > 0 && dot + 1 < ref.size() &&
                                  std::all_of(ref.begin() + ptrdiff_t(dot) + 1, ref.end(), [](char c) { return c >= '0' && c <= '9'; }))
    candidates.push_back({ref.substr(0, dot), ref.compare(dot + 1, std::string::npos, "1") == 0 ? ref.substr(0, dot) : ref});
  for (const auto& [cand, file] : candidates) {
    if (cand == id) continue;  // looked up above
    const std::vector<Filed> mine = filed(cand);
    for (size_t i = 0; i < mine.size(); ++i) {
      if (mine[i].name != report::ReportStore::sanitize(file)) continue;
      if (uid && mine[i].owner != *uid) continue;
      if (mine[i].owner != caller.uid && !admin) {
        others = true;
        continue;
      }
      return answer(mine, i);
    }
  }
  if (others) return {AdminStatus::kNotAllowed, "the report of job '" + id + "' belongs to another user"};
  // A name without coloc run's random suffix: the newest job of that name — a running one first,
  // else the newest report. (Only names that are no job id of their own get here.)
  if (newest_of_name) {
    const broker::Job* newest = nullptr;
    for (auto& [serial, job] : broker_.jobs()) {
      const std::string& jid = job.key.id;
      const bool named = jid.size() == id.size() + 7 && jid.compare(0, id.size() + 1, id + "-") == 0 &&
                         std::all_of(jid.end() - 6, jid.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
      if (!named || (uid && job.key.uid != *uid) || (!admin && job.key.uid != caller.uid)) continue;
      if (!newest || job.started > newest->started) newest = &job;
    }
    std::vector<std::string> candidates;
    if (newest) candidates.push_back(std::to_string(newest->key.uid) + ":" + newest->key.id);
    for (const std::string& rid : store_.run_ids_of(id)) candidates.push_back(uid ? std::to_string(*uid) + ":" + rid : rid);
    for (const std::string& c : candidates)
      if (AdminAnswer a = report(c, caller, now, false); a.status == AdminStatus::kOk) return a;
  }
  return {AdminStatus::kNotFound, "no job or report named '" + name + "'"};
}

// ---- compute policies ----------------------------------------------------------------------------

std::vector<Admin::DeviceRow> Admin::device_rows() const {
  std::vector<DeviceRow> rows;
  std::map<broker::Uuid, size_t> at;
  std::optional<std::vector<broker::Uuid>> nvml = info_.nvml_devices ? info_.nvml_devices() : std::nullopt;
  if (nvml)
    for (const broker::Uuid& u : *nvml)
      if (at.emplace(u, rows.size()).second) rows.push_back({u, uint32_t(rows.size()), "nvml", std::nullopt});
  uint32_t next = uint32_t(rows.size());
  for (uint32_t b = 0; b < broker_.devices().size(); ++b) {
    const broker::Uuid& u = broker_.devices()[b].uuid;
    if (auto it = at.find(u); it != at.end()) {
      rows[it->second].broker_device = b;
      continue;
    }
    at.emplace(u, rows.size());
    rows.push_back({u, next++, "colocd", b});
  }
  // Devices colocd knows only from a policy (saved, or set for a device not seen yet).
  auto add_unseen = [&](const broker::Uuid& u) {
    if (at.emplace(u, rows.size()).second) rows.push_back({u, std::nullopt, nullptr, std::nullopt});
  };
  if (policies_)
    for (const auto& [u, s] : policies_->devices()) add_unseen(u);
  for (const auto& [u, s] : scheduler_.policies()) add_unseen(u);
  return rows;
}

json Admin::policy_json(const broker::Uuid& dev) const { return compute::PolicyStore::to_json(scheduler_.policy(dev)); }

json Admin::gpu_share_json(broker::JobSerial job, const broker::Uuid& dev) const {
  if (!info_.gpu_share || scheduler_.policy(dev).mode != proto::PolicyMode::kTimeslice) return nullptr;
  const double share = info_.gpu_share(job, dev);
  return std::isfinite(share) ? json(share) : json(nullptr);
}

json Admin::control_json(const broker::Uuid& dev) const {
  if (scheduler_.policy(dev).mode != proto::PolicyMode::kPriority) return nullptr;
  const compute::ControlView v = scheduler_.control_view(dev);
  return {{"active", v.active},
          {"probing", v.probing},
          {"allow", std::round(v.allow * 1000) / 1000},
          {"slowdown", std::round(v.slowdown * 1000) / 1000},
          {"target", v.target},
          {"probes", v.probes},
          {"stalled", v.stalled},
          {"window_ms", double(v.window) / 1e6}};
}

json Admin::holder_json(const broker::Uuid& dev) const {
  const broker::JobSerial serial = scheduler_.holder(dev);
  if (serial == 0) return nullptr;
  auto it = broker_.jobs().find(serial);
  return it == broker_.jobs().end() ? json(nullptr) : json(it->second.key.id);
}

const char* Admin::compute_state(const broker::Job& job, const broker::Uuid* dev) const {
  if (gates_.paused(job.serial) != compute::PausedBy::kNobody) return "paused";
  for (const auto& [d, jd] : job.devices) {
    const broker::Uuid& u = broker_.devices()[d].uuid;
    if (dev && u != *dev) continue;
    const pages::GateState st = scheduler_.state(job.serial, u);
    // Under priority a throttled job's gate opens and closes with the high jobs' gaps (every few
    // ms): it is `throttled` while the controller holds it in either state.
    if (scheduler_.policy(u).mode == proto::PolicyMode::kPriority) {
      if (job.priority != proto::Priority::kHigh && st != pages::GateState::kRun) return "throttled";
      continue;
    }
    if (st == pages::GateState::kTimeslice) return "waiting-quantum";
  }
  return "running";
}

json Admin::policies_json() const {
  json devs = json::array();
  for (const DeviceRow& r : device_rows())
    devs.push_back({{"index", r.index ? json(*r.index) : json(nullptr)},
                    {"index_from", r.index_from ? json(r.index_from) : json(nullptr)},
                    {"uuid", r.uuid.str()},
                    {"policy", policy_json(r.uuid)},
                    {"holder", holder_json(r.uuid)},
                    {"control", control_json(r.uuid)},
                    {"seen", r.index.has_value()}});
  json dflt = policies_ && policies_->default_settings() ? compute::PolicyStore::to_json(*policies_->default_settings())
                                                          : json(nullptr);
  return {{"default", dflt}, {"devices", devs}};
}

const Admin::DeviceRow* Admin::resolve_device(const std::string& selector, const std::vector<DeviceRow>& rows,
                                              std::string* why) const {
  auto known = [&] {
    std::string list;
    for (const DeviceRow& r : rows)
      if (r.index) list += (list.empty() ? "" : ", ") + std::to_string(*r.index);
    return list.empty() ? std::string("colocd knows no device yet") : "the indices are " + list;
  };
  const bool digits = !selector.empty() && selector.size() <= 9 &&
                      std::all_of(selector.begin(), selector.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    const uint32_t index = uint32_t(std::stoul(selector));
    for (const DeviceRow& r : rows)
      if (r.index && *r.index == index) return &r;
    *why = "no device with index " + selector + " (" + known() + ")";
    return nullptr;
  }
  std::string prefix = selector;
  for (char& c : prefix) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (prefix.rfind("gpu-", 0) != 0) prefix = "gpu-" + prefix;
  std::vector<const DeviceRow*> hits;
  for (const DeviceRow& r : rows) {
    std::string u = r.uuid.str();
    for (char& c : u) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (u.compare(0, prefix.size(), prefix) == 0) hits.push_back(&r);
  }
  if (hits.size() == 1) return hits.front();
  if (hits.empty()) {
    *why = "no device '" + selector + "' (give a UUID or a unique prefix of one, an index, or all; " + known() + ")";
    return nullptr;
  }
  *why = "'" + selector + "' matches " + std::to_string(hits.size()) + " devices (";
  for (size_t i = 0; i < hits.size(); ++i) *why += (i ? ", " : "") + hits[i]->uuid.str();
  *why += "): give more of the UUID, or the index";
  return nullptr;
}

AdminAnswer Admin::policy(const proto::AdminMsg& msg, const Caller& caller) {
  if (!is_admin(caller)) return {AdminStatus::kNotAllowed, "only root or the admin group may set a device's compute policy"};
  const auto mode = proto::PolicyMode(msg.mode);
  compute::PolicySettings s;
  s.mode = mode;
  s.quantum = broker::Nanos(msg.quantum_ms ? msg.quantum_ms : proto::kDefaultQuantumMs) * 1'000'000;
  if (mode == proto::PolicyMode::kPriority) s.target_pct = msg.target_pct ? msg.target_pct : proto::kDefaultTargetPct;
  const std::string selector = msg.job;
  const bool all = selector == "all";
  const std::vector<DeviceRow> rows = device_rows();
  std::vector<const DeviceRow*> targets;
  if (all) {
    for (const DeviceRow& r : rows) targets.push_back(&r);
  } else {
    std::string why;
    const DeviceRow* r = resolve_device(selector, rows, &why);
    if (!r) return {AdminStatus::kNotFound, why};
    targets.push_back(r);
  }
  // Saved first: when it cannot be, nothing changes.
  if (policies_) {
    const compute::PolicyStore before = *policies_;
    if (all) policies_->set_default(s);
    else policies_->set(targets.front()->uuid, s);
    if (auto r = policies_->save(); !r) {
      *policies_ = before;
      return {AdminStatus::kInternal, "cannot save the policy (" + r.error().message() + "); nothing changed"};
    }
  }
  json changed = json::array();
  for (const DeviceRow* r : targets) {
    json was = policy_json(r->uuid);
    scheduler_.set_policy(r->uuid, s);
    changed.push_back({{"index", r->index ? json(*r->index) : json(nullptr)},
                       {"index_from", r->index_from ? json(r->index_from) : json(nullptr)},
                       {"uuid", r->uuid.str()},
                       {"policy", policy_json(r->uuid)},
                       {"was", was}});
  }
  log::get("engine")->info("uid {} set the compute policy of {} to {}{}", caller.uid,
                           all ? std::string("every device (and those to come)") : targets.front()->uuid.str(),
                           compute::mode_name(s.mode),
                           s.mode == proto::PolicyMode::kTimeslice ? fmt::format(" (quantum {} ms)", s.quantum / 1'000'000)
                           : s.mode == proto::PolicyMode::kPriority ? fmt::format(" (target slowdown {}%)", s.target_pct)
                                                                    : std::string());
  return {AdminStatus::kOk, json{{"device", selector},
                                 {"all", all},
                                 {"default", all ? compute::PolicyStore::to_json(s) : json(nullptr)},
                                 {"devices", changed}}
                                .dump()};
}

// ---- run history ---------------------------------------------------------------------------------

AdminAnswer Admin::history(const Caller& caller) const {
  if (!history_)
    return {AdminStatus::kOk, json{{"path", nullptr}, {"loaded", true}, {"usable", false}, {"fingerprints", json::array()}}.dump()};
  return {AdminStatus::kOk, history_->list(uint32_t(caller.uid)).dump()};
}

AdminAnswer Admin::history_forget(const proto::AdminMsg& msg, const Caller& caller) {
  const std::string what = msg.job;
  if (!history_) {
    if (what == "all") return {AdminStatus::kOk, json{{"forgotten", 0}}.dump()};
    return {AdminStatus::kNotFound, "no fingerprint '" + what + "' in the run history (history is off)"};
  }
  size_t n = 0;
  switch (history_->forget(uint32_t(caller.uid), what, &n)) {
    case history::HistoryStore::Forget::kNotFound:
      return {AdminStatus::kNotFound, "no fingerprint '" + what + "' in the run history"};
    case history::HistoryStore::Forget::kNotAllowed:
      return {AdminStatus::kNotAllowed, "fingerprint " + what + " belongs to another user; only root may forget it"};
    case history::HistoryStore::Forget::kOk:
      break;
  }
  if (n > 0)
    log::get("engine")->info("uid {} forgot {} of the run history", caller.uid,
                             what == "all" ? fmt::format("{} fingerprint(s)", n) : "fingerprint " + what);
  return {AdminStatus::kOk, json{{"forgotten", n}}.dump()};
}

AdminAnswer Admin::cancel(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now) {
  const std::string name = msg.job;
  Found f = find_own_job(name, caller, "cancel");
  if (f.status == AdminStatus::kNotAllowed || f.status == AdminStatus::kAmbiguous) return {f.status, f.why};
  if (!f.job) {
    // Ended already? Its report says so (the index in memory: the loop never reads the disk here).
    if (writer_) {
      const auto colon = name.find(':');
      const std::string id = colon == std::string::npos ? name : name.substr(colon + 1);
      const std::optional<uint32_t> uid = is_admin(caller) ? std::nullopt : std::optional<uint32_t>(caller.uid);
      if (auto e = writer_->find_ended(id, uid))
        return {AdminStatus::kNotFound, "job '" + id + "' has ended (exit " +
                                            (e->exit_status ? std::to_string(*e->exit_status) : std::string("unknown")) +
                                            "): nothing to cancel; its report: coloc report " + e->name};
    }
    return {AdminStatus::kNotFound, f.why.empty() ? "no job '" + name + "'" : f.why};
  }
  if (!cancel_) return {AdminStatus::kInternal, "this colocd cannot cancel jobs"};
  return cancel_(*f.job, int(msg.mode), broker::Nanos(msg.quantum_ms) * 1'000'000, caller, is_admin(caller), now);
}

AdminAnswer Admin::ended(const proto::AdminMsg& msg, const Caller& caller) const {
  json jobs = json::array();
  bool indexed = true;
  size_t total = 0;
  report::ReportWriter::Filter filter;
  filter.since_ms = int64_t(std::min<uint64_t>(msg.mem, uint64_t(std::numeric_limits<int64_t>::max())));
  if (msg.set_fields & proto::kEndedUser) filter.uid = msg.quantum_ms;
  // The newest kMaxEnded that the filter keeps: the answer is built on the loop, and any user may ask.
  if (writer_)
    for (const report::ReportWriter::Ended& e : writer_->newest(kMaxEnded, filter, &total, &indexed)) {
      const bool own = is_admin(caller) || e.uid == caller.uid;  // as coloc report shows commands
      jobs.push_back({{"job", e.job},
                      {"report", e.name},
                      {"uid", e.uid},
                      {"user", e.user},
                      {"command", own ? json(e.command) : json(nullptr)},
                      {"start_unix_ms", e.start_ms},
                      {"end_unix_ms", e.end_ms},
                      {"exit_status", e.exit_status ? json(*e.exit_status) : json(nullptr)},
                      {"exit_signal", e.exit_signal ? json(*e.exit_signal) : json(nullptr)},
                      {"peak", e.peak},
                      {"waited_s", e.waited_s},
                      {"cancelled_by", e.cancelled_by.empty() ? json(nullptr) : json(e.cancelled_by)}});
    }
  return {AdminStatus::kOk, json{{"indexed", indexed}, {"total", total}, {"jobs", jobs}}.dump()};
}

AdminAnswer Admin::handle(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now) {
  switch (proto::AdminOp(msg.op)) {
    case proto::AdminOp::kStatus:
      return {AdminStatus::kOk, status(now).dump()};
    case proto::AdminOp::kJobs: {
      json jobs = json::array();
      for (auto& [serial, job] : broker_.jobs()) jobs.push_back(job_json(job, now));
      return {AdminStatus::kOk, json{{"jobs", jobs}}.dump()};
    }
    case proto::AdminOp::kSet:
      return set(msg, caller, now);
    case proto::AdminOp::kReport:
      return report(msg.job, caller, now);
    case proto::AdminOp::kPause:
      return pause(msg, caller, true, now);
    case proto::AdminOp::kResume:
      return pause(msg, caller, false, now);
    case proto::AdminOp::kPolicy:
      return policy(msg, caller);
    case proto::AdminOp::kHistory:
      return history(caller);
    case proto::AdminOp::kHistoryForget:
      return history_forget(msg, caller);
    case proto::AdminOp::kCancel:
      return cancel(msg, caller, now);
    case proto::AdminOp::kEnded:
      return ended(msg, caller);
    case proto::AdminOp::kSuspend:
      return suspend(msg, caller, now);
  }
  return {AdminStatus::kInvalid, "unknown admin operation"};
}

}  // namespace coloc::engine
