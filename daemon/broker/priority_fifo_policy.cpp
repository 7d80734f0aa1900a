#include "broker/priority_fifo_policy.h"

#include <cassert>

namespace coloc::broker {

namespace {

/// 0: growth, or an admission that holds a reservation; 1: an admission that reserves nothing.
int rank(const WaiterView& w) { return w.admission && !w.reserves ? 1 : 0; }

/// True when `a` is a better victim than `b`.
bool worse(const VictimCandidate& a, const VictimCandidate& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.progressed != b.progressed) return !a.progressed;
  if (a.admitted_at != b.admitted_at) return a.admitted_at > b.admitted_at;
  if (a.age != b.age) return a.age > b.age;
  return a.job > b.job;
}

}  // namespace

bool PriorityFifoPolicy::before(const WaiterView& a, const WaiterView& b) const {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (rank(a) != rank(b)) return rank(a) < rank(b);
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
  for (const VictimCandidate& c : candidates)
    if (worse(c, *v)) v = &c;
  return v->job;
}

}  // namespace coloc::broker
