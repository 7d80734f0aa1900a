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
// Brokers: LocalBroker (limits from the environment, below) and DaemonBroker (daemon_broker.h: the
// node daemon's grants, through its shared pages). The daemon's pages are mapped over ControlArea
// and StatsArea with mmap(MAP_FIXED) (daemon_pages.h), so the hooks keep the same addresses.
//   - Slots are the daemon's: a device gets its slot when it is attached (admission), not when a
//     hook first looks at it. Queries of a device the process does not use (cuDeviceTotalMem on
//     another GPU) attach nothing and admit nothing: they see unattached_limit().
//   - The fast-path rule of pages.h holds: the ledger adds to stats().slots[s].in_use with a
//     sequentially consistent read-modify-write and only then re-reads the grant (seq_cst), so a
//     grant the daemon lowers is either seen by the client or the client's bytes by the daemon.
//   - The effective limit of a slot is min(the control page's limit, local_limit(slot))
//     (limit_of()). Under a daemon the local limit is only a per-device COLOC_MEM_LIMIT_<n>:
//     COLOC_MEM_LIMIT is the registration's request, and the daemon's limit is the job's.
//   - Fork: after_fork_child() runs first in the child, before the ledger resets: a daemon broker
//     replaces the shared stats mapping by a private page (the child never writes the parent's
//     books) and drops the parent's connection without writing to it.
#pragma once

#include <atomic>
#include <cstdint>

#include "coloc/pages.h"
#include "cuda_api.h"
#include "job_share.h"
#include "mutex.h"
#include "options.h"

namespace coloc::interpose {

/// Device slots per process: the pages' slot count.
inline constexpr int kMaxDevices = int(pages::kSlots);

/// What a launch learned at the gate (Broker::gate_wait), for after the driver call.
struct GateTicket {
  int slot = -1;       ///< the launch's device slot, when known
  bool track = false;  ///< the slot's gate is kWindow: count the launch and mark it (tracker.h)
  CUcontext ctx = nullptr;  ///< the launch stream's context, when the gate asked (the tracker's key)
};

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
enum class Refusal : uint8_t {
  none,
  own_limit,        ///< the job's own limit (never waits)
  device_full,      ///< no room on the device (--on-full fail, or it can never fit)
  deadlock_broken,  ///< every job on the device waited; this one was chosen to fail
  not_admitted,     ///< admission refused for another reason (a bad request, a forked child)
  timeout,          ///< waited COLOC_WAIT_TIMEOUT without room
  cancelled,        ///< the wait was ended by SIGINT or SIGTERM
  user_cap,         ///< over the per-user cap of the daemon (--max-per-user)
  no_daemon,        ///< the daemon is away and the job asked to fail (--on-full fail)
  job_cancelled,    ///< the job was cancelled (`coloc cancel`): nothing new is granted to it
};
/// "none", "own limit", "device full", "deadlock broken", "not admitted", "timeout",
/// "interrupted by a signal", "user cap", "no daemon", "job cancelled".
const char* refusal_name(Refusal r);

/// What the hooks tell the broker about a device the process is about to use.
struct DeviceInfo {
  int slot = -1;                ///< the slot the broker chose (filled in by Devices)
  int ordinal = -1;             ///< the device's ordinal as this process numbers it
  unsigned char uuid[16] = {};  ///< cuDeviceGetUuid
  uint64_t total_bytes = 0;     ///< physical memory in bytes (cuDeviceTotalMem_v2)
};

/// The broker asks to hear of frees only when a device's in-use falls below this (bytes; 0 =
/// never). Written by the broker, read after every free (relaxed).
std::atomic<uint64_t>& surplus_floor(int slot);

/// The local cap for a slot (bytes; kNoLimit = none), set by the broker when it attaches
/// the slot, before anything is charged there.
std::atomic<uint64_t>& local_limit(int slot);

/// The effective limit of `slot` in bytes: min(control page's limit, local_limit(slot)). Two relaxed
/// loads.
inline uint64_t limit_of(int slot) {
  uint64_t daemon = control().slots[slot].limit.load(std::memory_order_relaxed);
  uint64_t local = local_limit(slot).load(std::memory_order_relaxed);
  return local < daemon ? local : daemon;
}

class Broker {
 public:

