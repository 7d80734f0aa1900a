// daemon/engine/server.h — colocd's engine: the listening socket, one epoll loop, the
// connections, and the glue between them and the broker, the process watcher and the reports.
//
// Everything runs on one thread (the report writer, the run history and /metrics have threads of
// their own, fed from here and never waited for). Each event (a datagram, a hang-up, a process exit, a timer)
// is handled to completion: decode, call the broker, then send the replies and record the
// events the broker handed back, then re-arm the deadline timer.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/broker.h"
#include "broker/priority_fifo_policy.h"
#include "compute/gates.h"
#include "compute/policy_store.h"
#include "compute/scheduler.h"
#include "compute/device_time.h"
#include "compute/share_window.h"
#include "config/config.h"
#include "device/memory_reader.h"
#include "device/outside_processes.h"
#include "engine/admin.h"
#include "engine/connection.h"
#include "engine/event_loop.h"
#include "engine/helper_process.h"
#include "engine/listener.h"
#include "engine/resume_state.h"
#include "engine/systemd.h"
#include "metrics/counters.h"
#include "metrics/exporter.h"
#include "report/job_recorder.h"
#include "report/job_state_store.h"
#include "report/report_store.h"
#include "report/report_writer.h"
#include "util/result.h"
#include "util/unique_fd.h"
#include "watch/process_watcher.h"

namespace coloc::engine {

class Server {
 public:
  explicit Server(config::Config cfg);
  ~Server();

  /// Creates the state directory, takes its lock, binds the socket, loads the restart state and
  /// starts the process watcher. Errors name what failed; nothing is left listening then.
  Result<void> start();
  /// Serves until SIGINT or SIGTERM. Returns the process exit code.
  int run();
  /// Replaces how the daemon reads each device's free memory (call before start()). Without
  /// this, start() loads NVML (device::NvmlReader); a null reader, or NVML missing, leaves the
  /// outside-coloc estimate to the clients' reports.
  void set_memory_reader(std::unique_ptr<device::MemoryReader> reader) {
    memory_reader_ = std::move(reader);
    memory_reader_set_ = true;
  }
  /// Serve on `fd`, the listening socket the service manager passed (socket activation;
  /// engine/systemd.h), instead of binding --socket (call before start()).
  void adopt_listen_socket(UniqueFd fd) { inherited_socket_ = std::move(fd); }
  /// The run history (<state-dir>/history.db), from start() on; null before.
  history::HistoryStore* history() { return history_.get(); }

 private:
  using Nanos = broker::Nanos;

  Result<void> open_state_dir();
  Result<void> open_listener();
  Result<void> open_signals_and_timers();
  Nanos now() const;

