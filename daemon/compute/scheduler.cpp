#include "compute/scheduler.h"

#include <algorithm>

namespace coloc::compute {

Scheduler::Scheduler() = default;

// ---- settings ------------------------------------------------------------------------------------

void Scheduler::set_policy(const Uuid& dev, const PolicySettings& s) {
  // The same settings again (`coloc policy all ...` over devices that have them) keep the policy
  // object: a controller keeps what it learned (baselines, its level).
  auto dv = devices_.find(dev);
  if (dv != devices_.end() && dv->second.policy && policy(dev) == s) return;
  if (s == PolicySettings{}) settings_.erase(dev);
  else settings_[dev] = s;
  device(dev).policy = make_policy(s);
}

PolicySettings Scheduler::policy(const Uuid& dev) const {
  auto it = settings_.find(dev);
  return it == settings_.end() ? PolicySettings{} : it->second;
}

void Scheduler::set_weight(JobSerial job, uint32_t weight) {
  jobs_[job].weight = std::clamp<uint32_t>(weight, proto::kMinWeight, proto::kMaxWeight);
  if (!jobs_[job].order) jobs_[job].order = next_order_++;
}

uint32_t Scheduler::weight(JobSerial job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? proto::kDefaultWeight : it->second.weight;
}

void Scheduler::set_paused(JobSerial job, bool paused) {
  JobState& j = jobs_[job];
  if (!j.order) j.order = next_order_++;
  j.paused = paused;
}

void Scheduler::set_priority(JobSerial job, proto::Priority p) {
  JobState& j = jobs_[job];
  if (!j.order) j.order = next_order_++;
  j.priority = p;
}

void Scheduler::forget_job(JobSerial job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  for (const Uuid& d : it->second.held) {
    auto dv = devices_.find(d);
    if (dv != devices_.end() && dv->second.owner == job) dv->second.owner = 0;
  }
  jobs_.erase(it);
  present_.erase(job);
}

Scheduler::DeviceState& Scheduler::device(const Uuid& dev) {
  DeviceState& d = devices_[dev];
  if (!d.policy) d.policy = make_policy(policy(dev));
  return d;
}

const ComputePolicy& Scheduler::policy_of(const Uuid& dev) const {
  auto it = devices_.find(dev);
  if (it != devices_.end() && it->second.policy) return *it->second.policy;
  return share_;
}

// ---- queries ------------------------------------------------------------------------------------

pages::GateState Scheduler::state(JobSerial job, const Uuid& dev) const {
  auto dv = devices_.find(dev);
  if (dv != devices_.end() && dv->second.policy && dv->second.policy->controls()) {
    auto w = wishes_.find({job, dev});
    return w == wishes_.end() ? pages::GateState::kRun : w->second.state;
  }
  if (dv == devices_.end() || !dv->second.policy || !dv->second.policy->exclusive()) return pages::GateState::kRun;
  if (dv->second.owner == job) {
    auto j = jobs_.find(job);
    if (j != jobs_.end() && j->second.holding && !j->second.draining) return pages::GateState::kWindow;
  }
  return pages::GateState::kTimeslice;
}

Nanos Scheduler::window(JobSerial job, const Uuid& dev) const {
  const ComputePolicy& p = policy_of(dev);
  if (!p.controls()) return p.window();
  auto w = wishes_.find({job, dev});
  return w == wishes_.end() ? 0 : w->second.window;
}

ControlView Scheduler::control_view(const Uuid& dev) const { return policy_of(dev).view(); }

Nanos Scheduler::turn_end(JobSerial job, const Uuid& dev) const {
  auto j = jobs_.find(job);
  if (j == jobs_.end() || !j->second.holding || j->second.draining || !j->second.held.count(dev)) return 0;
  return j->second.turn_start + j->second.turn_len;
}

JobSerial Scheduler::holder(const Uuid& dev) const {
  auto dv = devices_.find(dev);
  return dv == devices_.end() ? 0 : dv->second.owner;
}

std::vector<SchedEvent> Scheduler::take_events() {
  std::vector<SchedEvent> out;
  out.swap(events_);
  return out;
}

Nanos Scheduler::next_tick(Nanos now) const {
  // Busy: a job waits for a device or a turn drains: every kTickNs. Shared by jobs that all sit
  // still: a slower look, for the first launch that will want a turn. Otherwise none.
  if (hot_) return now + kTickNs;
  if (next_control_ != broker::kNever) return std::max(now, next_control_);
  std::map<Uuid, int> on;
  for (const auto& [job, devs] : present_)
    for (const Uuid& d : devs) ++on[d];
  for (const auto& [d, n] : on)
    if (n > 1) return now + kIdleTickNs;
  return broker::kNever;
}

// ---- the state machine ------------------------------------------------------------------------------

void Scheduler::end_turn(JobSerial, JobState& j, Nanos now, TurnEnd why) {
  j.draining = true;
  j.drain_start = now;
  j.why = why;
}

void Scheduler::release(JobSerial job, JobState& j, Nanos now, bool timed_out) {
  // Only the time others wanted a device of the turn is charged (the fairness rule: scheduler.h).
  Nanos held = j.owed + (j.contended && now > j.looked ? now - j.looked : 0);
  uint32_t w = j.weight;
  Nanos charge = 0;
  for (const Uuid& d : j.held) {
    charge = std::max(charge, policy_of(d).charge(held, w));
    auto dv = devices_.find(d);
    if (dv != devices_.end() && dv->second.owner == job) dv->second.owner = 0;
  }
  j.vtime += charge;
  SchedEvent e;
  e.kind = timed_out ? SchedEvent::Kind::kDrainTimeout : SchedEvent::Kind::kDrained;
  e.job = job;
  e.devices.assign(j.held.begin(), j.held.end());
  e.at = now;
  e.waited = j.draining && now > j.drain_start ? now - j.drain_start : 0;
  e.why = j.why;
  events_.push_back(std::move(e));
  if (timed_out) j.skip_next = true;
  j.holding = j.draining = false;
  j.held.clear();
}

bool Scheduler::tick(Nanos now, const std::function<Usage(JobSerial, const Uuid&)>& usage,
                     const std::vector<std::pair<JobSerial, Uuid>>& present) {
  bool changed = false;
  // Who is on which exclusive device now.
  present_.clear();
  for (const auto& [job, dev] : present) {
    DeviceState& d = device(dev);
    if (!d.policy->exclusive()) continue;
    present_[job].insert(dev);
    JobState& j = jobs_[job];
    if (!j.order) j.order = next_order_++;
  }

  // Devices a turn lost (the job left them, or they stopped being exclusive) are free at once; the
  // rest of a gang's turn drains as usual.
  for (auto& [job, j] : jobs_) {
    if (!j.holding) continue;
    const std::set<Uuid>& on = present_[job];
    std::vector<Uuid> lost;
    for (const Uuid& d : j.held)
      if (!on.count(d) || !policy_of(d).exclusive()) lost.push_back(d);
    if (lost.empty()) continue;
    changed = true;
    if (lost.size() == j.held.size()) {
      j.why = TurnEnd::kLeft;
      release(job, j, now, false);
      continue;
    }
    for (const Uuid& d : lost) {
      j.held.erase(d);
      auto dv = devices_.find(d);
      if (dv != devices_.end() && dv->second.owner == job) dv->second.owner = 0;
    }
    if (!j.draining) end_turn(job, j, now, TurnEnd::kLeft);
  }

  // Who wants a turn: a launch of it waits at a gate on any of its devices (a gang that waits on
  // one device wants all of them: its turn takes them together).
  std::map<JobSerial, bool> wants;
  for (const auto& [k, devs] : present_) {
    bool w = false;
    for (const Uuid& d : devs) w |= usage(k, d).wants;
    wants[k] = w;
  }
  // Whether a job other than `job` (and not paused) wants a device of `devs` now.
  auto others_want = [&](JobSerial job, const std::set<Uuid>& devs) {
    for (const auto& [k, kdevs] : present_) {
      if (k == job || !wants[k]) continue;
      auto kj = jobs_.find(k);
      if (kj != jobs_.end() && kj->second.paused) continue;
      for (const Uuid& d : kdevs)
        if (devs.count(d)) return true;
    }
    return false;
  };
  // Turns in progress: the time since the last look counts toward the holder's charge only when
  // another job wanted its device then too (contended at both looks). A turn that runs on while
  // nobody else wants the device (alone, or the others idle or paused) costs nothing, however
  // long: a newcomer then does not find the holder's solo hours waiting as its debt.
  for (auto& [job, j] : jobs_) {
    if (!j.holding) continue;
    if (j.contended && now > j.looked) j.owed += now - j.looked;
    j.contended = others_want(job, j.held);
    j.looked = now;
  }
  // A job that starts wanting the device (new, or back from idling) starts at the least virtual
  // time of those already active: no credit hoarded while idle, and no debt either (a holder's
  // time alone was never charged, above).
  Nanos floor = broker::kNever;
  for (const auto& [k, j] : jobs_)
    if (j.active) floor = std::min(floor, j.vtime);
  for (auto& [k, j] : jobs_) {
    const bool active = j.holding || wants[k];
    if (active && !j.active && floor != broker::kNever) j.vtime = std::max(j.vtime, floor);
    j.active = active;
  }

  // Holders: end the turn when it is over (or the holder idles, or is paused) and another wants a
  // device of it.
  for (auto& [job, j] : jobs_) {
    if (!j.holding || j.draining) continue;
    if (j.paused) {
      end_turn(job, j, now, TurnEnd::kPaused);
      changed = true;
    } else if (j.contended) {
      bool idle = true;
      for (const Uuid& d : j.held) {
        Usage u = usage(job, d);
        idle &= u.drained && !u.wants && now >= u.last_activity + kIdleNs;
      }
      if (now >= j.turn_start + j.turn_len) {
        end_turn(job, j, now, TurnEnd::kExpired);
        changed = true;
      } else if (idle) {
        end_turn(job, j, now, TurnEnd::kIdle);
        changed = true;
      }
    }
  }

  // Draining turns: the devices are free once the holder drained, or after the grace.
  for (auto& [job, j] : jobs_) {
    if (!j.draining) continue;
    bool drained = true;
    Nanos grace = 0;
    for (const Uuid& d : j.held) {
      drained &= usage(job, d).drained;
      grace = std::max(grace, policy_of(d).grace());
    }
    // Never in the tick that closed the gate: the engine writes the closed gate after the tick,
    // and only a look after that write sees every launch that passed the open one (pages.h:
    // StatsPage::launching).
    if (now <= j.drain_start) continue;
    if (drained) {
      release(job, j, now, false);
      changed = true;
    } else if (now >= j.drain_start + grace) {
      release(job, j, now, true);
      changed = true;
    }
  }

  // Free devices go to the jobs that want them, in the policy's order; a job claims all its
  // devices at once (a gang), and a device a job ahead claimed stays free for it.
  std::vector<TurnCandidate> cands;
  for (const auto& [job, devs] : present_) {
    JobState& j = jobs_[job];
    if (j.holding || j.paused || devs.empty()) continue;
    bool alone = true;
    for (const Uuid& d : devs)
      for (const auto& [k, kd] : present_) alone &= k == job || !kd.count(d);
    if (!wants[job] && !alone) continue;
    cands.push_back({job, j.weight, j.vtime, j.order});
  }
  if (!cands.empty()) {
    const ComputePolicy& pol = policy_of(*present_[cands.front().job].begin());
    std::sort(cands.begin(), cands.end(), [&](const TurnCandidate& a, const TurnCandidate& b) { return pol.before(a, b); });
    // A job that lost the device on a drain timeout sits out one turn when another wants it.
    if (cands.size() > 1)
      for (size_t i = 0; i < cands.size(); ++i)
        if (jobs_[cands[i].job].skip_next) {
          jobs_[cands[i].job].skip_next = false;
          TurnCandidate c = cands[i];
          cands.erase(cands.begin() + long(i));
          cands.push_back(c);
          break;
        }
    // Claimed by a job ahead in the order (free now, or held by a turn that is to end).
    std::set<Uuid> claimed;
    for (const TurnCandidate& c : cands) {
      const std::set<Uuid>& devs = present_[c.job];
      bool clash = false;
      for (const Uuid& d : devs) clash |= claimed.count(d) > 0;
      if (clash) continue;
      claimed.insert(devs.begin(), devs.end());
      bool all_free = true;
      for (const Uuid& d : devs) all_free &= device(d).owner == 0;
      if (!all_free) continue;
      JobState& j = jobs_[c.job];
      j.holding = true;
      j.draining = false;
      j.skip_next = false;
      j.turn_start = now;
      j.turn_len = 0;
      j.held = devs;
      j.owed = 0;
      j.looked = now;
      j.contended = others_want(c.job, devs);
      for (const Uuid& d : devs) {
        device(d).owner = c.job;
        j.turn_len = std::max(j.turn_len, policy_of(d).turn(j.weight));
      }
      SchedEvent e;
      e.kind = SchedEvent::Kind::kTurnStart;
      e.job = c.job;
      e.devices.assign(devs.begin(), devs.end());
      e.at = now;
      events_.push_back(std::move(e));
      changed = true;
    }
  }
  changed |= control(now, usage, present);
  // Hot until nobody waits and nothing drains (next_tick).
  hot_ = false;
  for (const auto& [k, j] : jobs_) hot_ |= j.draining || (wants[k] && !j.holding);
  return changed;
}

}  // namespace coloc::compute