  /// cuInit, before the real driver's: a daemon broker registers here (once). False makes cuInit
  /// fail with CUDA_ERROR_NOT_INITIALIZED without calling the driver (COLOC_REQUIRE_DAEMON and no
  /// daemon). May block (registration; COLOC_REQUIRE_DAEMON waits up to COLOC_WAIT_TIMEOUT).
  virtual bool on_init() { return true; }

  /// Attaches a device the process is about to use (its first context, or a first allocation on
  /// it), before anything is charged on it: this is admission, and it may block until the job is
  /// admitted. Returns the slot (0..kMaxDevices-1), with control().slots[slot] describing the
  /// device (uuid, limit, grant, attached), local_limit(slot) and surplus_floor(slot) set. Returns
  /// -1 with *why == Refusal::none when no slot is free (the device is then not accounted), or -1
  /// with *why saying why the job was not admitted (the caller fails with
  /// CUDA_ERROR_OUT_OF_MEMORY). Devices calls it once per device, one device at a time, with no
  /// lock of its own held but its attach lock.
  virtual int attach_device(const DeviceInfo& d, Refusal* why) = 0;

  /// The limit a device the process has not attached shows through cuDeviceTotalMem (bytes;
  /// kNoLimit = none). Never blocks.
  virtual uint64_t unattached_limit(int ordinal) = 0;

  /// Called when a charge would take the device's in-use to `wanted` bytes, above the grant or
  /// above limit_of(slot). May block (wait policy). Refusal::none = try again (the grant or the
  /// limit was raised); otherwise the allocation fails with CUDA_ERROR_OUT_OF_MEMORY. Going over
  /// the job's own limit never waits.
  virtual Refusal grow(int slot, uint64_t wanted) = 0;

  /// Called after a free when in-use fell below surplus_floor(slot). Must not block.
  virtual void surplus(int slot, uint64_t in_use) = 0;

  /// The driver returned CUDA_ERROR_OUT_OF_MEMORY for a request of `request` bytes that the grant
  /// allowed (`attempt` times before: 0 the first time): the books missed memory used outside this
  /// job, or a process that just died has not given its memory back yet. The request is still
  /// charged on the stats page: `charged` bytes of stats().slots[slot].in_use are its own (not in
  /// use by anything the driver holds). Returns true to have the driver call tried again (the
  /// charge stays meanwhile), false to return the driver's error. May wait a little (DaemonBroker,
  /// wait policy: at most about 2.5 s over all attempts; a stop signal ends it).
  virtual bool driver_oom(int slot, uint64_t request, uint64_t charged, int attempt) = 0;

  /// Writes into out[cap] what the user should know about the latest refusal of this thread's
  /// attach_device (slot -1) or grow(slot) that returned `why`: a clause that starts with "; "
  /// (the numbers behind it: how much was asked, how long it waited, why this job, what to do),
  /// or "" when there is nothing to add. Never blocks.
  virtual void describe_refusal(int slot, Refusal why, char* out, size_t cap) {
    (void)slot;
    (void)why;
    if (cap) out[0] = '\0';
  }

  /// Called by a launch when control().gate is not pages::GateState::kRun, with the state read,
  /// the stream the launch goes to and whether the entry point is a `_ptsz` one (its stream 0 is
  /// the per-thread default stream). May block (timeslice, paused, the in-flight window); returns
  /// when the launch may go ahead, with a ticket that says whether the launch is to be tracked
  /// (its device's gate is kWindow: then the hook calls launched() after the driver). A launch
  /// into a capturing stream never waits and is never tracked (it records, it does not execute).
  virtual GateTicket gate_wait(uint32_t state, CUstream stream, bool per_thread) = 0;

  /// After a launch whose ticket says `track`, with the driver's result: counts it and records a
  /// completion mark now and then (tracker.h). Never blocks on the device.
  virtual void launched(const GateTicket& t, CUstream stream, bool per_thread, CUresult rc) {
    (void)t;
    (void)stream;
    (void)per_thread;
    (void)rc;
  }

