// interpose/devices.h — which device an operation happens on: device slots keyed by UUID, the
// per-process ordinal -> slot map, and context -> slot lookups with a per-thread cache.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Devices are keyed by UUID (cuDeviceGetUuid): ordinals are per process (CUDA_VISIBLE_DEVICES
// renumbers them), UUIDs are not. A slot is created the first time a hook meets a device; its
// limit comes from the broker (Broker::attach_device) before anything is charged on it.
//
// An allocation happens on the device of the current context. Finding it costs one driver call
// (cuCtxGetCurrent) and a compare with this thread's cached (context, slot, epoch); on a miss, the
// context table, then cuCtxGetDevice. Destroying a context bumps the epoch, so no thread keeps a
// stale mapping for a context handle the driver may reuse.
#pragma once

#include <atomic>
#include <cstdint>
#include "mutex.h"

#include "broker.h"
#include "cuda_api.h"

namespace coloc::interpose {

/// A device slot and a context (slot -1: unknown, e.g. no current context).
struct Where {
  int slot = -1;
  CUcontext ctx = nullptr;
};

/// Context bookkeeping of one device slot (guarded by Devices::context_mutex(slot)).
struct ContextBooks {
  int primary_refs = 0;        ///< cuDevicePrimaryCtxRetain minus releases, as seen by us
  int primary_inflight = 0;    ///< retains in progress
  bool primary_charged = false;  ///< the primary context's cost is on the ledger
  CUcontext primary = nullptr;   ///< the primary context's handle, once retained
  int created = 0;             ///< live contexts from cuCtxCreate*
};

class Devices {
 public:
  static constexpr int kMaxContexts = 256;  ///< contexts remembered (more still work, uncached)
  static constexpr int kMaxOrdinals = 64;   ///< ordinals cached (more still work, uncached)

  constexpr Devices() = default;

  /// The slot of device `ordinal`, creating it on first sight (UUID and capacity from the driver;
  /// slot and limit from the broker). -1 when the driver cannot describe the ordinal (invalid
  /// ordinal, not initialised) or the broker has no slot left.
  int slot_for_ordinal(CUdevice ordinal);
  /// This thread's current context and its slot; slot -1 when there is no current context.
  Where current();
  /// The slot of context `ctx`, current or not; -1 when unknown to the driver.
  int slot_of_context(CUcontext ctx);
  /// The context and slot a stream's work runs on (null stream handles: the current context).
  Where of_stream(CUstream stream);

  /// Remembers `ctx` as living on `slot` (contexts we saw created or retained).
  void remember_context(CUcontext ctx, int slot);
  /// Forgets `ctx` (destroyed) and invalidates every thread's cached context lookups.
  void forget_context(CUcontext ctx);

  /// True when slot `slot` holds a device.
  bool slot_used(int slot) const { return used_[slot].load(std::memory_order_acquire); }
  /// What the hooks know of slot `slot` (valid once slot_used(slot)).
  const DeviceInfo& info(int slot) const { return info_[slot]; }

  /// The lock and books of contexts on `slot`.
  Mutex& context_mutex(int slot) { return context_mutex_[slot]; }
  ContextBooks& context_books(int slot) { return context_books_[slot]; }

  /// Fork protocol (fork.cpp): the slots lock is held across fork, so the child sees every slot
  /// whole (device identities and limits stay valid in the child).
  void lock_slots() { slots_mutex_.lock(); }
  void unlock_slots() { slots_mutex_.unlock(); }
  /// In the child (slots lock held): forgets every context (the child owns none), makes the other
  /// locks new, and releases the slots lock.
  void reset_in_child();

 private:
  struct CtxEntry {
    CUcontext ctx = nullptr;
    int slot = -1;
  };
  int lookup_context(CUcontext ctx);
  int describe_current_device();  // slot of the current context's device, via cuCtxGetDevice

  Mutex slots_mutex_;
  DeviceInfo info_[kMaxDevices] = {};
  std::atomic<bool> used_[kMaxDevices] = {};
  std::atomic<int> ordinal_slot_[kMaxOrdinals] = {};  // slot + 1; 0 = not yet known

  Mutex table_mutex_;
  CtxEntry table_[kMaxContexts] = {};
  std::atomic<uint32_t> epoch_{1};

  Mutex context_mutex_[kMaxDevices];
  ContextBooks context_books_[kMaxDevices] = {};
};

/// This process's devices.
Devices& devices();

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's form) into buf (>= 41 bytes).
void format_uuid(const unsigned char uuid[16], char* buf);

}  // namespace coloc::interpose
