// interpose/limits.h — the memory policy every allocating hook shares: charge within the limit and
// the grant, ask the broker for more grant, refuse with a clean CUDA_ERROR_OUT_OF_MEMORY.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Order of checks for a charge of n bytes on a device (in-use u, grant g, limit L):
//   u + n <= min(g, L)   charged at once (the fast path: one compare-and-swap, no broker), then the
//                        grant is read again (pages.h's fast-path rule: a grant the daemon lowered
//                        meanwhile sends the request to the slow path);
//   u + n >  L           refused at once: a job's own limit never waits. Before refusing, pool
//                        readings on the device are refreshed (they can only be too high), and the
//                        check repeats; then Broker::grow, which refuses at once (a daemon broker
//                        tells the daemon, which records the event and may have raised the limit);
//   g < u + n <= L       Broker::grow (may wait); then the check repeats.
// L is limit_of(slot): the control page's limit, lowered by a local cap (broker.h).
// A refusal counts a failed and refused allocation and logs one rate-limited warning naming the
// job, device, request, use and limit.
#pragma once

#include <cstdint>

#include "broker.h"
#include "cuda_api.h"

namespace coloc::interpose {

/// One way of charging a request (Ledger::try_charge or Ledger::pool_try_begin).
class ChargeAttempt {
 public:
  /// Charges if in-use stays <= `ceiling`. Always stores in *wanted the bytes it adds (or would
  /// add) and in *seen the in-use value it compared (before adding).
  virtual bool attempt(uint64_t ceiling, uint64_t* seen, uint64_t* wanted) = 0;
  /// Takes back a successful attempt (the grant was lowered under it).
  virtual void undo() = 0;

 protected:
  ~ChargeAttempt() = default;
};

/// Charges per the order above. CUDA_SUCCESS when charged, else CUDA_ERROR_OUT_OF_MEMORY. `what`
/// names the request in the warning (an entry point name); `request` is the bytes the caller asked
/// for (for the warning).
CUresult charge_with(int slot, uint64_t request, const char* what, ChargeAttempt& attempt);

/// The `what` of a context's charge (charge_with's warning names it, and explains a limit below it).
inline constexpr const char* kContextCreation = "context creation";

/// charge_with for a plain charge of `bytes` on `slot`.
CUresult charge(int slot, uint64_t bytes, const char* what);

/// Calls `driver` for an allocation that asked for `request` bytes and added `charged` bytes to
/// `slot`'s in-use (a pool allocation may charge less than it asks: reserved memory it reuses),
/// and returns its result. A CUDA_ERROR_OUT_OF_MEMORY from the driver (inside the grant) goes to
/// Broker::driver_oom, which may have the call tried again; the charge stays meanwhile.
template <class Driver>
CUresult call_charged(int slot, uint64_t request, uint64_t charged, Driver&& driver) {
  for (int attempt = 0;; ++attempt) {
    CUresult r = driver();
    if (r != CUDA_ERROR_OUT_OF_MEMORY || !broker().driver_oom(slot, request, charged, attempt)) return r;
  }
}

/// call_charged for an allocation that charged exactly the `bytes` it asked for.
template <class Driver>
CUresult call_charged(int slot, uint64_t bytes, Driver&& driver) {
  return call_charged(slot, bytes, bytes, static_cast<Driver&&>(driver));
}

/// The driver failed an allocation that was charged `bytes`: uncharges; when the driver was out of
/// memory (within the grant), counts a failed allocation.
void charge_failed(int slot, uint64_t bytes, CUresult driver_result);

/// After a free on `slot`: tells the broker when in-use fell below its surplus floor.
void after_free(int slot);

/// Re-reads the reserved memory of every tracked pool on `slot`, and of its graph memory pool. True
/// when some reading changed.
bool refresh_pools(int slot);

}  // namespace coloc::interpose
