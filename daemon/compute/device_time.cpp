// daemon/compute/device_time.cpp — see device_time.h.
#include "compute/device_time.h"

#include <algorithm>

namespace coloc::compute {

void DeviceTime::look(broker::Nanos now, const Key& key, const std::vector<Figures>& figs, broker::Nanos since) {
  auto [it, fresh] = jobs_.try_emplace(key);
  Job& j = it->second;
  if (fresh) j.high = j.last_look = std::min(since, now);
  if (now < j.last_look) now = j.last_look;  // (never decreasing: a caller's slip counts nothing)
  struct Span {
    broker::Nanos end = 0, start = 0;
    uint64_t delta = 0;
  };
  std::vector<Span> spans;
  spans.reserve(figs.size() + 1);
  uint64_t old_delta = 0;  // pages without busy_until, together
  for (const Figures& f : figs) {
    Client& c = j.clients[f.client];
    if (f.busy_ns < c.busy_ns) {  // gone back (not a page's behaviour): a new baseline, nothing added
      c.busy_ns = f.busy_ns;
      continue;
    }
    const uint64_t delta = f.busy_ns - c.busy_ns;
    if (delta == 0) continue;  // its busy_until is kept as seen last: the next work lies after it
    c.busy_ns = f.busy_ns;
    if (!f.busy_until) {
      old_delta += delta;
      continue;
    }
    const broker::Nanos end = std::min<broker::Nanos>(*f.busy_until, now);
    spans.push_back({end, broker::Nanos(c.until), delta});
    c.until = std::max<uint64_t>(c.until, end);
  }
  if (old_delta) spans.push_back({now, j.last_look, old_delta});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.end < b.end; });
  for (const Span& s : spans) {
    const broker::Nanos lo = std::max(j.high, s.start);
    if (s.end <= lo) continue;
    j.total += std::min<uint64_t>(s.delta, uint64_t(s.end - lo));
    j.high = s.end;
  }
  j.last_look = now;
}

uint64_t DeviceTime::total(const Key& key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? 0 : it->second.total;
}

void DeviceTime::forget_client(uint64_t client) {
  for (auto& [key, j] : jobs_) j.clients.erase(client);
}

void DeviceTime::forget_job(broker::JobSerial job) {
  for (auto it = jobs_.begin(); it != jobs_.end();) it = it->first.first == job ? jobs_.erase(it) : std::next(it);
}

}  // namespace coloc::compute
