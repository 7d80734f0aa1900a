// daemon/broker/broker.cpp — the Broker's core (broker.h): lookups, the decisions on admission and
// growth, the requests that carry them out, waiting (the queue, its pump, deadlock breaking), time,
// and the audit. Its clients' lifecycle and driver overhead are in broker_clients.cpp, an admin's
// changes to a job in broker_limits.cpp, its devices in broker_devices.cpp.
#include "broker/broker.h"

#include <map>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <sstream>

#include "broker/arith.h"
#include "util/log.h"

namespace coloc::broker {


std::string Uuid::str() const {
  char buf[64];
  const uint8_t* b = bytes.data();
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

Uuid Uuid::from(const uint8_t (&b)[16]) {
  Uuid u;
  std::copy(b, b + 16, u.bytes.begin());
  return u;
}

bool Uuid::parse(const std::string& text, Uuid* out) {
  // "GPU-" then 8-4-4-4-12 hex digits.
  if (text.size() != 40 || text.compare(0, 4, "GPU-") != 0) return false;
  Uuid u;
  size_t byte = 0;
  for (size_t i = 4; i < text.size();) {
    if (i == 12 || i == 17 || i == 22 || i == 27) {
      if (text[i++] != '-') return false;
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    int hi = hex(text[i]), lo = hex(text[i + 1]);
    if (hi < 0 || lo < 0 || byte >= 16) return false;
    u.bytes[byte++] = uint8_t(hi * 16 + lo);
    i += 2;
  }
  if (byte != 16) return false;
  *out = u;
  return true;
}

/// What the broker decided about one request.
struct Broker::Decision {
  enum class Kind { kGrant, kRefuse, kNoRoom } kind = Kind::kNoRoom;
  Reason reason = Reason::kNone;
  Bytes grant = 0;            ///< growth: the client's new grant
  std::vector<Bytes> grants;  ///< admission: per device, in request order
  FullContext full;           ///< kNoRoom: what stopped it
  bool device_short = false;  ///< kNoRoom: a device (not only the user cap) lacks room
  /// kGrant of an admission: the devices where it goes ahead of the head of the queue (backfill).
  struct Pass {
    uint32_t device;
    uint64_t head;  ///< the head's arrival number
    BackfillCheck check;
  };
  std::vector<Pass> backfill;
};

Broker::Broker(BrokerConfig config, const MemoryPolicy& policy) : config_(config), policy_(policy) {
  assert(config_.grant_step > 0);
}

// ---- lookups and small helpers ----------------------------------------------------------------

const Job* Broker::find_job(const JobKey& key) const {
  auto it = job_index_.find(key);
  return it == job_index_.end() ? nullptr : &jobs_.at(it->second);
}

const Client* Broker::find_client(ClientId id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : &it->second;
}

std::optional<uint32_t> Broker::find_device(const Uuid& uuid) const {
  auto it = device_index_.find(uuid);
  if (it == device_index_.end()) return std::nullopt;
  return it->second;
}

Job& Broker::job_of(const Client& c) { return jobs_.at(c.job); }

Bytes Broker::usable(uint32_t device) const {
  const Device& d = devices_[device];
  return sat_sub(sat_sub(d.capacity, d.headroom), d.outside);
}

Bytes Broker::available(uint32_t device) const { return sat_sub(usable(device), devices_[device].committed); }

Bytes Broker::client_in_use(const Client& c, uint32_t slot) const {
  const ClientSlot& s = c.slots[slot];
  return std::min(sat_sub(ledger_in_use(c, slot), s.excess), std::max(s.grant, s.floor));
}

Bytes Broker::ledger_in_use(const Client& c, uint32_t slot) const {
  const ClientSlot& s = c.slots[slot];
  const Bytes page = c.stats->slots[slot].in_use.load(std::memory_order_seq_cst);
  return std::min(std::max(page, s.floor), devices_[s.device].capacity);
}

Bytes Broker::overclaimed(const Job& job) const {
  Bytes sum = 0;
  for (ClientId id : job.clients) {
    const Client& c = clients_.at(id);
    for (const ClientSlot& s : c.slots)
      if (s.attached) sum = sat_add(sum, s.overclaim);
  }
  return sum;
}

void Broker::publish_job_others() {
  for (uint32_t dev = 0; dev < devices_.size(); ++dev) publish_job_others(dev);
}

void Broker::publish_job_others(uint32_t dev) {
  std::map<JobSerial, Bytes> held;  // per job: its clients' in-use and overheads on the device
  for (auto [id, slot] : devices_[dev].attachments) {
    const Client& c = clients_.at(id);
    held[c.job] = sat_add(held[c.job], sat_add(client_in_use(c, slot), c.slots[slot].overhead));
  }
  for (auto [id, slot] : devices_[dev].attachments) {
    const Client& c = clients_.at(id);
    if (!c.control) continue;
    c.control->slots[slot].job_others.store(sat_sub(held[c.job], client_in_use(c, slot)), std::memory_order_relaxed);
  }
}

Bytes Broker::in_use(uint32_t device) const {
  Bytes sum = 0;
  for (auto [id, slot] : devices_[device].attachments) sum = sat_add(sum, client_in_use(clients_.at(id), slot));
  return sum;
}

Bytes Broker::user_committed(uint32_t uid) const {
  auto it = user_committed_.find(uid);
  return it == user_committed_.end() ? 0 : it->second;
}

bool Broker::parked_on(JobSerial job, uint32_t device) const {
  for (const Waiter& w : waiters_)
    if (w.job == job && !w.admission && clients_.at(w.client).slots[w.slot].device == device) return true;
  return false;
}


Bytes Broker::reservation_for(Bytes limit, const Device& dev) const {
  if (limit == kNoLimit) return 0;
  return std::min(limit, sat_sub(dev.capacity, dev.headroom));
}

std::pair<Bytes, Footprint> Broker::footprint_for(Bytes limit, Bytes history, Bytes declared, const Device& dev) const {
  if (limit != kNoLimit) return {reservation_for(limit, dev), Footprint::kMem};
  if (history > 0) return {std::min(history, sat_sub(dev.capacity, dev.headroom)), Footprint::kHistory};
  if (declared > 0) return {std::min(declared, sat_sub(dev.capacity, dev.headroom)), Footprint::kEstimate};
  return {0, Footprint::kNone};
}

Bytes Broker::limit_on(const Job& job, uint32_t device) const {
  auto it = job.devices.find(device);
  return it == job.devices.end() ? job.limit : std::min(job.limit, it->second.cap);
}

void Broker::set_job_device(Job& job, uint32_t device, Bytes reserved, Bytes granted) {
  JobDevice& jd = job.devices[device];
  Bytes before = std::max(jd.reserved, jd.granted);
  Bytes after = std::max(reserved, granted);
  Device& d = devices_[device];
  Bytes& user = user_committed_[job.key.uid];
  d.committed = d.committed - before + after;
  user = user - before + after;
  if (user == 0) user_committed_.erase(job.key.uid);
  jd.reserved = reserved;
  jd.granted = granted;
}

void Broker::write_grant(Client& c, uint32_t slot, Bytes grant) {
  ClientSlot& s = c.slots[slot];
  assert(grant >= s.grant);
  Job& job = job_of(c);
  JobDevice& jd = job.devices[s.device];
  set_job_device(job, s.device, jd.reserved, jd.granted - s.grant + grant);
  s.grant = grant;
  // Raised before the reply is sent, so the client sees it when the reply arrives.
  c.control->slots[slot].grant.store(grant, std::memory_order_seq_cst);
}

Bytes Broker::lower_grant(Client& c, uint32_t slot, Bytes target) {
  ClientSlot& s = c.slots[slot];
  const Bytes old = s.grant;
  if (target >= old) return old;
  // The pages.h protocol: store the lower grant, then read in-use. Either we see an allocation
  // that raced with us, or the client sees the lower grant; never neither.
  auto& word = c.control->slots[slot].grant;
  word.store(target, std::memory_order_seq_cst);
  Bytes u = std::min(c.stats->slots[slot].in_use.load(std::memory_order_seq_cst), devices_[s.device].capacity);
  u = std::max(u, s.floor);
  if (u > target) {
    target = std::min(old, round_up(u, config_.grant_step));
    word.store(target, std::memory_order_seq_cst);
  }
  Job& job = job_of(c);
  JobDevice& jd = job.devices[s.device];
  set_job_device(job, s.device, jd.reserved, jd.granted - old + target);
  s.grant = target;
  return target;
}

void Broker::trim_job(Job& job, uint32_t device) {
  for (ClientId id : job.clients) {
    Client& c = clients_.at(id);
    for (uint32_t slot = 0; slot < pages::kSlots; ++slot)
      if (c.slots[slot].attached && c.slots[slot].device == device) lower_grant(c, slot, 0);
  }
}

bool Broker::waits_on(const Waiter& w, uint32_t device) const {
  if (!w.admission) return clients_.at(w.client).slots[w.slot].device == device;
  for (const AttachNeed& n : w.devices)
    if (n.device == device) return true;
  return false;
}

WaiterView Broker::view_of(const Waiter& w) const {
  const Job& j = jobs_.at(w.job);
  bool reserves = j.limit != kNoLimit || j.estimate > 0;  // an admission that declares (or is known by) a footprint
  for (const AttachNeed& n : w.devices) reserves |= n.cap != kNoLimit || n.estimate > 0;
  return WaiterView{j.priority, w.order, w.admission, w.admission && reserves};
}

bool Broker::waits_ahead(uint32_t device, const WaiterView& me, ClientId except_client, uint32_t except_seq) const {
  for (const Waiter& w : waiters_) {
    if (w.client == except_client && w.seq == except_seq) continue;
    if (!w.device_short || w.frozen) continue;  // held only by its user's cap, or its job is suspended
    if (!waits_on(w, device)) continue;
    const WaiterView v = view_of(w);
    if (policy_.before(v, me)) return true;
  }
  return false;
}

void Broker::event(Event::Kind kind, const Job& job, Nanos now, std::optional<uint32_t> device, bool admission,
                   Reason reason, Bytes bytes, Bytes in_use) {
  Event e{kind, job.serial, job.key, now, {}, admission, reason, bytes, in_use};
  if (device) e.device = devices_[*device].uuid;
  events_.push_back(std::move(e));
}

// ---- decisions ----------------------------------------------------------------------------------

Broker::Decision Broker::decide_grow(Client& c, uint32_t slot, Bytes need, Nanos now, bool queued) {
  (void)now;
  Decision d;
  ClientSlot& s = c.slots[slot];
  Job& job = job_of(c);
  const uint32_t dev = s.device;
  const Bytes limit = limit_on(job, dev);
  if (need > limit) {
    // Grants above a lowered limit were kept only for memory in use then; what is no longer in
    // use goes back now (a client that never shrinks would otherwise keep it).
    if (job.devices[dev].granted > limit) trim_job(job, dev);
    d.kind = Decision::Kind::kRefuse;
    d.reason = Reason::kOwnLimit;
    return d;
  }
  if (need <= s.grant) {
    d.kind = Decision::Kind::kGrant;
    d.grant = s.grant;
    return d;
  }
  JobDevice* jd = &job.devices[dev];
  Bytes others = jd->granted - s.grant;
  if (others > limit - need) {
    // Other processes of the job hold grants they may not use: take those back first.
    trim_job(job, dev);
    jd = &job.devices[dev];
    others = jd->granted - s.grant;
    if (need <= s.grant) {
      d.kind = Decision::Kind::kGrant;
      d.grant = s.grant;
      return d;
    }
    if (others > limit - need) {
      d.kind = Decision::Kind::kRefuse;
      d.reason = Reason::kOwnLimit;
      return d;
    }
  }
  const Bytes target = std::min(round_up(need, config_.grant_step), limit - others);
  const Bytes cur = std::max(jd->reserved, jd->granted);
  const Bytes extra_need = sat_sub(std::max(jd->reserved, others + need), cur);

  WaiterView me{job.priority, next_order_, false, false};
  Bytes room = available(dev);
  if (holding() || (!queued && waits_ahead(dev, me, 0, 0))) room = 0;
  Bytes user_room = UINT64_MAX;
  if (config_.max_per_user) user_room = sat_sub(*config_.max_per_user, user_committed(c.uid));
  const Bytes allowed = std::min(room, user_room);
  // The most this client's grant may reach: the job may commit `cur + allowed` on the device.
  const Bytes max_grant = sat_sub(sat_add(cur, allowed), others);
  if (max_grant >= need) {
    d.kind = Decision::Kind::kGrant;
    d.grant = std::max(std::min(target, max_grant), need);
    return d;
  }
  const Device& device = devices_[dev];
  d.kind = Decision::Kind::kNoRoom;
  d.device_short = room < extra_need;
  d.full.on_full = job.on_full;
  d.full.over_user_cap = user_room < extra_need;
  d.full.can_ever_fit = std::max(jd->reserved, others + need) <= sat_sub(device.capacity, device.headroom);
  d.full.can_ever_fit_user_cap =
      !config_.max_per_user || std::max(jd->reserved, others + need) <= *config_.max_per_user;
  return d;
}

Broker::Decision Broker::decide_attach(Client& c, const std::vector<AttachNeed>& devs, Nanos now, bool queued) {
  (void)now;
  Decision d;
  Job& job = job_of(c);
  bool reserves = job.limit != kNoLimit || job.estimate > 0;
  for (const AttachNeed& n : devs) reserves |= n.cap != kNoLimit || n.estimate > 0;
  WaiterView me{job.priority, next_order_, true, reserves};
  Bytes user_extra_need = 0, user_extra_target = 0;
  std::vector<Bytes> targets, exact;
  bool all_room_target = true, all_room_exact = true;
  d.full.on_full = job.on_full;
  for (const AttachNeed& n : devs) {
    const uint32_t dev = n.device;
    const Bytes req = n.request;
    const Device& device = devices_[dev];
    auto it = job.devices.find(dev);
    bool admitted = it != job.devices.end() && it->second.admitted;
    // Its limit there: the job's, capped by this process's cap when it is the one admitting the job.
    const Bytes limit = admitted ? limit_on(job, dev) : std::min(job.limit, n.cap);
    if (req > limit) {
      d.kind = Decision::Kind::kRefuse;
      d.reason = Reason::kOwnLimit;
      return d;
    }
    Bytes granted = it != job.devices.end() ? it->second.granted : 0;
    if (granted > limit - req) {
      trim_job(job, dev);
      it = job.devices.find(dev);
      granted = it != job.devices.end() ? it->second.granted : 0;
      if (granted > limit - req) {
        d.kind = Decision::Kind::kRefuse;
        d.reason = Reason::kOwnLimit;
        return d;
      }
    }
    const Bytes reserved = admitted ? it->second.reserved : footprint_for(limit, n.estimate, job.estimate, device).first;
    const Bytes cur = admitted ? std::max(it->second.reserved, granted) : 0;
    const Bytes target = std::min(round_up(req, config_.grant_step), limit - granted);
    const Bytes extra_target = sat_sub(std::max(reserved, granted + target), cur);
    const Bytes extra_exact = sat_sub(std::max(reserved, granted + req), cur);
    Bytes room = available(dev);
    if (holding() && extra_exact > 0) room = 0;
    if (!holding() && !queued && extra_exact > 0 && waits_ahead(dev, me, 0, 0)) {
      // Behind a request that waits on the device: only backfill lets it in now (pump() looks at
      // queued ones the same way).
      const Waiter* head = head_waiter(dev);
      const BackfillCheck bf = head ? check_backfill(dev, *head, growth_waits_ahead(dev, me), job, n, extra_exact, now)
                                    : BackfillCheck{};
      if (bf.ahead && extra_exact <= room) d.backfill.push_back({dev, head->order, bf});
      else room = 0;
    }
    // A suspended job's queued restore comes first, backfill or not, for jobs of its priority or lower.
    if (extra_exact > 0 && restore_ahead(dev, job.priority, job.serial) != 0) {
      room = 0;
      if (!d.backfill.empty() && d.backfill.back().device == dev) d.backfill.pop_back();
    }
    if (extra_target > room) all_room_target = false;
    if (extra_exact > room) {
      all_room_exact = false;
      d.device_short = true;
    }
    if (std::max(reserved, granted + req) > sat_sub(device.capacity, device.headroom)) d.full.can_ever_fit = false;
    user_extra_need = sat_add(user_extra_need, extra_exact);
    user_extra_target = sat_add(user_extra_target, extra_target);
    targets.push_back(target);
    exact.push_back(req);
  }
  Bytes user_room = UINT64_MAX;
  if (config_.max_per_user) user_room = sat_sub(*config_.max_per_user, user_committed(c.uid));
  if (all_room_target && user_extra_target <= user_room) {
    d.kind = Decision::Kind::kGrant;
    d.grants = std::move(targets);
    return d;
  }
  if (all_room_exact && user_extra_need <= user_room) {
    d.kind = Decision::Kind::kGrant;
    d.grants = std::move(exact);
    return d;
  }
  d.backfill.clear();
  d.kind = Decision::Kind::kNoRoom;
  d.full.over_user_cap = user_extra_need > user_room;
  d.full.can_ever_fit_user_cap = !config_.max_per_user || user_extra_need <= *config_.max_per_user;
  return d;
}

// ---- requests -----------------------------------------------------------------------------------

void Broker::refuse(Client& c, uint32_t seq, Reply::Kind kind, uint32_t slot, Reason reason, Bytes bytes,
                    std::optional<uint32_t> device, Nanos waited, Nanos now, Bytes asked_in_use) {
  Job& job = job_of(c);
  Reply r;
  r.kind = kind;
  r.client = c.id;
  r.seq = seq;
  r.granted = false;
  r.reason = reason;
  r.waited = waited;
  r.slot = slot;
  if (kind == Reply::Kind::kGrow && c.slots[slot].attached) r.grant = c.slots[slot].grant;
  r.limit = job.limit;
  replies_.push_back(std::move(r));
  Bytes used = (kind == Reply::Kind::kGrow && c.slots[slot].attached) ? client_in_use(c, slot) : 0;
  if (kind == Reply::Kind::kGrow && asked_in_use != kUnknown) used = std::min(asked_in_use, bytes);
  event(Event::Kind::kRefused, job, now, device, kind == Reply::Kind::kAttach, reason, bytes, used);
  auto lg = log::get("broker");
  const std::string cause = "refused uid " + std::to_string(c.uid) + " " + proto::reason_name(reason);
  if (reason == Reason::kBadRequest)
    log::limited(lg, spdlog::level::warn, cause, "job {} (pid {}): bad request refused", job.key.str(), c.pid);
  else
    log::limited(lg, spdlog::level::info, cause, "job {} (pid {}): {} of {} refused: {}", job.key.str(), c.pid,
                 kind == Reply::Kind::kAttach ? "admission" : "growth", mib(bytes), proto::reason_name(reason));
}

void Broker::grant_attach(Client& c, uint32_t seq, const std::vector<AttachNeed>& devs,
                          const std::vector<Bytes>& grants, Nanos waited, Nanos now) {
  Job& job = job_of(c);
  Reply r;
  r.kind = Reply::Kind::kAttach;
  r.client = c.id;
  r.seq = seq;
  r.granted = true;
  r.waited = waited;
  r.limit = job.limit;
  uint32_t next_free = 0;
  for (size_t i = 0; i < devs.size(); ++i) {
    const uint32_t dev = devs[i].device;
    Device& d = devices_[dev];
    JobDevice& jd = job.devices[dev];
    if (!jd.admitted) {
      jd.admitted = true;
      jd.admitted_at = now;
      // A promise restored after a restart was to this job's admission here: it is kept.
      if (d.restored_promise && d.restored_promise->first == job.key) d.restored_promise.reset();
      jd.cap = devs[i].cap;
      const auto [reserved, source] = footprint_for(limit_on(job, dev), devs[i].estimate, job.estimate, d);
      set_job_device(job, dev, reserved, jd.granted);
      jd.source = source;
      jd.expected_end = devs[i].run > 0 ? sat_add(now, devs[i].run) : kNever;
      event(Event::Kind::kAdmitted, job, now, dev);
      log::limited(log::get("broker"), spdlog::level::info, "admitted uid " + std::to_string(c.uid),
                   "job {} admitted on {} (reservation {} from {}, waited {:.3f} s)", job.key.str(), d.uuid.str(),
                   mib(jd.reserved), footprint_name(jd.source), double(waited) / 1e9);
    }
    while (next_free < pages::kSlots && c.slots[next_free].attached) ++next_free;
    assert(next_free < pages::kSlots);  // checked before the request was accepted
    const uint32_t slot = next_free;
    ClientSlot& s = c.slots[slot];
    s.attached = true;
    s.device = dev;
    s.grant = 0;
    // The baseline of its context footprint: the device's use outside coloc now. colocd's own
    // reading where it reads the device; else the most any client's latest figure implies (the
    // hostile-peer estimate can trail honest outside use, which would then be charged to this
    // job; a lie can only raise this baseline). No figure at all: no baseline.
    s.footprint_due = true;
    s.baseline_known = d.measured ? d.outside_known : !d.figures.empty();
    s.outside_before = d.measured ? d.outside : std::max(d.outside, d.figures.highest());
    ++job.devices[dev].clients;
    d.attachments.emplace_back(c.id, slot);
    auto& cs = c.control->slots[slot];
    std::copy(d.uuid.bytes.begin(), d.uuid.bytes.end(), cs.uuid);
    cs.limit.store(limit_on(job, dev), std::memory_order_relaxed);
    cs.reservation.store(job.devices[dev].reserved, std::memory_order_relaxed);
    write_grant(c, slot, grants[i]);
    cs.attached.store(1, std::memory_order_release);
    r.slots.push_back({slot, grants[i]});
  }
  publish_job_others();  // its first cuMemGetInfo already sees the job's other processes
  replies_.push_back(std::move(r));
}

bool Broker::park(Client& c, Waiter w, Nanos now) {
  size_t mine = 0;
  for (const Waiter& x : waiters_) mine += x.client == c.id;
  if (mine >= kMaxParkedPerClient) return false;  // a client flooding the queue gets refusals
  Job& job = job_of(c);
  w.order = next_order_++;
  w.client = c.id;
  w.job = job.serial;
  w.since = now;
  const Nanos timeout = w.admission ? job.admission_wait_timeout : job.wait_timeout;
  w.deadline = timeout ? sat_add(now, timeout) : kNever;
  if (off_books(job)) {  // its wait clock runs only once its job is restored
    w.frozen = true;
    w.left = w.deadline == kNever ? kNever : timeout;
    w.deadline = kNever;
  }
  std::optional<uint32_t> dev;
  if (!w.admission) dev = c.slots[w.slot].device;
  else dev = w.devices.front().device;
  event(Event::Kind::kWaitBegin, job, now, dev, w.admission, Reason::kNone, w.need);
  log::limited(log::get("broker"), spdlog::level::info, "waits uid " + std::to_string(c.uid),
               "job {} (pid {}) waits for {} on {}", job.key.str(), c.pid, w.admission ? "admission" : "memory",
               devices_[*dev].uuid.str());
  waiters_.push_back(std::move(w));
  return true;
}

void Broker::clear_floors(Client& c) {
  for (ClientSlot& s : c.slots) s.floor = 0;
}

void Broker::attach(ClientId id, uint32_t seq, std::span<const AttachRequest> reqs, Nanos now) {
  Client& c = clients_.at(id);
  clear_floors(c);
  std::vector<AttachNeed> devs;
  bool bad = reqs.empty() || reqs.size() > pages::kSlots;
  uint32_t free_slots = 0;
  for (const ClientSlot& s : c.slots) free_slots += !s.attached;
  if (reqs.size() > free_slots) bad = true;
  for (const AttachRequest& r : reqs) {
    if (bad) break;
    uint32_t dev = device_for(r.uuid, r.capacity, r.measured, c, now);
    for (const ClientSlot& s : c.slots) bad |= s.attached && s.device == dev;
    for (const Waiter& w : waiters_)
      if (w.client == id && w.admission)
        for (const AttachNeed& n : w.devices) bad |= n.device == dev;
    for (const AttachNeed& n : devs) bad |= n.device == dev;
    devs.push_back({dev, std::min(r.request, devices_[dev].capacity), r.cap, r.estimate, r.run});
  }
  if (bad) {
    refuse(c, seq, Reply::Kind::kAttach, 0, Reason::kBadRequest, 0, std::nullopt, 0, now);
    return;
  }
  if (job_of(c).cancelled) {
    refuse(c, seq, Reply::Kind::kAttach, 0, Reason::kJobCancelled, 0, devs.front().device, 0, now);
    return;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].measured) refresh_outside(devs[i].device, reqs[i].physical_free, now);
    else report_outside(devs[i].device, reqs[i].physical_free, now, c, 0, 0, 0);
  }
  if (off_books(job_of(c))) {  // suspended: nothing is granted until its restore; it waits, frozen
    Waiter w;
    w.seq = seq;
    w.admission = true;
    for (const AttachNeed& n : devs) w.need = sat_add(w.need, n.request);
    w.device_short = false;
    w.devices = std::move(devs);
    const Bytes need = w.need;
    const uint32_t first = w.devices.front().device;
    if (!park(c, std::move(w), now)) refuse(c, seq, Reply::Kind::kAttach, 0, Reason::kBadRequest, need, first, 0, now);
    return;
  }
  Decision d = decide_attach(c, devs, now, false);
  if (d.kind == Decision::Kind::kGrant) {
    grant_attach(c, seq, devs, d.grants, 0, now);
    for (const Decision::Pass& p : d.backfill) note_backfill(p.device, p.head, job_of(c), p.check, now);
    return;
  }
  Bytes total = 0;
  for (const AttachNeed& n : devs) total = sat_add(total, n.request);
  if (d.kind == Decision::Kind::kRefuse) {
    refuse(c, seq, Reply::Kind::kAttach, 0, d.reason, total, devs.front().device, 0, now);
    return;
  }
  if (d.device_short)
    for (const AttachNeed& n : devs) note_short(n.device);
  FullAction a = policy_.on_full(d.full);
  if (!a.park && holding() && d.full.can_ever_fit) a = {true, Reason::kNone};
  if (!a.park) {
    refuse(c, seq, Reply::Kind::kAttach, 0, a.reason, total, devs.front().device, 0, now);
    return;
  }
  Waiter w;
  w.seq = seq;
  w.admission = true;
  w.need = total;
  w.device_short = d.device_short || !d.full.over_user_cap;
  w.devices = std::move(devs);
  if (!park(c, std::move(w), now)) refuse(c, seq, Reply::Kind::kAttach, 0, Reason::kBadRequest, total, std::nullopt, 0, now);
}

void Broker::grow(ClientId id, uint32_t seq, uint32_t slot, Bytes need, Bytes physical_free, Nanos now,
                  Bytes in_use) {
  Client& c = clients_.at(id);
  clear_floors(c);
  if (slot >= pages::kSlots || !c.slots[slot].attached) {
    refuse(c, seq, Reply::Kind::kGrow, slot < pages::kSlots ? slot : 0, Reason::kBadRequest, need, std::nullopt, 0, now);
    return;
  }
  const uint32_t dev = c.slots[slot].device;
  report_outside(dev, physical_free, now, c, slot, client_in_use(c, slot), 0);
  if (off_books(job_of(c))) {  // suspended: nothing is granted until its restore; it waits, frozen
    Waiter w;
    w.seq = seq;
    w.admission = false;
    w.slot = slot;
    w.need = need;
    w.in_use = in_use;
    w.device_short = false;
    if (!park(c, std::move(w), now)) refuse(c, seq, Reply::Kind::kGrow, slot, Reason::kBadRequest, need, dev, 0, now, in_use);
    return;
  }
  Decision d = decide_grow(c, slot, need, now, false);
  Job& job = job_of(c);
  if (d.kind == Decision::Kind::kGrant) {
    if (d.grant > c.slots[slot].grant) {
      write_grant(c, slot, d.grant);
      ++job.devices[dev].growths;
    }
    Reply r;
    r.kind = Reply::Kind::kGrow;
    r.client = id;
    r.seq = seq;
    r.granted = true;
    r.slot = slot;
    r.grant = c.slots[slot].grant;
    r.limit = job.limit;
    replies_.push_back(std::move(r));
    return;
  }
  if (d.kind == Decision::Kind::kRefuse) {
    refuse(c, seq, Reply::Kind::kGrow, slot, d.reason, need, dev, 0, now, in_use);
    pump(now);  // a refusal over the limit may have trimmed grants
    return;
  }
  if (job.cancelled) {  // what would wait is refused: it is on its way out
    refuse(c, seq, Reply::Kind::kGrow, slot, Reason::kJobCancelled, need, dev, 0, now, in_use);
    return;
  }
  if (d.device_short) note_short(dev);
  FullAction a = policy_.on_full(d.full);
  if (!a.park && holding() && d.full.can_ever_fit) a = {true, Reason::kNone};
  if (!a.park) {
    refuse(c, seq, Reply::Kind::kGrow, slot, a.reason, need, dev, 0, now, in_use);
    return;
  }
  Waiter w;
  w.seq = seq;
  w.admission = false;
  w.slot = slot;
  w.need = need;
  w.in_use = in_use;
  w.device_short = d.device_short || !d.full.over_user_cap;
  if (!park(c, std::move(w), now)) {
    refuse(c, seq, Reply::Kind::kGrow, slot, Reason::kBadRequest, need, dev, 0, now, in_use);
    return;
  }
  if (!holding()) break_deadlock(dev, now);
}

void Broker::shrink(ClientId id, uint32_t slot, Bytes keep, Nanos now) {
  Client& c = clients_.at(id);
  clear_floors(c);
  if (slot >= pages::kSlots || !c.slots[slot].attached) {
    log::limited(log::get("broker"), spdlog::level::warn, "bad slot uid " + std::to_string(c.uid),
                 "pid {}: shrink of slot {} that is not attached ignored", c.pid, slot);
    return;
  }
  Bytes before = c.slots[slot].grant;
  if (lower_grant(c, slot, keep) < before) pump(now);
}

void Broker::driver_oom(ClientId id, uint32_t slot, Bytes request, Bytes in_use, Bytes physical_free, Nanos now) {
  Client& c = clients_.at(id);
  clear_floors(c);
  if (slot >= pages::kSlots || !c.slots[slot].attached) {
    log::limited(log::get("broker"), spdlog::level::warn, "bad slot uid " + std::to_string(c.uid),
                 "pid {}: driver OOM on slot {} that is not attached ignored", c.pid, slot);
    return;
  }
  const uint32_t dev = c.slots[slot].device;
  Device& d = devices_[dev];
  ++d.driver_ooms;
  Job& job = job_of(c);
  event(Event::Kind::kDriverOom, job, now, dev, false, Reason::kNone, request, in_use);
  // The request failed inside the grant: it is memory the client can show missing (at most its
  // unused grant, whatever it claims).
  const Bytes unused_grant = sat_sub(c.slots[slot].grant, std::min(client_in_use(c, slot), in_use));
  report_outside(dev, physical_free, now, c, slot, in_use, std::min(request, unused_grant));
  log::limited(log::get("broker"), spdlog::level::warn, "driver oom uid " + std::to_string(c.uid),
               "job {} (pid {}): the driver refused {} on {} inside a grant of {} ({} in use): memory used outside "
               "coloc is now estimated at {}",
               job.key.str(), c.pid, mib(request), d.uuid.str(), mib(c.slots[slot].grant), mib(in_use), mib(d.outside));
}

void Broker::cancel(ClientId id, uint32_t target_seq, Nanos now) {
  clear_floors(clients_.at(id));
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (waiters_[i].client == id && waiters_[i].seq == target_seq) {
      answer_waiter(i, false, Reason::kCancelled, now);
      pump(now);
      return;
    }
  }
}

