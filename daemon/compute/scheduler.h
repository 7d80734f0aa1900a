// daemon/compute/scheduler.h — who holds each device under an exclusive compute policy
// (timeslice), with handover by drain, idle give-up and gangs; and the tick of controlling
// policies (priority: compute/priority_policy.h), whose gate wishes it keeps.
//
// The model. A device whose policy is exclusive is held by at most one job at a time (its
// *turn*). The holder's launches on the device go ahead within the in-flight window (gate state
// kWindow); every other job's launches there wait (kTimeslice). A turn ends when its length
// (weight × quantum) is over and another job wants the device, or at once when the holder has
// nothing in flight and submits nothing while another waits (an idle job costs nobody anything).
// Then the holder's gate closes and the turn *drains*: the next job's gate opens only once the
// holder reports that every launch it made has completed (its stats page), so executions never
// overlap. A holder that has not drained within the policy's grace loses the device anyway
// (logged) and skips its next turn: one stuck kernel cannot freeze the device.
//
// Fairness. Turns go in order of virtual time (the policy's `before`): device time held for
// its weight. What a turn adds to it is only the time *contended*: between two looks (ticks) at
// which another job (not paused) wanted a device of the turn, including its drain. A turn taken
// alone, or run on while the others idle or sit paused, is not debt: when a newcomer (or a job
// back from idling, or from a pause) starts wanting the device, it starts at the least virtual
// time of the active jobs (no credit hoarded while idle), and the holder, whose solo time was
// never charged, is at that floor too; the holder's turn has long expired, so it drains and the
// two alternate from the first quantum on (issue 27: charging the whole solo turn at its end gave
// the newcomer the device alone for as long as the holder had had it). The engine does not tick
// while a job is alone, so the solo time is left out by the rule "contended at both looks", not
// by how often it looks; the cost is at most a tick's charge per contention's start.
//
// Gangs. A job attached to several exclusive devices takes its turns on all of them at once: its
// turn starts only when every one of them is free, so its ranks run together. Free devices are
// given in order of the policies' `before` (the virtual time): the first job in that order claims
// its devices (keeping them free while the others drain) and no later job may take them, so a
// gang is never starved by single-device jobs.
//
// Pure: no I/O, no clock (every call takes `now`), no pages. The engine feeds it each job's
// Usage (summed over its processes' stats pages: compute/gates.h) and writes the gates it asks
// for. Single-threaded (the event loop).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "broker/types.h"
#include "coloc/pages.h"
#include "compute/compute_policy.h"

namespace coloc::compute {

using broker::Uuid;

/// Why a turn ended (reports, logs, the benchmark).
enum class TurnEnd : uint8_t { kExpired, kIdle, kPaused, kLeft };

/// Something the engine should log or count.
struct SchedEvent {
  enum class Kind : uint8_t {
    kTurnStart,      ///< `job` holds `devices` from `at`
    kDrained,        ///< `job`'s turn drained at `at` (`waited`: since its gate closed)
    kDrainTimeout,   ///< `job` did not drain within the grace: the next gate opened anyway
  } kind = Kind::kTurnStart;
  JobSerial job = 0;
  std::vector<Uuid> devices;
  Nanos at = 0;
  Nanos waited = 0;
  TurnEnd why = TurnEnd::kExpired;
};

class Scheduler {
 public:
  Scheduler();

  // ---- settings ----
  /// Sets device `dev`'s policy (coloc policy); takes effect at the next tick. Switching a device
  /// away from an exclusive policy opens every gate there at once.
  void set_policy(const Uuid& dev, const PolicySettings& s);
  /// The device's settings (share by default).
  PolicySettings policy(const Uuid& dev) const;
  /// Every device with settings other than the default.
  const std::map<Uuid, PolicySettings>& policies() const { return settings_; }
  /// A job's weight (kMinWeight..kMaxWeight; clamped), default kDefaultWeight.
  void set_weight(JobSerial job, uint32_t weight);
  uint32_t weight(JobSerial job) const;
  /// The job is paused (coloc pause): it takes no turn; a holder's turn ends (it drains first).
  void set_paused(JobSerial job, bool paused);
  /// The job's priority (its controlling policies' input: priority protects `high` jobs).
  void set_priority(JobSerial job, proto::Priority p);
  /// The job ended: forgets it (its turn ends without a drain: its processes are gone).
  void forget_job(JobSerial job);