  /// A connection the listener let in.
  void on_accept(UniqueFd fd, const ucred& peer, bool exempt);
  /// At the descriptor limit: closes the oldest connection of a non-exempt peer that has not
  /// sent its first message yet, now. True when there was one.
  bool make_room();
  /// Makes sure `n` descriptors are free now (for a registration at the descriptor limit): for
  /// an exempt peer by closing unregistered connections of others. False when they are not.
  bool descriptors_for(const Connection& c, int n);
  /// Closes connections that sent no valid first message within cfg_.hello_timeout.
  void expire_hellos(Nanos t);
  /// Removes a doomed connection from the loop and the books of connections, now.
  void destroy(uint64_t id);
  Connection* find_connection(uint64_t id);
  void on_connection_event(Connection& c, uint32_t events);
  void on_message(Connection& c, const unsigned char* data, size_t len);
  void on_register(Connection& c, const proto::Message& m);
  void on_admin(Connection& c, const proto::Message& m);
  void on_process_exit(const watch::Exit& e);
  void on_sample();
  /// Feeds the job's recorder a sample of each of its devices, summed over its processes'
  /// stats pages.
  void sample_job(const broker::Job& job, Nanos t);
  void sample_job(broker::JobSerial serial, Nanos t);
  void on_deadline();
  // Estimation (server_estimate.cpp): the run history at admission and at a job's end, the
  // online prediction on the sampling timer.
  /// Remembers the job's history fingerprint from its first Register (a v9 client's env hash).
  void note_fingerprint(const broker::Job& job, const proto::RegisterMsg& r, uint16_t version, const std::string& command);
  /// What the job's history says of it on `uuid`: its footprint (bytes; 0 = none) and its median
  /// time from admission to end (ns; 0 = none). Remembers the device's model for the run's record.
  struct HistoryFootprint {
    broker::Bytes estimate = 0;
    Nanos run = 0;
  };
  HistoryFootprint history_footprint(broker::JobSerial job, const broker::Uuid& uuid, broker::Bytes capacity);
  /// Reads every client's prediction (stats pages, layout 6) and gives each job's to the broker.
  void estimate_sample(Nanos t);
  /// Writes each waiting process's queue note (pages.h, layout 8: its first waiting request's
  /// reason, position, blocker, ask and estimated start, from Broker::queue) where it changed, and
  /// clears the note of a process that no longer waits. On the sampling timer (server_queue.cpp).
  void publish_queue_notes(Nanos t);
  // `coloc cancel` (server_cancel.cpp).
  /// Cancels `job` for `caller` (`admin`: root or the admin group): a Slurm job is refused
  /// (kNotAllowed, naming scancel) unless `admin`, since a job marks itself as Slurm's; else it
  /// leaves the queue and gets nothing new (Broker::cancel_job), its report records the cancel, its
  /// processes and anchor get `sig` through pidfds, and SIGKILL at t + `grace` (kill_due). Answers
  /// {job, uid, user, signal, grace_ms, signalled: [{pid, anchor, ended?}], left_queue, slurm}.
  AdminAnswer cancel_job(const broker::Job& job, int sig, Nanos grace, const Caller& caller, bool admin, Nanos t);
  /// Sends SIGKILL to the cancelled processes whose grace ended by `t` (on the deadline timer).
  void kill_due(Nanos t);
  // Suspension (server_suspend.cpp; issue 29): a job's processes checkpointed to host memory by
  // the helper (coloc-ckpt), on `coloc suspend` or for a high job waiting for memory (preempt),
  // and restored on `coloc resume` or when room returns.
  /// The checkpoint helper's path (cfg_.ckpt_helper, else coloc-ckpt next to colocd or in
  /// ../lib/coloc from it).
  std::string ckpt_helper() const;
  /// The preempt mode in force: the config's, or for "auto" what `coloc-ckpt check` found (off
  /// until it has answered).
  broker::PreemptMode preempt_mode() const;
  /// At start, for preempt = "auto": runs `coloc-ckpt check` (off the loop) and says once what
  /// the mode is.
  void check_checkpoint_support();
  /// Why `job` cannot be suspended ("" when it can): a process whose preflight says it used what
  /// a checkpoint cannot carry, one too old to tell, none with a CUDA context. `pids` (optional)
  /// receives the processes to checkpoint (every one with a context).
  std::string not_suspendable(const broker::Job& job, std::vector<pid_t>* pids) const;
  /// What a checkpoint of `job` would move to host memory (bytes): its grants and driver
  /// overheads on every device.
  broker::Bytes host_bytes(const broker::Job& job) const;
  /// Starts the helper that suspends `job` (preflight and host room checked first). `by`:
  /// "admin", "owner" or "preempt"; `held`: its restore waits for `coloc resume`. False with
  /// *why when it did not start.
  bool start_suspend(const broker::Job& job, const std::string& by, uint32_t by_uid, const std::string& cause, bool held,
                     std::string* why, Nanos t);
  void on_suspend_done(broker::JobSerial job, const HelperProcess::Outcome& o);
  /// Runs the restore helper for a job whose restore the broker admitted (Broker::take_restores).
  void start_restore(broker::JobSerial job);
  void on_restore_done(broker::JobSerial job, const HelperProcess::Outcome& o);
  /// The job ended: its suspension (if any) ends with it (counted in /metrics; a helper still
  /// running for it is left to finish, and its answer is then ignored).
  void forget_suspension(broker::JobSerial job, Nanos t);
  /// colocd stops: logs, for each job still suspended, the command that restores it by hand.
  void say_suspended_at_stop();
  /// Preemption: for each device whose first waiting request is a high job's that lacks memory,
  /// suspends the jobs broker::choose_victims picks (one suspension in flight per device).
  void preempt_check(Nanos t);
  /// `coloc suspend` (Admin's suspender) and the suspension half of `coloc resume` (`ended`
  /// receives "suspension" when one was ended or its restore queued).
  AdminAnswer admin_suspend(const broker::Job& job, const Caller& caller, bool admin, Nanos t);
  AdminAnswer admin_resume(const broker::Job& job, const Caller& caller, bool admin, Nanos t, bool* ended);
  /// The job's suspension as status shows it: {state, by, cause, since_s, bytes, pids,
  /// checkpoint_s, restore_need} or null; with "suspendable"/"not_suspendable" and the last
  /// failure ("suspend_error"). See docs/daemon.md.
  nlohmann::json suspension_json(const broker::Job& job, Nanos t) const;
  /// The config's report_retention as the report writer takes it.
  static report::ReportWriter::Retention retention_of(const config::Config& c) {
    return {int64_t(c.report_retention.age / 1'000'000), c.report_retention.count};
  }
  /// Fills `ds` with the job's prediction on `dev` and where its reservation came from.
  void fill_prediction(const broker::Job& job, uint32_t dev, report::DeviceSample& ds) const;
  /// Records the job's run in the history (its recorder must still exist), then forgets it.
  void record_history(broker::JobSerial job);
  /// What save_job keeps of the job's estimation (its fingerprint, its reservations from history
  /// or prediction), null when nothing; and continue_saved's way back (reservations as they fit).
  nlohmann::json estimate_state(const broker::Job& job) const;
  void restore_estimate(const broker::Job& job, const nlohmann::json& state, Nanos t);
  // The compute side (server_compute.cpp).
  Result<void> open_compute_timer();
  /// Advances the scheduler to `t` (pauses, who is on which device, drains), rewrites the gates
  /// that changed, logs handovers that timed out, and re-arms the compute timer.
  void compute_tick(Nanos t);
  void on_compute_timer();
  /// Samples each timesliced job's device time (its clients' stats pages) for gpu_share().
  void compute_sample(Nanos t);
  /// Feeds device_time_ every tracked client's figures at `t` (only client `only`'s when given:
  /// a departing client's last).
  void look_device_time(Nanos t, std::optional<broker::ClientId> only = std::nullopt);
  /// The share of the last 10 s (or of its life on the device, if shorter) that `job`'s work ran
  /// on `dev`, from its completions (tracked under an exclusive policy only); NaN when not known.
  double gpu_share(broker::JobSerial job, const broker::Uuid& dev) const;
  /// Reads the free memory of broker device `device` through memory_reader_ (if any) and hands
  /// it to the broker (Broker::refresh_outside). `prompted`: asked for by a client's message
  /// (rate-limited), not the sample timer.
  void read_device_memory(uint32_t device, Nanos t, bool prompted = false);
  /// Reconciles the books of every process attached to broker device `device` with the driver's
  /// per-process figures (memory_reader_->processes; broker/overhead.h) through
  /// Broker::reconcile_device: each one's driver overhead and what its stats page claims beyond
  /// the driver's figure; the list also bounds memory used outside coloc from below. Sampling
  /// timer only.
  void reconcile_overheads(uint32_t device, Nanos t);
  /// Reads the driver's process list of broker device `device` (memory_reader_->processes) into
  /// processes_[device] (server_outside.cpp): every sample while processes are attached there
  /// (reconcile_overheads uses it), else at most once a second; then updates the device's
  /// processes outside coloc (outside_, for status). Sampling timer only.
  void read_processes(uint32_t device, Nanos t);
  /// True when most pids of a driver's process list are processes of colocd's own PID namespace
  /// (or the list is empty): then they are the pids colocd knows its clients by, and a client the
  /// list does not name holds nothing there. A driver that reports another namespace's pids
  /// (colocd in a container of its own) names few of them. (kill(pid, 0): one system call each.)
  static bool pids_are_ours(const std::vector<device::ProcessMemory>& procs);
  /// Reads, at most once a second, the devices NVML lists that no coloc process has attached
  /// since colocd started (no broker device): their memory into unmet_, and their processes,
  /// all outside coloc, into outside_. So `coloc status` shows a GPU used only outside coloc.
  /// Sampling timer only (server_outside.cpp).
  void read_unmet_devices(Nanos t);