// ---- waiting ------------------------------------------------------------------------------------

void Broker::answer_waiter(size_t index, bool granted, Reason reason, Nanos now) {
  Waiter w = std::move(waiters_[index]);
  waiters_.erase(waiters_.begin() + ptrdiff_t(index));
  Client& c = clients_.at(w.client);
  Job& job = job_of(c);
  const Nanos waited = now - w.since;
  std::optional<uint32_t> dev;
  if (!w.admission) dev = c.slots[w.slot].device;
  else dev = w.devices.front().device;
  event(Event::Kind::kWaitEnd, job, now, dev, w.admission, granted ? Reason::kNone : reason, w.need);
  assert(!granted);  // grants from the queue go through pump()
  refuse(c, w.seq, w.admission ? Reply::Kind::kAttach : Reply::Kind::kGrow, w.slot, reason, w.need, dev, waited, now,
         w.in_use);
}

void Broker::pump(Nanos now) {
  if (waiters_.empty()) {
    check_restores(now);
    return;
  }
  std::vector<size_t> order(waiters_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return policy_.before(view_of(waiters_[a]), view_of(waiters_[b])); });
  // Per device: a request ahead waits there (nothing behind takes memory there, but by backfill),
  // the first of them (the head), and whether a growth request is among them.
  std::vector<char> blocked(devices_.size(), 0), growth_blocked(devices_.size(), 0);
  std::vector<size_t> head_of(devices_.size(), 0);
  auto block = [&](size_t i, const std::vector<uint32_t>& devs) {
    for (uint32_t dev : devs) {
      if (!blocked[dev]) head_of[dev] = i;
      blocked[dev] = 1;
      growth_blocked[dev] |= !waiters_[i].admission;
    }
  };
  std::vector<char> done(waiters_.size(), 0);
  for (size_t i : order) {
    Waiter& w = waiters_[i];
    if (w.frozen) continue;  // its job is suspended: it neither waits in line nor is served
    Client& c = clients_.at(w.client);
    std::vector<uint32_t> devs;
    if (w.admission)
      for (const AttachNeed& n : w.devices) devs.push_back(n.device);
    else
      devs.push_back(c.slots[w.slot].device);
    bool is_blocked = false;
    for (uint32_t dev : devs) is_blocked |= blocked[dev] != 0;
    std::vector<Decision::Pass> passes;
    if (is_blocked) {
      // Only an admission the backfill rule lets ahead of the head on every device where one waits.
      bool ahead = w.admission && !holding();
      for (size_t k = 0; ahead && k < w.devices.size(); ++k) {
        const AttachNeed& n = w.devices[k];
        if (!blocked[n.device]) continue;
        const Bytes extra = extra_need(w, n.device);
        // Within what its job holds there already: it takes nothing from the head.
        if (extra == 0 && config_.backfill == backfill::Mode::kEasy) continue;
        const BackfillCheck bf = check_backfill(n.device, waiters_[head_of[n.device]], growth_blocked[n.device] != 0,
                                                job_of(c), n, extra, now);
        ahead = bf.ahead;
        passes.push_back({n.device, waiters_[head_of[n.device]].order, bf});
      }
      if (!ahead) {
        block(i, devs);
        continue;
      }
    }
    Decision d = w.admission ? decide_attach(c, w.devices, now, true) : decide_grow(c, w.slot, w.need, now, true);
    Job& job = job_of(c);
    const Nanos waited = now - w.since;
    if (d.kind == Decision::Kind::kNoRoom) {
      w.device_short = d.device_short || !d.full.over_user_cap;
      if (w.device_short) block(i, devs);
      continue;
    }
    done[i] = 1;
    event(Event::Kind::kWaitEnd, job, now, devs.front(), w.admission,
          d.kind == Decision::Kind::kGrant ? Reason::kNone : d.reason, w.need);
    if (d.kind == Decision::Kind::kRefuse) {
      refuse(c, w.seq, w.admission ? Reply::Kind::kAttach : Reply::Kind::kGrow, w.slot, d.reason, w.need, devs.front(),
             waited, now);
      continue;
    }
    if (w.admission) {
      grant_attach(c, w.seq, w.devices, d.grants, waited, now);
      for (const Decision::Pass& p : passes) note_backfill(p.device, p.head, job, p.check, now);
    } else {
      if (d.grant > c.slots[w.slot].grant) {
        write_grant(c, w.slot, d.grant);
        ++job.devices[devs.front()].growths;
      }
      Reply r;
      r.kind = Reply::Kind::kGrow;
      r.client = c.id;
      r.seq = w.seq;
      r.granted = true;
      r.waited = waited;
      r.slot = w.slot;
      r.grant = c.slots[w.slot].grant;
      r.limit = job.limit;
      replies_.push_back(std::move(r));
      log::limited(log::get("broker"), spdlog::level::info, "served uid " + std::to_string(c.uid),
                   "job {} (pid {}) got its memory after {:.3f} s", job.key.str(), c.pid,
                               double(waited) / 1e9);
    }
  }
  size_t out = 0;
  for (size_t i = 0; i < waiters_.size(); ++i) {
    if (done[i]) continue;
    if (out != i) waiters_[out] = std::move(waiters_[i]);
    ++out;
  }
  waiters_.resize(out);
  check_restores(now);
}

