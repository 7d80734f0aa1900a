// interpose/limits.cpp — see limits.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "limits.h"

#include <cstdio>
#include <cstring>

#include "broker.h"
#include "coloc/size.h"
#include "devices.h"
#include "driver.h"
#include "log.h"
#include "options.h"
#include "pools.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

// One warning per second per device, at most.
constinit RateLimit g_oom_warnings[kMaxDevices];

// Bound on broker round trips for one request (each may raise the grant while others use it).
constexpr int kMaxGrowRounds = 64;

void warn_refused(int slot, uint64_t request, uint64_t in_use, uint64_t limit, Refusal why, const char* what) {
  uint64_t suppressed = 0;
  if (!log_enabled(LogLevel::warn) || !g_oom_warnings[slot].allow(monotonic_ns(), &suppressed)) return;
  char id[41], req[32], use[32], lim[32];
  format_uuid(devices().info(slot).uuid, id);
  format_size(request, req, sizeof req);
  format_size(in_use, use, sizeof use);
  if (limit == kNoLimit) std::snprintf(lim, sizeof lim, "none");
  else format_size(limit, lim, sizeof lim);
  // A context that does not fit the limit at all: the limit is too small for any CUDA work.
  const bool context_too_big = why == Refusal::own_limit && std::strcmp(what, kContextCreation) == 0 &&
                               limit != kNoLimit && request > limit;
  // What else holds the job's limit on this device (its driver overhead, its other processes),
  // so that a refusal at the own limit adds up: request + in use + this > limit.
  char held[128] = "";
  if (uint64_t others = broker().job_others(slot); others > 0 && why == Refusal::own_limit) {
    char o[32];
    format_size(others, o, sizeof o);
    std::snprintf(held, sizeof held, ", the job's driver overhead and other processes %s", o);
  }
  char detail[640];  // the broker's numbers behind the refusal (asked, waited, why this job)
  broker().describe_refusal(slot, why, detail, sizeof detail);
  logf(LogLevel::warn,
       "out of memory (%s): job %s, device %d (%s): %s requests %s, in use %s%s, limit %s%s; "
       "returning CUDA_ERROR_OUT_OF_MEMORY%s%s",
       refusal_name(why), options().job, devices().info(slot).ordinal, id, what, req, use, held, lim, detail,
       context_too_big ? " (the limit is less than one CUDA context, which coloc counts as COLOC_CONTEXT_BYTES; a CUDA "
                         "context alone takes a few hundred MiB on real GPUs, 512 MiB on simgpu)"
                       : "",
       suppressed ? " (more refusals since the last warning)" : "");
}

class PlainCharge final : public ChargeAttempt {
 public:
  PlainCharge(int slot, uint64_t bytes) : slot_(slot), bytes_(bytes) {}
  bool attempt(uint64_t ceiling, uint64_t* seen, uint64_t* wanted) override {
    *wanted = bytes_;
    return ledger().try_charge(slot_, bytes_, ceiling, seen);
  }
  void undo() override { ledger().uncharge(slot_, bytes_); }

 private:
  int slot_;
  uint64_t bytes_;
};

}  // namespace

CUresult charge_with(int slot, uint64_t request, const char* what, ChargeAttempt& attempt) {
  pages::ControlSlot& c = control().slots[slot];
  bool refreshed = false, trimmed = false;
  for (int round = 0;; ++round) {
    uint64_t limit = limit_of(slot);
    uint64_t grant = c.grant.load(std::memory_order_seq_cst);
    uint64_t seen = 0, wanted = 0;
    if (attempt.attempt(grant < limit ? grant : limit, &seen, &wanted)) {
      // pages.h: after adding, re-read the grant; a lowered one sends us to the slow path.
      if (seen + wanted <= c.grant.load(std::memory_order_seq_cst)) return CUDA_SUCCESS;
      attempt.undo();
    }
    bool over_limit = wanted > limit || seen > limit - wanted;
    // Pools first (pools.h; the graph memory pool too). At the own limit: give their unused
    // reserve back, which also leaves their books exact; beyond the grant only: read them (a grant
    // round trip costs more than a few readings).
    {
      if (over_limit && !trimmed) {
        trimmed = refreshed = true;
        if (trim_pools(slot) || refresh_pools(slot)) continue;
      } else if (!over_limit && !refreshed) {
        refreshed = true;
        if (refresh_pools(slot)) continue;
      }
    }
    // The broker answers at once past the own limit (a daemon records the event), else it may wait.
    uint64_t total = wanted > UINT64_MAX - seen ? UINT64_MAX : seen + wanted;
    Refusal why = round < kMaxGrowRounds ? broker().grow(slot, total) : Refusal::device_full;
    if (why == Refusal::none) continue;
    ledger().count_failed(slot, true);
    warn_refused(slot, request, seen, limit, why, what);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult charge(int slot, uint64_t bytes, const char* what) {
  PlainCharge attempt(slot, bytes);
  return charge_with(slot, bytes, what, attempt);
}

void charge_failed(int slot, uint64_t bytes, CUresult driver_result) {
  ledger().uncharge(slot, bytes);
  if (driver_result != CUDA_ERROR_OUT_OF_MEMORY) return;  // a bad argument is not a failed allocation
  ledger().count_failed(slot, false);
}

void after_free(int slot) {
  uint64_t floor = surplus_floor(slot).load(std::memory_order_relaxed);
  if (floor == 0) return;
  uint64_t in_use = ledger().in_use(slot);
  if (in_use < floor) broker().surplus(slot, in_use);
}

}  // namespace coloc::interpose