  /// Sends an Error and closes the connection (after this event is handled).
  void refuse(Connection& c, proto::ErrorCode code, const std::string& text);
  /// Closes the connection after this event is handled; a job client leaves the books at once.
  void drop(Connection& c, const std::string& reason, std::optional<report::ProcessExit> exit = std::nullopt,
            bool warn = false);
  /// Sends the broker's replies, records its events, destroys dropped connections, re-arms timers.
  void settle();
  void send_reply(const broker::Reply& r);
  void on_broker_event(const broker::Event& e);
  void finalize_job(broker::JobSerial serial);
  void fold_stats(Connection& c);
  void rearm_deadline();
  // Job state across restarts (<state-dir>/jobs/, report/job_state_store.h; server_restart.cpp).
  /// At start: loads the previous run's saved jobs into away_ (those none of whose processes is
  /// alive into dead_at_start_). Errors: the jobs directory cannot be made.
  Result<void> load_saved_jobs();
  /// A registration of `job` continued `saved`: its pause holds again, and (for the first of its
  /// processes) its report continues from the saved state.
  void continue_saved(const broker::Job& job, const report::SavedJob& saved, Nanos t);
  /// Saves the live jobs' report state: changed ones at most once a second (every one when
  /// `force`), unchanged ones every 10 s.
  void persist_jobs(Nanos t, bool force, bool throttle = true);
  void save_job(const broker::Job& job, const report::JobRecorder& rec, Nanos t);
  /// The saved job of the previous run that registration `spec` continues (removed from away_),
  /// or nullopt. A resuming process, one the saved state lists, or any process of the job while
  /// one it lists is alive continues it; otherwise a saved job of the same key is over and is
  /// reported at once (ended while the daemon was away).
  std::optional<report::SavedJob> claim_saved(const broker::ClientSpec& spec, std::optional<uint64_t> start_time,
                                              bool resume);
  /// After the resume grace: saved jobs none of whose processes is alive get their report (ended
  /// while the daemon was away); continued jobs' processes that did not come back are marked so.
  void sweep_away(Nanos t);
  /// Writes the report of a saved job that ended while the daemon was away: between its last
  /// sighting (saved_mono / saved_unix_ms) and the restart (or, when one of its processes was
  /// still alive at the restart, now).
  void finish_away(const report::SavedJob& saved);
  void send_or_drop(Connection& c, const void* data, size_t len, std::vector<int> fds = {});
  // The service manager (server_systemd.cpp): READY=1, STATUS= lines, STOPPING=1.
  /// "serving 2 devices, 3 jobs" (and the restart hold, while it lasts).
  std::string service_status();
  /// Sampling timer: a STATUS= line when it changed (at most one a second).
  void notify_tick(Nanos t);
  // Settings at run time (server_reload.cpp).
  /// SIGHUP: reads the config file again (with the flags given at start over it) and applies what
  /// can change live; what cannot is logged as needing a restart. A bad file changes nothing (one
  /// line in the log says why).
  void reload_config();
  /// Gives the policy store the config file's policies (its configured layer, under the stored ones).
  void configure_policies();
  /// Warns about each `[devices."UUID"]` table that no device known now has.
  void warn_unknown_devices();
  /// The devices colocd knows: the broker's and NVML's.
  std::vector<broker::Uuid> known_devices() const;
  // Prometheus /metrics (server_metrics.cpp; metrics/exporter.h).
  /// Starts the exporter on `listen` (HOST:PORT; nothing when empty) and watches its requests
  /// for snapshots. Errors name the address; the exporter is then unchanged (none).
  Result<void> open_metrics(const std::string& listen);
  /// Stops the exporter (its port closes; its thread is joined). Nothing when there is none.
  void close_metrics();
  /// SIGHUP with a new metrics_listen: the old listener closes, the new one opens; when it
  /// cannot, the old address is served again and false returned (the caller keeps its value).
  /// A host name (not an IPv4/IPv6 address) is refused without closing anything: resolving it
  /// could stall the loop on DNS.
  bool switch_metrics(const std::string& from, const std::string& to);
  /// Builds a snapshot (status, the jobs' report totals, the counters) and hands it to the exporter.
  void publish_metrics();
  /// A grow or attach request read at `received`: its answer, if sent in this same event (it did
  /// not wait), is a grant round trip (note_answer, from send_reply).
  void note_request(broker::ClientId client, uint32_t seq, metrics::Request kind, Nanos received);
  void note_answer(const broker::Reply& r);