Bytes Broker::extra_need(const Waiter& w, uint32_t device) const {
  const Client& c = clients_.at(w.client);
  const Job& job = jobs_.at(w.job);
  auto it = job.devices.find(device);
  const bool admitted = it != job.devices.end() && it->second.admitted;
  const Bytes reserved = admitted ? it->second.reserved : 0;
  const Bytes granted = it != job.devices.end() ? it->second.granted : 0;
  const Bytes cur = admitted ? std::max(reserved, granted) : 0;
  if (!w.admission) {
    const Bytes others = granted - c.slots[w.slot].grant;
    return sat_sub(std::max(reserved, sat_add(others, w.need)), cur);
  }
  for (const AttachNeed& n : w.devices)
    if (n.device == device) {
      const Bytes r = admitted ? reserved : footprint_for(std::min(job.limit, n.cap), n.estimate, job.estimate, devices_[device]).first;
      return sat_sub(std::max(r, sat_add(granted, n.request)), cur);
    }
  return 0;
}

const Waiter* Broker::head_waiter(uint32_t device) const {
  const Waiter* head = nullptr;
  WaiterView head_view;
  for (const Waiter& w : waiters_) {
    if (!w.device_short || w.frozen) continue;  // held only by its user's cap, or suspended
    if (!waits_on(w, device)) continue;
    const WaiterView v = view_of(w);
    if (!head || policy_.before(v, head_view)) {
      head = &w;
      head_view = v;
    }
  }
  return head;
}

