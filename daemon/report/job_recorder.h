// daemon/report/job_recorder.h — everything a job's report holds, gathered while the job runs:
// broker events (admission, waits, refusals, driver OOMs), samples of its stats pages, and the
// counters of processes that already left. Pure: the engine feeds it; to_json() renders it.
//
// Bounded: per device the timeline keeps O(500) points and at most kMaxListed waits and OOM
// events (the oldest closed ones are dropped first and counted, their waiting time still summed);
// at most kMaxListed processes are listed (the first one, whose exit status is the job's, stays).
// state() / from_state() carry the whole recorder across a daemon restart
// (<state-dir>/jobs/, see report/job_state_store.h).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/types.h"
#include "coloc/pages.h"
#include "report/timeline.h"
#include "util/result.h"

namespace coloc::report {

using broker::Bytes;
using broker::Nanos;

/// Counters a client keeps on its stats page, summed over a job's processes on one device.
struct Counters {
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t failures = 0;
  uint64_t launches = 0;
  uint64_t wait_memory_ns = 0;     ///< as the clients measured it
  uint64_t wait_admission_ns = 0;  ///< as the clients measured it
  /// Time launches waited at the launch gate, and launches that waited, by the gate's state then
  /// (pages::GateState: index 0, RUN, stays 0). Layout-4 pages only (pages::GateStats).
  std::array<uint64_t, pages::kGateStates> gate_wait_ns{};
  std::array<uint64_t, pages::kGateStates> gate_waits{};
  /// Completion tracking (pages::TrackStats; layout-5 pages only, zero before): device time of
  /// the completed work (host-stamped, tracked only while the device is timesliced), launches
  /// made holding the device (gate state kWindow), and launches that waited for the in-flight
  /// window. A job's busy_ns is its device time, the union of its processes' busy intervals
  /// (compute/device_time.h), which the engine puts in DeviceSample::live; a process that leaves
  /// folds none (its work stays in that union), so folded busy_ns holds only what an earlier
  /// colocd counted (daemon_restarted()).
  uint64_t busy_ns = 0;
  uint64_t window_launches = 0;
  uint64_t window_waits = 0;
  Counters& operator+=(const Counters& o);
  bool operator==(const Counters&) const = default;
};

/// The counters of `slot` on a client's stats page; the gate's and the tracking's only when `gated`
/// (the daemon made the page in layout 4 or later: the page's own header is the client's to
/// overwrite; a layout-4 client never writes the tracking counters, so they read zero). Untrusted
/// figures: they only ever reach the client's own job's report.
Counters counters_of(const pages::StatsPage& page, uint32_t slot, bool gated);

/// The job's online prediction of its peak on a device (estimator/online.h), from its processes'
/// stats pages (layout 6): the sum of their predictions, the least confident of them.
struct PredictionSample {
  Bytes peak = 0;             ///< bytes; 0 = no prediction yet
  std::string state;          ///< "learning", "stable", "changing", "none"; "" = no process reports one
  uint32_t confidence = 0;    ///< per mille
  Nanos period = 0;           ///< the iteration period (ns); 0 = none
  std::optional<Nanos> stable_since;  ///< daemon monotonic ns the prediction became stable
};

/// One sample of a job on one device.
struct DeviceSample {
  PredictionSample prediction;
  std::string reservation_source = "none";  ///< broker::footprint_name of the reservation's source
  /// The last time a higher prediction could not raise the reservation: why ("kept: ..."), what
  /// it wanted and what was available then (bytes); empty outcome = none.
  std::string kept_outcome;
  Bytes kept_wanted = 0, kept_available = 0;
  /// The job's history fingerprint on the device (`coloc history`'s id), "" = none (no env hash).
  std::string fingerprint;
  Bytes capacity = 0;
  Bytes limit = broker::kNoLimit;
  Bytes reservation = 0;
  Bytes in_use = 0;       ///< sum over the job's live processes
  Bytes peak_hint = 0;    ///< the largest per-process peak (a lower bound of the job's peak)
  Bytes driver_overhead = 0;  ///< sum over the job's live processes (broker.h, "driver overhead")
  /// Sum over the job's live processes, but busy_ns: the job's device time on the device so far
  /// in this colocd's life, the union of its processes' busy intervals, those that left included
  /// (compute/device_time.h)
  Counters live;
};

/// How a process ended.
struct ProcessExit {
  pid_t pid = 0;
  std::optional<int> exit_code;    ///< exit(n) / return from main
  std::optional<int> signal;       ///< killed by this signal
  std::string source;              ///< "goodbye", "bpf", "pidfd", "hangup", "daemon-away"
  /// Not how it ended but where it ran: its step within the job (Register v11, COLOC_STEP; a
  /// Slurm step: "batch", "extern", "0", ...), "" = none. Set by add_process(); process_exited()
  /// keeps it.
  std::string step;
};

class JobRecorder {
 public:
  /// The most waits, OOM events (per device) and processes a report lists.
  static constexpr size_t kMaxListed = 1000;

