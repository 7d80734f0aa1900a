// daemon/broker/priority_fifo_policy.h — the default memory policy.
#pragma once

#include "broker/memory_policy.h"

namespace coloc::broker {

/// The default policy, as the design notes state it: priority, then FIFO; wait or fail as the
/// job asked (a request that can never fit fails at once); the deadlock victim is the
/// lowest-priority job, and among those the youngest.
class PriorityFifoPolicy final : public MemoryPolicy {
 public:
  const char* name() const override { return "priority-fifo"; }
  bool before(const WaiterView& a, const WaiterView& b) const override;
  FullAction on_full(const FullContext& ctx) const override;
  JobSerial choose_victim(std::span<const VictimCandidate> candidates) const override;
};

}  // namespace coloc::broker