bool Broker::waits_for_outside(const Waiter& w, uint32_t device) const {
  const Device& d = devices_[device];
  if (d.outside == 0) return false;
  // Fits in capacity - headroom - every commitment, were nothing used outside coloc.
  return extra_need(w, device) <= sat_sub(sat_sub(d.capacity, d.headroom), d.committed);
}

void Broker::break_deadlock(uint32_t device, Nanos now) {
  // Only a real deadlock is broken: the request everything on the device waits behind (the first
  // in the policy's order) must need memory that only the parked coloc jobs can give back. When it
  // would fit were the memory used outside coloc freed, failing a coloc job is not the way out:
  // it waits (up to its wait timeout) for the outside use to go away.
  if (const Waiter* head = head_waiter(device); head && waits_for_outside(*head, device)) return;
  std::vector<VictimCandidate> candidates;
  for (auto& [serial, job] : jobs_) {
    auto it = job.devices.find(device);
    if (it == job.devices.end() || !it->second.admitted || it->second.clients == 0) continue;
    if (off_books(job)) continue;  // suspended: it holds nothing there, and waits for nothing
    if (!parked_on(serial, device)) return;  // someone can still free memory
    candidates.push_back({serial, job.priority, job.age, it->second.admitted_at, it->second.growths > 0});
  }
  if (candidates.empty()) return;
  JobSerial victim = policy_.choose_victim(candidates);
  const Job& vj = jobs_.at(victim);
  log::limited(log::get("broker"), spdlog::level::warn, "deadlock uid " + std::to_string(vj.key.uid),
               "device {}: every job ({}) is waiting for memory; failing the request of job {} ({})",
                           devices_[device].uuid.str(), candidates.size(), vj.key.str(),
                           proto::priority_name(vj.priority));
  for (size_t i = waiters_.size(); i-- > 0;) {
    const Waiter& w = waiters_[i];
    if (w.job == victim && !w.admission && clients_.at(w.client).slots[w.slot].device == device)
      answer_waiter(i, false, Reason::kDeadlockBroken, now);
  }
}

