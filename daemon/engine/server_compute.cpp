// daemon/engine/server_compute.cpp — the engine's glue to the compute side: the scheduler's timer,
// feeding it each job's usage from the stats pages (compute/gates.h), and writing the gates it
// asks for. The decisions are compute/scheduler.h's.
#include <fcntl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "engine/server.h"
#include "util/log.h"

namespace coloc::engine {

Result<void> Server::open_compute_timer() {
  int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return Error::from_errno("timerfd_create");
  compute_timer_.reset(fd);
  if (auto r = loop_->add(fd, EPOLLIN, [this](uint32_t) { on_compute_timer(); }); !r) return r.error();
  return {};
}

void Server::on_compute_timer() {
  uint64_t n;
  while (::read(compute_timer_.get(), &n, sizeof n) == ssize_t(sizeof n)) {
  }
  compute_armed_ = broker::kNever;  // fired: disarmed
  compute_tick(now());
}

void Server::compute_tick(Nanos t) {
  compute_dirty_ = false;
  // A device a client brought since the last tick gets the `coloc policy all` default (unless it
  // has its own policy), before its first gate is written.
  for (; compute_devices_ < broker_.devices().size(); ++compute_devices_)
    policies_.apply_new_device(broker_.devices()[compute_devices_].uuid, scheduler_);
  // Pauses are the gates' books (coloc pause); the scheduler only needs to know who sits out.
  for (const auto& [serial, job] : broker_.jobs()) {
    // A job being suspended, or suspended, sits out too: its processes are locked.
    scheduler_.set_paused(serial, gates_.paused(serial) != compute::PausedBy::kNobody ||
                                      job.suspension != broker::Suspension::kNone);
    scheduler_.set_priority(serial, job.priority);
  }
  // One pass over the clients' stats pages per tick.
  const auto usages = gates_.usages();
  // Device time too: the more often it looks, the less of two processes' interleaved work falls
  // behind the job's high-water mark (compute/device_time.h); every 1 ms while a device is
  // contended, else on the sampling timer.
  look_device_time(t);
  std::vector<std::pair<broker::JobSerial, broker::Uuid>> present;
  present.reserve(usages.size());
  for (const auto& [key, u] : usages) present.push_back(key);
  scheduler_.tick(
      t,
      [&usages](broker::JobSerial j, const broker::Uuid& d) {
        auto it = usages.find({j, d});
        if (it != usages.end()) return it->second;
        compute::Usage none;
        none.drained = true;
        return none;
      },
      present);
  gates_.refresh();
  for (const compute::SchedEvent& e : scheduler_.take_events()) {
    // The job report's turns: when the job held each device.
    if (auto rec = recorders_.find(e.job); rec != recorders_.end())
      for (const broker::Uuid& d : e.devices) {
        if (e.kind == compute::SchedEvent::Kind::kTurnStart) rec->second.turn_begin(d, e.at);
        else rec->second.turn_end(d, e.at, e.kind == compute::SchedEvent::Kind::kDrainTimeout);
      }
    if (e.kind != compute::SchedEvent::Kind::kDrainTimeout) {
      log::get("compute")->debug("job {}: {} on {} device(s) (waited {:.2f} ms)", e.job,
                                 e.kind == compute::SchedEvent::Kind::kTurnStart ? "turn starts" : "turn drained",
                                 e.devices.size(), double(e.waited) / 1e6);
      continue;
    }
    const broker::Job* job = nullptr;
    auto it = broker_.jobs().find(e.job);
    if (it != broker_.jobs().end()) job = &it->second;
    log::limited(log::get("compute"), spdlog::level::warn, "drain timeout",
                 "job {}: its work on the device did not complete within {:.0f} ms of the end of its turn; the next "
                 "job's turn began anyway (its work may overlap), and it sits out its next turn",
                 job ? job->key.str() : std::to_string(e.job), double(e.waited) / 1e6);
  }
  // Re-arm: the next tick the scheduler wants (none while nothing is contended).
  Nanos next = scheduler_.next_tick(t);
  if (next == compute_armed_) return;
  compute_armed_ = next;
  itimerspec its{};
  if (next != broker::kNever) {
    its.it_value.tv_sec = time_t(next / 1000000000);
    its.it_value.tv_nsec = long(next % 1000000000);
  }
  ::timerfd_settime(compute_timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

}  // namespace coloc::engine

namespace coloc::engine {

namespace {
/// Whether process `pid` is stopped (SIGSTOP, a job-control stop, a debugger's trace stop):
/// /proc/PID/stat's state, the field after the command's closing parenthesis, is 'T' or 't'. A
/// process that cannot be read (gone, another pid namespace) is not.
bool process_stopped(int pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* paren = std::strrchr(buf, ')');
  if (!paren || paren[1] != ' ') return false;
  return paren[2] == 'T' || paren[2] == 't';
}
}  // namespace

void Server::compute_sample(Nanos t) {
  // Stopped processes (compute/priority_policy.h: a stalled high job): one small read per tracked
  // client of a high-priority job per sampling round (no other job's state is used).
  gates_.read_stopped([this](int pid, broker::JobSerial job) {
    auto it = broker_.jobs().find(job);
    return it != broker_.jobs().end() && it->second.priority == proto::Priority::kHigh && process_stopped(pid);
  });
  // Each job's device time (the union of its processes' intervals: device_time_), not the sum.
  std::map<compute::ShareWindow::Key, uint64_t> busy;
  for (const auto& [key, u] : gates_.usages()) busy.emplace(key, device_time_.total(key));
  share_window_.sample(t, busy, [&](const broker::Uuid& dev) { return scheduler_.policy(dev); });
}

void Server::look_device_time(Nanos t, std::optional<broker::ClientId> only) {
  for (const auto& [key, figs] : gates_.busy_figures(only)) {
    auto rec = recorders_.find(key.first);
    device_time_.look(t, key, figs, rec != recorders_.end() ? rec->second.mono_start() : t);
  }
}

double Server::gpu_share(broker::JobSerial job, const broker::Uuid& dev) const {
  // Measured only where the device is timesliced: elsewhere the clients track no completions (share),
  // or only some jobs' and as an upper bound (priority), so there is no share to show (null).
  const compute::PolicySettings p = scheduler_.policy(dev);
  if (p.mode != proto::PolicyMode::kTimeslice) return std::nan("");
  return share_window_.share(job, dev, p);
}

}  // namespace coloc::engine
