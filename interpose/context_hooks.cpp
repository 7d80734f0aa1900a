// interpose/context_hooks.cpp — the handlers of the context policy (hooks.def): a CUDA context
// costs device memory (options().context_bytes, Kind::context), charged once per live context.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// - cuCtxCreate*: admission (attaching the device: Devices::attach, at the first context on it),
//   charge, create; cuCtxDestroy*: credit, and drop the records of the allocations that died with
//   the context.
// - The primary context is charged while retained (retains minus releases > 0) or while a retain
//   is in flight. Its lock is never held across a driver or broker call: a flag claims the charge,
//   and reconcile() repairs the books after each call, whatever the interleaving.
// - cuDevicePrimaryCtxReset frees the context's allocations but leaves it retained ("Resetting the
//   primary context does not release it", CUDA Driver API); the holder's next use re-creates it, so
//   its cost stays charged while it is retained.
#include "mutex.h"

#include "devices.h"
#include "tracker.h"
#include "driver.h"
#include "handlers.h"
#include "limits.h"
#include "log.h"
#include "runtime.h"

#include <cstdio>

#include "coloc/size.h"

namespace coloc::interpose {

namespace {

uint64_t context_cost() { return options().context_bytes; }

Record context_record(int slot) { return Record{context_cost(), 0, kNoPool, uint16_t(slot), Kind::context}; }

// The slot of device `dev` for a context about to be made there: attaching the device is admission
// (it may wait). -1 with CUDA_ERROR_OUT_OF_MEMORY in *refused when the job was not admitted; -1 with
// CUDA_SUCCESS when the device is not accounted (the driver answers alone).
int admitted_slot(CUdevice dev, CUresult* refused) {
  Refusal why = Refusal::none;
  int slot = devices().attach(dev, &why);
  *refused = CUDA_SUCCESS;
  if (slot < 0 && why != Refusal::none) {
    char detail[640];  // the broker's numbers behind the refusal (asked, waited, why this job)
    broker().describe_refusal(-1, why, detail, sizeof detail);
    if (why == Refusal::own_limit) {  // admission asks for one context: the limit is below that
      char lim[32], ctx[32];
      uint64_t limit = broker().unattached_limit(int(dev));
      if (limit == kNoLimit) std::snprintf(lim, sizeof lim, "none");
      else format_size(limit, lim, sizeof lim);
      format_size(context_cost(), ctx, sizeof ctx);
      if (limit < context_cost())
        logf(LogLevel::warn,
             "job %s not admitted on device %d (own limit): its limit %s is less than one CUDA context, which coloc "
             "counts as %s (COLOC_CONTEXT_BYTES; a CUDA context alone takes a few hundred MiB on real GPUs, 512 MiB "
             "on simgpu)%s; returning CUDA_ERROR_OUT_OF_MEMORY",
             options().job, int(dev), lim, ctx, detail);
      else  // the job's other processes hold the rest of it
        logf(LogLevel::warn,
             "job %s not admitted on device %d (own limit): its limit %s has no room left for one more CUDA context "
             "(%s, COLOC_CONTEXT_BYTES) next to what the job holds%s; returning CUDA_ERROR_OUT_OF_MEMORY",
             options().job, int(dev), lim, ctx, detail);
    } else {
      logf(LogLevel::warn, "job %s not admitted on device %d (%s)%s; returning CUDA_ERROR_OUT_OF_MEMORY",
           options().job, int(dev), refusal_name(why), detail);
    }
    *refused = CUDA_ERROR_OUT_OF_MEMORY;
  }
  return slot;
}

// The driver has just created `ctx` on `slot`'s device: when the broker asks (the first context
// there, under colocd), it gets the device's free memory read in that context, from which colocd
// estimates what the driver took beyond the ledger's charge. The context is made current for the
// read and the caller's current context restored.
void report_footprint(int slot, CUcontext ctx) {
  if (!ctx || !broker().wants_footprint(slot)) return;
  size_t free = 0, total = 0;
  const bool pushed = call<Fn::cuCtxPushCurrent_v2>(ctx) == CUDA_SUCCESS;
  const CUresult r = pushed ? call<Fn::cuMemGetInfo_v2>(&free, &total) : CUDA_ERROR_INVALID_CONTEXT;
  if (pushed) {
    CUcontext popped = nullptr;
    (void)call<Fn::cuCtxPopCurrent_v2>(&popped);
  }
  if (r == CUDA_SUCCESS) broker().context_footprint(slot, uint64_t(free));
}

// The charge of one context.
CUresult charge_context(int slot) {
  if (CUresult r = charge(slot, context_cost(), kContextCreation); r != CUDA_SUCCESS) return r;
  ledger().commit(Key{0, Space::none}, context_record(slot));
  return CUDA_SUCCESS;
}

// With the slot's context lock held: the primary context is charged iff it is retained or being
// retained. Memory the driver already gave is charged even past the limit: the books follow the
// device.
void reconcile_primary_locked(int slot, ContextBooks& b) {
  bool live = b.primary_refs > 0 || b.primary_inflight > 0;
  if (live && !b.primary_charged) {
    ledger().force_charge(slot, context_cost());
    ledger().commit(Key{0, Space::none}, context_record(slot));
    b.primary_charged = true;
  } else if (!live && b.primary_charged) {
    ledger().release_context_cost(slot, context_cost());
    b.primary_charged = false;
  }
}

template <class Create>
CUresult create(CUcontext* pctx, CUdevice dev, Create&& driver_create) {
  CUresult refused;
  int slot = admitted_slot(dev, &refused);
  if (refused != CUDA_SUCCESS) return refused;
  if (slot < 0) return driver_create();
  if (CUresult r = charge_context(slot); r != CUDA_SUCCESS) return r;
  CUresult r = call_charged(slot, context_cost(), driver_create);
  if (r != CUDA_SUCCESS) {
    ledger().release_context_cost(slot, context_cost());
    ledger().count_failed(slot, false);
    return r;
  }
  {
    MutexLock g(devices().context_mutex(slot));
    ++devices().context_books(slot).created;
  }
  devices().remember_context(*pctx, slot);
  report_footprint(slot, *pctx);
  return r;
}

template <Fn id>
CUresult destroy(CUcontext ctx) {
  int slot = ctx ? devices().slot_of_context(ctx) : -1;
  tracker().forget_context(ctx);  // before: no call of ours may use it once it is destroyed
  CUresult r = call<id>(ctx);
  if (r != CUDA_SUCCESS || slot < 0) return r;
  bool charged = false;
  {
    MutexLock g(devices().context_mutex(slot));
    ContextBooks& b = devices().context_books(slot);
    if (ctx != b.primary && b.created > 0) {
      --b.created;
      charged = true;
    }
  }
  if (charged) ledger().release_context_cost(slot, context_cost());
  ledger().release_records_of_context(reinterpret_cast<uint64_t>(ctx));
  devices().forget_context(ctx);
  return r;
}

/// The primary context of `dev` as the books know it (null when none).
CUcontext known_primary(CUdevice dev, bool last_ref_only) {
  int slot = devices().find_slot(dev);
  if (slot < 0) return nullptr;
  MutexLock g(devices().context_mutex(slot));
  const ContextBooks& b = devices().context_books(slot);
  return last_ref_only && b.primary_refs > 1 ? nullptr : b.primary;
}

template <Fn id>
CUresult primary_release(CUdevice dev) {
  // The last release destroys the context: the tracker lets go of it first.
  tracker().forget_context(known_primary(dev, true));
  CUresult r = call<id>(dev);
  if (r != CUDA_SUCCESS) return r;
  int slot = devices().find_slot(dev);
  if (slot < 0) return r;
  CUcontext gone = nullptr;
  {
    MutexLock g(devices().context_mutex(slot));
    ContextBooks& b = devices().context_books(slot);
    if (b.primary_refs > 0) --b.primary_refs;
    bool was_charged = b.primary_charged;
    reconcile_primary_locked(slot, b);
    if (was_charged && !b.primary_charged) gone = b.primary;  // the driver destroyed it
  }
  if (gone) {
    ledger().release_records_of_context(reinterpret_cast<uint64_t>(gone));
    devices().forget_context(gone);
  }
  return r;
}

template <Fn id>
CUresult primary_reset(CUdevice dev) {
  tracker().forget_context(known_primary(dev, false));
  CUresult r = call<id>(dev);
  if (r != CUDA_SUCCESS) return r;
  int slot = devices().find_slot(dev);
  if (slot < 0) return r;
  CUcontext primary = nullptr;
  {
    MutexLock g(devices().context_mutex(slot));
    primary = devices().context_books(slot).primary;
  }
  if (primary) ledger().release_records_of_context(reinterpret_cast<uint64_t>(primary));
  return r;
}

}  // namespace

namespace context {

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create(pctx, dev, [&] { return call<Fn::cuCtxCreate>(pctx, flags, dev); });
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create(pctx, dev, [&] { return call<Fn::cuCtxCreate_v2>(pctx, flags, dev); });
}

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams, unsigned int flags,
                        CUdevice dev) {
  return create(pctx, dev, [&] { return call<Fn::cuCtxCreate_v3>(pctx, paramsArray, numParams, flags, dev); });
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags, CUdevice dev) {
  return create(pctx, dev, [&] { return call<Fn::cuCtxCreate_v4>(pctx, ctxCreateParams, flags, dev); });
}

