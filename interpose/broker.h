// interpose/broker.h — the seam between the hooks and whoever sets this job's memory limits and
// launch gate: a Broker, and the control words the hot paths read without asking it.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The fast paths never call the broker:
//   - an allocation that fits the device's grant and limit charges the ledger and calls the driver;
//   - a launch reads the gate word (one relaxed load) and, in state RUN, calls the driver.
//
// The layouts are those of include/coloc/pages.h (the daemon's pages): the control page, which the
// hooks read, and the stats page, where the ledger keeps each device's in-use bytes, peak and
// counts. Both live in page-aligned, page-sized static objects of libcoloc.so (ControlArea,
// StatsArea), so that a daemon-backed broker can map the daemon's memfds over them with
// mmap(MAP_FIXED | MAP_SHARED) and the hooks keep reading and writing the same addresses with the
// same single atomic operations: no pointer to follow, no branch to add.
//
// A daemon-backed broker (next issue) plugs in like this:
//   - runtime init installs it with set_broker() instead of LocalBroker (e.g. when COLOC_SOCKET is
//     set). It connects and registers; when the daemon is absent it behaves like LocalBroker
//     (limits from the environment), i.e. fail-open.
//   - It maps the control page over control() (PROT_READ) and the stats page over stats()
//     (PROT_READ | PROT_WRITE), both before the first device is attached, so nothing has been
//     charged yet: the switch loses no update. On a reconnect (daemon restarted) it keeps its
//     mappings and re-registers with the exact ledger (ledger().counts(slot)), then re-sends
//     parked requests.
//   - attach_device() sends Attach for one device and returns the slot the daemon chose; admit()
//     and grow() are blocking round trips; surplus() and driver_oom() are one-way messages.
//   - The fast-path rule of pages.h holds: the ledger adds to stats().slots[s].in_use with a
//     sequentially consistent read-modify-write and only then re-reads the grant (seq_cst), so a
//     grant the daemon lowers is either seen by the client or the client's bytes by the daemon.
//   - Fork: after_fork_child() runs first in the child, before the ledger resets: it must replace
//     the shared stats mapping by a private anonymous page (the child must never write the
//     parent's books), drop the parent's socket without writing to it, and leave the control page
//     mapped (same job); the child registers as its own process if it touches CUDA.
#pragma once

#include <atomic>
#include <cstdint>

#include "coloc/pages.h"
#include "options.h"

namespace coloc::interpose {

/// Device slots per process: the pages' slot count.
inline constexpr int kMaxDevices = int(pages::kSlots);

/// libcoloc.so's control page: one page, page-aligned, zero-initialised (gate RUN, no slot attached).
struct alignas(pages::kPageSize) ControlArea {
  pages::ControlPage page;
  char pad[pages::kPageSize - sizeof(pages::ControlPage)];
};
/// libcoloc.so's stats page, same shape.
struct alignas(pages::kPageSize) StatsArea {
  pages::StatsPage page;
  char pad[pages::kPageSize - sizeof(pages::StatsPage)];
};
static_assert(sizeof(ControlArea) == pages::kPageSize && sizeof(StatsArea) == pages::kPageSize);

extern ControlArea g_control_area;
extern StatsArea g_stats_area;

/// This process's control page (the words the hot paths read).
inline pages::ControlPage& control() { return g_control_area.page; }
/// This process's stats page (the ledger's shared counters).
inline pages::StatsPage& stats() { return g_stats_area.page; }

/// Why memory was refused (in logs and reports).
enum class Refusal : uint8_t { none, own_limit, device_full, deadlock_broken, not_admitted };
/// "none", "own limit", "device full", "deadlock broken", "not admitted".
const char* refusal_name(Refusal r);

/// What the hooks tell the broker about a device when they first see it.
struct DeviceInfo {
  int slot = -1;                ///< the slot the broker chose (filled in by Devices)
  int ordinal = -1;             ///< the device's ordinal as this process numbers it
  unsigned char uuid[16] = {};  ///< cuDeviceGetUuid
  uint64_t total_bytes = 0;     ///< physical memory in bytes (cuDeviceTotalMem_v2)
};

/// The broker asks to hear of frees only when a device's in-use falls below this (bytes; 0 =
/// never). Written by the broker, read after every free (relaxed).
std::atomic<uint64_t>& surplus_floor(int slot);

class Broker {
 public:

  /// Called once per device, when the hooks first see it and before anything is charged on it.
  /// Returns the slot (0..kMaxDevices-1) the device gets, with control().slots[slot] filled in
  /// (uuid, limit, grant <= limit, then attached) and surplus_floor(slot) set; -1 when no slot is
  /// free (the device is then not accounted). Called with Devices' slot lock held, one device at a
  /// time. May block for one round trip.
  virtual int attach_device(const DeviceInfo& d) = 0;

  /// Admission: called once per device before the process's first context on it is created
  /// (cuDevicePrimaryCtxRetain or cuCtxCreate*), with the context's configured cost. May block
  /// until the job is admitted. Refusal::none = go ahead; anything else makes the context call
  /// fail with CUDA_ERROR_OUT_OF_MEMORY.
  virtual Refusal admit(int slot, uint64_t context_bytes) = 0;

  /// Called when a charge would take the device's in-use to `wanted` bytes, above the grant but not
  /// above the limit (the own limit never waits: the hooks refuse that without asking). May block
  /// (wait policy). Refusal::none = the grant was raised (the hooks re-read it and retry);
  /// otherwise the allocation fails with CUDA_ERROR_OUT_OF_MEMORY.
  virtual Refusal grow(int slot, uint64_t wanted) = 0;

  /// Called after a free when in-use fell below control().surplus_floor[slot]. Must not block.
  virtual void surplus(int slot, uint64_t in_use) = 0;

  /// The driver returned CUDA_ERROR_OUT_OF_MEMORY for `bytes` that the grant allowed: the books
  /// missed memory used outside this job. Must not block.
  virtual void driver_oom(int slot, uint64_t bytes) = 0;

  /// Called by a launch when control().gate is not pages::GateState::kRun, with the state read.
  /// May block (timeslice, paused); returns when the launch may go ahead.
  virtual void gate_wait(uint32_t state) = 0;

  /// Fork protocol (fork.cpp): before fork, after fork in the parent, after fork in the child
  /// (called first in the child, before the ledger and devices reset).
  virtual void before_fork() {}
  virtual void after_fork_parent() {}
  virtual void after_fork_child() {}

 protected:
  ~Broker() = default;  // brokers live for the whole process; never deleted through this type
};

/// The broker of this process (LocalBroker until the daemon issue adds another).
Broker& broker();
/// Replaces the broker (runtime init; tests). `b` must live for the rest of the process.
void set_broker(Broker* b);

/// Limits from the environment (COLOC_MEM_LIMIT, COLOC_MEM_LIMIT_<n>); slots in the order devices
/// are met; grant = limit, so it is never asked to grow; admits at once; the gate stays RUN.
class LocalBroker final : public Broker {
 public:
  constexpr LocalBroker() = default;
  int attach_device(const DeviceInfo& d) override;
  Refusal admit(int slot, uint64_t context_bytes) override;
  Refusal grow(int slot, uint64_t wanted) override;
  void surplus(int slot, uint64_t in_use) override;
  void driver_oom(int slot, uint64_t bytes) override;
  void gate_wait(uint32_t state) override;
  void after_fork_child() override;

 private:
  std::atomic<int> next_slot_{0};
};

}  // namespace coloc::interpose
