// daemon/broker/broker_limits.cpp — an admin's changes to a running job (`coloc set`): its memory
// limit, with the reservation that follows it on each device, and its priority.
#include <algorithm>

#include "broker/arith.h"
#include "broker/broker.h"
#include "util/log.h"

namespace coloc::broker {

bool Broker::set_limit(JobSerial serial, Bytes limit, Nanos now, std::vector<ReservationChange>* changes) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end() || limit == 0) return false;
  Job& job = it->second;
  const bool raised = limit > job.limit;  // from no limit to one is a lowering: no reservation appears
  job.limit = limit;
  auto lg = log::get("broker");
  if (off_books(job)) {  // suspended: its books are aside; the restore applies the new limit
    for (ClientId id : job.clients) {
      Client& c = clients_.at(id);
      for (uint32_t s = 0; s < pages::kSlots; ++s)
        if (c.slots[s].attached)
          c.control->slots[s].limit.store(limit_on(job, c.slots[s].device), std::memory_order_relaxed);
    }
    lg->info("job {}: limit set to {} (suspended: it applies at the restore)", job.key.str(), mib(limit));
    return true;
  }
  for (auto& [dev, jd] : job.devices) {
    if (!jd.admitted) continue;
    const Device& d = devices_[dev];
    ReservationChange ch;
    ch.device = dev;
    ch.before = jd.reserved;
    ch.wanted = reservation_for(limit_on(job, dev), d);
    if (!raised || ch.wanted <= jd.reserved) {
      ch.wanted = std::min(ch.wanted, jd.reserved);
      set_job_device(job, dev, ch.wanted, jd.granted);
      ch.outcome = ch.wanted < ch.before ? ReservationChange::kLowered : ReservationChange::kUnchanged;
    } else {
      ch = try_raise(job, dev, ch.wanted);
      if (ch.outcome == ReservationChange::kRaised) jd.source = Footprint::kMem;
      else
        lg->info("job {}: reservation on {} kept at {} ({} does not fit now: {} available{}); it grows by ordinary "
                 "grants",
                 job.key.str(), d.uuid.str(), mib(jd.reserved), mib(ch.wanted), mib(ch.available),
                 ch.outcome == ReservationChange::kKeptOthersWait ? ", and other jobs' requests wait there"
                 : ch.outcome == ReservationChange::kKeptUserCap  ? ", over the user's cap"
                                                                  : "");
    }
    if (limit != kNoLimit) jd.source = Footprint::kMem;  // a declared limit outranks every estimate
    ch.after = jd.reserved;
    if (ch.after != ch.before)
      lg->info("job {}: reservation on {} {} from {} to {}", job.key.str(), d.uuid.str(),
               ch.after > ch.before ? "raised" : "lowered", mib(ch.before), mib(ch.after));
    if (changes) changes->push_back(ch);
    if (job.devices[dev].granted > limit_on(job, dev)) trim_job(job, dev);
  }
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (uint32_t s = 0; s < pages::kSlots; ++s) {
      if (!c.slots[s].attached) continue;
      c.control->slots[s].limit.store(limit_on(job, c.slots[s].device), std::memory_order_relaxed);
      c.control->slots[s].reservation.store(job.devices[c.slots[s].device].reserved, std::memory_order_relaxed);
    }
  }
  log::get("broker")->info("job {}: limit set to {}", job.key.str(), mib(limit));
  pump(now);
  return true;
}

ReservationChange Broker::try_raise(Job& job, uint32_t dev, Bytes wanted) {
  // The reservation follows when the larger footprint fits now, all of it, without
  // over-committing the device or the user's cap and without taking memory a request of another
  // job is waiting for. Otherwise it stays, and the job grows by ordinary grants.
  JobDevice& jd = job.devices[dev];
  ReservationChange ch;
  ch.device = dev;
  ch.before = jd.reserved;
  ch.wanted = wanted;
  const Bytes cur = std::max(jd.reserved, jd.granted);
  const Bytes extra = sat_sub(std::max(wanted, jd.granted), cur);
  bool others_wait = false;
  for (const Waiter& w : waiters_) {
    if (w.job == job.serial || !w.device_short || w.frozen) continue;
    if (w.admission) {
      for (const AttachNeed& n : w.devices) others_wait |= n.device == dev;
    } else {
      others_wait |= clients_.at(w.client).slots[w.slot].device == dev;
    }
  }
  const bool user_ok = !config_.max_per_user || sat_add(user_committed(job.key.uid), extra) <= *config_.max_per_user;
  ch.available = available(dev);
  if (!others_wait && user_ok && extra <= ch.available) {
    set_job_device(job, dev, wanted, jd.granted);
    ch.outcome = ReservationChange::kRaised;
  } else {
    ch.outcome = others_wait ? ReservationChange::kKeptOthersWait
                 : !user_ok  ? ReservationChange::kKeptUserCap
                             : ReservationChange::kKeptNoRoom;
  }
  ch.after = jd.reserved;
  return ch;
}

