// daemon/broker/broker_suspend.cpp — the books of a suspension (broker.h, "Suspension"; issue 29):
// a job's memory leaves the devices' books once its processes are checkpointed to host memory, and
// comes back through a queued restore request, admitted when it fits again.
#include <algorithm>
#include <map>

#include "broker/arith.h"
#include "broker/broker.h"
#include "util/log.h"

namespace coloc::broker {

namespace {

/// Stops `w`'s wait clock: it keeps what was left of its timeout.
void freeze(Waiter& w, Nanos now) {
  if (w.frozen) return;
  w.frozen = true;
  w.left = w.deadline == kNever ? kNever : sat_sub(w.deadline, now);
  w.deadline = kNever;
}

/// Starts it again with what it had left.
void thaw(Waiter& w, Nanos now) {
  if (!w.frozen) return;
  w.frozen = false;
  w.deadline = w.left == kNever ? kNever : sat_add(now, w.left);
  w.left = kNever;
}

}  // namespace

Bytes Broker::restore_need(const Job& job, uint32_t device) const {
  if (!off_books(job)) return 0;
  Bytes books = 0;
  std::map<int32_t, Bytes> driver;  // per process: a process with two connections has one figure
  for (ClientId id : job.clients) {
    const Client& c = clients_.at(id);
    for (const ClientSlot& s : c.slots) {
      if (!s.attached || s.device != device) continue;
      books = sat_add(books, sat_add(s.saved_grant, s.saved_overhead));
      if (s.saved_used != kUnknown) driver[c.pid] = std::max(driver[c.pid], s.saved_used);
    }
  }
  Bytes used = 0;
  for (auto [pid, b] : driver) used = sat_add(used, b);
  return std::max(books, used);
}

bool Broker::begin_suspend(JobSerial serial, Nanos now, bool held) {
  (void)now;
  auto it = jobs_.find(serial);
  if (it == jobs_.end() || it->second.suspension != Suspension::kNone) return false;
  Job& job = it->second;
  // What the device holds for each process now, by the driver's own figure: its restore needs that
  // much again (the checkpoint will take the process off the driver's list).
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (ClientSlot& s : c.slots) {
      if (!s.attached) continue;
      s.saved_used = kUnknown;
      const Device& d = devices_[s.device];
      if (!d.processes_known || !d.processes_ours) continue;
      for (const ProcessFigure& p : d.processes)
        if (p.pid == c.pid && p.used != kUnknown) s.saved_used = std::min(p.used, d.capacity);
    }
  }
  job.suspension = Suspension::kSuspending;
  job.restore_held = held;
  return true;
}

bool Broker::release_restore(JobSerial serial, Nanos now) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end()) return false;
  Job& job = it->second;
  if (job.suspension != Suspension::kSuspending && job.suspension != Suspension::kSuspended) return false;
  job.restore_held = false;
  // Its place among the restores: from now (a held suspension did not queue until released).
  job.restore_since = now;
  pump(now);
  return true;
}

void Broker::end_suspend(JobSerial serial, bool ok, Nanos now) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end() || it->second.suspension != Suspension::kSuspending) return;
  Job& job = it->second;
  if (!ok) {
    job.suspension = Suspension::kNone;
    job.restore_held = false;
    return;
  }
  // Its grants and overheads go aside: the claims of its processes count nothing from here on (the
  // control pages keep the grants: a locked process allocates nothing, and gets them back as they
  // were).
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (ClientSlot& s : c.slots) {
      if (!s.attached) continue;
      s.saved_grant = s.grant;
      s.saved_overhead = s.overhead;
      s.grant = s.overhead = s.overhead_reading = 0;
      s.overhead_estimated = false;
      s.footprint_due = false;
      s.floor = 0;
      s.excess = s.excess_reading = s.overclaim = s.overclaim_reading = 0;
    }
  }
  Bytes freed = 0;
  for (auto& [dev, jd] : job.devices) {
    freed = sat_add(freed, std::max(jd.reserved, jd.granted));
    jd.saved_reserved = jd.reserved;
    jd.overhead = 0;
    set_job_device(job, dev, 0, 0);
  }
  for (Waiter& w : waiters_)
    if (w.job == serial) freeze(w, now);
  job.suspension = Suspension::kSuspended;
  job.suspended_at = job.restore_since = now;
  log::get("broker")->info("job {} suspended: {} left the devices' books; its restore waits for that room again",
                           job.key.str(), mib(freed));
  pump(now);
}

