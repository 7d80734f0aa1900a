// interpose/daemon_broker.h — the Broker that takes its grants from colocd (docs/daemon.md, "The
// client contract"), and falls back to standalone limits when there is no daemon.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Runtime init installs it when COLOC_SOCKET is set, when the default socket
// (/run/coloc/colocd.sock) exists, or when COLOC_REQUIRE_DAEMON=1. Then, per process:
//
//   cuInit         registers (once): job COLOC_JOB (or none: the process is its own job), limit
//                  COLOC_MEM_LIMIT (a request: from then on the daemon's limit on the control page
//                  is the job's, and `coloc set` may raise it; only COLOC_MEM_LIMIT_<n> stays a
//                  local cap), COLOC_PRIORITY, COLOC_ON_FULL, COLOC_WAIT_TIMEOUT, command
//                  line and fingerprint; maps the daemon's pages over the areas (daemon_pages.h)
//                  (a process joining a job registered with another limit: a lower COLOC_MEM_LIMIT
//                  holds for this process alone, a higher one is ignored; one warning says which)
//                  and starts the link thread (daemon_link.h). Registration happens at the first
//                  cuInit rather than at load: LD_PRELOAD reaches every program a job starts
//                  (shells, tools), and only CUDA processes belong in the daemon's books.
//                  No daemon: one warning, then standalone limits from the environment (as
//                  LocalBroker), for the rest of the process. COLOC_REQUIRE_DAEMON=1: waits up to
//                  COLOC_WAIT_TIMEOUT (back-off), then cuInit fails with
//                  CUDA_ERROR_NOT_INITIALIZED and an error line saying why.
//   first context  Attach (admission; may wait). The slot is the daemon's.
//   allocation     the fast path never asks; past the grant: Grow (may be parked: wait policy);
//                  past the daemon's limit: Grow too (the daemon answers own-limit at once and
//                  records it); past only a lower COLOC_MEM_LIMIT_<n>: refused locally.
//   free           when the grant exceeds in-use by more than two grant steps: Shrink to in-use
//                  rounded up plus one step (lazy return; at most one message per two steps).
//   driver OOM     inside the grant: DriverOom with the request, the in-use without it and
//                  cuMemGetInfo's free memory, and one warning per process; under the wait
//                  policy the driver call is tried again for up to ~2.5 s (a process that just
//                  died gives its memory back to the driver a moment after the daemon, which
//                  notices the death at once, has granted it to us), then the driver's error.
//   launches       flushed to the stats page every 4096 launches per entry point and thread, and
//                  at exit, onto the slot of the flushing thread's current context.
//   launch gate    a launch whose page summary is not RUN waits on the gate of its current
//                  context's slot (pages.h, "The launch gate"): a shared futex on the control
//                  page, in slices of SignalWindow::kSliceMs. A pending SIGINT/SIGTERM ends the
//                  wait (the launch proceeds: one launch is harmless, and the application's
//                  handler runs when the hook returns); from then on the process's launches pass
//                  that gate until colocd changes it, so the handler can save and exit. When the connection is lost the gates
//                  open locally (the link thread wakes every waiter) until the next registration
//                  maps the new daemon's pages: a job never sleeps on a dead daemon's word. The
//                  time each launch waited goes to the stats page's GateStats, by the state.
//                  The launch's device is its stream's context's (the current context's for the
//                  null, legacy and per-thread streams); one on a context whose slot is not known
//                  (not created through the hooks; finding it could wait for an admission) waits
//                  at the first closed gate. A launch into a capturing stream
//                  (cuStreamIsCapturing: ACTIVE or INVALIDATED, or CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
//                  for the legacy stream during a global capture) passes: it records, it does not
//                  run, and waiting would stall the capture.
//   exit           on_exit: launches flushed, Goodbye with the exit status.
//   waits          a pending SIGINT/SIGTERM ends any wait (signal_wait.h): a Cancel is sent, its
//                  reply read; a grant that raced with it is kept (the allocation succeeds). A
//                  wait (admission or memory) that lasts more than kLongWaitNs says so in one
//                  warning (what it waits for, how long it may, `coloc status`), and then how it
//                  ended.
//   restart        the link thread reconnects and re-registers with the exact ledger; meanwhile
//                  the job runs on its grants, and a growth or admission waits for the reconnect
//                  (up to COLOC_WAIT_TIMEOUT; --on-full fail: fails at once).
//   fork           the child takes private copies of the areas (never writes the parent's books),
//                  drops the parent's connection unread, and registers anew at its own cuInit if
//                  the parent had no device attached. A child of a process that attached devices
//                  cannot use CUDA anyway (the driver refuses it): it keeps the parent's view of
//                  the limits and is never admitted anywhere.
#pragma once

#include <atomic>
#include <cstdint>

#include "broker.h"
#include "coloc/wire.h"
#include "daemon_link.h"
#include "mutex.h"

namespace coloc::interpose {

class DaemonBroker final : public Broker, private LinkOwner {
 public:
  /// A wait for admission or memory longer than this (ns) is announced at warning level.
  static constexpr uint64_t kLongWaitNs = 1000000000ull;

  constexpr DaemonBroker() = default;

