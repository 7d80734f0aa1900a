// daemon/compute/gates.h — the compute side's books: which jobs are paused, and the launch gate on
// every registered client's control page (coloc/pages.h, "The launch gate").
//
// The engine tells Gates about clients as they register and leave, and about pauses (coloc pause,
// coloc resume). Gates decides each slot's gate of each client from its job's state and the
// scheduler's wish for the slot's device (compute/scheduler.h: kRun, kWindow for a timeslice's
// holder, kTimeslice for the others), and writes it, in the order pages.h gives, waking the
// client's waiters (a shared futex on the page) on every change. A client whose page is older than
// pages::kGatedLayout has no gates: it is served without gating, and counted as such (status shows
// it); one older than pages::kTrackedLayout is paused but never timesliced (it cannot report its
// drain). Gates also sums what the clients' stats pages say of each job's work on each device
// (usages()), for the scheduler.
//
// Single-threaded (the event loop). Pure but for the page writes and the futex wake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "broker/types.h"
#include "coloc/pages.h"
#include "compute/device_time.h"
#include "compute/scheduler.h"

namespace coloc::compute {

using broker::ClientId;
using broker::JobSerial;

/// Who paused a job: resuming a pause that an admin set needs an admin.
enum class PausedBy : uint8_t { kNobody = 0, kOwner = 1, kAdmin = 2 };

/// "owner", "admin" (kNobody: null in JSON, so not named here).
const char* paused_by_name(PausedBy p);
/// The inverse of paused_by_name; nullopt for anything else.
std::optional<PausedBy> parse_paused_by(const char* s);

/// The gate state a job's launches are in now (status' compute_state).
enum class ComputeState : uint8_t { kRunning, kPaused };
const char* compute_state_name(ComputeState s);

class Gates {
 public:
  /// The scheduler whose wishes the gates follow (null: every device is shared).
  void set_scheduler(const Scheduler* s) { scheduler_ = s; }
  /// A client registered: `page` and `stats` are its pages (the engine owns them; valid until
  /// remove_client; `stats` may be null) of layout `layout`. Its gates are written at once from
  /// its job's state.
  void add_client(ClientId id, JobSerial job, pages::ControlPage* page, uint16_t layout,
                  const pages::StatsPage* stats = nullptr, int pid = 0);
  /// Reads whether each tracked client's process is stopped through `is_stopped(pid, job)` (the
  /// engine reads /proc/PID/stat on its sampling timer, for the jobs whose state matters);
  /// usages() then shows it (Usage::stopped).
  template <class IsStopped>
  void read_stopped(IsStopped&& is_stopped) {
    for (auto& [id, c] : clients_)
      c.stopped = c.pid > 0 && c.stats && c.layout >= pages::kTrackedLayout && is_stopped(c.pid, c.job);
  }
  /// Rewrites every client's gates from the job states and the scheduler (after a tick, an
  /// attach, a policy change); writes only what changed. Returns how many slots changed.
  int refresh();
  /// Every (job, device) with a tracked client attached (layout >= kTrackedLayout), with the
  /// job's work there summed over those clients: one pass over the clients (the scheduler's tick).
  std::map<std::pair<JobSerial, Uuid>, Usage> usages() const;
  /// Each tracked client's device time figures (busy_ns, and busy_until from layout-7 pages) per
  /// (job, device), for compute/device_time.h; only client `only`'s when given.
  std::map<std::pair<JobSerial, Uuid>, std::vector<DeviceTime::Figures>> busy_figures(
      std::optional<ClientId> only = std::nullopt) const;
  /// The client left: its page is no longer written.
  void remove_client(ClientId id);
  /// The job ended at `now` (monotonic ns). Its pause, if any, is kept for kEndedPauseNs for
  /// inherit(); otherwise its state is forgotten.
  void forget_job(JobSerial job, broker::Nanos now);
  /// A process of a job that was registered before (a re-registration after its connection
  /// dropped) started job `job` of key `key` anew: it takes over the pause of an ended job of the
  /// same key from the last kEndedPauseNs, so dropping the connection does not lift a pause.
  /// True when it did.
  bool inherit(JobSerial job, const broker::JobKey& key, broker::Nanos now);

  /// How long an ended job's pause waits for a process of it to come back (ns).
  static constexpr broker::Nanos kEndedPauseNs = 60'000'000'000;

  /// Pauses the job `job` (of key `key`) (by != kNobody) or resumes it (kNobody), writing every
  /// client's gates on every device. A job unknown so far is remembered (its clients to come start
  /// paused).
  void set_paused(JobSerial job, const broker::JobKey& key, PausedBy by);
  PausedBy paused(JobSerial job) const;
  ComputeState state(JobSerial job) const;
  /// The job's clients on pages without gates (served ungated).
  size_t ungated(JobSerial job) const;

 private:
  struct ClientEntry {
    JobSerial job = 0;
    pages::ControlPage* page = nullptr;
    const pages::StatsPage* stats = nullptr;
    uint16_t layout = 0;
    int pid = 0;           ///< its process (0: unknown)
    bool stopped = false;  ///< its process was stopped at the last read_stopped()
  };
  struct JobEntry {
    PausedBy paused = PausedBy::kNobody;
    broker::JobKey key;
    broker::Nanos ended_at = 0;  ///< 0: live; else when it ended (kept for inherit())
  };
  int apply(const ClientEntry& c) const;
  pages::GateState wanted(JobSerial job, const ClientEntry& c, uint32_t slot) const;
  void uncount_ungated(const ClientEntry& c);

  std::map<ClientId, ClientEntry> clients_;
  std::map<JobSerial, size_t> ungated_;  ///< clients per job on pages without gates (status asks per job)
  std::map<JobSerial, JobEntry> jobs_;
  const Scheduler* scheduler_ = nullptr;
};

/// Writes `state` to every gate of `page` and its summary, in pages.h's order, and wakes the
/// waiters of each slot whose state changed. Returns how many slots changed.
int write_gates(pages::ControlPage& page, pages::GateState state);
/// Writes `states[s]` to each slot's gate, then the summary, in pages.h's order, and wakes the
/// waiters of each changed slot (and, when `wake_summary`, of `gate_seq`: layout 5). Returns how
/// many slots changed.
int write_gates(pages::ControlPage& page, const pages::GateState (&states)[pages::kSlots], bool wake_summary);

}  // namespace coloc::compute
