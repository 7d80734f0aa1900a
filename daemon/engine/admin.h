// daemon/engine/admin.h — the CLI's requests: status, jobs, set, pause, resume, report, policy,
// history (list and forget: a fingerprint's command line only to its owner and root; forgetting
// another user's fingerprint needs root).
// Answers are JSON text (shapes in docs/daemon.md, "Admin answers"). Reading status is open to every
// user; changing a job and reading its report is for its owner (who may only lower its limit,
// priority or weight, and may not resume a pause an admin set) and for root or members of
// --admin-group, checked against SO_PEERCRED / SO_PEERGROUPS; a device's compute policy is for
// root and the admin group only. Priority high is for root and the admin and high-priority groups
// (may_be_high: the engine asks at registration).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker/broker.h"
#include "coloc/protocol.h"
#include "compute/gates.h"
#include "compute/policy_store.h"
#include "compute/scheduler.h"
#include "device/outside_processes.h"
#include "history/history_store.h"
#include "report/job_recorder.h"
#include "report/report_store.h"
#include "report/report_writer.h"

namespace coloc::engine {

/// Who is asking (from the socket, never from the message).
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

/// Facts about the daemon for `coloc status`.
struct DaemonInfo {
  uint64_t epoch = 0;
  pid_t pid = 0;
  std::string socket;
  std::string state_dir;
  std::string watcher;
  broker::Nanos started = 0;
  std::optional<gid_t> admin_gid;
  std::string admin_group;  ///< its name ("" = none)
  /// --high-priority-group: members may run jobs at priority high (as root and the admin group).
  std::optional<gid_t> high_priority_gid;
  std::string high_priority_group;  ///< its name ("" = none)
  size_t fd_limit = 0;  ///< RLIMIT_NOFILE in effect
  /// Where /metrics is served ("HOST:PORT", the port bound), "" = off (status shows null).
  std::string metrics;
  /// The "connections" object of status (listener counters, open connections per uid); null
  /// when not set.
  std::function<nlohmann::json()> connections;
  /// True when colocd reads devices itself (NVML) and cannot read broker device `i` (one it knows
  /// only from clients: of an old simgpu state directory, or gone). Null: every device is seen.
  std::function<bool(uint32_t)> unseen;
  /// The devices colocd reads itself (NVML), in NVML's index order; null, or nullopt from it:
  /// none (devices are then numbered in the broker's order).
  std::function<std::optional<std::vector<broker::Uuid>>()> nvml_devices;
  /// A job's share of a device's time over the last 10 s (0..1); null: not measured (status
  /// shows null).
  std::function<double(broker::JobSerial, const broker::Uuid&)> gpu_share;
  /// The processes outside coloc on a device (device/outside_processes.h); null, or nullptr from
  /// it: not known (status shows "outside_processes": null).
  std::function<const device::OutsideList*(const broker::Uuid&)> outside_processes;
  /// The memory of a device NVML lists that no coloc process has used since colocd started (not
  /// a broker device); null, or nullopt from it: not read (status leaves the device out).
  std::function<std::optional<device::DeviceMemory>(const broker::Uuid&)> unmet_device;
  /// How colocd reads the devices itself: MemoryReader::name() ("nvml"), "" when it does not; then
  /// memory_reader_error says why (NVML missing, nvmlInit_v2 failed).
  std::string memory_reader;
  std::string memory_reader_error;
};

struct AdminAnswer {
  proto::AdminStatus status = proto::AdminStatus::kOk;
  std::string text;  ///< JSON on success, a sentence otherwise
};

class Admin {
 public:
  Admin(broker::Broker& broker, compute::Gates& gates, compute::Scheduler& scheduler,
        std::map<broker::JobSerial, report::JobRecorder>& recorders, const report::ReportStore& store,
        const DaemonInfo& info)
      : broker_(broker), gates_(gates), scheduler_(scheduler), recorders_(recorders), store_(store), info_(info) {}

  /// Answers one request at monotonic time `now`.
  AdminAnswer handle(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now);