bool Broker::set_prediction(JobSerial serial, uint32_t dev, Bytes predicted, Nanos now, ReservationChange* change) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end()) return false;
  Job& job = it->second;
  auto jit = job.devices.find(dev);
  if (jit == job.devices.end() || !jit->second.admitted || dev >= devices_.size()) return false;
  JobDevice& jd = jit->second;
  const Device& d = devices_[dev];
  jd.predicted = predicted;
  ReservationChange ch;
  ch.device = dev;
  ch.before = ch.after = jd.reserved;
  // Precedence: a declared limit, then the history, then the declared estimate, then this
  // prediction. A history or declared estimate below what this run has shown it needs (its stable
  // prediction) is raised like an online one: raising never fails anything, and the job will need
  // that much again.
  const bool mine = limit_on(job, dev) == kNoLimit && jd.source != Footprint::kMem && !off_books(job);
  const Bytes wanted = std::min(predicted, sat_sub(d.capacity, d.headroom));
  if (mine && wanted > jd.reserved) {
    ch = try_raise(job, dev, wanted);
    auto lg = log::get("broker");
    if (ch.outcome == ReservationChange::kRaised) {
      jd.source = Footprint::kOnline;
      // The figure is the client's: rate-limited per user, so no job can flood the log.
      log::limited(lg, spdlog::level::info, "prediction uid " + std::to_string(job.key.uid),
                   "job {}: reservation on {} raised from {} to {} (its online prediction)", job.key.str(),
                   d.uuid.str(), mib(ch.before), mib(ch.after));
      for (ClientId id : job.clients) {
        Client& c = clients_.at(id);
        for (uint32_t s = 0; s < pages::kSlots; ++s)
          if (c.slots[s].attached && c.slots[s].device == dev)
            c.control->slots[s].reservation.store(jd.reserved, std::memory_order_relaxed);
      }
    }
  }
  if (change) *change = ch;
  (void)now;
  return true;
}

bool Broker::restore_reservation(JobSerial serial, uint32_t dev, Bytes bytes, Footprint source, ReservationChange* change) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end() || dev >= devices_.size()) return false;
  Job& job = it->second;
  auto jit = job.devices.find(dev);
  if (jit == job.devices.end() || !jit->second.admitted) return false;
  JobDevice& jd = jit->second;
  ReservationChange ch;
  ch.device = dev;
  ch.before = ch.after = jd.reserved;
  const Bytes wanted = std::min(bytes, sat_sub(devices_[dev].capacity, devices_[dev].headroom));
  if (limit_on(job, dev) == kNoLimit && !off_books(job) &&
      (source == Footprint::kHistory || source == Footprint::kEstimate || source == Footprint::kOnline) &&
      wanted > jd.reserved) {
    ch = try_raise(job, dev, wanted);
    if (ch.outcome == ReservationChange::kRaised) {
      jd.source = source;
      for (ClientId id : job.clients) {
        Client& c = clients_.at(id);
        for (uint32_t s = 0; s < pages::kSlots; ++s)
          if (c.slots[s].attached && c.slots[s].device == dev)
            c.control->slots[s].reservation.store(jd.reserved, std::memory_order_relaxed);
      }
    }
  }
  if (change) *change = ch;
  return true;
}

bool Broker::set_priority(JobSerial serial, Priority priority, Nanos now) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end()) return false;
  it->second.priority = priority;
  for (ClientId id : it->second.clients)
    clients_.at(id).control->priority.store(uint32_t(priority), std::memory_order_relaxed);
  log::get("broker")->info("job {}: priority set to {}", it->second.key.str(), proto::priority_name(priority));
  pump(now);
  return true;
}

}  // namespace coloc::broker
