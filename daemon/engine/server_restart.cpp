// daemon/engine/server_restart.cpp — the Server's job state across restarts (server.h, "Job
// state across restarts"): saving the running jobs' report state, limit, priority, pause and weight under
// <state-dir>/jobs/, continuing a saved job when its processes come back, and reporting the ones
// that ended while colocd was away.
#include <algorithm>

#include "engine/server.h"
#include "util/clock.h"
#include "util/log.h"

namespace coloc::engine {

// ---- job state across restarts -------------------------------------------------------------------

Result<void> Server::load_saved_jobs() {
  // The running jobs' report state of the previous run: continued when their processes
  // re-register, reported as ended while the daemon was away when they do not.
  if (auto r = job_states_.prepare(); !r) return r;
  boot_id_ = report::boot_id();
  report::JobStateStore::Loaded saved = job_states_.load();
  for (const std::string& p : saved.problems) log::get("report")->error("{}", p);
  // The previous daemon saw its jobs alive until it last said it was running (a job that died
  // while it ran would have been noticed), which is often later than a job's last save.
  restart_wall_ms_ = wall_ms();
  const std::optional<report::DaemonAlive> alive = job_states_.load_alive();
  for (report::SavedJob& j : saved.jobs) {
    if (alive && alive->boot_id == j.boot_id && alive->mono > j.saved_mono) {
      j.saved_mono = alive->mono;
      j.saved_unix_ms = std::max(j.saved_unix_ms, alive->unix_ms);
    }
    bool any = false;
    if (j.boot_id == boot_id_)
      for (auto& [pid, start] : j.pids) {
        auto now = process_start_time(pid);
        any |= now && *now == start;
      }
    if (!any) dead_at_start_.insert(j.key);
    away_.emplace(j.key, std::move(j));
  }
  if (!away_.empty())
    log::get("report")->info("restart: {} job(s) were running when colocd stopped; their reports continue", away_.size());
  return {};
}

void Server::continue_saved(const broker::Job& job, const report::SavedJob& saved, Nanos t) {
  auto lg = log::get("engine");
  if (gates_.paused(job.serial) == compute::PausedBy::kNobody)  // paused before the restart: still paused
    if (auto by = compute::parse_paused_by(saved.paused.c_str())) gates_.set_paused(job.serial, job.key, *by);
  scheduler_.set_weight(job.serial, saved.weight);  // a `coloc set --weight` survives the restart
  if (saved.estimate.is_object()) restore_estimate(job, saved.estimate, t);  // its fingerprint, its reservations
  if (!recorders_.count(job.serial)) {
    // Continue the report from before the restart: start, timeline, counters, waits.
    auto rec = report::JobRecorder::from_state(saved.recorder, job.serial);
    if (rec) {
      // Waits open then stay open until their requests come back (re-sent right after the
      // re-registration): one row spans the restart. Those that do not come back are closed
      // where the daemon last saw them, once the resume grace is over (at least a second later).
      rec.value().daemon_restarted(saved.saved_mono);
      restart_waits_[job.serial] = std::max(away_deadline_, t + 1'000'000'000);
      recorders_.emplace(job.serial, std::move(rec.value()));
      continued_.insert(job.serial);
      lg->info("job {}: continuing its report from before the restart", job.key.str());
    } else {
      lg->error("job {}: its saved report state is unusable ({}); the report starts over", job.key.str(),
                rec.error().message());
    }
  }
}

void Server::save_job(const broker::Job& job, const report::JobRecorder& rec, Nanos t) {
  report::SavedJob s;
  s.key = job.key;
  s.limit = job.limit;
  s.priority = proto::priority_name(job.priority);
  s.paused = compute::paused_by_name(gates_.paused(job.serial));
  s.weight = scheduler_.weight(job.serial);
  for (broker::ClientId id : job.clients) {
    const broker::Client* c = broker_.find_client(id);
    // The anchor (coloc run) too: while it lives, the job is not over (it registers again).
    if (auto st = c->anchor ? process_start_time(c->pid) : resume_.start_time(c->pid)) s.pids.emplace_back(c->pid, *st);
  }
  s.saved_mono = t;
  s.saved_unix_ms = wall_ms();
  s.boot_id = boot_id_;
  s.recorder = rec.state();
  s.estimate = estimate_state(job);
  Persisted& p = persisted_[job.serial];
  if (auto r = job_states_.save(s); !r) {
    if (!p.warned) log::get("report")->warn("job {}: {} (a restart would lose its report so far)", job.key.str(), r.error().message());
    p.warned = true;
    return;
  }
  p = {rec.revision(), job.limit, job.priority, gates_.paused(job.serial), t, false, s.weight};
}

void Server::persist_jobs(Nanos t, bool force, bool throttle) {
  constexpr Nanos kEvery = 1'000'000'000, kRefresh = 10'000'000'000;
  if (throttle && !force && t < next_persist_) return;
  next_persist_ = t + kEvery;
  for (const auto& [serial, job] : broker_.jobs()) {
    auto rec = recorders_.find(serial);
    if (rec == recorders_.end() || job.clients.empty()) continue;
    auto p = persisted_.find(serial);
    // A job younger than a second is saved only when asked (coloc set): most short jobs of a
    // mass start end before the first save, and a file made and deleted per job is the daemon's
    // dearest work then. (A restart within its first second continues its report from its
    // processes' own start; see claim_saved.)
    if (throttle && !force && p == persisted_.end() && t - job.started < kEvery) continue;
    bool changed = p == persisted_.end() || p->second.revision != rec->second.revision() ||
                   p->second.limit != job.limit || p->second.priority != job.priority ||
                   p->second.paused != gates_.paused(job.serial) || p->second.weight != scheduler_.weight(job.serial);
    if (force || changed || t - p->second.at >= kRefresh) save_job(job, rec->second, t);
  }
  // The daemon is running: should it die now, the jobs it had were alive until about here.
  if (broker_.jobs().empty() && away_.empty()) return;
  if (auto r = job_states_.save_alive({t, wall_ms(), boot_id_}); !r) {
    if (!alive_warned_) log::get("report")->warn("{} (after a restart, jobs that ended meanwhile get a wider end range)", r.error().message());
    alive_warned_ = true;
  }
}

std::optional<report::SavedJob> Server::claim_saved(const broker::ClientSpec& spec, std::optional<uint64_t> start_time,
                                                    bool resume) {
  const broker::JobKey key{spec.uid, spec.job_id};
  auto it = away_.find(key);
  if (it == away_.end() || broker_.find_job(key)) return std::nullopt;
  // It continues the saved job when it is one of its processes coming back, or when any of
  // those is still alive (a new process of a job that is still running).
  bool ours = false;
  if (it->second.boot_id == boot_id_) {
    ours = resume;
    for (auto& [pid, st] : it->second.pids) {
      if (ours) break;
      if (pid == spec.pid) ours = start_time && st == *start_time;
      else if (auto now = process_start_time(pid)) ours = *now == st;
    }
  }
  if (!ours) {
    // A new run under the same id: the saved one is over (it is reported now).
    report::SavedJob gone = std::move(it->second);
    away_.erase(it);
    finish_away(gone);
    return std::nullopt;
  }
  report::SavedJob s = std::move(it->second);
  away_.erase(it);
  return s;
}

void Server::finish_away(const report::SavedJob& saved) {
  auto lg = log::get("report");
  auto rec = report::JobRecorder::from_state(saved.recorder, 0);  // checked at load
  if (!rec) {
    lg->error("job {}: its saved report state is unusable ({}); no report", saved.key.str(), rec.error().message());
    job_states_.remove(saved.key);
    return;
  }
  // It died after the daemon last saw it, and before this daemon started (or, when one of its
  // processes was still alive then, before now).
  const int64_t noticed = dead_at_start_.count(saved.key) ? restart_wall_ms_ : wall_ms();
  dead_at_start_.erase(saved.key);
  rec.value().set_limit(saved.limit);
  rec.value().finish_away(saved.saved_mono, saved.saved_unix_ms, noticed);
  auto path = store_.write(saved.key.id, rec.value().to_json(saved.saved_mono).dump(1));
  if (path)
    lg->warn("job {} ended while colocd was away, between {} and {} (its processes did not come back); report {} "
             "(exit status unknown)",
             saved.key.str(), report::iso8601_utc(saved.saved_unix_ms), report::iso8601_utc(noticed), path.value());
  else
    lg->error("job {} ended while colocd was away; its report could not be written: {}", saved.key.str(),
              path.error().message());
  job_states_.remove(saved.key);
}

void Server::sweep_away(Nanos t) {
  if ((away_.empty() && continued_.empty()) || t < next_sweep_) return;
  if (t < away_deadline_ && resume_.expected() > 0) return;  // processes may still come back
  next_sweep_ = t + 1'000'000'000;
  auto alive = [](pid_t pid, uint64_t start) {
    auto now = process_start_time(pid);
    return now && *now == start;
  };
  std::vector<broker::JobKey> over;
  for (auto& [key, saved] : away_) {
    bool any = false;
    if (saved.boot_id == boot_id_)
      for (auto& [pid, start] : saved.pids) any |= alive(pid, start);
    if (!any) over.push_back(key);  // a live process that never re-registers keeps it until it dies
  }
  for (const broker::JobKey& key : over) {
    report::SavedJob s = std::move(away_.at(key));
    away_.erase(key);
    finish_away(s);
  }
  // Continued jobs: their processes that did not come back died while the daemon was away.
  for (broker::JobSerial serial : continued_) {
    auto rec = recorders_.find(serial);
    if (rec == recorders_.end()) continue;
    for (pid_t pid : rec->second.pending_exits())
      if (!by_pid_.count(pid) && !lingering_.count(pid) && !process_start_time(pid))
        rec->second.process_exited({pid, std::nullopt, std::nullopt, "daemon-away"});
  }
  continued_.clear();
}

}  // namespace coloc::engine