  /// The status document (also used by tests through the CLI).
  nlohmann::json status(broker::Nanos now) const;
  /// One job as status shows it at `now`; `devices` (if given) receives the device index of each
  /// entry of its "devices" array.
  nlohmann::json job_json(const broker::Job& job, broker::Nanos now, std::vector<uint32_t>* devices = nullptr) const;
  /// A waiting request's place in its device's queue (Broker::queue): {"reason", "position",
  /// "behind" (the job first in line, for Priority and Queue; else null), "behind_user",
  /// "missing" (bytes, Resources and Outside; else null), "held_by" (Resources: the jobs holding
  /// the device, largest first, at most 3: [{job, user, bytes}]), "asks" (bytes it must commit
  /// there), "asks_source" ("mem", "history", "estimate", "context", "growth"),
  /// "estimated_start_s" (seconds from now, null: not known), "estimated_start_ms" (Unix ms)}.
  nlohmann::json queue_json(const broker::Broker::QueueEntry& e, uint32_t device, broker::Nanos now) const;
  /// What `coloc set --mem` did to the job's reservation on each device: [{uuid, outcome
  /// ("unchanged", "lowered", "raised", "kept: ..."), before, after, wanted, available}] (bytes).
  nlohmann::json reservation_changes_json(const std::vector<broker::ReservationChange>& changes) const;
  bool is_admin(const Caller& c) const;
  /// Whether `c` may run a job at priority high: root, the admin group, the high-priority group.
  bool may_be_high(const Caller& c) const;
  /// Who may, after "root": "the admin group gpuadmin and the high-priority group ml", or "no
  /// other user" (for messages).
  std::string high_priority_holders() const;
  /// The writer of reports still on their way to disk: reading reports waits for it first.
  void set_report_writer(report::ReportWriter* w) { writer_ = w; }
  /// Where `coloc policy` saves what it sets (loaded and applied by the engine at start); null:
  /// policies are set live only.
  void set_policy_store(compute::PolicyStore* s) { policies_ = s; }
  /// The engine's part of `coloc cancel` (Server::cancel_job): signals, the grace timer, the
  /// report's record; `admin`: the caller is root or in the admin group. Null: kCancel answers
  /// kInternal.
  using Canceller = std::function<AdminAnswer(const broker::Job&, int sig, broker::Nanos grace, const Caller&,
                                              bool admin, broker::Nanos now)>;
  void set_canceller(Canceller c) { cancel_ = std::move(c); }
  /// The engine's part of `coloc suspend` and `coloc resume` (server_suspend.cpp): `suspend` starts
  /// the helper and answers with the job; `resume` ends a suspension (kOk with *ended set; a
  /// default answer with *ended false when the job is not suspended); `info` is the job's
  /// suspension for status (merged into job_json). Null: kSuspend answers kInternal.
  using Suspender = std::function<AdminAnswer(const broker::Job&, const Caller&, bool admin, broker::Nanos now)>;
  using Resumer = std::function<AdminAnswer(const broker::Job&, const Caller&, bool admin, broker::Nanos now, bool* ended)>;
  using SuspensionInfo = std::function<nlohmann::json(const broker::Job&, broker::Nanos now)>;
  void set_suspender(Suspender s, Resumer r, SuspensionInfo i) {
    suspend_ = std::move(s);
    resume_ = std::move(r);
    suspension_info_ = std::move(i);
  }
  /// The run history (coloc history); null: history is off (kHistory answers an empty list with
  /// "usable": false, kHistoryForget finds nothing).
  void set_history(history::HistoryStore* h) { history_ = h; }

  /// A device as `coloc policy` and `coloc status` number it: NVML's devices by their NVML index,
  /// then the devices only the broker knows (from clients; of NVML's count on) in the broker's
  /// order; devices known only from a saved policy have no index.
  struct DeviceRow {
    broker::Uuid uuid;
    std::optional<uint32_t> index;
    const char* index_from = nullptr;         ///< "nvml", "colocd", or null (no index)
    std::optional<uint32_t> broker_device;    ///< its index in the broker's devices
  };
  std::vector<DeviceRow> device_rows() const;
  /// The "policies" object of status: {default, devices: [{index, index_from, uuid, policy,
  /// holder, seen}]}.
  nlohmann::json policies_json() const;

