// daemon/broker/broker_devices.cpp — the Broker's devices (broker.h, "The books", device): their
// capacity, and the estimate of memory used outside coloc from colocd's own readings and from
// clients' figures (outside.h).
#include <algorithm>

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
  // own word, and it holds even where the ledgers add up to more than the device shows).
  outside = std::max(outside, std::min(listed_outside(d), used));
  set_outside(device, outside, now);
}

bool Broker::list_matches(const Device& d) const {
  bool holding = false;
  for (auto [id, s] : d.attachments) {
    const Client& c = clients_.at(id);
    for (const ProcessFigure& p : d.processes)
      if (p.pid == c.pid) return true;
    if (ledger_in_use(c, s) > 0) holding = true;
  }
  return !holding;
}

Bytes Broker::listed_outside(const Device& d) const {
  if (!d.processes_known || !list_matches(d)) return 0;
  std::set<int32_t> attached;
  for (auto [id, s] : d.attachments) attached.insert(clients_.at(id).pid);
  Bytes sum = 0;
  for (const ProcessFigure& p : d.processes)
    if (p.used != kUnknown && !attached.count(p.pid)) sum = sat_add(sum, p.used);
  return sum;
}

void Broker::reconcile_device(uint32_t device, const std::vector<ProcessFigure>* processes, Nanos now) {
  if (device >= devices_.size()) return;
  Device& d = devices_[device];
  d.processes_known = processes != nullptr;
  if (!processes) {
    d.processes.clear();
    return;  // the driver cannot tell: keep what is booked
  }
  d.processes = *processes;
  if (d.attachments.empty()) return;
  const bool matches = list_matches(d);
  std::set<int32_t> seen;  // one process, one figure (its first attachment takes it)
  const auto attachments = d.attachments;  // set_overhead may change the books
  for (auto [id, slot] : attachments) {
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second.pid <= 0) continue;
    Client& c = it->second;
    const ProcessFigure* figure = nullptr;
    for (const ProcessFigure& p : d.processes)
      if (p.pid == c.pid) figure = &p;
    const bool listed = figure && seen.insert(c.pid).second;
    if (!listed && figure) continue;  // a second attachment of a listed process: its figure is taken
    // A driver that does not name an attached process cannot see it (another PID namespace): an
    // overhead estimated from its context footprint stands, and nothing is learnt of its claim.
    if (!listed && (c.slots[slot].overhead_estimated || !matches)) continue;
    reconcile_client(c, slot, listed, listed ? figure->used : 0, now);
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
    const Bytes f = std::min(figure, d.capacity);
    const Bytes reading = sat_sub(ledger, f);
    s.excess = settle_overhead(s.excess, s.excess_reading, reading);
    s.excess_reading = reading;
  }
  const Bytes over = sat_sub(ledger, known ? std::max(cap, std::min(figure, d.capacity)) : cap);
  const Bytes overclaim = std::min(over, s.overclaim_reading);
  s.overclaim_reading = over;
  if (overclaim > 0 && s.overclaim == 0) {
    const Job& job = jobs_.at(c.job);
    log::limited(log::get("broker"), spdlog::level::warn, "overclaim uid " + std::to_string(c.uid),
                 "job {} (pid {}): its stats page claims {} in use on device {}, but it holds at most {} (its grant "
                 "{}{}): colocd counts no more than it holds, and the rest as memory used outside coloc",
                 job.key.str(), c.pid, mib(ledger), d.uuid.str(), mib(sat_sub(ledger, overclaim)), mib(cap),
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
