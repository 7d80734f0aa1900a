#include "metrics/counters.h"

namespace coloc::metrics {

void Histogram::observe(broker::Nanos ns) {
  const double s = double(ns) / 1e9;
  size_t i = 0;
  while (i < kGrantBuckets.size() && s > kGrantBuckets[i]) ++i;
  ++counts[i];
  ++count;
  sum += s;
}

void Counters::on_event(const broker::Event& e) {
  using K = broker::Event::Kind;
  const uint32_t kind = uint32_t(e.admission ? WaitKind::kAdmission : WaitKind::kGrowth);
  switch (e.kind) {
    case K::kAdmitted:
      ++v_.admissions;
      break;
    case K::kWaitBegin:
      ++v_.waits[kind];
      open_[{e.job, kind}].push_back(e.at);
      break;
    case K::kWaitEnd: {
      // A wait begun before a restart ends here without a start: its time is not this daemon's.
      auto it = open_.find({e.job, kind});
      if (it == open_.end()) break;
      const broker::Nanos start = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) open_.erase(it);
      v_.wait_seconds[kind] += e.at > start ? double(e.at - start) / 1e9 : 0.0;
      break;
    }
    case K::kRefused:
      if (uint32_t r = uint32_t(e.reason); r >= 1 && r <= kMaxReason) ++v_.refusals[r];
      break;
    case K::kJobEnded:
      // Its parked requests went with it (answered or not, the broker ends their waits first).
      open_.erase(open_.lower_bound({e.job, 0}), open_.upper_bound({e.job, 1}));
      break;
    default:
      break;
  }
}

}  // namespace coloc::metrics