// ---- time and admin -----------------------------------------------------------------------------

void Broker::tick(Nanos now) {
  if (hold_until_ != 0 && now >= hold_until_) end_hold(now);
  bool any = false;
  for (size_t i = waiters_.size(); i-- > 0;) {
    if (waiters_[i].deadline <= now) {
      const Waiter& w = waiters_[i];
      const uint32_t dev = w.admission ? w.devices.front().device : clients_.at(w.client).slots[w.slot].device;
      if (waits_for_outside(w, dev))
        log::limited(log::get("broker"), spdlog::level::warn, "timeout uid " + std::to_string(jobs_.at(w.job).key.uid),
            "job {}: timeout waiting for memory used outside coloc on {} ({} used outside coloc, {} available, {} "
            "needed)",
            jobs_.at(w.job).key.str(), devices_[dev].uuid.str(), mib(devices_[dev].outside), mib(available(dev)),
            mib(extra_need(w, dev)));
      answer_waiter(i, false, Reason::kTimeout, now);
      any = true;
    }
  }
  if (any) pump(now);
}

Nanos Broker::next_deadline() const {
  Nanos t = hold_until_ ? hold_until_ : kNever;
  for (const Waiter& w : waiters_) t = std::min(t, w.deadline);
  return t;
}

void Broker::hold_until(Nanos until) { hold_until_ = until; }

