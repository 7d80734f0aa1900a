#include "broker/priority_fifo_policy.h"

#include <cassert>

namespace coloc::broker {

bool PriorityFifoPolicy::before(const WaiterView& a, const WaiterView& b) const {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.order < b.order;
}

FullAction PriorityFifoPolicy::on_full(const FullContext& ctx) const {
  // Waiting for something that can never happen only delays the failure.
  if (!ctx.can_ever_fit) return {false, Reason::kDeviceFull};
  if (ctx.over_user_cap && !ctx.can_ever_fit_user_cap) return {false, Reason::kUserCap};
  if (ctx.on_full == OnFull::kFail) return {false, ctx.over_user_cap ? Reason::kUserCap : Reason::kDeviceFull};
  return {true, Reason::kNone};
}

JobSerial PriorityFifoPolicy::choose_victim(std::span<const VictimCandidate> candidates) const {
  assert(!candidates.empty());
  const VictimCandidate* v = &candidates[0];
  for (const VictimCandidate& c : candidates) {
    if (c.priority < v->priority || (c.priority == v->priority && c.age > v->age) ||
        (c.priority == v->priority && c.age == v->age && c.job > v->job))
      v = &c;
  }
  return v->job;
}

}  // namespace coloc::broker
