#include "broker/outside.h"

#include <algorithm>
#include <array>
#include <vector>

namespace coloc::broker {

void OutsideFigures::report(uint32_t uid, Bytes outside, Bytes allowance, Nanos now) {
  figures_[uid] = {outside, allowance, now};
  while (figures_.size() > kMaxUsers) {  // forget the oldest figure
    auto oldest = figures_.begin();
    for (auto it = figures_.begin(); it != figures_.end(); ++it)
      if (it->second.at < oldest->second.at) oldest = it;
    figures_.erase(oldest);
  }
}

void OutsideFigures::forget(uint32_t uid) { figures_.erase(uid); }

Bytes OutsideFigures::highest() const {
  Bytes h = 0;
  for (const auto& [uid, fig] : figures_) h = std::max(h, fig.outside);
  return h;
}

Bytes OutsideFigures::estimate() const {
  std::vector<Figure> f;
  for (const auto& [uid, fig] : figures_) f.push_back(fig);
  const size_t n = f.size();
  if (n == 0) return 0;
  // e[mask]: the estimate from the figures in `mask` alone (see outside.h).
  std::array<Bytes, 1u << kMaxUsers> e{};
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    Bytes best = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!(mask & (1u << i))) continue;
      const Bytes without = e[mask ^ (1u << i)];
      const Bytes cap = without > kUnknown - f[i].allowance ? kUnknown : without + f[i].allowance;
      best = std::max(best, std::min(f[i].outside, cap));
    }
    e[mask] = best;
  }
  return e[(1u << n) - 1];
}

}  // namespace coloc::broker