  config::Config cfg_;
  broker::PriorityFifoPolicy policy_;
  broker::Broker broker_;
  compute::Gates gates_;  ///< the compute side: pauses and every client's launch gates
  compute::Scheduler scheduler_;  ///< the compute side: who holds each exclusive device (timeslice)
  std::unique_ptr<EventLoop> loop_;
  UniqueFd signal_fd_, sample_timer_, deadline_timer_, lock_fd_;
  UniqueFd compute_timer_;              ///< the scheduler's ticks (armed only while a device is contended)
  Nanos compute_armed_ = broker::kNever;  ///< what compute_timer_ is set to
  bool compute_dirty_ = false;          ///< clients or pauses changed since the last compute_tick
  size_t compute_devices_ = 0;          ///< broker devices given the `coloc policy all` default so far
  compute::ShareWindow share_window_;  ///< GPU SHARE: each job's device time over the last 10 s
  /// Each job's device time per device, the union of its processes' busy intervals (reports,
  /// GPU SHARE, coloc_job_gpu_time_seconds_total)
  compute::DeviceTime device_time_;
  std::unique_ptr<Listener> listener_;
  UniqueFd inherited_socket_;           ///< from the service manager, until open_listener adopts it
  systemd::Notifier notifier_;          ///< $NOTIFY_SOCKET (no-op without it)
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;  ///< by connection id
  /// Connections not yet past their first message, oldest first: (accepted at, connection id).
  std::deque<std::pair<Nanos, uint64_t>> hellos_;
  std::unordered_map<broker::ClientId, Connection*> by_client_;
  std::unordered_map<pid_t, std::vector<Connection*>> by_pid_;
  std::vector<uint64_t> doomed_;  ///< ids of connections to destroy in settle()
  std::map<broker::JobSerial, report::JobRecorder> recorders_;
  std::map<broker::JobSerial, Nanos> closing_;  ///< ended jobs waiting (briefly) for exit statuses
  /// Cancelled jobs' processes that get SIGKILL at `at` (pidfds: a pid reused meanwhile is safe).
  /// One per job: a second cancel signals the same processes again (and any new ones), and the
  /// earlier deadline holds, so cancels repeated with long graces hold no more descriptors.
  struct Kill {
    Nanos at = 0;
    std::string job;  ///< "uid:id": the job, and the log's name for it
    std::vector<std::pair<pid_t, UniqueFd>> pidfds;
  };
  std::vector<Kill> kills_;
  /// A suspension in flight or in force (server_suspend.cpp), by job.
  struct Suspend {
    broker::JobKey key;
    std::string by;     ///< "admin", "owner", "preempt"
    uint32_t by_uid = 0;
    std::string cause;  ///< why, for the log, status and the report
    std::vector<pid_t> pids;
    Nanos began = 0;            ///< the suspend helper started
    Nanos since = 0;            ///< its books left the devices (0: still suspending)
    int64_t since_ms = 0;       ///< the same, Unix ms
    Nanos restore_began = 0;    ///< the restore helper started (0: not yet)
    broker::Bytes bytes = 0;    ///< moved to host memory
    double checkpoint_s = 0;    ///< how long the helper took to lock and checkpoint
    std::string error;          ///< a failed restore: why
    std::unique_ptr<HelperProcess> helper;
  };
  std::map<broker::JobSerial, Suspend> suspends_;
  std::unique_ptr<HelperProcess> ckpt_check_;          ///< `coloc-ckpt check` at start (auto)
  std::optional<broker::PreemptMode> preempt_auto_;    ///< what auto resolved to
  /// When each job last came back from a suspension, or a suspension of it failed (preempt_min_run).
  std::map<broker::JobSerial, Nanos> resumed_at_;
  std::map<broker::JobSerial, std::string> suspend_errors_;  ///< the last failed suspension's reason
  std::set<broker::JobSerial> not_suspendable_said_;         ///< logged once per job
  std::map<broker::JobSerial, std::string> preempt_verdicts_; ///< per waiting high job: the last verdict said
  /// Jobs a Register with a Slurm step joined (the Slurm plugin's anchor and tasks): `coloc cancel`
  /// points to scancel for these.
  std::set<broker::JobSerial> slurm_jobs_;
  /// Watches kept after a hang-up, to learn the exit status: by pid, the process's start time and
  /// the number of watches.
  struct Linger {
    uint64_t start = 0;
    int count = 0;
  };
  std::map<pid_t, Linger> lingering_;
  report::ReportStore store_;
  std::unique_ptr<report::ReportWriter> writer_;  ///< writes ended jobs' reports off the loop
  ResumeState resume_;
  report::JobStateStore job_states_;
  /// The devices' compute policies (coloc policy), saved by UUID in <state-dir>/policies.json.
  compute::PolicyStore policies_{cfg_.state_dir + "/policies.json"};
  std::string boot_id_;
  std::map<broker::JobKey, report::SavedJob> away_;  ///< saved jobs of the previous run, not (yet) continued
  Nanos away_deadline_ = 0;       ///< the resume grace ends: away_ is swept from then on
  int64_t restart_wall_ms_ = 0;   ///< when this daemon started (Unix ms): the latest the previous one stopped
  std::set<broker::JobKey> dead_at_start_;  ///< saved jobs none of whose processes was alive at the start
  /// Continued jobs whose waits open at the restart are still pending: when (monotonic ns) those
  /// whose request has not come back are closed (JobRecorder::close_restart_waits).
  std::map<broker::JobSerial, Nanos> restart_waits_;
  bool alive_warned_ = false;     ///< save_alive failed once (said once)
  Nanos next_sweep_ = 0;
  std::set<broker::JobSerial> continued_;    ///< continued from a saved state: processes still to account for
  struct Persisted {
    uint64_t revision = 0;
    broker::Bytes limit = 0;
    proto::Priority priority = proto::Priority::kNormal;
    compute::PausedBy paused = compute::PausedBy::kNobody;
    Nanos at = 0;
    bool warned = false;
    uint32_t weight = proto::kDefaultWeight;
  };
  std::map<broker::JobSerial, Persisted> persisted_;
  Nanos next_persist_ = 0;
  std::unique_ptr<watch::ProcessWatcher> watcher_;
  std::unique_ptr<device::MemoryReader> memory_reader_;  ///< null: client reports only
  bool memory_reader_set_ = false;
  std::vector<Nanos> last_read_;  ///< per broker device: the last reading through memory_reader_
  std::vector<char> unreadable_;  ///< per broker device: its last reading failed (memory_reader_ does not know it)
  /// Per broker device: the driver's last process list (nullopt: cannot tell), and when it was read.
  std::vector<std::optional<std::vector<device::ProcessMemory>>> processes_;
  std::vector<Nanos> processes_read_;
  device::OutsideProcesses outside_;  ///< the processes outside coloc on each device (status)
  std::map<broker::Uuid, device::DeviceMemory> unmet_;  ///< read_unmet_devices: NVML's devices the broker has not met
  Nanos unmet_read_ = 0;
  DaemonInfo info_;
  std::unique_ptr<history::HistoryStore> history_;  ///< the run history (SQLite on its own thread)
  /// A job's history fingerprint (server_estimate.cpp): known only for v9 clients' jobs.
  struct JobPrint {
    uint32_t uid = 0;
    uint64_t command_hash = 0, env_hash = 0;
    std::string command;
    std::map<broker::Uuid, std::string> models;  ///< the device models it was admitted on
  };
  std::map<broker::JobSerial, JobPrint> prints_;
  /// The queue note last written to each client's control page (publish_queue_notes).
  std::unordered_map<broker::ClientId, pages::QueueNoteValue> queue_notes_;
  /// Per (job, device): the last time its prediction could not raise its reservation.
  std::map<std::pair<broker::JobSerial, uint32_t>, broker::ReservationChange> kept_;
  /// Reservations saved before a restart whose device the job has not re-attached yet (its
  /// anchor came back first): restored by estimate_sample once it has. By job.
  struct PendingRestore {
    broker::Uuid uuid;
    broker::Bytes bytes = 0;
    broker::Footprint source = broker::Footprint::kNone;
  };
  std::map<broker::JobSerial, std::vector<PendingRestore>> pending_restores_;
  /// Restores what it can of `pending` for `job` now; returns what is left.
  std::vector<PendingRestore> restore_now(const broker::Job& job, std::vector<PendingRestore> pending);
  std::unique_ptr<Admin> admin_;
  metrics::Counters metrics_;                  ///< what /metrics counts that nothing else does
  std::unique_ptr<metrics::Exporter> exporter_;  ///< /metrics (null: off)
  EventLoop::Token exporter_token_ = 0;           ///< the loop's watch of its wanted_fd()
  struct PendingAnswer {
    broker::ClientId client = 0;
    uint32_t seq = 0;
    metrics::Request kind = metrics::Request::kGrow;
    Nanos received = 0;
  };
  std::vector<PendingAnswer> rtt_pending_;  ///< requests of this event not answered yet (cleared by settle)
  uint64_t next_conn_id_ = 1;
  uint64_t hello_timeouts_ = 0;
  uint64_t made_room_ = 0;       ///< connections of others closed to let root or an admin in  ///< connections closed for sending no first message in time
  bool stop_ = false;
  Nanos armed_deadline_ = broker::kNever;  ///< what the deadline timer is set to
  std::vector<unsigned char> rx_;
};

}  // namespace coloc::engine