  /// Where the daemon listens (copied; at most 107 bytes). Runtime init, before any hook uses it.
  void set_socket(const char* path);

  bool on_init() override;
  int attach_device(const DeviceInfo& d, Refusal* why) override;
  uint64_t unattached_limit(int ordinal) override;
  /// The daemon's figure (pages.h: ControlSlot::job_others; 0 from a daemon older than protocol
  /// v4, or while standalone).
  uint64_t job_others(int slot) override;
  void at_exit() override;
  Refusal grow(int slot, uint64_t wanted) override;
  void surplus(int slot, uint64_t in_use) override;
  bool driver_oom(int slot, uint64_t request, uint64_t charged, int attempt) override;
  GateTicket gate_wait(uint32_t state, CUstream stream, bool per_thread) override;
  GateTicket copy_wait(CUstream stream, bool per_thread) override;
  void launched(const GateTicket& t, CUstream stream, bool per_thread, CUresult rc) override;
  /// True while the gates are open locally (the daemon is away).
  bool gates_overridden() const { return gate_override_.load(std::memory_order_acquire); }
  void describe_refusal(int slot, Refusal why, char* out, size_t cap) override;
  void flush_launches() override;
  void after_fork_child() override;
  /// Under colocd (v5): the first context on each slot sends a ContextFootprint.
  bool wants_footprint(int slot) override;
  void context_footprint(int slot, uint64_t physical_free) override;

  /// At exit (on_exit): flushes the launch counts and says Goodbye with `status`.
  void goodbye(int status);

 private:
  enum class Mode : uint8_t {
    unregistered,  ///< cuInit not seen yet
    daemon,        ///< registered (connected, or reconnecting)
    standalone,    ///< no daemon: limits from the environment (fail-open)
    inherited,     ///< a forked child of a registered process with devices
    failed,        ///< COLOC_REQUIRE_DAEMON and no daemon: cuInit fails
    exiting,       ///< after Goodbye
  };
  struct SlotRecord {
    std::atomic<bool> attached{false};
    unsigned char uuid[16] = {};
    uint64_t capacity = 0;
    uint64_t cap = 0;  // the cap sent in its Attach (COLOC_MEM_LIMIT_<n>, bytes; 0 = none)
    std::atomic<bool> footprint_claimed{false};  // its ContextFootprint was sent (or is being)
  };

  void fill_register(bool resume, proto::RegisterMsg* m) override;
  bool adopt(const proto::RegisterReplyMsg& reply, int control_fd, int stats_fd, bool resume) override;
  bool holds_grants() const override;
  void on_lost() override;
  void register_now();
  /// The gate of a launch (`copy` false) or an async copy into `stream` (gate_wait, copy_wait).
  GateTicket pass_gate(CUstream stream, bool per_thread, bool copy);
  Mode registered_mode();
  void set_floor(int slot);
  void record_slot(int slot, const unsigned char uuid[16], uint64_t capacity, uint64_t cap);
  int recorded_slot(const unsigned char uuid[16]) const;
  uint64_t physical_free(int slot);
  uint64_t wait_deadline() const;
  /// The local cap on the device this process numbers `ordinal`: min(COLOC_MEM_LIMIT_<n>, own_cap_).
  uint64_t own_cap(int ordinal) const;

  std::atomic<Mode> mode_{Mode::unregistered};
  Mutex register_mutex_;
  char socket_[108] = {};
  DaemonLink link_;
  LocalBroker local_;
  wire::Cmdline cmdline_;
  uint64_t env_hash_ = 0;  // wire::env_fingerprint of this process's environment (Register v9)
  std::atomic<uint64_t> job_limit_{kNoLimit};  // the daemon's limit for the job (RegisterReply)
  // Bytes: the limit of the first registration (what `coloc set --mem` may change later); 0 =
  // not registered yet.
  std::atomic<uint64_t> registered_limit_{0};
  /// This process's own cap on every device (bytes): its COLOC_MEM_LIMIT when that is lower than
  /// the limit of the job it joined; kNoLimit otherwise.
  std::atomic<uint64_t> own_cap_{kNoLimit};
  std::atomic<uint64_t> launches_flushed_{0};
  std::atomic<bool> oom_warned_{false};  // the driver-OOM-inside-the-grant warning was printed
  std::atomic<bool> gate_override_{false};  // the daemon is away: launches pass every gate
  // Per slot: a SIGINT/SIGTERM ended a wait at the gate while its futex word read `seq`: launches
  // pass that gate until the daemon changes it ((1 << 32) | seq; 0 = none).
  std::atomic<uint64_t> released_[kMaxDevices] = {};
  SlotRecord slots_[kMaxDevices];
  // An Attach in flight: its device, so that a grant the daemon wrote on the control page just
  // before dying (reply lost) is found and kept at re-registration.
  Mutex attach_mutex_;
  bool attach_pending_ = false;
  unsigned char attach_uuid_[16] = {};
  uint64_t attach_capacity_ = 0;
  uint64_t attach_cap_ = 0;
};

/// The process's DaemonBroker (installed by runtime init when a daemon is configured).
DaemonBroker& daemon_broker();

}  // namespace coloc::interpose
