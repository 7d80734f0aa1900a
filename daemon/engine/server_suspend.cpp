// daemon/engine/server_suspend.cpp — suspension (issue 29, "Preemption without lost work"): a job's
// processes checkpointed to host memory by the helper (coloc-ckpt, a process colocd never waits
// on), on `coloc suspend` or for a high job waiting for memory (preempt); restored on
// `coloc resume`, or, for a preempted job, when its room is free again. The books are the
// broker's (broker.h, "Suspension"); the order of victims is broker/preempt.h's.
#include <unistd.h>

#include <algorithm>
#include <climits>

#include <nlohmann/json.hpp>

#include "broker/arith.h"
#include "broker/preempt.h"
#include "device/host_memory.h"
#include "engine/server.h"
#include "util/clock.h"
#include "util/log.h"

namespace coloc::engine {

using nlohmann::json;

namespace {

std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  const std::string p(buf, size_t(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

/// The helper's answer: its JSON when it printed one (`ok`, `summary`, per process `state`,
/// `failed_step`, `error`), else what its exit and stderr say.
struct HelperAnswer {
  bool ok = false;
  std::string summary;
  std::vector<std::string> failed;  ///< "pid 123 FAILED (checkpoint: ...)"
};

HelperAnswer read_answer(const HelperProcess::Outcome& o) {
  HelperAnswer a;
  const json j = json::parse(o.out, nullptr, false);
  if (j.is_object()) {
    a.ok = j.value("ok", false) && o.exit_code == 0;
    a.summary = j.value("summary", j.value("error", std::string()));
    for (const json& p : j.value("processes", json::array()))
      if (p.is_object() && p.value("state", std::string()) == "failed")
        a.failed.push_back("pid " + std::to_string(p.value("pid", 0)) + " FAILED (" +
                           p.value("failed_step", std::string("?")) + ": " + p.value("error", std::string()) + ")");
  }
  if (a.summary.empty()) {
    std::string err = o.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    if (const size_t nl = err.rfind('\n'); nl != std::string::npos) err = err.substr(nl + 1);
    a.summary = o.timed_out  ? "the helper ran past its deadline and was killed"
                : o.stuck    ? "the helper did not end after SIGKILL (stuck in the driver)"
                : o.signal   ? "the helper was killed by signal " + std::to_string(o.signal)
                : err.empty() ? "the helper exited with status " + std::to_string(o.exit_code)
                              : err;
  }
  return a;
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string s;
  for (pid_t p : pids) s += (s.empty() ? "" : " ") + std::to_string(p);
  return s;
}

/// How long a helper may run beyond the lock timeout: checkpointing or restoring moves every byte
/// of the job (a few GiB/s host memory bandwidth; 40 GiB over PCIe Gen4 takes ~1.7 s, a first
/// checkpoint faulting in fresh host pages several times that).
constexpr int kHelperSlackMs = 300'000;

}  // namespace

std::string Server::ckpt_helper() const {
  if (!cfg_.ckpt_helper.empty()) return cfg_.ckpt_helper;
  const std::string dir = exe_dir();
  for (const std::string& p : {dir + "/coloc-ckpt", dir + "/../lib/coloc/coloc-ckpt"})
    if (::access(p.c_str(), X_OK) == 0) return p;
  return dir + "/coloc-ckpt";
}

broker::PreemptMode Server::preempt_mode() const {
  if (cfg_.preempt) return *cfg_.preempt;
  return preempt_auto_.value_or(broker::PreemptMode::kOff);
}

void Server::check_checkpoint_support() {
  auto lg = log::get("engine");
  if (cfg_.preempt) {
    lg->info("preempt = {}", broker::preempt_mode_name(*cfg_.preempt));
    return;
  }
  const std::string helper = ckpt_helper();
  auto h = HelperProcess::start(*loop_, {helper, "--json", "check"}, 15000, [this](const HelperProcess::Outcome& o) {
    const HelperAnswer a = read_answer(o);
    preempt_auto_ = a.ok ? broker::PreemptMode::kBestEffort : broker::PreemptMode::kOff;
    if (a.ok)
      log::get("engine")->info("preempt = auto: best-effort (the driver's checkpoint API works: {})", a.summary);
    else
      log::get("engine")->info("preempt = auto: off (the driver's checkpoint API is not usable here: {})", a.summary);
    ckpt_check_.reset();  // (allowed: nothing of it is touched after `done`)
  });
  if (!h) {
    preempt_auto_ = broker::PreemptMode::kOff;
    lg->info("preempt = auto: off (the checkpoint helper {} could not start: {})", helper, h.error().message());
    return;
  }
  ckpt_check_ = std::move(h.value());
}

std::string Server::not_suspendable(const broker::Job& job, std::vector<pid_t>* pids) const {
  std::vector<pid_t> out;
  for (broker::ClientId id : job.clients) {
    const broker::Client* c = broker_.find_client(id);
    if (!c || c->anchor) continue;
    bool attached = false;
    for (const broker::ClientSlot& s : c->slots) attached |= s.attached;
    if (!attached) continue;  // no context yet: nothing of it is on a device
    auto conn = by_client_.find(id);
    if (conn == by_client_.end()) continue;
    if (pages::layout_for_protocol(conn->second->version) < pages::kPreflightLayout)
      return "process " + std::to_string(c->pid) + " speaks protocol v" + std::to_string(conn->second->version) +
             " (its libcoloc.so is older than v14 and cannot tell what it used)";
    if (const uint32_t bits = c->stats->not_suspendable.load(std::memory_order_relaxed))
      return "process " + std::to_string(c->pid) + " used " + pages::not_suspendable_reason(bits);
    if (std::find(out.begin(), out.end(), c->pid) == out.end()) out.push_back(c->pid);
  }
  if (out.empty()) return "no process of it has a CUDA context";
  if (pids) *pids = std::move(out);
  return "";
}

broker::Bytes Server::host_bytes(const broker::Job& job) const {
  broker::Bytes b = 0;
  for (const auto& [dev, jd] : job.devices) b = broker::sat_add(b, jd.granted);
  return b;
}

bool Server::start_suspend(const broker::Job& job, const std::string& by, uint32_t by_uid, const std::string& cause,
                           bool held, std::string* why, Nanos t) {
  if (job.suspension != broker::Suspension::kNone) {
    *why = std::string("it is ") + broker::suspension_name(job.suspension);
    return false;
  }
  std::vector<pid_t> pids;
  if (std::string no = not_suspendable(job, &pids); !no.empty()) {
    *why = "not suspendable: " + no;
    return false;
  }
  // Host memory is never overcommitted: MemAvailable less the reserve, and the job's cgroup room.
  const broker::Bytes moving = host_bytes(job);
  const auto room = device::host_room(pids.front(), cfg_.suspend_host_reserve);
  if (!room) {
    *why = "host memory cannot be read (/proc/meminfo)";
    return false;
  }
  if (room->room() < moving) {
    *why = "not enough host memory: it would move " + broker::mib(moving) + " and " + broker::mib(room->room()) +
           " is free beyond the reserve" + (room->cgroup && *room->cgroup < room->host ? " (cgroup " + room->cgroup_path + ")" : "");
    return false;
  }
  if (!broker_.begin_suspend(job.serial, t, held)) {
    *why = "the broker refused it";
    return false;
  }
  std::vector<std::string> argv{ckpt_helper(), "--json", "suspend", "--lock-timeout",
                                std::to_string(cfg_.suspend_lock_timeout / 1'000'000)};
  for (pid_t p : pids) argv.push_back(std::to_string(p));
  const broker::JobSerial serial = job.serial;
  auto h = HelperProcess::start(*loop_, argv, int(cfg_.suspend_lock_timeout / 1'000'000) + kHelperSlackMs,
                                [this, serial](const HelperProcess::Outcome& o) { on_suspend_done(serial, o); });
  if (!h) {
    broker_.end_suspend(serial, false, t);
    *why = "the checkpoint helper could not start: " + h.error().message();
    return false;
  }
  Suspend& s = suspends_[serial];
  s = Suspend{};
  s.key = job.key;
  s.by = by;
  s.by_uid = by_uid;
  s.cause = cause;
  s.pids = pids;
  s.began = t;
  s.bytes = moving;
  s.helper = std::move(h.value());
  suspend_errors_.erase(serial);
  compute_dirty_ = true;  // it sits out its turns from now on (its processes are being locked)
  log::get("engine")->info("job {}: suspending (processes {}; {} to host memory; {})", job.key.str(), pid_list(pids),
                           broker::mib(moving), cause);
  return true;
}

void Server::on_suspend_done(broker::JobSerial serial, const HelperProcess::Outcome& o) {
  const Nanos t = now();
  auto it = suspends_.find(serial);
  if (it == suspends_.end()) return;
  const HelperAnswer a = read_answer(o);
  auto lg = log::get("engine");
  Suspend& s = it->second;
  auto job = broker_.jobs().find(serial);
  if (job == broker_.jobs().end()) {  // it ended meanwhile: nothing of it is left to suspend
    suspends_.erase(it);
    settle();
    return;
  }
  if (a.ok) {
    s.since = t;
    s.since_ms = wall_ms();
    s.checkpoint_s = double(t - s.began) / 1e9;
    s.helper.reset();
    lg->info("job {} suspended in {:.3f} s: {} in host memory ({})", s.key.str(), s.checkpoint_s, broker::mib(s.bytes),
             s.cause);
    metrics_.on_suspended(s.bytes);
    broker_.end_suspend(serial, true, t);  // its books leave the devices: what waits is served
    compute_dirty_ = true;
  } else {
    broker_.end_suspend(serial, false, t);
    std::string failed;
    for (const std::string& f : a.failed) failed += "; " + f;
    lg->warn("job {}: suspension failed, it runs on: {}{}", s.key.str(), a.summary, failed);
    if (!a.failed.empty())
      lg->error("job {}: a process of it is in CU_PROCESS_STATE_FAILED: its device memory is lost{}", s.key.str(), failed);
    suspend_errors_[serial] = a.summary + failed;
    resumed_at_[serial] = t;  // not tried again before preempt_min_run: another job is tried first
    suspends_.erase(it);
  }
  settle();
}

void Server::start_restore(broker::JobSerial serial) {
  const Nanos t = now();
  auto job = broker_.jobs().find(serial);
  if (job == broker_.jobs().end()) return;
  std::vector<pid_t> pids;
  for (broker::ClientId id : job->second.clients) {
    const broker::Client* c = broker_.find_client(id);
    if (!c || c->anchor) continue;
    bool attached = false;
    for (const broker::ClientSlot& s : c->slots) attached |= s.attached;
    if (attached && std::find(pids.begin(), pids.end(), c->pid) == pids.end()) pids.push_back(c->pid);
  }
  Suspend& s = suspends_[serial];
  if (s.key.id.empty()) s.key = job->second.key;
  s.restore_began = t;
  if (pids.empty()) {  // every process of it ended while suspended
    if (s.since) metrics_.on_suspension_end(double(t - s.since) / 1e9);
    suspends_.erase(serial);
    broker_.end_restore(serial, true, t);
    return;
  }
  std::vector<std::string> argv{ckpt_helper(), "--json", "resume"};
  for (pid_t p : pids) argv.push_back(std::to_string(p));
  auto h = HelperProcess::start(*loop_, argv, kHelperSlackMs,
                                [this, serial](const HelperProcess::Outcome& o) { on_restore_done(serial, o); });
  if (!h) {
    s.error = "the checkpoint helper could not start: " + h.error().message();
    log::get("engine")->error("job {}: cannot restore ({}); restore it by hand: {} resume {}", s.key.str(), s.error,
                              ckpt_helper(), pid_list(pids));
    broker_.end_restore(serial, false, t);
    return;
  }
  s.pids = pids;
  s.helper = std::move(h.value());
  log::get("engine")->info("job {}: restoring (processes {})", s.key.str(), pid_list(pids));
}

void Server::on_restore_done(broker::JobSerial serial, const HelperProcess::Outcome& o) {
  const Nanos t = now();
  auto it = suspends_.find(serial);
  if (it == suspends_.end()) return;
  const HelperAnswer a = read_answer(o);
  Suspend& s = it->second;
  auto lg = log::get("engine");
  if (a.ok) {
    lg->info("job {} restored in {:.3f} s after {:.3f} s suspended", s.key.str(), double(t - s.restore_began) / 1e9,
             s.since ? double(s.restore_began - s.since) / 1e9 : 0.0);
    resumed_at_[serial] = t;
    if (s.since) metrics_.on_suspension_end(double(t - s.since) / 1e9);
    suspends_.erase(it);
    broker_.end_restore(serial, true, t);
    compute_dirty_ = true;
  } else {
    std::string failed;
    for (const std::string& f : a.failed) failed += "; " + f;
    s.error = a.summary + failed;
    s.helper.reset();
    lg->error("job {}: restore failed: {}; its processes stay suspended. When there is room, restore them by hand: "
              "{} resume {}",
              s.key.str(), s.error, ckpt_helper(), pid_list(s.pids));
    broker_.end_restore(serial, false, t);
  }
  settle();
}

void Server::forget_suspension(broker::JobSerial serial, Nanos t) {
  auto it = suspends_.find(serial);
  resumed_at_.erase(serial);
  suspend_errors_.erase(serial);
  not_suspendable_said_.erase(serial);
  preempt_verdicts_.erase(serial);
  if (it == suspends_.end()) return;
  if (it->second.since) metrics_.on_suspension_end(double(t - it->second.since) / 1e9);
  if (it->second.helper && it->second.helper->running()) {
    it->second.since = 0;  // counted; the helper's answer finds no job and is dropped
    return;
  }
  suspends_.erase(it);
}

void Server::say_suspended_at_stop() {
  for (const auto& [serial, s] : suspends_) {
    auto job = broker_.jobs().find(serial);
    if (job == broker_.jobs().end() || s.pids.empty()) continue;
    log::get("engine")->warn("job {} stays {} as colocd stops: its processes keep their memory in host memory; "
                             "restore them by hand when there is room: {} resume {}",
                             s.key.str(), broker::suspension_name(job->second.suspension), ckpt_helper(), pid_list(s.pids));
  }
}

void Server::preempt_check(Nanos t) {
  const broker::PreemptMode mode = preempt_mode();
  if (mode == broker::PreemptMode::kOff || broker_.holding()) return;
  bool high_waits = false;
  for (const broker::Waiter& w : broker_.waiters())
    high_waits |= !w.frozen && broker_.jobs().at(w.job).priority == proto::Priority::kHigh;
  if (!high_waits) return;
  auto lg = log::get("engine");
  for (uint32_t dev = 0; dev < broker_.devices().size(); ++dev) {
    // One suspension or restore at a time on a device: what it frees is known only once it ends.
    bool busy = false;
    for (const auto& [serial, j] : broker_.jobs())
      busy |= (j.suspension == broker::Suspension::kSuspending || j.suspension == broker::Suspension::kRestoring) &&
              j.devices.count(dev);
    if (busy) continue;
    const std::vector<broker::Broker::QueueEntry> q = broker_.queue(dev, t);
    if (q.empty()) continue;
    const broker::Broker::QueueEntry& head = q.front();
    if (head.reason != proto::WaitReason::kResources && head.reason != proto::WaitReason::kOutside) continue;
    const broker::Job& high = broker_.jobs().at(head.waiter->job);
    if (high.priority != proto::Priority::kHigh || head.missing == 0) continue;
    std::vector<broker::SuspendCandidate> cands;
    pid_t any_pid = 0;
    for (const auto& [serial, j] : broker_.jobs()) {
      if (serial == high.serial || j.suspension != broker::Suspension::kNone) continue;
      auto jd = j.devices.find(dev);
      if (jd == j.devices.end() || !jd->second.admitted || jd->second.clients == 0) continue;
      broker::SuspendCandidate c;
      c.job = serial;
      c.priority = j.priority;
      c.device_bytes = std::max(jd->second.reserved, jd->second.granted);
      c.host_bytes = host_bytes(j);
      c.started = j.started;
      if (auto r = resumed_at_.find(serial); r != resumed_at_.end()) c.started = std::max(c.started, r->second);
      std::vector<pid_t> pids;
      const std::string no = not_suspendable(j, &pids);
      c.suspendable = no.empty();
      if (!no.empty() && j.priority < high.priority && not_suspendable_said_.insert(serial).second)
        lg->info("job {} is not suspendable: {}", j.key.str(), no);
      if (c.suspendable && !any_pid) any_pid = pids.front();
      cands.push_back(c);
    }
    broker::Bytes room = 0;
    if (any_pid)
      if (auto r = device::host_room(any_pid, cfg_.suspend_host_reserve)) room = r->room();
    const broker::VictimChoice v = broker::choose_victims(cands, head.missing, mode, t, cfg_.preempt_min_run, room);
    std::string verdict;
    switch (v.why) {
      case broker::NoVictims::kNone: break;
      case broker::NoVictims::kPolicyOff: verdict = "preempt is off"; break;
      case broker::NoVictims::kNoCandidate:
        verdict = "no job it may suspend (" + std::string(broker::preempt_mode_name(mode)) +
                  " jobs that passed the preflight and ran preempt_min_run)";
        break;
      case broker::NoVictims::kNotEnough: verdict = "the jobs it may suspend hold too little"; break;
      case broker::NoVictims::kHostMemory: verdict = "not enough host memory to suspend them"; break;
    }
    auto& said = preempt_verdicts_[high.serial];
    if (!verdict.empty()) {
      if (said != verdict) lg->info("job {} waits for {} on {}: no suspension: {}", high.key.str(),
                                    broker::mib(head.missing), broker_.devices()[dev].uuid.str(), verdict);
      said = verdict;
      continue;
    }
    said.clear();
    const std::string cause = "preempted for high job " + high.key.str() + " on " + broker_.devices()[dev].uuid.str();
    for (broker::JobSerial victim : v.jobs) {
      const broker::Job& vj = broker_.jobs().at(victim);
      std::string why;
      if (!start_suspend(vj, "preempt", 0, cause, false, &why, t)) {
        lg->warn("job {}: cannot suspend it for {}: {}", vj.key.str(), high.key.str(), why);
        suspend_errors_[victim] = why;
        resumed_at_[victim] = t;  // another is tried next
      }
    }
  }
}

AdminAnswer Server::admin_suspend(const broker::Job& job, const Caller& caller, bool admin, Nanos t) {
  // Answered with the job either way: `suspension` (and `already`) when it is held, else null and
  // `suspend_error` saying why not (the CLI exits 1 then).
  const bool already = job.suspension != broker::Suspension::kNone;
  std::string why;
  const std::string who = user_name(caller.uid);
  if (!already && !start_suspend(job, admin ? "admin" : "owner", caller.uid, "coloc suspend by " + who, true, &why, t)) {
    suspend_errors_[job.serial] = why;
    log::limited(log::get("engine"), spdlog::level::info, "suspend uid " + std::to_string(caller.uid),
                 "uid {}: job {} not suspended: {}", caller.uid, job.key.str(), why);
  }
  json j = admin_->job_json(broker_.jobs().at(job.serial), t);
  j["already"] = already;
  return {proto::AdminStatus::kOk, j.dump()};
}

AdminAnswer Server::admin_resume(const broker::Job& job, const Caller& caller, bool admin, Nanos t, bool* ended) {
  *ended = false;
  auto it = suspends_.find(job.serial);
  if (job.suspension == broker::Suspension::kNone || it == suspends_.end()) return {};
  if (it->second.by == "admin" && !admin)
    return {proto::AdminStatus::kNotAllowed,
            "job '" + job.key.id + "' was suspended by an admin; only root or the admin group may resume it"};
  if (job.suspension == broker::Suspension::kLost)
    return {proto::AdminStatus::kInvalid, "job '" + job.key.id + "': its restore failed (" + it->second.error +
                                              "); restore it by hand: " + ckpt_helper() + " resume " +
                                              pid_list(it->second.pids)};
  if (job.suspension == broker::Suspension::kSuspending || job.suspension == broker::Suspension::kSuspended) {
    broker_.release_restore(job.serial, t);
    log::get("engine")->info("uid {} resumed suspended job {} (its restore queued)", caller.uid, job.key.str());
  }
  *ended = true;
  return {};
}

json Server::suspension_json(const broker::Job& job, Nanos t) const {
  json out = json::object();
  std::vector<pid_t> pids;
  const std::string no = not_suspendable(job, &pids);
  out["suspendable"] = no.empty();
  out["not_suspendable"] = no.empty() ? json(nullptr) : json(no);
  auto err = suspend_errors_.find(job.serial);
  out["suspend_error"] = err == suspend_errors_.end() ? json(nullptr) : json(err->second);
  auto it = suspends_.find(job.serial);
  if (job.suspension == broker::Suspension::kNone || it == suspends_.end()) {
    out["suspension"] = nullptr;
    return out;
  }
  const Suspend& s = it->second;
  json need = json::object();
  for (const auto& [dev, jd] : job.devices)
    if (broker::Bytes b = broker_.restore_need(job, dev)) need[broker_.devices()[dev].uuid.str()] = b;
  out["suspension"] = json{{"state", broker::suspension_name(job.suspension)},
                           {"by", s.by},
                           {"by_user", s.by == "preempt" ? json(nullptr) : json(user_name(s.by_uid))},
                           {"cause", s.cause},
                           {"since_s", s.since ? json(double(t - s.since) / 1e9) : json(nullptr)},
                           {"since_ms", s.since_ms ? json(s.since_ms) : json(nullptr)},
                           {"bytes", s.bytes},
                           {"pids", s.pids},
                           {"checkpoint_s", s.since ? json(s.checkpoint_s) : json(nullptr)},
                           {"restore_held", job.restore_held},
                           {"restore_need", need},
                           {"error", s.error.empty() ? json(nullptr) : json(s.error)}};
  return out;
}

}  // namespace coloc::engine