void Broker::end_hold(Nanos now) {
  if (hold_until_ == 0) return;
  hold_until_ = 0;
  log::get("broker")->info("restart hold ended: serving new requests");
  for (uint32_t dev = 0; dev < devices_.size(); ++dev)
    if (devices_[dev].committed > usable(dev))
      log::get("broker")->warn(
          "device {}: over-committed after the restart by memory really in use ({} committed, {} usable); nothing "
          "more is granted on the device until it fits again",
          devices_[dev].uuid.str(), mib(devices_[dev].committed), mib(usable(dev)));
  pump(now);
  for (uint32_t dev = 0; dev < devices_.size(); ++dev) break_deadlock(dev, now);
}

std::vector<Reply> Broker::take_replies() { return std::exchange(replies_, {}); }
std::vector<Event> Broker::take_events() { return std::exchange(events_, {}); }

// ---- audit --------------------------------------------------------------------------------------

std::string Broker::audit() const {
  std::ostringstream o;
  std::vector<Bytes> committed(devices_.size(), 0);
  std::map<uint32_t, Bytes> users;
  for (auto& [serial, job] : jobs_) {
    for (auto& [dev, jd] : job.devices) {
      Bytes granted = 0, overhead = 0;
      uint32_t clients = 0;
      for (ClientId id : job.clients) {
        const Client& c = clients_.at(id);
        for (uint32_t s = 0; s < pages::kSlots; ++s) {
          if (!c.slots[s].attached || c.slots[s].device != dev) continue;
          granted += c.slots[s].grant + c.slots[s].overhead;
          overhead += c.slots[s].overhead;
          ++clients;
        }
      }
      if (overhead != jd.overhead) o << "job " << job.key.str() << " device " << dev << ": overhead " << jd.overhead << " != sum " << overhead << "\n";
      if (granted != jd.granted) o << "job " << job.key.str() << " device " << dev << ": granted " << jd.granted << " != sum " << granted << "\n";
      if (clients != jd.clients) o << "job " << job.key.str() << " device " << dev << ": clients " << jd.clients << " != " << clients << "\n";
      if (!jd.admitted && (jd.reserved || jd.granted)) o << "job " << job.key.str() << ": commitment without admission\n";
      if (jd.reserved > std::min(job.limit, jd.cap) && job.suspension != Suspension::kRestoring)
        o << "job " << job.key.str() << ": reservation over limit\n";
      committed[dev] += std::max(jd.reserved, jd.granted);
      users[job.key.uid] += std::max(jd.reserved, jd.granted);
    }
  }
  for (uint32_t d = 0; d < devices_.size(); ++d) {
    if (committed[d] != devices_[d].committed)
      o << "device " << d << ": committed " << devices_[d].committed << " != sum " << committed[d] << "\n";
    for (auto [id, slot] : devices_[d].attachments) {
      const Client* c = find_client(id);
      if (!c || !c->slots[slot].attached || c->slots[slot].device != d) o << "device " << d << ": stale attachment\n";
    }
  }
  for (auto& [uid, b] : users)
    if (b != user_committed(uid)) o << "user " << uid << ": committed " << user_committed(uid) << " != sum " << b << "\n";
  for (auto& [uid, b] : user_committed_)
    if (!users.count(uid) || users[uid] != b) o << "user " << uid << ": stale committed " << b << "\n";
  for (auto& [id, c] : clients_)
    for (uint32_t s = 0; s < pages::kSlots; ++s)
      if (c.slots[s].attached && !off_books(jobs_.at(c.job)) && c.control->slots[s].grant.load() != c.slots[s].grant)
        o << "client " << id << " slot " << s << ": control page grant differs from the books\n";
  return o.str();
}

}  // namespace coloc::broker