  /// Called by an async copy or memset (cuMemcpyAsync, cuMemsetD8Async, ... and _ptsz) when
  /// control().gate is not pages::GateState::kRun: waits while its stream's device is held by
  /// another job under the timeslice policy (a copy on the device's engines is device time too).
  /// A copy into a capturing stream never waits. Never waits for a pause or the in-flight window;
  /// the holder's copies are tracked like its launches (the ticket).
  virtual GateTicket copy_wait(CUstream stream, bool per_thread) {
    (void)stream;
    (void)per_thread;
    return {};
  }

  /// Called now and then by launches (every kLaunchFlushEvery launches of one entry point on one
  /// thread) and before the process ends: adds the launches counted since the last flush to the
  /// stats page. Must not block.
  virtual void flush_launches() {}

  /// Bytes the job's *other* processes hold on `slot`'s device (their shares of the job's limit:
  /// each at least what that process uses), for the job's view in cuMemGetInfo. 0 when not known.
  /// Never blocks.
  virtual uint64_t job_others(int slot) {
    (void)slot;
    return 0;
  }

  /// The driver has just created a context on `slot`'s device. True, once per attached slot, when
  /// the broker wants the device's free memory right after it (context_footprint). Never blocks.
  virtual bool wants_footprint(int slot) {
    (void)slot;
    return false;
  }
  /// The device's free memory in bytes right after the process's first context on `slot` was
  /// created (cuMemGetInfo in it), after wants_footprint(slot) said true. Never blocks.
  virtual void context_footprint(int slot, uint64_t physical_free) {
    (void)slot;
    (void)physical_free;
  }

  /// The process is exiting (atexit, or libcoloc's destructor; may be called twice).
  virtual void at_exit() {}

  /// Fork protocol (fork.cpp): before fork, after fork in the parent, after fork in the child
  /// (called first in the child, before the ledger and devices reset).
  virtual void before_fork() {}
  virtual void after_fork_parent() {}
  virtual void after_fork_child() {}

 protected:
  ~Broker() = default;  // brokers live for the whole process; never deleted through this type
};

/// The broker of this process (LocalBroker unless runtime init installed a DaemonBroker).
Broker& broker();
/// Replaces the broker (runtime init; tests). `b` must live for the rest of the process.
void set_broker(Broker* b);

/// Limits from the environment (COLOC_MEM_LIMIT, COLOC_MEM_LIMIT_<n>); slots in the order devices
/// are attached; admits at once; the gate stays RUN. Writes the control area: usable only while no
/// daemon page is mapped over it. A limit is the job's (COLOC_JOB), not the process's: the grant
/// is this process's share of it (job_share.h), grown past and given back as in-use moves. Where
/// the job cannot be shared (no /dev/shm, a foreign segment), grant = limit, per process.
class LocalBroker final : public Broker {
 public:
  constexpr LocalBroker() = default;
  int attach_device(const DeviceInfo& d, Refusal* why) override;
  uint64_t unattached_limit(int ordinal) override;
  Refusal grow(int slot, uint64_t wanted) override;
  void surplus(int slot, uint64_t in_use) override;
  bool driver_oom(int slot, uint64_t request, uint64_t charged, int attempt) override;
  void describe_refusal(int slot, Refusal why, char* out, size_t cap) override;
  GateTicket gate_wait(uint32_t state, CUstream stream, bool per_thread) override;
  uint64_t job_others(int slot) override;
  void at_exit() override;
  void after_fork_child() override;

 private:
  // Joins the job's segment for `slot` (its uuid and limit are on the control page). Holds mu.
  void join_locked(int slot);
  // Sets the grant (and surplus floor) to `share`. Holds mu.
  void set_share_locked(int slot, uint64_t share);

  struct alignas(64) Shared {
    Mutex mu;
    JobShare share;
    bool wanted = false;  // the slot has a limit: its grant is a share of the job's
    bool failed = false;  // joining failed: the limit stays per process
    uint64_t refused_others = 0;  // what the other processes held at the last refusal
  };
  std::atomic<int> next_slot_{0};
  Shared shared_[kMaxDevices];
};

}  // namespace coloc::interpose