CUresult cuCtxDestroy(CUcontext ctx) { return destroy<Fn::cuCtxDestroy>(ctx); }

CUresult cuCtxDestroy_v2(CUcontext ctx) { return destroy<Fn::cuCtxDestroy_v2>(ctx); }

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  CUresult refused;
  int slot = admitted_slot(dev, &refused);
  if (refused != CUDA_SUCCESS) return refused;
  if (slot < 0) return call<Fn::cuDevicePrimaryCtxRetain>(pctx, dev);
  Mutex& m = devices().context_mutex(slot);
  ContextBooks& b = devices().context_books(slot);
  bool claim;
  {
    MutexLock g(m);
    claim = !b.primary_charged;  // this thread charges the context; others see it charged
    b.primary_charged = true;
    ++b.primary_inflight;
  }
  if (claim) {
    if (CUresult r = charge_context(slot); r != CUDA_SUCCESS) {
      MutexLock g(m);
      --b.primary_inflight;
      b.primary_charged = false;        // nothing was charged
      reconcile_primary_locked(slot, b);  // ... unless another retain made it live meanwhile
      return r;
    }
  }
  CUresult r = call_charged(slot, context_cost(), [&] { return call<Fn::cuDevicePrimaryCtxRetain>(pctx, dev); });
  CUcontext ctx = (r == CUDA_SUCCESS && pctx) ? *pctx : nullptr;
  {
    MutexLock g(m);
    --b.primary_inflight;
    if (r == CUDA_SUCCESS) ++b.primary_refs;
    if (ctx) b.primary = ctx;
    reconcile_primary_locked(slot, b);
  }
  if (ctx) {
    devices().remember_context(ctx, slot);
    report_footprint(slot, ctx);
  }
  return r;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release<Fn::cuDevicePrimaryCtxRelease>(dev); }

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return primary_release<Fn::cuDevicePrimaryCtxRelease_v2>(dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset<Fn::cuDevicePrimaryCtxReset>(dev); }

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset<Fn::cuDevicePrimaryCtxReset_v2>(dev); }

}  // namespace context

}  // namespace coloc::interpose
