// daemon/broker/overhead.h — driver overhead: the device memory the driver holds for a process
// beyond what its ledger counts (a CUDA context as the driver sizes it, where COLOC_CONTEXT_BYTES
// is only a guess; module images; lazy-loaded kernels).
//
// colocd reconciles each process's books with the driver's own per-process figure (NVML's
// nvmlDeviceGetComputeRunningProcesses_v3, read on the sampling timer; device/memory_reader.h):
//     overhead = max(0, driver's figure - the ledger's in-use)
// and books it with Broker::set_overhead, which charges it to the job inside its limit. An
// allocation is charged in the ledger before the driver call and a free credited after it, so a
// reading taken meanwhile shows the ledger ahead, never behind: such a reading is too low by the
// allocation in flight, never too high. So a higher reading is booked at once, and a lower one
// only as far as the reading before it agrees (settle_overhead): a dip that lasts one reading
// never lowers the books. Where the driver gives no per-process figure, Broker::context_footprint
// estimates the overhead once, from the device's free memory around the process's first context;
// the driver's figure, when one comes, replaces that estimate.
#pragma once

#include <algorithm>
#include <optional>

#include "broker/arith.h"
#include "broker/types.h"

namespace coloc::broker {

/// The overhead one reading implies for a process on a device (bytes). `listed`: the driver named
/// the process on the device (one not named holds nothing there: 0). `driver_used`: its figure
/// (kUnknown when the driver does not say: NVML_VALUE_NOT_AVAILABLE). `ledger`: the process's
/// in-use there. nullopt: unknown (keep what is booked).
inline std::optional<Bytes> reconcile_overhead(bool listed, Bytes driver_used, Bytes ledger) {
  if (!listed) return Bytes{0};
  if (driver_used == kUnknown) return std::nullopt;
  return sat_sub(driver_used, ledger);
}

/// The overhead to book after a reading (bytes): `reading` when it is not below `booked`, else
/// no lower than the previous reading (`previous`), so only two readings in a row lower it.
inline Bytes settle_overhead(Bytes booked, Bytes previous, Bytes reading) {
  if (reading >= booked) return reading;
  return std::min(booked, std::max(reading, previous));
}

}  // namespace coloc::broker