 private:
  struct Found {
    const broker::Job* job = nullptr;
    proto::AdminStatus status = proto::AdminStatus::kOk;
    std::string why;
  };
  /// Resolves "job" or "uid:job" for `caller`.
  Found find_job(const std::string& name, const Caller& caller) const;
  /// find_job, refused (kNotAllowed, "... may `doing` other users' jobs") unless the job is the
  /// caller's or the caller is an admin.
  Found find_own_job(const std::string& name, const Caller& caller, const char* doing) const;
  AdminAnswer set(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now);
  /// kPause (`pause` true) or kResume: the job, as job_json, with "was" (who had paused it, or null).
  AdminAnswer pause(const proto::AdminMsg& msg, const Caller& caller, bool pause, broker::Nanos now);
  /// kSuspend: the caller's job (or any, for an admin), through the suspender.
  AdminAnswer suspend(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now);
  /// kPolicy: sets the policy of the device(s) `msg.job` names (admin only); answers
  /// {device, all, default, devices: [{index, index_from, uuid, policy, was}]}.
  AdminAnswer policy(const proto::AdminMsg& msg, const Caller& caller);
  /// kHistory: HistoryStore::list for the caller. kHistoryForget: `msg.job` is a fingerprint or
  /// "all"; answers {"forgotten": N}; kNotFound for an unknown fingerprint, kNotAllowed for
  /// another user's unless the caller is root.
  AdminAnswer history(const Caller& caller) const;
  AdminAnswer history_forget(const proto::AdminMsg& msg, const Caller& caller);
  /// kCancel: the caller's job (or any, for an admin), through the canceller. A job that has
  /// ended (a report is filed under its name) or is not known: kNotFound.
  AdminAnswer cancel(const proto::AdminMsg& msg, const Caller& caller, broker::Nanos now);
  /// kEnded: the newest kMaxEnded ended jobs that end at or after `msg.mem` (Unix ms) and are of
  /// the uid in `msg.quantum_ms` (with kEndedUser), and how many match ("total"); a job's command
  /// only to its owner and admins, as kReport shows it.
  AdminAnswer ended(const proto::AdminMsg& msg, const Caller& caller) const;
  /// The most ended jobs one kEnded answer lists (about 500 bytes each).
  static constexpr size_t kMaxEnded = 1000;
  /// The device `selector` names ("all" is the caller's): an index, a UUID or a unique prefix of
  /// one (with or without "GPU-"). nullptr and *why when none or several match.
  const DeviceRow* resolve_device(const std::string& selector, const std::vector<DeviceRow>& rows, std::string* why) const;
  /// {mode, quantum_ms} of the device now.
  nlohmann::json policy_json(const broker::Uuid& dev) const;
  /// A job's gpu_share on a device: null where colocd does not measure it (a device that is not
  /// timesliced, too few samples yet).
  nlohmann::json gpu_share_json(broker::JobSerial job, const broker::Uuid& dev) const;
  /// The id of the job holding `dev` under an exclusive policy, or null.
  /// The priority controller's state on `dev` (null for other policies).
  nlohmann::json control_json(const broker::Uuid& dev) const;
  nlohmann::json holder_json(const broker::Uuid& dev) const;
  /// Sets `device`'s "outside_processes" ([{pid, uid, user, command, used_bytes}], at most
  /// OutsideProcesses::kMaxPerDevice, the largest first; null when not known) and
  /// "outside_processes_more" (how many more there are).
  void add_outside_processes(nlohmann::json& device, const broker::Uuid& uuid) const;
  /// The job's compute state on `dev` (`dev` null: on any device): "paused", "waiting-quantum",
  /// "running".
  const char* compute_state(const broker::Job& job, const broker::Uuid* dev) const;
  /// The report of `name`: a job id (or UID:ID), a report's file name (ID.2), or — with
  /// `newest_of_name` — a name coloc run suffixed (NAME: its newest job).
  AdminAnswer report(const std::string& name, const Caller& caller, broker::Nanos now, bool newest_of_name = true);

  broker::Broker& broker_;
  compute::Gates& gates_;
  compute::Scheduler& scheduler_;
  std::map<broker::JobSerial, report::JobRecorder>& recorders_;
  const report::ReportStore& store_;
  const DaemonInfo& info_;
  report::ReportWriter* writer_ = nullptr;
  compute::PolicyStore* policies_ = nullptr;
  history::HistoryStore* history_ = nullptr;
  Canceller cancel_;
  Suspender suspend_;
  Resumer resume_;
  SuspensionInfo suspension_info_;
};

/// The user name of `uid`, or the number as text. Cached for 60 s (thread-safe).
std::string user_name(uid_t uid);

}  // namespace coloc::engine