std::vector<JobSerial> Broker::take_restores() { return std::exchange(restores_, {}); }

JobSerial Broker::restore_ahead(uint32_t device, Priority priority, JobSerial self) const {
  const Job* best = nullptr;
  for (const auto& [serial, j] : jobs_) {
    if (serial == self || j.suspension != Suspension::kSuspended || j.restore_held || j.priority < priority) continue;
    if (restore_need(j, device) == 0) continue;
    if (!best || j.priority > best->priority || (j.priority == best->priority && j.restore_since < best->restore_since))
      best = &j;
  }
  return best ? best->serial : 0;
}

void Broker::check_restores(Nanos now) {
  if (holding()) return;
  std::vector<Job*> line;
  for (auto& [serial, job] : jobs_)
    if (job.suspension == Suspension::kSuspended && !job.restore_held) line.push_back(&job);
  if (line.empty()) return;
  // Higher priority first, then the earlier suspended (the order the restore requests queued in).
  std::stable_sort(line.begin(), line.end(), [](const Job* a, const Job* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->restore_since < b->restore_since;
  });
  std::vector<char> blocked(devices_.size(), 0);
  for (Job* j : line) {
    std::vector<std::pair<uint32_t, Bytes>> needs;
    Bytes total = 0;
    bool fits = true;
    for (const auto& [dev, jd] : j->devices) {
      const Bytes need = restore_need(*j, dev);
      if (need == 0) continue;
      needs.emplace_back(dev, need);
      total = sat_add(total, need);
      if (blocked[dev] || need > available(dev)) fits = false;
      // A request of a higher priority waiting there goes first.
      for (const Waiter& w : waiters_)
        if (!w.frozen && w.device_short && waits_on(w, dev) && jobs_.at(w.job).priority > j->priority) fits = false;
    }
    if (config_.max_per_user && total > sat_sub(*config_.max_per_user, user_committed(j->key.uid))) fits = false;
    if (!fits) {
      for (auto [dev, need] : needs) blocked[dev] = 1;  // nothing behind it takes its room
      continue;
    }
    for (auto [dev, need] : needs) set_job_device(*j, dev, need, 0);
    j->suspension = Suspension::kRestoring;
    restores_.push_back(j->serial);
    log::get("broker")->info("job {}: restore admitted after {:.3f} s suspended ({} reserved)", j->key.str(),
                             double(sat_sub(now, j->suspended_at)) / 1e9, mib(total));
  }
}

void Broker::end_restore(JobSerial serial, bool ok, Nanos now) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end() || it->second.suspension != Suspension::kRestoring) return;
  Job& job = it->second;
  if (!ok) {
    for (auto& [dev, jd] : job.devices) set_job_device(job, dev, 0, 0);
    job.suspension = Suspension::kLost;
    log::get("broker")->warn("job {}: its restore failed; its processes stay suspended and hold nothing on the devices",
                             job.key.str());
    pump(now);
    return;
  }
  // Grants and overheads as they were (the control pages still say so).
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (ClientSlot& s : c.slots) {
      if (!s.attached) continue;
      JobDevice& jd = job.devices[s.device];
      s.grant = s.saved_grant;
      s.overhead = s.saved_overhead;
      s.overhead_reading = s.overhead;
      jd.overhead += s.overhead;
      set_job_device(job, s.device, jd.reserved, jd.granted + s.grant + s.overhead);
      s.saved_grant = s.saved_overhead = 0;
      s.saved_used = kUnknown;
    }
  }
  // Its reservation back where it fits (the need reserved for the restore may be less).
  for (auto& [dev, jd] : job.devices) {
    const Bytes limit = limit_on(job, dev);
    const Bytes wanted = limit == kNoLimit ? jd.saved_reserved : std::min(jd.saved_reserved, limit);
    jd.saved_reserved = 0;
    if (wanted > jd.reserved) try_raise(job, dev, wanted);
    else set_job_device(job, dev, wanted, jd.granted);
  }
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (uint32_t s = 0; s < pages::kSlots; ++s)
      if (c.slots[s].attached)
        c.control->slots[s].reservation.store(job.devices[c.slots[s].device].reserved, std::memory_order_relaxed);
  }
  for (Waiter& w : waiters_)
    if (w.job == serial) thaw(w, now);
  job.suspension = Suspension::kNone;
  log::get("broker")->info("job {} restored after {:.3f} s", job.key.str(), double(sat_sub(now, job.suspended_at)) / 1e9);
  pump(now);
}

}  // namespace coloc::broker
