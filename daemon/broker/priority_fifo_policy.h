// daemon/broker/priority_fifo_policy.h — the default memory policy.
#pragma once

#include "broker/memory_policy.h"

namespace coloc::broker {

/// The default policy ("priority-fifo").
///
/// Order of parked requests (before()):
///   1. higher priority first (high, normal, best-effort);
///   2. within a priority, the growth of running jobs (jobs already admitted, asking for more)
///      and the admission of jobs that declared a limit (--mem: their admission holds their whole
///      footprint) come before the admission of jobs without a limit (which hold no
///      reservation): a running job's growth is never starved by a stream of newcomers;
///   3. then arrival order (FIFO).
/// A request that does not fit (on_full()): one that can never fit fails at once (device-full,
/// or user-cap when the user's cap alone can never hold it); otherwise it waits or fails as the
/// job asked (--on-full).
/// Deadlock victim (choose_victim(), every job on the device waiting to grow): the lowest
/// priority; among those, a job that has made no progress on the device (no growth granted
/// since admission) before one that has; then the newest: latest admitted on the device, then
/// the youngest process, then the latest job serial. An older running job is therefore kept,
/// and the newest job that has not got anywhere yet is the one refused (deadlock-broken).
class PriorityFifoPolicy final : public MemoryPolicy {
 public:
  const char* name() const override { return "priority-fifo"; }
  bool before(const WaiterView& a, const WaiterView& b) const override;
  FullAction on_full(const FullContext& ctx) const override;
  JobSerial choose_victim(std::span<const VictimCandidate> candidates) const override;
};

}  // namespace coloc::broker