  // ---- running ----
  /// Advances every exclusive device's state machine to `now`, reading each job's usage through
  /// `usage(job, device)`. Returns whether any gate state changed (then the engine rewrites gates).
  bool tick(Nanos now, const std::function<Usage(JobSerial, const Uuid&)>& usage,
            const std::vector<std::pair<JobSerial, Uuid>>& present);
  /// When the next tick is due (kNever: nothing exclusive is contended).
  Nanos next_tick(Nanos now) const;

  /// The gate state of `job`'s launches on `dev` as the scheduler wants it: on an exclusive
  /// device kWindow for the holder, kTimeslice for everyone else; under a controlling policy what
  /// it wished at the last tick; kRun otherwise (pauses are the engine's: compute/gates.h puts
  /// kPaused over this).
  pages::GateState state(JobSerial job, const Uuid& dev) const;
  /// The in-flight window of `job`'s launches on `dev` in kWindow (ns; 0 = none): the policy's
  /// for a timeslice's holder, the controller's under a controlling policy.
  Nanos window(JobSerial job, const Uuid& dev) const;
  /// The controlling policy's state on `dev` (inactive when the device has none).
  ControlView control_view(const Uuid& dev) const;
  /// When `job`'s turn on `dev` ends (monotonic ns), 0 when it does not hold it.
  Nanos turn_end(JobSerial job, const Uuid& dev) const;
  /// The job holding `dev` now (0 = none).
  JobSerial holder(const Uuid& dev) const;
  /// Events since the last call (turn starts, drains, drain timeouts).
  std::vector<SchedEvent> take_events();

  /// Smallest tick interval while a device is contended (ns): how often drains and idle holders
  /// are looked at (the handover latency is about this plus the holder's drain).
  static constexpr Nanos kTickNs = 1'000'000;
  /// Tick interval while exclusive devices are shared by jobs none of which waits (ns): how soon
  /// the first launch that waits is noticed (a holder that idles then hands over within it).
  static constexpr Nanos kIdleTickNs = 10'000'000;
  /// A holder with nothing in flight that has not launched for this long is idle (ns).
  static constexpr Nanos kIdleNs = 2'000'000;

 private:
  struct JobState {
    uint32_t weight = proto::kDefaultWeight;
    proto::Priority priority = proto::Priority::kNormal;
    Nanos vtime = 0;
    uint64_t order = 0;
    bool paused = false;
    bool skip_next = false;       ///< lost the device on a drain timeout: sits out one turn
    bool holding = false;         ///< its turn is on (its devices are `held`)
    bool draining = false;        ///< its gates are closed; waiting for its drain
    bool active = false;          ///< held or wanted a device at the last tick
    TurnEnd why = TurnEnd::kExpired;
    Nanos turn_start = 0, turn_len = 0, drain_start = 0;
    bool contended = false;       ///< at the last look (`looked`) another job wanted a device of the turn
    Nanos looked = 0;             ///< the last tick that looked at this turn
    Nanos owed = 0;               ///< the turn's contended time so far (what release() charges)
    std::set<Uuid> held;          ///< devices of the current turn
  };
  struct DeviceState {
    std::unique_ptr<ComputePolicy> policy;
    JobSerial owner = 0;          ///< holder or drainer; 0 = free
  };
  DeviceState& device(const Uuid& dev);
  const ComputePolicy& policy_of(const Uuid& dev) const;
  void end_turn(JobSerial job, JobState& j, Nanos now, TurnEnd why);
  void release(JobSerial job, JobState& j, Nanos now, bool timed_out);
  /// Runs the controlling policies' loops; true when a wish changed.
  bool control(Nanos now, const std::function<Usage(JobSerial, const Uuid&)>& usage,
               const std::vector<std::pair<JobSerial, Uuid>>& present);

  std::map<Uuid, PolicySettings> settings_;
  std::map<Uuid, DeviceState> devices_;
  std::map<JobSerial, JobState> jobs_;
  std::map<JobSerial, std::set<Uuid>> present_;  ///< exclusive devices each job is on (last tick)
  std::map<std::pair<JobSerial, Uuid>, GateWish> wishes_;  ///< controlling policies' (last tick)
  Nanos next_control_ = broker::kNever;  ///< the soonest a controlling policy wants a tick
  std::vector<SchedEvent> events_;
  SharePolicy share_;
  bool hot_ = false;  ///< at the last tick a job waited for a device, or a turn drained
  uint64_t next_order_ = 1;
};

}  // namespace coloc::compute
