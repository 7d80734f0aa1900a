// daemon/engine/server_cancel.cpp — `coloc cancel`: the job leaves the queue at once, its processes
// and its anchor get the signal through pidfds, and those still alive after the grace get SIGKILL
// (a deadline of the engine's timer, so the loop never waits for them).
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/resume_state.h"
#include "engine/server.h"
#include "util/clock.h"
#include "util/log.h"

namespace coloc::engine {

namespace {

/// A pidfd for `pid` if it is still the process that started at `start` (its ProcKey), else an
/// empty descriptor: a pid that a later process took is never signalled.
UniqueFd open_pidfd(pid_t pid, uint64_t start) {
  int fd = int(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return UniqueFd();
  UniqueFd out(fd);
  // Checked after the pidfd is open: from here on it names this process, whatever the pid does.
  if (process_start_time(pid) != start) return UniqueFd();
  return out;
}

bool send_signal(int pidfd, int sig) {
  return ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0;
}

}  // namespace

AdminAnswer Server::cancel_job(const broker::Job& job, int sig, Nanos grace, const Caller& caller, bool admin,
                               Nanos t) {
  // A Slurm job is Slurm's to end. Any process may say it runs in a Slurm step (COLOC_STEP), so
  // root and the admin group may still cancel one here: a job cannot make itself uncancellable.
  const bool slurm = slurm_jobs_.count(job.serial) > 0;
  if (slurm && !admin) {
    const std::string& id = job.key.id;
    const std::string slurm_id = id.rfind("slurm-", 0) == 0 ? id.substr(6) : id;
    return {proto::AdminStatus::kNotAllowed, "job '" + id + "' runs under Slurm: cancel it with `scancel " + slurm_id +
                                                 "` (Slurm ends its steps, and coloc sees them go); root and the "
                                                 "admin group may cancel it here"};
  }
  const std::string who = user_name(caller.uid);
  if (auto rec = recorders_.find(job.serial); rec != recorders_.end())
    rec->second.cancelled(caller.uid, who, sig, wall_ms());
  // First out of the queue, so that the jobs behind it are served now, not when its processes go.
  const size_t left = broker_.cancel_job(job.serial, t);

  nlohmann::json signalled = nlohmann::json::array();
  // A job cancelled again: its entry, the earlier deadline kept.
  auto kill = std::find_if(kills_.begin(), kills_.end(), [&](const Kill& k) { return k.job == job.key.str(); });
  if (kill == kills_.end()) {
    kills_.push_back({t + grace, job.key.str(), {}});
    kill = std::prev(kills_.end());
  } else {
    kill->at = std::min(kill->at, t + grace);
  }
  // Every pidfd first, then the signals back to back: the anchor forwards a signal to its
  // command, which may end (and be reaped) before a pidfd opened after that signal.
  struct Target {
    size_t slot;  ///< in kill->pidfds
    pid_t pid;
    bool anchor;
  };
  std::vector<Target> targets;
  for (broker::ClientId id : job.clients) {
    auto it = by_client_.find(id);
    if (it == by_client_.end()) continue;
    const Connection& c = *it->second;
    auto known = std::find_if(kill->pidfds.begin(), kill->pidfds.end(), [&](const auto& p) { return p.first == c.pid(); });
    UniqueFd fresh = open_pidfd(c.pid(), c.start_time);  // (a known pid may be a new process now)
    if (known == kill->pidfds.end()) {
      if (!fresh.valid()) continue;  // gone already
      kill->pidfds.emplace_back(c.pid(), std::move(fresh));
      known = std::prev(kill->pidfds.end());
    } else if (fresh.valid()) {
      known->second = std::move(fresh);
    }
    targets.push_back({size_t(known - kill->pidfds.begin()), c.pid(), broker_.clients().at(id).anchor});
  }
  // The CUDA processes before the anchor: the anchor forwards what it gets to its command, which
  // may then end, and be reaped, between two of these calls. A target that ended after its pidfd
  // opened (ESRCH) is listed as `ended`: the cancel reached it either way.
  std::stable_partition(targets.begin(), targets.end(), [](const Target& tg) { return !tg.anchor; });
  for (const Target& tg : targets) {
    const bool sent = send_signal(kill->pidfds[tg.slot].second.get(), sig);
    nlohmann::json e{{"pid", tg.pid}, {"anchor", tg.anchor}};
    if (!sent) e["ended"] = true;
    signalled.push_back(std::move(e));
  }
  log::limited(log::get("engine"), spdlog::level::info, "cancel uid " + std::to_string(caller.uid),
               "job {} cancelled by {} (uid {}): signal {} to {} process(es){}, SIGKILL after {} ms", job.key.str(), who,
               caller.uid, sig, targets.size(), left ? ", out of the queue" : "", (kill->at - t) / 1'000'000);
  nlohmann::json answer{{"job", job.key.id},
                        {"uid", job.key.uid},
                        {"user", user_name(job.key.uid)},
                        {"signal", sig},
                        {"grace_ms", (kill->at - t) / 1'000'000},
                        {"signalled", signalled},
                        {"left_queue", left > 0},
                        {"slurm", slurm}};
  if (kill->pidfds.empty()) kills_.erase(kill);
  else rearm_deadline();
  return {proto::AdminStatus::kOk, answer.dump()};
}

void Server::kill_due(Nanos t) {
  for (auto it = kills_.begin(); it != kills_.end();) {
    if (it->at > t) {
      ++it;
      continue;
    }
    size_t killed = 0;
    for (const auto& [pid, fd] : it->pidfds) killed += send_signal(fd.get(), SIGKILL) ? 1 : 0;  // ESRCH: it went
    if (killed)
      log::limited(log::get("engine"), spdlog::level::info, "cancel kill",
                   "job {}: SIGKILL to {} process(es) still alive after the grace", it->job, killed);
    it = kills_.erase(it);
  }
}

}  // namespace coloc::engine
