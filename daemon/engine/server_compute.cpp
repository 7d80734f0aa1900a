// daemon/engine/server_compute.cpp — the engine's glue to the compute side: the scheduler's timer,
// feeding it each job's usage from the stats pages (compute/gates.h), and writing the gates it
// asks for. The decisions are compute/scheduler.h's.
#include <sys/timerfd.h>
#include <unistd.h>

#include <cmath>
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
    scheduler_.set_paused(serial, gates_.paused(serial) != compute::PausedBy::kNobody);
    scheduler_.set_priority(serial, job.priority);
  }
  // One pass over the clients' stats pages per tick.
  const auto usages = gates_.usages();
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
constexpr broker::Nanos kShareWindow = 10'000'000'000;  // coloc status' GPU SHARE: the last 10 s
}

void Server::compute_sample(Nanos t) {
  std::set<std::pair<broker::JobSerial, broker::Uuid>> seen;
  // A device whose policy changed since the last sample starts its window afresh: what its jobs
  // ran under the previous policy is no share of this one's (a priority device's tracking counts
  // some jobs' work as an upper bound).
  std::set<broker::Uuid> changed;
  for (const auto& [key, u] : gates_.usages()) {
    const compute::PolicySettings now_policy = scheduler_.policy(key.second);
    auto [pit, fresh] = share_policy_.try_emplace(key.second, now_policy);
    if (!fresh && !(pit->second == now_policy)) changed.insert(key.second);
  }
  for (const broker::Uuid& dev : changed) share_policy_[dev] = scheduler_.policy(dev);
  for (const auto& [key, u] : gates_.usages()) {
    seen.insert(key);
    auto& h = busy_history_[key];
    const uint64_t busy = u.busy_ns;
    if (changed.count(key.second)) h.clear();
    if (!h.empty() && busy < h.back().second) h.clear();  // a process left: its counts went with it
    h.emplace_back(t, busy);
    while (h.size() > 2 && h[1].first + kShareWindow <= t) h.pop_front();
  }
  for (auto it = busy_history_.begin(); it != busy_history_.end();)
    it = seen.count(it->first) ? std::next(it) : busy_history_.erase(it);
}

double Server::gpu_share(broker::JobSerial job, const broker::Uuid& dev) const {
  // Measured only where the device is timesliced: elsewhere the clients track no completions (share),
  // or only some jobs' and as an upper bound (priority), so there is no share to show (null).
  if (scheduler_.policy(dev).mode != proto::PolicyMode::kTimeslice) return std::nan("");
  // Changed since the last sample: its window starts at the next one.
  if (auto p = share_policy_.find(dev); p == share_policy_.end() || !(p->second == scheduler_.policy(dev)))
    return std::nan("");
  auto it = busy_history_.find({job, dev});
  if (it == busy_history_.end() || it->second.size() < 2) return std::nan("");
  const auto& [t0, b0] = it->second.front();
  const auto& [t1, b1] = it->second.back();
  if (t1 <= t0) return std::nan("");
  return std::min(1.0, double(b1 - b0) / double(t1 - t0));
}

}  // namespace coloc::engine