  /// `mono_start`: the daemon's monotonic clock at the job's start; `wall_start_ms`: Unix ms.
  JobRecorder(broker::JobSerial serial, broker::JobKey key, std::string user, std::string command,
              uint64_t cmdline_hash, std::string priority, Nanos mono_start, int64_t wall_start_ms);

  /// A broker event of this job (kAdmitted, kWaitBegin/End, kRefused, kDriverOom).
  void on_event(const broker::Event& e);
  /// A sample of the job on `device` at `now`.
  void sample(const broker::Uuid& device, Nanos now, const DeviceSample& s);
  /// Counters of a process that left, so they survive it; all but its busy_ns, whose work the
  /// job's device time (the union the samples show) already holds.
  void fold(const broker::Uuid& device, const Counters& c, Bytes peak);
  /// A process of the job registered: listed in the report (in registration order), with `step`,
  /// its step within the job (a proto::valid_step() label, "" = none: the report says null). A
  /// process already listed and still running is not listed again; it only gains `step` if it
  /// had none (it came back after a restart whose saved state did not say).
  void add_process(pid_t pid, const std::string& step = "");
  /// Process `e.pid` ended: its exit fields (not its step) are filled in.
  void process_exited(const ProcessExit& e);
  /// The exit status of the job's command, from its anchor's Goodbye (`coloc run`: the exit code,
  /// or 128 + the signal that killed it). It is the job's exit status, ahead of its first process's.
  void command_exited(int status) { command_status_ = status; }
  /// The job's open wait of kind `admission` on `device` stood for `reason` (the queue's, at a
  /// sample): the report lists each wait's reasons in the order seen, at most kMaxReasons, a
  /// repeat of the last one not again.
  void note_wait_reason(const broker::Uuid& device, bool admission, proto::WaitReason reason);
  /// `coloc cancel`: who (uid, user name) cancelled the job with which signal, at `wall_ms`
  /// (Unix ms). The report's "cancelled" ({by, uid, signal, at}); the first cancel counts.
  void cancelled(uid_t uid, std::string user, int signal, int64_t wall_ms);
  bool was_cancelled() const { return cancelled_.has_value(); }
  static constexpr size_t kMaxReasons = 8;
  /// Processes whose end is not known yet.
  std::vector<pid_t> pending_exits() const;

  /// How the job's run went, for its run history (daemon/history): its duration (ns, to `now`),
  /// exit status (the command's, else its first process's), whether it was killed (by a signal,
  /// or `coloc run` said 128 + a signal) or met an out-of-memory error (an OOM event or a failed
  /// allocation), and its peak per device (bytes).
  struct RunSummary {
    Nanos duration = 0;
    Nanos admitted_for = 0;  ///< from its first admission on any device to `now` (0: never admitted)
    std::optional<int> exit_status;
    bool killed = false;
    bool oom = false;
    /// Its out-of-memory error was at its own limit (or its user's cap), not a full device: the
    /// broker refused it for kOwnLimit or kUserCap, or its library failed an allocation (the
    /// library fails only at the job's limit) with no refusal for a full device.
    bool oom_limit = false;
    bool cancelled = false;  ///< `coloc cancel` (JobRecorder::cancelled)
    std::map<broker::Uuid, Bytes> peaks;
  };
  RunSummary run_summary(Nanos now) const;
  bool has_process(pid_t pid) const;
  void set_priority(std::string p) { priority_ = std::move(p); }
  /// The job's limit (bytes, or kNoLimit), known from its registration on: the report shows it
  /// for a device the job has not been admitted on yet (waiting, or refused / cancelled there).
  void set_limit(Bytes limit);
  /// The capacity (bytes) of `device`, known before the job is admitted there (its Attach says
  /// it); samples after admission take over.
  void set_capacity(const broker::Uuid& device, Bytes capacity);
  /// The job ended at `now` (monotonic) / `wall_ms` (Unix ms). A turn still open ends then.
  void finish(Nanos now, int64_t wall_ms);

