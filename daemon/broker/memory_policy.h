// daemon/broker/memory_policy.h — the decisions the memory broker delegates: who is served
// first when memory frees, what a request that does not fit does, and who loses a deadlock.
//
// Lifecycle: the engine creates one policy at start and hands it to the Broker by reference; it
// lives as long as the Broker. The Broker calls it only on the daemon's loop thread, from inside
// its own methods, with views of its state that are valid for the duration of the call. A policy
// is a pure function of its arguments: no I/O, no clock, no state that changes between calls
// (so decisions are reproducible in tests and after a daemon restart).
#pragma once

#include <span>

#include "broker/types.h"

namespace coloc::broker {

/// A parked request as the policy sees it.
struct WaiterView {
  Priority priority = Priority::kNormal;  ///< the job's priority now
  uint64_t order = 0;                     ///< arrival number: smaller came first
  bool admission = false;                 ///< waiting for admission (Attach) rather than growth
  /// Admission only: the job declared a limit (--mem), so admission holds its reservation (its
  /// whole footprint); false for a job without a limit, whose admission reserves nothing.
  bool reserves = false;
};

/// A job that is waiting on a deadlocked device.
struct VictimCandidate {
  JobSerial job = 0;
  Priority priority = Priority::kNormal;
  uint64_t age = 0;       ///< larger = younger (its process started later)
  Nanos admitted_at = 0;  ///< when the job was admitted on the device (ns, the broker's clock)
  /// The job has made progress on the device: at least one of its growth requests there was
  /// granted since admission (a fact of the daemon's books, not of the client's counters).
  bool progressed = false;
};

/// What to do with a request that does not fit the device now.
struct FullContext {
  OnFull on_full = OnFull::kWait;  ///< the job's choice (--on-full)
  bool can_ever_fit = true;        ///< false when it would not fit even on an empty device
  bool over_user_cap = false;      ///< the user's cap, not the device, is what stops it
  bool can_ever_fit_user_cap = true;  ///< false when it exceeds the cap even with nothing else of the user's
};
struct FullAction {
  bool park = false;              ///< true: park until memory frees (or the wait times out)
  Reason reason = Reason::kNone;  ///< when not parking: why it is refused
};

class MemoryPolicy {
 public:
  virtual ~MemoryPolicy() = default;

  /// A short name for logs and status ("priority-fifo").
  virtual const char* name() const = 0;

  /// Called whenever parked requests are considered (after memory frees, a request parks, or a
  /// priority changes) to sort them. Returns true when `a` must be served before `b`; must be a
  /// strict weak ordering. The broker serves in this order and never lets a request take memory on
  /// a device where one ahead of it in this order is still waiting.
  virtual bool before(const WaiterView& a, const WaiterView& b) const = 0;

  /// Called when a request (admission or growth) does not fit now. Returns park, or refuse with
  /// a reason (kDeviceFull, kUserCap).
  virtual FullAction on_full(const FullContext& ctx) const = 0;

  /// Called when every job on a device has a parked growth request and the request first in line
  /// there would not fit even without the memory used outside coloc (only the parked coloc jobs
  /// could free what it needs; see broker.h, "Deadlock").
  /// `candidates` is non-empty; returns the serial of the job whose requests on that device are
  /// refused with kDeadlockBroken.
  virtual JobSerial choose_victim(std::span<const VictimCandidate> candidates) const = 0;
};

}  // namespace coloc::broker
