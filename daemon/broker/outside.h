// daemon/broker/outside.h — memory used outside coloc on a device, from figures colocd cannot
// check: the physical free memory its clients report (cuMemGetInfo, in Attach, Grow and
// DriverOom) when colocd has no reading of its own (no NVML, or NVML does not know the device).
//
// A client can lie. The rule (docs/daemon.md, "Hostile peers"):
//   - Each user's (uid's) latest figure counts; one user's many processes are one voice. A figure
//     is what it implies: o = capacity - free - coloc's in-use then (never below 0).
//   - A user can show missing only memory colocd has set aside for it and it does not use: its
//     allowance a = its jobs' commitment on the device minus their in-use (plus, for a driver
//     OOM, the request that failed). So a user's figure counts at most `a` above what the other
//     users' figures establish without it:
//         E(R) = max over users u in R of  min(o_u, E(R \ {u}) + a_u),   E({}) = 0.
//   - Consequences, each proven by induction over R: adding a user's figure never lowers E (no
//     figure can make colocd over-grant: a false "all free" only withdraws its own user's voice),
//     and raises it by at most that user's allowance (a false "all used" costs the others no more
//     than what its user holds unused). An honest outside use is seen in full once the users who
//     see it hold enough unused commitment between them (a job admitted with --mem holds its
//     reservation), and at once wherever colocd reads the device itself (NVML), which this rule
//     never overrides.
//   - At most kMaxUsers figures count (the latest ones); E is computed over subsets of them.
#pragma once

#include <cstdint>
#include <map>

#include "broker/types.h"

namespace coloc::broker {

class OutsideFigures {
 public:
  /// Users whose figures count at once (the most recent ones; older ones are forgotten).
  static constexpr size_t kMaxUsers = 8;

  /// Records user `uid`'s figure at `now`: `outside` = what it implies (bytes), `allowance` =
  /// what the user holds unused on the device (bytes). Replaces the user's earlier figure.
  void report(uint32_t uid, Bytes outside, Bytes allowance, Nanos now);
  /// Forgets user `uid`'s figure (its last client left the device).
  void forget(uint32_t uid);
  void clear() { figures_.clear(); }
  bool empty() const { return figures_.empty(); }
  size_t size() const { return figures_.size(); }

  /// E over the figures held (the rule above), in bytes.
  Bytes estimate() const;
  /// The most any held figure implies (bytes; 0 when none): never below estimate(). A figure can
  /// only raise it, so it is the safe baseline of a driver-overhead estimate (a lie can make that
  /// estimate smaller, never larger: Broker::context_footprint).
  Bytes highest() const;

 private:
  struct Figure {
    Bytes outside = 0;
    Bytes allowance = 0;
    Nanos at = 0;
  };
  std::map<uint32_t, Figure> figures_;
};

}  // namespace coloc::broker
