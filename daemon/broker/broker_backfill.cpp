// daemon/broker/broker_backfill.cpp — the Broker's side of EASY backfill (backfill.h): the books it
// feeds the rule (the device's holders and their expected ends, the head's need) and the promise
// it keeps per device.
#include <algorithm>
#include <vector>

#include "broker/arith.h"
#include "broker/broker.h"
#include "util/log.h"

namespace coloc::broker {

bool Broker::growth_waits_ahead(uint32_t device, const WaiterView& me) const {
  for (const Waiter& w : waiters_)
    if (!w.admission && w.device_short && waits_on(w, device) && policy_.before(view_of(w), me)) return true;
  return false;
}

Broker::BackfillCheck Broker::check_backfill(uint32_t dev, const Waiter& head, bool growth_ahead, const Job& job,
                                             const AttachNeed& need, Bytes extra, Nanos now) const {
  BackfillCheck r;
  if (config_.backfill != backfill::Mode::kEasy || holding()) return r;
  // Never past a running job's growth, nor past another request of its own job.
  if (growth_ahead || !head.admission || head.job == job.serial) return r;
  if (backfill::overrun(devices_[dev].promise, head.order, now)) return r;
  std::vector<backfill::Holder> holders;
  for (const auto& [serial, j] : jobs_) {
    auto it = j.devices.find(dev);
    if (it == j.devices.end() || !it->second.admitted) continue;
    const Bytes commitment = std::max(it->second.reserved, it->second.granted);
    if (commitment > 0) holders.push_back({commitment, it->second.expected_end});
  }
  r.shadow = backfill::shadow(available(dev), extra_need(head, dev), holders, now);
  // Its footprint is known when its admission reserves one there (--mem, a cap, history, an estimate).
  const bool known = footprint_for(std::min(job.limit, need.cap), need.estimate, job.estimate, devices_[dev]).second !=
                     Footprint::kNone;
  r.verdict = backfill::decide(r.shadow, {extra, known, need.run}, now);
  r.ahead = backfill::goes_ahead(r.verdict);
  return r;
}

void Broker::note_backfill(uint32_t dev, uint64_t head, Job& job, const BackfillCheck& check, Nanos now) {
  JobDevice& jd = job.devices[dev];
  jd.backfilled = true;
  jd.backfill_verdict = check.verdict;
  backfill::Promise& p = devices_[dev].promise;
  if (p.head != head) p = {head, check.shadow.at};
  else p.shadow = std::min(p.shadow, check.shadow.at);
  log::limited(log::get("broker"), spdlog::level::info, "backfill uid " + std::to_string(job.key.uid),
               "job {} went ahead of the queue on {} ({}; the head's shadow time {})", job.key.str(),
               devices_[dev].uuid.str(), backfill::verdict_name(check.verdict),
               check.shadow.at == kNever ? std::string("unknown")
                                         : fmt::format("in {:.1f} s", double(sat_sub(check.shadow.at, now)) / 1e9));
}

}  // namespace coloc::broker