namespace coloc::compute {

bool Scheduler::control(Nanos now, const std::function<Usage(JobSerial, const Uuid&)>& usage,
                        const std::vector<std::pair<JobSerial, Uuid>>& present) {
  std::map<Uuid, std::vector<DeviceJob>> on;
  for (const auto& [job, dev] : present) {
    DeviceState& d = device(dev);
    if (!d.policy->controls()) continue;
    auto j = jobs_.find(job);
    on[dev].push_back({job, j == jobs_.end() ? proto::Priority::kNormal : j->second.priority, usage(job, dev)});
  }
  std::map<std::pair<JobSerial, Uuid>, GateWish> wishes;
  next_control_ = broker::kNever;
  for (auto& [dev, d] : devices_) {
    if (!d.policy || !d.policy->controls()) continue;
    auto it = on.find(dev);
    static const std::vector<DeviceJob> none;
    for (const GateWish& w : d.policy->control(now, it == on.end() ? none : it->second)) wishes[{w.job, dev}] = w;
    next_control_ = std::min(next_control_, d.policy->next_control(now));
  }
  auto same = [](const GateWish& a, const GateWish& b) { return a.state == b.state && a.window == b.window; };
  bool changed = wishes.size() != wishes_.size();
  for (auto a = wishes.begin(), b = wishes_.begin(); !changed && a != wishes.end(); ++a, ++b)
    changed = a->first != b->first || !same(a->second, b->second);
  wishes_.swap(wishes);
  return changed;
}

}  // namespace coloc::compute
