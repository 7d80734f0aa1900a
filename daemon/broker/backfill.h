// daemon/broker/backfill.h — EASY backfill on one device (issue 28): which waiting admission may go
// ahead of the request first in line there (the head) without delaying it.
//
// Pure: no clock (every call takes `now`), no state, no I/O. The Broker keeps the state (the
// promise a device made its head, Device::promise) and calls these on its loop; tests drive them
// with plain numbers.
//
// The rule (after Lifka's EASY backfilling on the IBM SP, 1995, as Slurm's sched/backfill uses it,
// with memory in place of nodes and predicted ends in place of time limits):
//   1. The head's *shadow time*: the jobs holding memory on the device end at their expected ends
//      (admission + the median time from admission to end of their fingerprint's clean runs), in
//      that order; the shadow time is the first end at which the memory available then covers
//      what the head needs. The *extra* is what is available then beyond that need.
//   2. A job whose end is not known (no history, or already past its expected end) is taken to
//      hold its memory for ever. When the head can only start once such jobs end, it has no shadow
//      time, and the extra is the least the head could find beyond its need at the moment it first
//      fits, whichever of those jobs end first (so an admission that takes only that much can never
//      be what it waits for).
//   3. A waiting admission may go ahead of the head when it fits now, its footprint is known (a
//      job without one reserves nothing and could grow into the head's memory), and either it is
//      expected to end by the shadow time, or it commits no more than the extra (which then
//      shrinks by as much).
// Predictions are medians, not limits, so they can be wrong: the Broker stops backfilling on a
// device once its head waits past the shadow time it was promised when the first job went ahead
// of it (overrun()), until that head starts.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "broker/types.h"

namespace coloc::broker::backfill {

/// colocd.toml's `backfill`: "easy" (the rule above; the default) or "off" (strict order: nothing
/// takes memory on a device where a request ahead of it in the policy's order waits).
enum class Mode : uint8_t { kOff, kEasy };
/// "off", "easy".
const char* mode_name(Mode m);
/// The inverse of mode_name; false for anything else.
bool parse_mode(std::string_view text, Mode* out);

/// A job that commits memory on the device, as the rule sees it.
struct Holder {
  Bytes commitment = 0;  ///< bytes it commits there now (max(reservation, granted))
  Nanos end = kNever;    ///< when it is expected to end (ns, the Broker's clock); kNever: not known
};

/// The head's plan on the device.
struct Shadow {
  /// When the head is expected to fit (ns; `now` when it fits now); kNever when that is not known
  /// (it waits for a job whose end is not known, or for memory used outside coloc).
  Nanos at = kNever;
  /// Bytes available at that moment beyond what the head needs (0 when it cannot be counted on).
  Bytes extra = 0;
};

/// Unknown ends are enumerated as subsets up to this many jobs; with more the extra is 0 when
/// the head waits for them (a device rarely holds more than a few jobs; 2^12 sums per call).
inline constexpr size_t kMaxUnknownHolders = 12;

/// The head's shadow time and extra (rules 1 and 2). `available`: bytes the device has
/// uncommitted now (Broker::available); `need`: bytes the head must commit beyond what its job
/// commits now; `holders`: the jobs committing memory on the device (the head's own job among
/// them, if it is admitted there, with its end). An end at or before `now` counts as not known.
Shadow shadow(Bytes available, Bytes need, std::span<const Holder> holders, Nanos now);

/// A waiting admission on the device, as the rule sees it.
struct Candidate {
  Bytes need = 0;          ///< bytes its admission commits there (its reservation, or its request)
  bool footprint = false;  ///< its reservation there is known (--mem, history, a declared estimate)
  Nanos run = 0;           ///< its expected time from admission to end (ns); 0: not known
};

/// What the rule says of a candidate.
enum class Verdict : uint8_t {
  kBeforeShadow,  ///< expected to end by the shadow time: goes ahead (fitting now is the caller's check)
  kInExtra,       ///< commits no more than the extra: goes ahead, the extra shrinks by `need`
  kNoFootprint,   ///< no known footprint: waits its turn
  kWouldDelay,    ///< could delay the head: waits its turn
};
/// "before-shadow", "in-extra", "no-footprint", "would-delay".
const char* verdict_name(Verdict v);
/// True for the verdicts that let the candidate go ahead.
inline bool goes_ahead(Verdict v) { return v == Verdict::kBeforeShadow || v == Verdict::kInExtra; }

/// Rule 3 for `c` against `s`, at `now`.
Verdict decide(const Shadow& s, const Candidate& c, Nanos now);

/// A request waiting on the device, in the policy's order, for project().
struct Queued {
  Bytes need = 0;  ///< bytes it must commit there beyond what its job commits now
  Nanos run = 0;   ///< its expected time from admission to end (ns); 0: not known (holds for ever)
};
/// When each of `queue` is expected to start (ns; kNever: not known), in strict order (no backfill:
/// an estimate a backfill can only bring forward for the job it lets in): the holders end at
/// their expected ends (one at or before `now`, or kNever, never), and the first in line starts
/// as soon as what is available covers its need, then ends `run` later. Whoever waits behind a
/// start that is not known has none either.
std::vector<Nanos> project(Bytes available, std::span<const Holder> holders, std::span<const Queued> queue, Nanos now);

/// What a device promised its head when the first job went ahead of it.
struct Promise {
  uint64_t head = 0;    ///< the head's arrival number (Waiter::order); 0: none
  Nanos shadow = kNever;  ///< its shadow time then (ns)
};
/// True when `head` (its arrival number) is the head `p` was made to and it still waits past the
/// promised shadow time: something ran longer than predicted, and nothing more goes ahead of it.
inline bool overrun(const Promise& p, uint64_t head, Nanos now) {
  return p.head != 0 && p.head == head && p.shadow != kNever && now > p.shadow;
}

}  // namespace coloc::broker::backfill
