// daemon/compute/share_window.cpp — see share_window.h.
#include "compute/share_window.h"

#include <algorithm>
#include <cmath>

namespace coloc::compute {

void ShareWindow::add(const Key& key, broker::Nanos now, uint64_t busy, bool restart) {
  auto& h = history_[key];
  if (restart) h.clear();
  if (!h.empty() && busy < h.back().second) h.clear();  // a process left: its counts went with it
  h.emplace_back(now, busy);
  while (h.size() > 2 && h[1].first + kWindow <= now) h.pop_front();
}

double ShareWindow::share(broker::JobSerial job, const broker::Uuid& dev, const PolicySettings& now_policy) const {
  if (auto p = policy_.find(dev); p == policy_.end() || !(p->second == now_policy)) return std::nan("");
  auto it = history_.find({job, dev});
  if (it == history_.end() || it->second.size() < 2) return std::nan("");
  const auto& [t0, b0] = it->second.front();
  const auto& [t1, b1] = it->second.back();
  if (t1 <= t0) return std::nan("");
  return std::min(1.0, double(b1 - b0) / double(t1 - t0));
}

}  // namespace coloc::compute
