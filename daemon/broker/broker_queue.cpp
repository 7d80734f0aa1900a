// daemon/broker/broker_queue.cpp — the Broker's queues as the rest of colocd sees them: EASY
// backfill (backfill.h: the books it feeds the rule, the device's holders and their expected ends,
// the head's need, and the promise it keeps per device), and each waiting request's reason,
// position and estimated start (queue()).
#include <algorithm>
#include <vector>

#include "broker/arith.h"
#include "broker/broker.h"
#include "util/log.h"

namespace coloc::broker {

namespace {
/// The jobs committing memory on `dev`, with their expected ends, as the backfill rule sees them.
std::vector<backfill::Holder> holders_on(const std::map<JobSerial, Job>& jobs, uint32_t dev) {
  std::vector<backfill::Holder> out;
  for (const auto& [serial, j] : jobs) {
    auto it = j.devices.find(dev);
    if (it == j.devices.end() || !it->second.admitted) continue;
    const Bytes commitment = std::max(it->second.reserved, it->second.granted);
    if (commitment > 0) out.push_back({commitment, it->second.expected_end});
  }
  return out;
}
}  // namespace
bool Broker::growth_waits_ahead(uint32_t device, const WaiterView& me) const {
  for (const Waiter& w : waiters_)
    if (!w.admission && w.device_short && !w.frozen && waits_on(w, device) && policy_.before(view_of(w), me)) return true;
  return false;
}

Broker::BackfillCheck Broker::check_backfill(uint32_t dev, const Waiter& head, bool growth_ahead, const Job& job,
                                             const AttachNeed& need, Bytes extra, Nanos now) const {
  BackfillCheck r;
  if (config_.backfill != backfill::Mode::kEasy || holding()) return r;
  // Never past a running job's growth, nor past another request of its own job.
  if (growth_ahead || !head.admission || head.job == job.serial) return r;
  if (backfill::overrun(devices_[dev].promise, head.order, now)) return r;
  if (const auto& rp = devices_[dev].restored_promise; rp && now > rp->second)
    if (auto hj = jobs_.find(head.job); hj != jobs_.end() && hj->second.key == rp->first) return r;
  const std::vector<backfill::Holder> holders = holders_on(jobs_, dev);
  r.shadow = backfill::shadow(available(dev), extra_need(head, dev), holders, now);
  // Its footprint is known when its admission reserves one there (--mem, a cap, history, an estimate).
  const bool known = footprint_for(std::min(job.limit, need.cap), need.estimate, job.estimate, devices_[dev]).second !=
                     Footprint::kNone;
  r.verdict = backfill::decide(r.shadow, {extra, known, need.run}, now);
  r.ahead = backfill::goes_ahead(r.verdict);
  return r;
}

std::vector<Broker::QueueEntry> Broker::queue(uint32_t device, Nanos now) const {
  std::vector<QueueEntry> out;
  if (device >= devices_.size()) return out;
  for (const Waiter& w : waiters_)
    if (waits_on(w, device)) out.push_back({&w});
  std::stable_sort(out.begin(), out.end(), [&](const QueueEntry& a, const QueueEntry& b) {
    return policy_.before(view_of(*a.waiter), view_of(*b.waiter));
  });
  const std::vector<backfill::Holder> holders = holders_on(jobs_, device);
  const Bytes avail = available(device);
  std::vector<backfill::Queued> line;
  const Waiter* head = nullptr;
  for (size_t i = 0; i < out.size(); ++i) {
    QueueEntry& e = out[i];
    const Waiter& w = *e.waiter;
    e.position = uint32_t(i + 1);
    e.need = extra_need(w, device);
    if (w.frozen) {
      e.reason = proto::WaitReason::kSuspended;  // its job is suspended: it waits for the restore
    } else if (holding()) {
      e.reason = proto::WaitReason::kRestart;
    } else if (!w.device_short) {
      e.reason = proto::WaitReason::kUserCap;
    } else if (!head) {
      head = &w;
      if (const JobSerial r = w.admission ? restore_ahead(device, jobs_.at(w.job).priority, w.job) : 0) {
        // A suspended job's restore is ahead of it in line.
        e.blocker = r;
        e.reason = jobs_.at(r).priority > jobs_.at(w.job).priority ? proto::WaitReason::kPriority
                                                                   : proto::WaitReason::kQueue;
      } else {
        e.reason = waits_for_outside(w, device) ? proto::WaitReason::kOutside : proto::WaitReason::kResources;
        e.missing = sat_sub(e.need, avail);
      }
    } else {
      e.blocker = head->job;
      e.reason = jobs_.at(head->job).priority > jobs_.at(w.job).priority ? proto::WaitReason::kPriority
                                                                         : proto::WaitReason::kQueue;
    }
    if (!w.device_short || w.frozen) continue;  // not in the device's line
    Nanos run = 0;
    for (const AttachNeed& n : w.devices)
      if (n.device == device) run = n.run;
    line.push_back({e.need, w.admission ? run : 0});
  }
  if (holding()) return out;
  const std::vector<Nanos> starts = backfill::project(avail, holders, line, now);
  size_t k = 0;
  for (QueueEntry& e : out)
    if (e.waiter->device_short && !e.waiter->frozen) e.start = starts[k++];
  return out;
}

std::pair<Bytes, Footprint> Broker::waiting_footprint(const Waiter& w, uint32_t device) const {
  if (!w.admission || device >= devices_.size()) return {0, Footprint::kNone};
  const Job& job = jobs_.at(w.job);
  for (const AttachNeed& n : w.devices)
    if (n.device == device) return footprint_for(std::min(job.limit, n.cap), n.estimate, job.estimate, devices_[device]);
  return {0, Footprint::kNone};
}

void Broker::note_backfill(uint32_t dev, uint64_t head, Job& job, const BackfillCheck& check, Nanos now) {
  JobDevice& jd = job.devices[dev];
  jd.backfilled = true;
  jd.backfill_verdict = check.verdict;
  backfill::Promise& p = devices_[dev].promise;
  devices_[dev].restored_promise.reset();  // a promise of this colocd's own replaces it
  if (p.head != head) p = {head, check.shadow.at};
  else p.shadow = std::min(p.shadow, check.shadow.at);
  log::limited(log::get("broker"), spdlog::level::info, "backfill uid " + std::to_string(job.key.uid),
               "job {} went ahead of the queue on {} ({}; the head's shadow time {})", job.key.str(),
               devices_[dev].uuid.str(), backfill::verdict_name(check.verdict),
               check.shadow.at == kNever ? std::string("unknown")
                                         : fmt::format("in {:.1f} s", double(sat_sub(check.shadow.at, now)) / 1e9));
}

size_t Broker::cancel_job(JobSerial job, Nanos now) {
  if (auto j = jobs_.find(job); j != jobs_.end()) j->second.cancelled = true;
  size_t answered = 0;
  for (size_t i = 0; i < waiters_.size();) {
    if (job_of(clients_.at(waiters_[i].client)).serial != job) {
      ++i;
      continue;
    }
    answer_waiter(i, false, Reason::kJobCancelled, now);  // erases waiters_[i]
    ++answered;
  }
  if (answered) pump(now);
  return answered;
}

bool Broker::restore_queue_state(JobSerial serial, uint32_t dev, Nanos expected_end, bool backfilled) {
  auto it = jobs_.find(serial);
  if (it == jobs_.end()) return false;
  auto jd = it->second.devices.find(dev);
  if (jd == it->second.devices.end() || !jd->second.admitted) return false;
  jd->second.expected_end = expected_end;
  jd->second.backfilled = jd->second.backfilled || backfilled;
  return true;
}

void Broker::restore_promise(uint32_t dev, const JobKey& head, Nanos shadow) {
  if (dev >= devices_.size() || shadow == kNever) return;
  auto& rp = devices_[dev].restored_promise;
  if (!rp || shadow < rp->second) rp = std::make_pair(head, shadow);
}

std::optional<std::pair<JobKey, Nanos>> Broker::promise_of(uint32_t dev) const {
  if (dev >= devices_.size()) return std::nullopt;
  const Device& d = devices_[dev];
  if (d.promise.head != 0 && d.promise.shadow != kNever)
    for (const Waiter& w : waiters_)
      if (w.order == d.promise.head)
        if (auto j = jobs_.find(w.job); j != jobs_.end()) return std::make_pair(j->second.key, d.promise.shadow);
  return d.restored_promise;
}

}  // namespace coloc::broker
