// interpose/devices.h — which device an operation happens on: device slots keyed by UUID, the
// per-process ordinal -> slot map, and context -> slot lookups with a per-thread cache.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Devices are keyed by UUID (cuDeviceGetUuid): ordinals are per process (CUDA_VISIBLE_DEVICES
// renumbers them), UUIDs are not. A device gets a slot when the process starts using it: its
// first context, or a first allocation on it (attach(): Broker::attach_device, which is admission
// and may wait). Its limit comes from the broker before anything is charged on it. Looking at a
// device (cuDeviceTotalMem) attaches nothing (find_slot()).
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

  /// The slot of device `ordinal` if the process has attached it, else -1. Never attaches.
  int find_slot(CUdevice ordinal);
  /// The slot of device `ordinal`, attaching it on first use (UUID and capacity from the driver;
  /// slot and limit from the broker: admission, which may wait). -1 when the driver cannot describe
  /// the ordinal (invalid ordinal, not initialised; *why = none), no slot is left (*why = none),
  /// or the job was not admitted (*why says why: the caller fails with CUDA_ERROR_OUT_OF_MEMORY).
  /// Attaches are serialised (one admission at a time per process).
  int attach(CUdevice ordinal, Refusal* why);
  /// This thread's current context and its slot; slot -1 when there is no current context. A
  /// current context on a device not attached yet attaches it (see attach()).
  Where current();
  /// The slot of this thread's current context if it is known, else -1. Never attaches, never
  /// waits: for paths that must not block (a launch).
  int known_current_slot();
  /// The slot of context `ctx`, current or not; -1 when unknown to the driver.
  int slot_of_context(CUcontext ctx);
  /// The slot of context `ctx` if it is known (created or retained through the hooks), else -1.
  /// Never attaches, never waits: for a launch.
  int known_slot_of(CUcontext ctx);
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
  /// locks new (the attach lock too: a parent's thread may have been waiting for admission), and
  /// releases the slots lock.
  void reset_in_child();

 private:
  struct CtxEntry {
    CUcontext ctx = nullptr;
    int slot = -1;
  };
  int lookup_context(CUcontext ctx);
  int describe_current_device();  // slot of the current context's device, via cuCtxGetDevice
  int slot_of_uuid_locked(const unsigned char uuid[16]) const;  // slots_mutex_ held; -1 if none
  void cache_ordinal(CUdevice ordinal, int slot);

  Mutex attach_mutex_;  // held across Broker::attach_device (which may wait for admission)
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
