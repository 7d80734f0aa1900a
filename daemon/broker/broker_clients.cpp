// daemon/broker/broker_clients.cpp — the Broker's clients (broker.h, "The books", client): a
// process registering, a restarted colocd taking back a process's ledger (resume), a process
// leaving; and each process's driver overhead on a device, from the driver's own per-process figure
// or its context footprint (overhead.h).
#include <algorithm>

#include "broker/arith.h"
#include "broker/broker.h"
#include "broker/overhead.h"
#include "util/log.h"

namespace coloc::broker {

// ---- driver overhead ----------------------------------------------------------------------------

Bytes Broker::overhead(uint32_t device) const {
  Bytes sum = 0;
  for (auto [id, slot] : devices_[device].attachments) sum = sat_add(sum, clients_.at(id).slots[slot].overhead);
  return sum;
}

void Broker::set_overhead(ClientId id, uint32_t slot, Bytes overhead, Nanos now) {
  auto it = clients_.find(id);
  if (it == clients_.end() || slot >= pages::kSlots || !it->second.slots[slot].attached) return;
  Client& c = it->second;
  if (jobs_.at(c.job).suspension != Suspension::kNone) return;  // its books are aside (or going)
  ClientSlot& s = c.slots[slot];
  const Bytes reading = std::min(overhead, devices_[s.device].capacity);
  if (s.overhead_estimated) {  // the driver's own figure replaces the footprint's estimate
    s.overhead_estimated = false;
    s.overhead_reading = reading;
    book_overhead(c, slot, reading, "the driver's figure beyond the ledger", now);
    return;
  }
  overhead = settle_overhead(s.overhead, s.overhead_reading, reading);
  s.overhead_reading = reading;
  book_overhead(c, slot, overhead, "the driver's figure beyond the ledger", now);
}

void Broker::context_footprint(ClientId id, uint32_t slot, Bytes physical_free, Bytes in_use, bool measured,
                               Nanos now) {
  auto it = clients_.find(id);
  if (it == clients_.end() || slot >= pages::kSlots || !it->second.slots[slot].attached) return;
  Client& c = it->second;
  if (off_books(jobs_.at(c.job))) return;
  ClientSlot& s = c.slots[slot];
  const uint32_t dev = s.device;
  const Device& d = devices_[dev];
  if (physical_free != kUnknown && physical_free > d.capacity) physical_free = kUnknown;
  const bool first = s.footprint_due;
  s.footprint_due = false;
  if (first && s.baseline_known && physical_free != kUnknown && s.overhead == 0) {
    const Bytes used = d.capacity - physical_free;
    Bytes estimate = sat_sub(used, sat_add(coloc_in_use(d, &c, slot, in_use), s.outside_before));
    // The process's in-use is its own word: no more than the job could have been granted.
    Job& job = job_of(c);
    const JobDevice& jd = job.devices[dev];
    const Bytes limit = limit_on(job, dev);
    if (limit != kNoLimit) estimate = std::min(estimate, sat_sub(limit, jd.granted));
    const Bytes unused_reservation = sat_sub(jd.reserved, jd.granted);
    estimate = std::min(estimate, sat_add(available(dev), unused_reservation));
    if (config_.max_per_user)  // nor past its user's cap, as no grant goes
      estimate = std::min(estimate, sat_add(sat_sub(*config_.max_per_user, user_committed(c.uid)), unused_reservation));
    if (estimate > 0) {
      s.overhead_reading = estimate;
      book_overhead(c, slot, estimate, "estimated from the device's free memory around its first context", now);
      s.overhead_estimated = true;
    }
  }
  if (physical_free == kUnknown) return;
  if (measured) refresh_outside(dev, physical_free, now);
  else report_outside(dev, physical_free, now, c, slot, in_use, 0);
}

void Broker::book_overhead(Client& c, uint32_t slot, Bytes overhead, const char* source, Nanos now) {
  ClientSlot& s = c.slots[slot];
  const Bytes old = s.overhead;
  if (overhead == old) return;
  Job& job = job_of(c);
  JobDevice& jd = job.devices[s.device];
  jd.overhead = jd.overhead - old + overhead;
  set_job_device(job, s.device, jd.reserved, jd.granted - old + overhead);
  s.overhead = overhead;
  c.control->slots[slot].overhead.store(overhead, std::memory_order_relaxed);  // for a re-registration
  publish_job_others(s.device);  // the job's view (a refusal's figures, cuMemGetInfo) sees it now
  if (overhead > old) {
    log::limited(log::get("broker"), spdlog::level::info, "overhead uid " + std::to_string(c.uid),
                 "job {} (pid {}): driver overhead on device {} is {} ({}); charged to the job", job.key.str(),
                 c.pid, devices_[s.device].uuid.str(), mib(overhead), source);
    if (jd.granted > limit_on(job, s.device)) trim_job(job, s.device);
  } else {
    pump(now);  // room freed
  }
}

// ---- clients ------------------------------------------------------------------------------------

ClientId Broker::add_client(const ClientSpec& spec, pages::ControlPage* control, pages::StatsPage* stats, Nanos now) {
  assert(control && stats && !spec.job_id.empty());
  JobKey key{spec.uid, spec.job_id};
  JobSerial serial;
  if (auto it = job_index_.find(key); it != job_index_.end()) {
    serial = it->second;
  } else {
    serial = next_job_++;
    Job j;
    j.serial = serial;
    j.key = key;
    j.priority = spec.priority;
    j.on_full = spec.on_full;
    j.limit = spec.limit == 0 ? kNoLimit : spec.limit;
    j.wait_timeout = spec.wait_timeout ? spec.wait_timeout : config_.default_wait_timeout;
    j.admission_wait_timeout = spec.wait_timeout ? spec.wait_timeout : config_.admission_wait_timeout;
    j.age = spec.age;
    j.started = now;
    jobs_.emplace(serial, std::move(j));
    job_index_[key] = serial;
    event(Event::Kind::kJobStarted, jobs_.at(serial), now);
  }
  Job& job = jobs_.at(serial);
  if (job.estimate == 0) job.estimate = spec.estimate;  // the first client that declares one
  Client c;
  c.id = next_client_++;
  c.job = serial;
  c.uid = spec.uid;
  c.pid = spec.pid;
  c.control = control;
  c.stats = stats;
  c.anchor = spec.anchor;
  if (spec.anchor) ++job.anchors;
  control->priority.store(uint32_t(job.priority), std::memory_order_relaxed);
  job.clients.push_back(c.id);
  ClientId id = c.id;
  clients_.emplace(id, std::move(c));
  return id;
}

void Broker::resume(ClientId id, std::span<const ResumeEntry> ledger, Nanos now, bool expected) {
  Client& c = clients_.at(id);
  Job& job = job_of(c);
  assert(ledger.size() <= pages::kSlots);
  for (uint32_t slot = 0; slot < ledger.size(); ++slot) {
    const ResumeEntry& e = ledger[slot];
    uint32_t dev = device_for(e.uuid, e.capacity, e.measured, c, now);
    Device& d = devices_[dev];
    Bytes in_use = e.in_use;
    if (e.physical_free != kUnknown && in_use > sat_sub(d.capacity, e.physical_free)) {
      ++d.ledger_mismatches;
      log::limited(log::get("broker"), spdlog::level::warn, "resume uid " + std::to_string(c.uid),
                   "job {}: resumed ledger claims {} in use on {}, more than the device shows used; clamped",
                               job.key.str(), mib(in_use), d.uuid.str());
      in_use = sat_sub(d.capacity, e.physical_free);
    }
    // The in-use is the client's word. Where the driver says what the process holds there, no
    // more of it is coloc's; and only memory known to be in use is granted past what fits: the
    // driver's figure, or the ledger of a process the restart expected (one registered with the
    // previous colocd). Any other re-registration gets what fits, within its job's limit, like
    // a growth would, and the rest of its claim counts as used outside coloc.
    const bool verified = e.driver_used != kUnknown;
    if (verified && in_use > e.driver_used) in_use = e.driver_used;
    const bool forced = expected || verified;
    // Until now the device showed this memory in use but no coloc client claimed it: an estimate
    // made meanwhile counted it as used outside coloc. It is coloc's again.
    // (Only memory known to be in use: an unconfirmed claim must not make room for itself.)
    if (d.outside_known && forced) d.outside = sat_sub(d.outside, in_use);
    JobDevice& jd = job.devices[dev];
    // The limit the process saw there (its control page: min(the job's limit, the cap there))
    // below the job's limit was a cap on the device, or a `coloc set` lowering that this daemon
    // has no saved state of: either way it holds there again. The process's own cap (e.cap) is
    // not the job's: it bound that process alone before the restart, and its library still holds
    // it to it. (Taken as the job's, a joining process's COLOC_MEM_LIMIT_<n> would have cut the
    // limit of every process of the job there at each restart.)
    const Bytes seen = e.limit != 0 && e.limit < job.limit ? e.limit : kNoLimit;
    jd.cap = std::min(jd.cap, seen);
    // A resumed job gets back what it had only as far as it fits: a job that missed the resume
    // grace may find its memory given to a newcomer meanwhile. What it really has in use cannot
    // be taken away; its surplus grant and its reservation are cut to what is left.
    const Bytes cur = jd.admitted ? std::max(jd.reserved, jd.granted) : 0;
    // The most the job may commit on the device. During the restart hold nobody new is admitted,
    // and the outside estimate still counts the memory of processes (of this job and of others)
    // that have not re-registered yet, which this job's reservation may already cover: only the
    // device's capacity bounds it then (end_hold warns if the books do not fit once all are back).
    const Bytes room = holding() ? sat_sub(sat_sub(d.capacity, d.headroom), d.committed) : available(dev);
    const Bytes fits = sat_add(cur, room);
    const Bytes asked = std::min(std::max(e.grant, round_up(in_use, config_.grant_step)), d.capacity);
    Bytes grant = std::min(asked, sat_sub(fits, jd.granted));
    // Its word, as a grant: within its job's limit (only memory in use may be granted past it).
    if (const Bytes lim = limit_on(job, dev); lim != kNoLimit) grant = std::min(grant, sat_sub(lim, jd.granted));
    if (grant < in_use) {
      if (forced) {
        grant = in_use;
      } else {
        log::limited(log::get("broker"), spdlog::level::warn, "resume uid " + std::to_string(c.uid),
                     "job {} (pid {}): a re-registration no restart expected claims {} in use on {}; the driver does "
                     "not confirm it, so it is granted {} (what fits) and the rest counts as used outside coloc",
                     job.key.str(), c.pid, mib(in_use), d.uuid.str(), mib(grant));
        in_use = grant;
      }
    }
    if (!jd.admitted) {
      jd.admitted = true;
      jd.admitted_at = now;
      const Bytes wanted = reservation_for(limit_on(job, dev), d);
      const Bytes reserved = std::min(wanted, std::max(fits, sat_add(jd.granted, grant)));
      set_job_device(job, dev, reserved, jd.granted);
      // A history or online reservation is not saved across a restart: the online prediction
      // (the processes' stats pages) raises it again once read.
      jd.source = limit_on(job, dev) != kNoLimit ? Footprint::kMem : Footprint::kNone;
      event(Event::Kind::kAdmitted, job, now, dev);
      if (reserved < wanted)
        log::limited(log::get("broker"), spdlog::level::warn, "resume uid " + std::to_string(c.uid),
            "job {}: resumed on {} with its reservation cut to {} (it had {}): only {} was left for it; beyond "
            "that it grows by ordinary grants",
            job.key.str(), d.uuid.str(), mib(reserved), mib(wanted), mib(fits));
    }
    if (grant < asked)
      log::limited(log::get("broker"), spdlog::level::warn, "resume uid " + std::to_string(c.uid),
                   "job {}: resumed on {} with a grant of {} instead of {} ({} in use): only {} was left for it",
                               job.key.str(), d.uuid.str(), mib(grant), mib(asked), mib(in_use), mib(fits));
    ClientSlot& s = c.slots[slot];
    s.attached = true;
    s.device = dev;
    s.grant = 0;
    s.floor = in_use;  // until the client has copied its counters into the new stats page
    ++jd.clients;
    d.attachments.emplace_back(id, slot);
    auto& cs = c.control->slots[slot];
    std::copy(d.uuid.bytes.begin(), d.uuid.bytes.end(), cs.uuid);
    cs.limit.store(limit_on(job, dev), std::memory_order_relaxed);
    cs.reservation.store(jd.reserved, std::memory_order_relaxed);
    write_grant(c, slot, grant);
    cs.attached.store(1, std::memory_order_release);
    if (e.overhead > 0) {
      // The driver overhead the previous daemon had booked for it (from its context footprint, or
      // the driver's figure): memory the driver holds, booked again until the driver's own figure
      // replaces it. The client's word, so bounded as a grant is: no more than the device shows
      // used beside its in-use, than its job's limit there leaves, than the room the grant above
      // was given (`fits`), or than its user's --max-per-user leaves (as a context footprint).
      Bytes o = std::min(e.overhead, sat_sub(d.capacity, in_use));
      if (e.physical_free != kUnknown) o = std::min(o, sat_sub(sat_sub(d.capacity, e.physical_free), in_use));
      if (const Bytes lim = limit_on(job, dev); lim != kNoLimit) o = std::min(o, sat_sub(lim, jd.granted));
      o = std::min(o, sat_sub(fits, jd.granted));
      if (config_.max_per_user) {
        const Bytes unused_reservation = sat_sub(jd.reserved, jd.granted);
        o = std::min(o, sat_add(sat_sub(*config_.max_per_user, user_committed(c.uid)), unused_reservation));
      }
      if (o > 0) {
        if (d.outside_known && forced) d.outside = sat_sub(d.outside, o);  // it is coloc's again, as the in-use above
        s.overhead_reading = o;
        book_overhead(c, slot, o, "booked before colocd restarted", now);
        s.overhead_estimated = true;
      }
    }
    // During the hold the books are incomplete (see `room` above): not an over-commit yet.
    if (!holding() && d.committed > usable(dev))
      log::limited(log::get("broker"), spdlog::level::warn, "resume uid " + std::to_string(c.uid),
          "device {}: over-committed by memory really in use ({} committed, {} usable): job {} holds {} in use; "
          "nothing more is granted on the device until it fits again",
          d.uuid.str(), mib(d.committed), mib(usable(dev)), job.key.str(), mib(in_use));
  }
  // The ledger may have lowered the job's limit, or its cap on a device where an earlier
  // re-registration already resumed it: no reservation stays above the limit there.
  for (auto& [dev, jd] : job.devices) {
    const Bytes limit = limit_on(job, dev);
    if (jd.admitted && limit != kNoLimit && jd.reserved > limit)
      set_job_device(job, dev, reservation_for(limit, devices_[dev]), jd.granted);
  }
  // Other clients of the job see the (possibly lowered) limit and reservation.
  for (ClientId other : job.clients) {
    Client& oc = clients_.at(other);
    for (uint32_t s = 0; s < pages::kSlots; ++s)
      if (oc.slots[s].attached) {
        oc.control->slots[s].limit.store(limit_on(job, oc.slots[s].device), std::memory_order_relaxed);
        oc.control->slots[s].reservation.store(job.devices[oc.slots[s].device].reserved, std::memory_order_relaxed);
      }
  }
}

void Broker::remove_client(ClientId id, Nanos now) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  Job& job = job_of(c);
  // Its parked requests vanish (nobody to answer), but their waits end for the report.
  for (size_t i = waiters_.size(); i-- > 0;) {
    if (waiters_[i].client != id) continue;
    const Waiter& w = waiters_[i];
    std::optional<uint32_t> dev;
    if (!w.admission) dev = c.slots[w.slot].device;
    else if (!w.devices.empty()) dev = w.devices.front().device;
    event(Event::Kind::kWaitEnd, job, now, dev, w.admission, Reason::kCancelled, w.need);
    waiters_.erase(waiters_.begin() + ptrdiff_t(i));
  }
  std::vector<uint32_t> touched;
  for (uint32_t slot = 0; slot < pages::kSlots; ++slot) {
    ClientSlot& s = c.slots[slot];
    if (!s.attached) continue;
    JobDevice& jd = job.devices[s.device];
    set_job_device(job, s.device, jd.reserved, jd.granted - s.grant - s.overhead);
    jd.overhead -= s.overhead;
    s.grant = 0;
    s.overhead = 0;
    s.overhead_reading = 0;
    --jd.clients;
    auto& att = devices_[s.device].attachments;
    att.erase(std::remove(att.begin(), att.end(), std::make_pair(id, slot)), att.end());
    // The job left the device: its reservation goes with it, unless an anchor keeps the job's
    // standing for its next process (the next step of a multi-step `coloc run`).
    const bool kept = job.anchors > (c.anchor ? 1u : 0u);
    if (jd.clients == 0 && !kept) {
      assert(jd.granted == 0);
      set_job_device(job, s.device, 0, 0);
      job.devices.erase(s.device);
    }
    touched.push_back(s.device);
  }
  if (c.anchor && --job.anchors == 0) {
    // The last anchor is gone: devices no process of the job is attached to are released.
    for (auto jt = job.devices.begin(); jt != job.devices.end();) {
      if (jt->second.clients != 0) {
        ++jt;
        continue;
      }
      const uint32_t dev = jt->first;
      assert(jt->second.granted == 0);
      set_job_device(job, dev, 0, 0);
      jt = job.devices.erase(jt);
      touched.push_back(dev);
    }
  }
  job.clients.erase(std::remove(job.clients.begin(), job.clients.end(), id), job.clients.end());
  JobSerial serial = job.serial;
  const uint32_t uid = c.uid;
  clients_.erase(it);
  // A user none of whose processes is on a device any more has no say about it (outside.h).
  for (uint32_t dev : touched) {
    Device& d = devices_[dev];
    if (!d.capacity_measured && d.attachments.empty() && d.committed == 0) d.capacity_open = true;
    if (d.measured || d.figures.empty()) continue;
    bool still = false;
    for (auto [cid, s] : d.attachments) still |= clients_.at(cid).uid == uid;
    if (still) continue;
    d.figures.forget(uid);
    set_outside(dev, d.figures.estimate(), now);
  }
  if (job.clients.empty()) {
    event(Event::Kind::kJobEnded, job, now);
    for ([[maybe_unused]] auto& [dev, jd] : job.devices) assert(jd.reserved == 0 && jd.granted == 0);
    job_index_.erase(job.key);
    jobs_.erase(serial);
  }
  pump(now);
  if (!holding())
    for (uint32_t dev : touched) break_deadlock(dev, now);
}

}  // namespace coloc::broker