  // ---- turns on timesliced devices (compute/scheduler.h's SchedEvents) ----------------------------

  /// The most turns a device's report lists; beyond, the two closest neighbours merge into one.
  static constexpr size_t kMaxTurns = 500;
  /// The job's turn on `device` began at `at` (monotonic): it holds the device.
  void turn_begin(const broker::Uuid& device, Nanos at);
  /// Its turn on `device` ended at `at` (drained, or `timed_out`: the drain's grace ran out and
  /// the next job's turn began anyway). Without an open turn only a timeout is counted.
  void turn_end(const broker::Uuid& device, Nanos at, bool timed_out);

  // ---- across a daemon restart ------------------------------------------------------------------

  /// The start of the job, when it is known better than at construction (a process that
  /// re-registers after a restart without a saved recorder: its process start time).
  void set_start(Nanos mono_start, int64_t wall_start_ms);
  /// The daemon restarted; it last saw the job at `last_seen` (monotonic). A turn open then ends
  /// there (the new daemon's scheduler starts over: its next turn is a new one). The live
  /// processes' tracking counters (busy_ns, window launches and waits) are kept as folded: the
  /// clients do not carry them over to the new pages (interpose/daemon_pages.cpp's adopt() copies
  /// StatsSlot and GateStats only). Waits still open then
  /// stay open, pending: the clients re-send their requests to the new daemon, and a request of
  /// the same kind on the same device that comes back (parked again, granted or refused)
  /// continues that wait, so one row spans the restart. close_restart_waits() closes those that
  /// did not come back.
  void daemon_restarted(Nanos last_seen);
  /// Waits open at a restart whose request did not come back: closed at the time the daemon
  /// last saw them open, outcome "daemon-restart".
  void close_restart_waits();
  /// The job ended while the daemon was away: its processes did not come back. `last_seen` /
  /// `last_seen_wall_ms` (when the daemon last saw it alive) become the end, the earliest it can
  /// have ended; `noticed_wall_ms` (Unix ms: the daemon's restart, or when it found the job's
  /// processes gone) the latest. Processes whose end is not known are marked "daemon-away" with
  /// no status; the last counters sampled are kept; open waits close at `last_seen`.
  void finish_away(Nanos last_seen, int64_t last_seen_wall_ms, int64_t noticed_wall_ms);
  /// Changes on every update that a report would show (not on a sample repeating the last one).
  uint64_t revision() const { return revision_; }

  /// The whole recorder as JSON (bounded as above), for from_state().
  nlohmann::json state() const;
  /// A recorder rebuilt from state() under `serial`. A document that is not what state() writes
  /// (missing or mistyped fields, a timeline out of order, lists over their bounds) is an Error
  /// naming the first bad field.
  static Result<JobRecorder> from_state(const nlohmann::json& state, broker::JobSerial serial);

  /// The report. `now` closes open waits of a live job. Shape: see docs/ARCHITECTURE.md.
  nlohmann::json to_json(Nanos now) const;

  /// What the report's device entry sums, per device: time waited by cause and device time.
  struct Totals {
    Nanos wait_memory = 0;     ///< ns: the daemon's measure of its queue, or the clients' when larger
    Nanos wait_admission = 0;  ///< ns, likewise
    /// ns launches waited at the launch gate, by pages::GateState (index 0, RUN, stays 0).
    std::array<uint64_t, pages::kGateStates> gate_wait_ns{};
    uint64_t busy_ns = 0;  ///< device time of the completed work (tracked while timesliced)
  };
  /// The report's figures (wait_memory_s, wait_admission_s, gate_wait_s, gpu_time_s) per device
  /// at `now` (open waits count up to `now`), without rendering the report.
  std::map<broker::Uuid, Totals> totals(Nanos now) const;
  /// The job's peak on `device` so far (0 when never seen there).
  Bytes peak(const broker::Uuid& device) const;
  const broker::JobKey& key() const { return key_; }
  broker::JobSerial serial() const { return serial_; }
  /// The job's start (the daemon's monotonic ns).
  Nanos mono_start() const { return mono_start_; }
  bool finished() const { return end_mono_.has_value(); }

