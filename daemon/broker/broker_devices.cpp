// daemon/broker/broker_devices.cpp — the Broker's devices (broker.h, "The books", device): their
// capacity, and the estimate of memory used outside coloc from colocd's own readings and from
// clients' figures (outside.h).
#include <algorithm>
#include <map>
#include <set>

#include "broker/arith.h"
#include "broker/broker.h"
#include "broker/overhead.h"
#include "util/log.h"

namespace coloc::broker {

Bytes Broker::headroom_for(Bytes capacity) const {
  return config_.headroom_bytes ? std::min(*config_.headroom_bytes, capacity) : Bytes(double(capacity) * config_.headroom_fraction);
}

uint32_t Broker::device_for(const Uuid& uuid, Bytes capacity, bool measured, const Client& c, Nanos now) {
  (void)now;
  auto set_capacity = [&](Device& d, Bytes cap) {
    d.capacity = cap;
    d.headroom = headroom_for(cap);
  };
  if (auto it = device_index_.find(uuid); it != device_index_.end()) {
    Device& d = devices_[it->second];
    if (measured) {
      // colocd's own reading is the device's capacity, whatever clients said before.
      if (d.capacity != capacity)
        log::get("broker")->warn("device {}: capacity {} as the device reports it (the books had {} from a client)",
                                 uuid.str(), mib(capacity), mib(d.capacity));
      set_capacity(d, capacity);
      d.capacity_measured = true;
      d.capacity_open = false;
    } else if (d.capacity_open) {
      set_capacity(d, capacity);  // no process was attached: the first one's word, again
      d.capacity_open = false;
    } else if (d.capacity != capacity) {
      // A client's word only: never raised by it (that could over-grant); lowered, so that no
      // grant passes what any attached process says the device holds (outside.h's reasoning:
      // at worst it costs the others what the claim takes away, as allocating would).
      const bool lower = !d.capacity_measured && capacity < d.capacity;
      log::limited(log::get("broker"), spdlog::level::warn, "capacity uid " + std::to_string(c.uid),
                   "device {} reported by pid {} (uid {}) with capacity {}; the books keep {}", uuid.str(), c.pid, c.uid,
                   mib(capacity), mib(lower ? capacity : d.capacity));
      if (lower) set_capacity(d, capacity);
    }
    return it->second;
  }
  Device d;
  d.uuid = uuid;
  set_capacity(d, capacity);
  d.capacity_measured = measured;
  devices_.push_back(std::move(d));
  uint32_t index = uint32_t(devices_.size() - 1);
  device_index_[uuid] = index;
  log::get("broker")->info("device {}: capacity {}{}, headroom {}", uuid.str(), mib(capacity),
                           measured ? "" : " (a client's word: colocd cannot read the device)",
                           mib(devices_[index].headroom));
  return index;
}

void Broker::refresh_outside(uint32_t device, Bytes physical_free, Nanos now) {
  if (physical_free == kUnknown || device >= devices_.size()) return;
  Device& d = devices_[device];
  // colocd's own reading: from now on the clients' figures for this device only ask for the next.
  d.measured = true;
  d.figures.clear();
  physical_free = std::min(physical_free, d.capacity);
  const Bytes used = d.capacity - physical_free;
  const Bytes coloc = coloc_in_use(d, nullptr, 0, 0);
  Bytes outside;
  if (coloc > used) {
    // The ledgers claim more than the device shows: a ledger is wrong, or allocations are in
    // flight (counted before the driver call). Client figures cannot tell how much is used
    // outside; the device can only bound it: keep a known estimate, capped by what is used.
    note_mismatch(d, coloc, used);
    outside = d.outside_known ? std::min(d.outside, used) : 0;
  } else {
    outside = used - coloc;
    d.mismatch_pending = false;
  }
  // What the driver lists for processes that are not coloc's is outside, whatever the ledgers
  // say (a claim is bounded by its grant and the driver's figure, but the list is the driver's
  // own word, and it holds even where the ledgers add up to more than the device shows). Only a
  // list read with this figure: one from an earlier reading may name a process that has ended
  // since, whose memory the device no longer shows (its figure would stand for another's use).
  if (d.processes_at == now) outside = std::max(outside, std::min(listed_outside(d), used));
  set_outside(device, outside, now);
}

Bytes Broker::listed_outside(const Device& d) const {
  if (!d.processes_known || !d.processes_ours) return 0;
  std::set<int32_t> attached;
  for (auto [id, s] : d.attachments) attached.insert(clients_.at(id).pid);
  Bytes sum = 0;
  for (const ProcessFigure& p : d.processes)
    if (p.used != kUnknown && !attached.count(p.pid)) sum = sat_add(sum, p.used);
  return sum;
}

void Broker::reconcile_device(uint32_t device, const std::vector<ProcessFigure>* processes, Nanos now, bool ours) {
  if (device >= devices_.size()) return;
  Device& d = devices_[device];
  d.processes_known = processes != nullptr;
  d.processes_ours = ours;
  d.processes_at = now;
  if (!processes) {
    d.processes.clear();
    return;  // the driver cannot tell: keep what is booked
  }
  d.processes = *processes;
  if (d.attachments.empty()) return;
  // Each process's attachments here, in order (normally one; a process with two connections has
  // two, which share its figure).
  std::map<int32_t, std::vector<std::pair<ClientId, uint32_t>>> by_pid;
  for (auto [id, slot] : d.attachments)
    if (const Client* c = find_client(id); c && c->pid > 0 && jobs_.at(c->job).suspension == Suspension::kNone)
      by_pid[c->pid].emplace_back(id, slot);  // (a job being suspended leaves the driver's list: not reconciled)
  for (auto& [pid, atts] : by_pid) {
    const ProcessFigure* figure = nullptr;
    for (const ProcessFigure& p : d.processes)
      if (p.pid == pid) figure = &p;
    const bool listed = figure != nullptr;
    // A driver that does not name an attached process cannot see it (another PID namespace): an
    // overhead estimated from its context footprint stands, and nothing is learnt of its claim.
    if (!listed && !ours) continue;
    if (listed && figure->used == kUnknown) {  // NVML_VALUE_NOT_AVAILABLE: keep what is booked
      for (auto [id, slot] : atts) reconcile_client(clients_.at(id), slot, true, kUnknown, now);
      continue;
    }
    // The figure goes to the attachments' ledgers in order; what is left over is driver overhead,
    // the first one's.
    Bytes left = listed ? figure->used : 0;
    std::vector<Bytes> part(atts.size(), 0);
    for (size_t i = 0; i < atts.size(); ++i) {
      const Client& c = clients_.at(atts[i].first);
      part[i] = std::min(left, ledger_in_use(c, atts[i].second));
      left -= part[i];
    }
    part[0] += left;
    for (size_t i = 0; i < atts.size(); ++i) {
      Client& c = clients_.at(atts[i].first);
      if (!listed && c.slots[atts[i].second].overhead_estimated) continue;
      reconcile_client(c, atts[i].second, listed, part[i], now);
    }
  }
}

void Broker::reconcile_client(Client& c, uint32_t slot, bool listed, Bytes figure, Nanos now) {
  ClientSlot& s = c.slots[slot];
  const Device& d = devices_[s.device];
  // Its ledger as the books count it: a process that has just re-registered has not copied its
  // counters into its new stats page yet (its driver figure is not all overhead).
  const Bytes ledger = ledger_in_use(c, slot);
  const Bytes cap = std::max(s.grant, s.floor);
  const bool known = figure != kUnknown;
  if (known) {
    // Beyond the driver's figure at two readings in a row: one reading can catch an allocation
    // between its charge and its driver call (the page ahead of the driver), the next does not.
    // A lie that comes and goes is not booked, and needs not be: claims stay within grants, so
    // it hides no more than its own job's unused grant, which is committed (docs/daemon.md).
    const Bytes reading = sat_sub(ledger, std::min(figure, d.capacity));
    s.excess = std::min(reading, s.excess_reading);
    s.excess_reading = reading;
  }
  // An overclaim: above both what it was granted and what the driver holds for it, by more than
  // one context's charge (the ledger force-charges COLOC_CONTEXT_BYTES for a context the driver
  // may make smaller), at two readings in a row.
  const Bytes held = known ? std::max(cap, std::min(figure, d.capacity)) : cap;
  const Bytes over = sat_sub(ledger, sat_add(held, kOverclaimSlack));
  const Bytes overclaim = std::min(over, s.overclaim_reading);
  s.overclaim_reading = over;
  if (overclaim > 0 && s.overclaim == 0) {
    const Job& job = jobs_.at(c.job);
    log::limited(log::get("broker"), spdlog::level::warn, "overclaim uid " + std::to_string(c.uid),
                 "job {} (pid {}): its stats page claims {} in use on device {}, but it holds at most {} (its grant "
                 "{}{}): colocd counts no more than it holds, and the rest as memory used outside coloc",
                 job.key.str(), c.pid, mib(ledger), d.uuid.str(), mib(held), mib(cap),
                 known ? ", the driver's figure " + mib(figure) : std::string());
  }
  s.overclaim = overclaim;
  auto o = reconcile_overhead(listed, figure, std::min(ledger, cap));
  if (o) set_overhead(c.id, slot, *o, now);
}

void Broker::report_outside(uint32_t device, Bytes physical_free, Nanos now, const Client& reporter, uint32_t slot,
                            Bytes reported_in_use, Bytes request) {
  if (physical_free == kUnknown || device >= devices_.size()) return;
  Device& d = devices_[device];
  if (d.measured) {  // colocd reads this device itself: a client's figure only asks for a fresh reading
    note_short(device);
    return;
  }
  physical_free = std::min(physical_free, d.capacity);
  const Bytes used = d.capacity - physical_free;
  const Bytes coloc = coloc_in_use(d, &reporter, slot, reported_in_use);
  if (coloc > used) note_mismatch(d, coloc, used);
  else d.mismatch_pending = false;
  const Bytes implied = coloc > used ? 0 : used - coloc;
  // What the reporter's user holds on the device and does not use: the most its own allocations
  // can show missing (outside.h).
  Bytes committed = 0, in_use_there = 0;
  for (const auto& [serial, job] : jobs_) {
    if (job.key.uid != reporter.uid) continue;
    auto jd = job.devices.find(device);
    if (jd == job.devices.end() || !jd->second.admitted) continue;
    committed = sat_add(committed, std::max(jd->second.reserved, jd->second.granted));
  }
  for (auto [id, s] : d.attachments) {
    const Client& ac = clients_.at(id);
    if (ac.uid == reporter.uid) in_use_there = sat_add(in_use_there, sat_add(client_in_use(ac, s), ac.slots[s].overhead));
  }
  const Bytes allowance = sat_add(sat_sub(committed, in_use_there), request);
  d.figures.report(reporter.uid, implied, allowance, now);
  set_outside(device, d.figures.estimate(), now);
}

Bytes Broker::coloc_in_use(const Device& d, const Client* reporter, uint32_t slot, Bytes reported_in_use) const {
  // A client that has just resumed has not copied its counters into its new stats page yet: its
  // ledger's in-use (the floor) stands for them, or its memory would be taken for outside use.
  Bytes coloc = 0;
  for (auto [id, s] : d.attachments) {
    const Client& ac = clients_.at(id);
    coloc = sat_add(coloc, client_in_use(ac, s));
    coloc = sat_add(coloc, ac.slots[s].overhead);  // the driver's memory for the process beyond its ledger
  }
  if (reporter) {
    // The stats page may still count the request the driver just refused (the client reserves,
    // calls the driver, then gives back): take the client's own figure when it is smaller.
    Bytes page = client_in_use(*reporter, slot);
    coloc = coloc - page + std::min(page, reported_in_use);
  }
  return coloc;
}

void Broker::note_mismatch(Device& d, Bytes coloc, Bytes used) {
  // An allocation is charged in its process's ledger just before the driver call: a reading
  // taken in between shows the ledgers ahead of the device, and the next one does not. Only a
  // difference that outlasts the ledgers — two readings in a row with the same coloc in-use — is
  // a ledger that is wrong.
  const bool again = d.mismatch_pending && d.mismatch_coloc == coloc;
  d.mismatch_pending = true;
  d.mismatch_coloc = coloc;
  if (!again) return;
  ++d.ledger_mismatches;
  if (d.ledger_mismatches == 1 || d.ledger_mismatches % 1000 == 0)
    log::get("broker")->warn("device {}: clients report {} in use but the device shows only {} used ({} reports like this)",
                             d.uuid.str(), mib(coloc), mib(used), d.ledger_mismatches);
}

void Broker::set_outside(uint32_t device, Bytes outside, Nanos now) {
  Device& d = devices_[device];
  const Bytes before = d.outside;
  d.outside = outside;
  d.outside_known = true;
  d.outside_at = now;
  if (d.outside < before) {
    pump(now);  // parked requests are re-examined against the fresh figure
    // What is still parked there no longer waits for outside memory that is gone: a deadlock
    // among coloc jobs that was hidden behind it is broken now.
    if (!holding()) break_deadlock(device, now);
  }
}

void Broker::reconfigure(const BrokerConfig& config, Nanos now) {
  const Bytes step = config_.grant_step;
  config_ = config;
  config_.grant_step = step;
  for (Device& d : devices_) d.headroom = headroom_for(d.capacity);
  pump(now);
}

void Broker::note_short(uint32_t device) {
  if (std::find(short_devices_.begin(), short_devices_.end(), device) == short_devices_.end())
    short_devices_.push_back(device);
}

std::vector<uint32_t> Broker::take_short_devices() { return std::exchange(short_devices_, {}); }

std::set<int32_t> Broker::attached_pids(uint32_t device) const {
  std::set<int32_t> out;
  if (device >= devices_.size()) return out;
  for (const auto& [id, slot] : devices_[device].attachments)
    if (const Client* c = find_client(id); c && c->pid > 0) out.insert(c->pid);
  return out;
}

}  // namespace coloc::broker