 private:
  struct Wait {
    bool admission = false;
    Nanos start = 0;
    std::optional<Nanos> end;
    broker::Reason outcome = broker::Reason::kNone;
    bool interrupted = false;  ///< open when the daemon stopped, and its request never came back
    bool resumed = false;      ///< open when the daemon stopped, continued after the restart
    /// Open at a restart and its request not back yet: the last time the daemon saw it open
    /// (monotonic ns), where it closes if the request does not come back.
    std::optional<Nanos> pending_since;
    std::vector<uint8_t> reasons;  ///< proto::WaitReason values, in the order seen (note_wait_reason)
  };
  struct Cancel {
    uid_t uid = 0;
    std::string by;
    int signal = 0;
    int64_t at_ms = 0;
  };
  struct Oom {
    Nanos at = 0;
    broker::Reason reason = broker::Reason::kNone;
    bool admission = false;
    Bytes request = 0;
    Bytes in_use = 0;
  };
  struct Device {
    Bytes capacity = 0;
    Bytes limit = broker::kNoLimit;
    Bytes reservation = 0;
    Bytes peak = 0;
    Bytes driver_overhead = 0;  ///< the largest driver overhead sampled (bytes)
    bool sampled = false;  ///< admitted: capacity and limit come from samples
    Bytes predicted_peak = 0;   ///< the highest online prediction sampled (bytes; 0 = none)
    std::string prediction_state;  ///< the latest ("" = never reported)
    uint32_t confidence = 0;       ///< per mille, the latest
    Nanos period = 0;              ///< the latest (ns)
    std::optional<Nanos> stable_at;  ///< when the prediction first became stable (ns from the job's start)
    std::string reservation_source = "none";  ///< the latest
    std::string kept_outcome;                  ///< DeviceSample::kept_outcome, the latest non-empty
    Bytes kept_wanted = 0, kept_available = 0;
    std::string fingerprint;                   ///< DeviceSample::fingerprint, the latest non-empty
    Timeline timeline;
    Counters folded;  ///< processes that left
    Counters live;    ///< the latest sample of live processes
    std::vector<Wait> waits;
    std::vector<Oom> ooms;
    uint64_t driver_ooms = 0;
    std::optional<Nanos> admitted_at;
    uint64_t waits_omitted = 0;           ///< closed waits dropped from `waits` (bound)
    Nanos omitted_wait_memory_ns = 0;     ///< their waiting time
    Nanos omitted_wait_admission_ns = 0;
    uint64_t ooms_omitted = 0;            ///< OOM events dropped from `ooms` (bound)
    /// Turns (held the device), since the job's start (ns), in time order, at most kMaxTurns:
    /// over the bound the two with the shortest gap between them merge into one.
    std::vector<std::pair<Nanos, Nanos>> turns;
    std::optional<Nanos> turn_open;  ///< the start (since the job's start) of the turn on now
    uint64_t turns_count = 0;        ///< turns begun, merged or not
    uint64_t drain_timeouts = 0;     ///< turns that did not drain within the grace
  };
  /// Ends `d`'s open turn at `at_rel` (since the job's start), if any.
  static void close_turn(Device& d, Nanos at_rel);
  Device& device(const broker::Uuid& u);
  /// The open wait of kind `admission` on `d` that a request coming back after a restart
  /// continues, or null.
  static Wait* pending_wait(Device& d, bool admission);
  Nanos rel(Nanos t) const { return t > mono_start_ ? t - mono_start_ : 0; }

  broker::JobSerial serial_;
  broker::JobKey key_;
  std::string user_;
  std::string command_;
  uint64_t cmdline_hash_;
  std::string priority_;
  Nanos mono_start_;
  int64_t wall_start_ms_;
  std::optional<Nanos> end_mono_;
  int64_t wall_end_ms_ = 0;
  std::map<broker::Uuid, Device> devices_;
  std::vector<ProcessExit> processes_;  ///< in registration order; exit fields filled when known
  std::optional<int> command_status_;   ///< command_exited()
  std::optional<Cancel> cancelled_;     ///< cancelled()
  uint64_t processes_omitted_ = 0;      ///< ended processes dropped from processes_ (bound)
  bool away_ = false;                   ///< ended while the daemon was away
  int64_t away_before_ms_ = 0;          ///< then: the latest it can have ended (Unix ms)
  Bytes job_limit_ = broker::kNoLimit;  ///< the job's limit (bytes)
  uint64_t revision_ = 0;
};

/// "2026-03-01T12:00:00.123Z" for Unix ms.
std::string iso8601_utc(int64_t unix_ms);

}  // namespace coloc::report
