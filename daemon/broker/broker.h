// daemon/broker/broker.h — the memory broker: the books of every device, job and client, and
// every decision about device memory (admission, growth, waiting, deadlock breaking).
//
// Pure logic over plain state: no sockets, no clock (every call takes `now`), no threads. The
// engine feeds it requests and sends the replies it hands back; tests drive it with a fake clock
// and pages in ordinary memory.
//
// The books
//   device  capacity, headroom, and `outside`: memory used outside coloc, estimated from the
//           engine's own NVML reading (refresh_outside) as capacity - physical free - sum of coloc
//           clients' in-use (stats pages; a just-resumed client's ledger in-use until it has
//           copied its counters). Physical free is the ground truth; client ledgers are checked
//           against it (when they claim more than the device shows used, a known estimate is
//           kept, capped by what the device shows used). Clients' own figures only prompt a
//           reading of such a device; for a device the engine cannot read they are one user's
//           word each, and count under the rule of outside.h (never lowering the estimate,
//           raising it by at most what the user holds unused).
//   job     (uid, id): limit, priority, wait choice; per device: admitted?, its limit there
//           (limit_on: the job's limit, capped by the COLOC_MEM_LIMIT_<n> of the process that
//           admitted it there), reservation (the declared footprint held at admission:
//           min(limit there, capacity - headroom), 0 without one) and granted (sum of its
//           clients' grants and driver overheads).
//   driver overhead  per client and device: what the driver holds for the process beyond its
//           ledger (contexts as the driver sizes them, module images, lazy-loaded kernels), from
//           the driver's per-process figure on the engine's sampling timer (set_overhead;
//           overhead.h), or, until one comes, estimated from the device's free memory right after
//           the process's first context there (context_footprint). It counts like a grant the client cannot use: inside the job's limit (a
//           grow needs need + the job's other grants + its overheads <= limit) and in the job's
//           commitment; it is coloc's memory, not memory used outside coloc.
//   client  one registered connection: its job, its pages, per slot: device and grant. A job's
//           anchor (`coloc run`) is a client that attaches nothing: it keeps the job, and its
//           reservations, alive between the processes of a multi-step command.
//   A job commits max(reservation, granted) on a device. The invariant, checked on every grant:
//       sum of commitments on a device <= capacity - headroom - outside.
//   Memory used outside coloc can grow behind our back; then nothing more is granted on that
//   device until it fits again (grants are never revoked, nothing is killed).
//
// Requests
//   attach  admission at the first context, all listed devices or none. A job already admitted
//           on a device admits its further processes there at once (within its reservation).
//   grow    raise a client's grant to `need`: granted (rounded up to the grant step, within the
//           limit), refused (own limit: at once, never waits), or parked (wait policy).
//   shrink  lower a grant (lazy return of surplus), never below what the client has in use.
//   Parked requests are served in the policy's order; a request never takes memory on a device
//   where one ahead of it in that order waits. They end when served, when their wait timeout passes,
//   when cancelled, or when the deadlock breaker picks their job.
//
// Deadlock (break_deadlock), on a device, checked when a growth parks, a client leaves, the restart
// hold ends, and a refresh lowers the outside estimate:
//   1. every job admitted on the device (with a process there) has a parked growth on it, and
//   2. the request first in the policy's order there (the one everything else waits behind) would
//      not fit even if every byte used outside coloc were freed:
//         outside == 0, or extra > capacity - headroom - committed
//      (extra: what its job must commit beyond its commitment now). Then only the parked coloc
//      jobs can make room, and none of them will: the policy picks a victim (kDeadlockBroken).
//   Otherwise (outside > 0 and extra <= capacity - headroom - committed) the shortfall is covered
//   by memory used outside coloc: failing a coloc job could not help, so the request waits, up to
//   its wait timeout (COLOC_WAIT_TIMEOUT, default 300 s), and is served when a refresh
//   (refresh_outside: a client's figure, or the engine's NVML read on its sampling timer) shows
//   enough of it freed. A timeout there is logged as a timeout waiting for memory used outside
//   coloc (reason kTimeout).
//
// Resume after a restart: a re-registered ledger's in-use moves from the outside estimate back to
// coloc (it was counted outside while no client claimed it); its grant and, at admission, its
// reservation are capped to what the device has left (its commitment may reach its commitment now
// + available), never below its in-use: a job that missed the resume grace cannot over-commit a
// device a newcomer was admitted into meanwhile. Only memory really in use can over-commit it
// (logged; nothing more is granted there until it fits).
//
// Suspension (issue 29; broker_suspend.cpp). The engine's helper checkpoints a job's processes
// (every one, since a checkpoint frees all of a process's GPUs); while it runs (kSuspending) the
// books are as they were. Once every process is checkpointed (end_suspend), the job's grants,
// driver overheads and reservations leave the devices' books (kept aside per slot), so its claims
// count nothing, in the commitments or in the outside formula; its processes are not reconciled
// with the driver's figures (which no longer list them); its parked requests freeze (their wait
// timeouts stop) and hold nothing up, and a request it makes parks frozen. What it needs back on a
// device (restore_need) is what the device held for it before: the driver's figures for its
// processes then (begin_suspend), or its grants and overheads where more. That is a queued restore
// request, not a commitment: it is admitted (check_restores, after every pass over the queue) when
// it fits every device the job used, no request of a higher priority waits there, and the user's
// cap allows; then the need is reserved (kRestoring) while the helper restores, and end_restore
// gives the job its grants and overheads back, and its reservation where that still fits. Until it
// is admitted, no new admission of the same or a lower priority takes memory on those devices
// (backfill included): a suspended job comes back before newcomers that could not have displaced
// it. A limit change, a prediction or a restart's reservation touches only the job's limit while
// it is suspended. A failed restore leaves the job kLost (its reservation released; the driver
// poisons a process whose restore failed for want of memory).
//
// Limit changes (set_limit): lowering lowers the reservation; raising raises it to
// min(new limit, capacity - headroom) when that whole footprint fits now (available memory, the
// user's cap, no request of another job parked on the device), else the reservation stays and the
// job grows beyond it by ordinary grants. The caller learns which (ReservationChange).
#pragma once

#include <map>
#include <set>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/backfill.h"
#include "broker/memory_policy.h"
#include "broker/outside.h"
#include "broker/types.h"
#include "coloc/pages.h"

namespace coloc::broker {

struct BrokerConfig {
  Bytes grant_step = 64ull << 20;              ///< grants move in multiples of this (> 0)
  Nanos default_wait_timeout = 300'000'000'000;  ///< COLOC_WAIT_TIMEOUT default for growth: 300 s
  /// How long an admission waits when its job sets no COLOC_WAIT_TIMEOUT (ns); 0 = for ever (the
  /// job has started nothing on the device, and a queue's estimated start may be hours away).
  Nanos admission_wait_timeout = 0;
  /// EASY backfill of admissions past the head of a device's queue (backfill.h), or strict order.
  backfill::Mode backfill = backfill::Mode::kEasy;
  double headroom_fraction = 0.02;             ///< of each device's capacity, unless headroom_bytes
  std::optional<Bytes> headroom_bytes;         ///< absolute headroom per device
  std::optional<Bytes> max_per_user;           ///< cap on one user's commitments over all devices
};

/// One device's books.
struct Device {
  Uuid uuid;
  Bytes capacity = 0;
  Bytes headroom = 0;
  Bytes outside = 0;            ///< estimate of memory used outside coloc (see above)
  bool outside_known = false;   ///< a physical-free report has arrived
  Nanos outside_at = 0;         ///< when the estimate was made
  Bytes committed = 0;          ///< sum over jobs of max(reservation, granted)
  uint64_t driver_ooms = 0;     ///< driver OOMs reported inside grants
  uint64_t ledger_mismatches = 0;  ///< readings in a row where the same ledgers claimed more than the device showed
  bool mismatch_pending = false;   ///< the last reading showed the ledgers ahead (allocations in flight, or wrong)
  Bytes mismatch_coloc = 0;        ///< coloc's in-use at that reading
  /// (client, slot) pairs attached to this device.
  std::vector<std::pair<ClientId, uint32_t>> attachments;
  /// colocd reads the device's free memory itself (refresh_outside has had a figure): clients'
  /// figures are never used for it then, only as a prompt to read it again.
  bool measured = false;
  /// Until then: the clients' figures, per user (outside.h).
  OutsideFigures figures;
  /// The driver's per-process list at colocd's last reading (reconcile_device), whether there is
  /// one (false: none yet, or the driver cannot tell), and whether its pids are colocd's (not
  /// another PID namespace's). The processes it lists that are not attached to the device are
  /// memory used outside coloc, whatever the ledgers say (refresh_outside's floor).
  std::vector<ProcessFigure> processes;
  Nanos processes_at = 0;  ///< when that list was read (reconcile_device's `now`)
  bool processes_known = false;
  bool processes_ours = false;
  bool capacity_measured = false;  ///< capacity is colocd's own reading (NVML)
  bool capacity_open = false;      ///< no process is attached: the next client's word sets it
  /// What the device promised the head of its queue when the first admission went ahead of it
  /// (backfill.h): the earliest finite shadow time of those backfills. Stale once that head is
  /// served; an overrun stops backfill there until then.
  backfill::Promise promise;
  /// The promise as it was before a colocd restart (restore_promise): the head's job and its
  /// shadow time. The head's request comes back as a new one, so it is known by its job: while
  /// that job's admission is the head and waits past the shadow time, nothing goes ahead of it.
  std::optional<std::pair<JobKey, Nanos>> restored_promise;
};

/// A job's standing on one device.
struct JobDevice {
  bool admitted = false;
  /// The cap on the job's limit here (bytes, kNoLimit = none): the AttachRequest::cap of the
  /// process whose admission admitted the job on the device (after a restart, the lowest of the
  /// limits its re-registered processes saw there below the job's: resume). Its
  /// limit here is min(Job::limit, cap) (Broker::limit_on).
  Bytes cap = kNoLimit;
  Bytes reserved = 0;
  Bytes granted = 0;   ///< sum of its clients' grants and driver overheads on the device
  Bytes overhead = 0;  ///< sum of its clients' driver overheads on the device (part of granted)
  uint32_t clients = 0;  ///< its clients attached to the device
  Nanos admitted_at = 0;
  uint64_t growths = 0;  ///< growth requests granted on the device since admission (raising a grant)
  Footprint source = Footprint::kNone;  ///< where `reserved` came from
  /// The job's online prediction of its peak here (bytes; 0 = none yet): the sum of its
  /// processes' stable predictions, as set_prediction last saw it. Shown, and the reservation when
  /// nothing of higher precedence set one.
  Bytes predicted = 0;
  /// When the job is expected to end (ns): admission + the median time from admission to end of
  /// its fingerprint's clean runs on the device's model (AttachNeed::run); kNever = not known.
  Nanos expected_end = kNever;
  /// Its reservation when it was suspended (end_suspend): given back at the restore where it fits.
  Bytes saved_reserved = 0;
  /// It was admitted ahead of the head of the device's queue (backfill.h), and how.
  bool backfilled = false;
  backfill::Verdict backfill_verdict = backfill::Verdict::kWouldDelay;
};

struct Job {
  JobSerial serial = 0;
  JobKey key;
  Priority priority = Priority::kNormal;
  OnFull on_full = OnFull::kWait;
  Bytes limit = kNoLimit;
  Nanos wait_timeout = 0;
  /// How long its admissions wait (ns; 0 = for ever): its own COLOC_WAIT_TIMEOUT, else
  /// BrokerConfig::admission_wait_timeout when it started.
  Nanos admission_wait_timeout = 0;
  uint64_t age = 0;
  Nanos started = 0;
  std::map<uint32_t, JobDevice> devices;  ///< by device index
  std::vector<ClientId> clients;
  /// Its registered anchors (ClientSpec::anchor): while > 0, a device its last attached process
  /// leaves keeps the job's standing there (admitted, reservation held, nothing granted).
  uint32_t anchors = 0;
  /// Its declared estimate per device (bytes; 0 = none): the ClientSpec::estimate of the first of
  /// its clients that declared one. Its reservation at a first admission on a device where it has
  /// no limit and no history (footprint_for).
  Bytes estimate = 0;
  /// Its suspension (types.h), and when its books were released (end_suspend; ns).
  Suspension suspension = Suspension::kNone;
  Nanos suspended_at = 0;
  /// Its restore waits for `coloc resume` (a suspension a user asked for), not for room alone: it
  /// is not queued, and holds up no admission, until release_restore.
  bool restore_held = false;
  /// When its restore request queued (end_suspend, or release_restore of a held one; ns): restores
  /// of one priority are admitted in this order.
  Nanos restore_since = 0;
  /// It was cancelled (Broker::cancel_job, `coloc cancel`): from then on it gets no admission and
  /// nothing that would wait; a growth that fits at once is still granted (a job that catches the
  /// signal may save its state). Not saved across a restart (neither is the pending SIGKILL).
  bool cancelled = false;
};

struct ClientSlot {
  bool attached = false;
  uint32_t device = 0;  ///< device index
  Bytes grant = 0;
  /// After a resume, the in-use the ledger claimed: a grant is not lowered below it until the
  /// client's first request (by then it has copied its counters into the new stats page).
  Bytes floor = 0;
  /// The driver's figure for the process on the device minus its ledger's in-use, at the last
  /// reconciliation (bytes, >= 0; set_overhead). Counted in its job's granted.
  Bytes overhead = 0;
  Bytes overhead_reading = 0;  ///< the last reading (set_overhead)
  /// `overhead` came from the process's context footprint (context_footprint), not from a
  /// per-process figure of the driver: a reading that does not name the process keeps it.
  bool overhead_estimated = false;
  /// Admitted by this connection's own Attach: its first ContextFootprint is still to come.
  bool footprint_due = false;
  /// At that admission colocd knew the device's use: `outside_before` was memory used outside
  /// coloc then (bytes; see context_footprint), the baseline of the footprint.
  bool baseline_known = false;
  Bytes outside_before = 0;
  /// What its stats page claims beyond the driver's per-process figure (bytes; reconcile_device):
  /// the smaller of the last two readings (one can catch an allocation in flight). The page's
  /// figure minus this is what its claim counts (client_in_use): memory the driver does not hold
  /// for the process is not coloc's, whatever the page says.
  Bytes excess = 0;
  Bytes excess_reading = 0;  ///< the last reading's
  /// What its stats page claimed beyond what it can hold (its grant, or the driver's figure for
  /// the process where that is more) and Broker::kOverclaimSlack, at both of the last two
  /// readings (the smaller): 0 for an honest client, whose ledger charges within its grant before
  /// the driver call and force-charges only memory the driver already gave. Shown in `coloc
  /// status` (a job's `overclaimed`).
  Bytes overclaim = 0;
  Bytes overclaim_reading = 0;  ///< the last reading's
  /// While its job is suspended (broker.h, "Suspension"): its grant and driver overhead before,
  /// given back at the restore, and the driver's figure for the process then (kUnknown: none).
  Bytes saved_grant = 0;
  Bytes saved_overhead = 0;
  Bytes saved_used = kUnknown;
};

struct Client {
  ClientId id = 0;
  JobSerial job = 0;
  uint32_t uid = 0;
  int32_t pid = 0;
  pages::ControlPage* control = nullptr;
  pages::StatsPage* stats = nullptr;
  bool anchor = false;  ///< the job's anchor (ClientSpec::anchor)
  std::array<ClientSlot, pages::kSlots> slots{};
};

/// What a limit change did to a job's reservation on one device (Broker::set_limit).
struct ReservationChange {
  enum Outcome {
    kUnchanged,       ///< the footprint did not change
    kLowered,         ///< lowered with the limit
    kRaised,          ///< raised with the limit (it fitted)
    kKeptNoRoom,      ///< raise wanted, but the device has too little available memory now
    kKeptUserCap,     ///< raise wanted, but it would pass the user's cap
    kKeptOthersWait,  ///< raise wanted, but requests of other jobs wait for memory on the device
  };
  uint32_t device = 0;
  Outcome outcome = kUnchanged;
  Bytes before = 0;     ///< reservation before (bytes)
  Bytes after = 0;      ///< reservation after (bytes)
  Bytes wanted = 0;     ///< min(limit, capacity - headroom) (bytes)
  Bytes available = 0;  ///< the device's available memory when a raise was considered (bytes)
};

/// One device of a parked admission: its index, the bytes needed at once, the process's cap there,
/// the job's footprint there from its history (0 = none).
struct AttachNeed {
  uint32_t device = 0;
  Bytes request = 0;
  Bytes cap = kNoLimit;
  Bytes estimate = 0;
  Nanos run = 0;  ///< AttachRequest::run
};

struct Waiter {
  uint64_t order = 0;
  ClientId client = 0;
  uint32_t seq = 0;
  JobSerial job = 0;
  bool admission = false;
  Nanos since = 0;
  Nanos deadline = kNever;
  /// False when only its user's cap holds it: then it does not hold up other users' requests.
  bool device_short = true;
  // growth
  uint32_t slot = 0;
  Bytes need = 0;
  Bytes in_use = kUnknown;  ///< growth: the client's in-use when it asked (Broker::grow)
  // admission: its devices, in request order
  std::vector<AttachNeed> devices;
  /// Its job is suspended: it holds nothing up, is never served, and its wait is stopped with
  /// `left` ns to go (kNever: no deadline), until the restore.
  bool frozen = false;
  Nanos left = kNever;
};

class Broker {
 public:
  /// Parked requests one client may have at once; more are refused (kBadRequest).
  static constexpr size_t kMaxParkedPerClient = 64;

  Broker(BrokerConfig config, const MemoryPolicy& policy);

  // ---- clients --------------------------------------------------------------------------------

  /// Registers a client under job (spec.uid, spec.job_id), creating the job (kJobStarted) if it
  /// has no live client. A job's settings come from its first client; a later client's limit
  /// does not change them (its own lower COLOC_MEM_LIMIT holds in its own process). `control` and `stats` are the client's pages: the broker writes the
  /// control page's words and reads the stats page's in_use; both must stay valid until
  /// remove_client. Returns the new client's id.
  ClientId add_client(const ClientSpec& spec, pages::ControlPage* control, pages::StatsPage* stats, Nanos now);

  /// Re-registration after a daemon restart: entry i becomes slot i, admitted, with the grant the
  /// client held (at least its in-use rounded up to the grant step; in-use is clamped to what the
  /// device's physical free memory allows, and to the driver's figure for the process where
  /// there is one: ResumeEntry::driver_used). Accepted even when it over-commits the device, for
  /// memory known to be in use: the driver's figure, or the ledger of a process the restart
  /// `expected` (registered with the previous colocd: its saved clients). Any other
  /// re-registration (a client's word only) gets no more than fits, within its job's limit, and
  /// the rest of its claim counts as memory used outside coloc. The job's limit is not changed by
  /// a ledger; a limit an entry saw below it (a cap there, or a lowering the daemon did not save)
  /// caps the job on that device. Call right after add_client.
  void resume(ClientId id, std::span<const ResumeEntry> ledger, Nanos now, bool expected = true);

  /// Drops a client (gone: hung up, exited, or killed): its parked requests vanish without reply,
  /// its grants are released, and its job ends (kJobEnded) when it was the job's last client.
  /// The job's reservation on a device goes when its last client attached there leaves, unless
  /// the job has an anchor left; when its last anchor leaves, the reservations of devices no
  /// process of the job is attached to go with it.
  void remove_client(ClientId id, Nanos now);

  // ---- requests (each produces exactly one Reply, now or later, except shrink/driver_oom/cancel)

  /// Admission at the first context on `devices` (1..16, distinct, not yet attached by this client).
  void attach(ClientId id, uint32_t seq, std::span<const AttachRequest> devices, Nanos now);
  /// Raise the grant on `slot` to `need` bytes. `physical_free` (or kUnknown) refreshes the device.
  /// `in_use` is what the client had in use on the slot when it asked (Grow's in_use; kUnknown:
  /// its stats page's figure then): a refusal's event records it, so that its request is exactly
  /// `need - in_use` however the client's use changes while it waits.
  void grow(ClientId id, uint32_t seq, uint32_t slot, Bytes need, Bytes physical_free, Nanos now,
            Bytes in_use = kUnknown);
  /// Lower the grant on `slot` to `keep` bytes (never below in-use rounded up to the step).
  void shrink(ClientId id, uint32_t slot, Bytes keep, Nanos now);
  /// The driver failed an allocation inside a grant: count, log, refresh the device. `in_use` is
  /// what the client reports it holds on the slot (without the failed request); the outside
  /// estimate takes the smaller of it and the stats page's figure (which may still count the
  /// failed request), so the failed request is not mistaken for coloc memory.
  void driver_oom(ClientId id, uint32_t slot, Bytes request, Bytes in_use, Bytes physical_free, Nanos now);
  /// Answer the parked request `target_seq` of this client with kCancelled (no-op if not parked).
  void cancel(ClientId id, uint32_t target_seq, Nanos now);
  /// `coloc cancel`: answers every parked request of the job (admissions and growth, on every
  /// device) with kCancelled, so that it leaves the queue at once, and serves the queue behind it.
  /// Returns how many requests it answered (0: it waited for nothing).
  size_t cancel_job(JobSerial job, Nanos now);
  /// After a restart: what the queue knew of `job` on `dev` (its expected end, ns, kNever = not
  /// known; whether it went ahead of the queue there). False when the job is not admitted there.
  bool restore_queue_state(JobSerial job, uint32_t dev, Nanos expected_end, bool backfilled);
  /// After a restart: the promise device `dev` made to the head of its queue (its job, its shadow
  /// time in ns); the earlier shadow wins when several restored jobs carry one.
  void restore_promise(uint32_t dev, const JobKey& head, Nanos shadow);
  /// What to save of device `dev`'s promise: the head's job and the shadow time; nullopt when it
  /// made none (or its head no longer waits).
  std::optional<std::pair<JobKey, Nanos>> promise_of(uint32_t dev) const;

  // ---- admin ----------------------------------------------------------------------------------

  /// Live limit change for a job (bytes > 0, or kNoLimit). Lowering it below what the job holds
  /// refuses further growth and trims each client's grant to its in-use; nothing is killed; the
  /// reservation drops to min(limit, capacity - headroom). Raising it raises the reservation to
  /// min(new limit, capacity - headroom) on each device where that whole footprint fits now
  /// (available memory, the user's cap, and no request of another job waiting on the device);
  /// elsewhere the reservation stays and the job grows beyond it by ordinary grants. `changes`
  /// (optional) receives what happened to the reservation on each admitted device.
  /// False when the job does not exist.
  bool set_limit(JobSerial job, Bytes limit, Nanos now, std::vector<ReservationChange>* changes = nullptr);
  /// Live priority change. False when the job does not exist.
  bool set_priority(JobSerial job, Priority priority, Nanos now);

  /// The job's online prediction of its peak on `device` (an index into devices(); bytes, > 0):
  /// the sum of its processes' stable predictions there. Kept for the books (JobDevice::predicted)
  /// and, where the job's reservation there is not a declared limit (history's, its declared
  /// estimate's, its own earlier prediction, or none), raised to: a history estimate (or a declared
  /// one) below what this run shows it needs is too
  /// low for this run. The reservation follows a higher prediction when the whole raise fits now
  /// (available memory, the user's cap, no other job's request waiting there), else it stays
  /// (kKept*, and the job grows by ordinary grants, as before; nothing is ever failed for it).
  /// A prediction never lowers a reservation. False when the job is not admitted there; else
  /// true, with *change (optional) saying what happened (kUnchanged when nothing did).
  bool set_prediction(JobSerial job, uint32_t device, Bytes predicted, Nanos now, ReservationChange* change = nullptr);
  /// After a restart: the job's reservation on `device` came from `source` (history, estimate or online)
  /// and was `bytes`: raised back to it when the whole raise fits now (else kept, as
  /// set_prediction), unless a declared limit holds there. False when the job is not admitted.
  bool restore_reservation(JobSerial job, uint32_t device, Bytes bytes, Footprint source, ReservationChange* change = nullptr);

  // ---- suspension (issue 29; broker_suspend.cpp; see "Suspension" above) --------------------------

  /// The helper is about to lock and checkpoint the job's processes: keeps, per process and device,
  /// the driver's last figure for it (what its restore will need) and marks the job kSuspending.
  /// `held`: its restore is to wait for release_restore (`coloc suspend`), not for room alone (a
  /// preemption). False (nothing changed) when the job is unknown or not running (kNone).
  bool begin_suspend(JobSerial job, Nanos now, bool held = false);
  /// `coloc resume` of a held suspension: its restore request queues from now on. False when the
  /// job is unknown or not suspended (kSuspending, kSuspended).
  bool release_restore(JobSerial job, Nanos now);
  /// The helper finished. `ok`: every process is checkpointed: the job's books leave the devices
  /// (kSuspended), its parked requests freeze, and what then fits is served. Else nothing changed
  /// (kNone again). Ignored unless the job is kSuspending.
  void end_suspend(JobSerial job, bool ok, Nanos now);
  /// Jobs whose restore was admitted since the last call (kRestoring; their need is reserved): the
  /// engine runs the helper for each and calls end_restore. Cleared by the call.
  std::vector<JobSerial> take_restores();
  /// The restore helper finished. `ok`: the job runs again (kNone): its grants and overheads come
  /// back, its reservation where it fits, its parked requests thaw with the wait they had left.
  /// Else its reservation is released and it is kLost. Ignored unless the job is kRestoring.
  void end_restore(JobSerial job, bool ok, Nanos now);
  /// What the job's restore needs on `device` (bytes): over its processes attached there, the
  /// driver's figure for each before the checkpoint, or its grant and overhead where more. 0 when it
  /// is not suspended there.
  Bytes restore_need(const Job& job, uint32_t device) const;
  /// True when the job's memory is off the device's books (kSuspended, kRestoring, kLost).
  static bool off_books(const Job& job) {
    return job.suspension == Suspension::kSuspended || job.suspension == Suspension::kRestoring ||
           job.suspension == Suspension::kLost;
  }
  /// The suspended job (if any) whose queued restore keeps an admission of a job of priority
  /// `priority` (not `self`) off `device`: the first by priority, then suspension time. 0: none.
  JobSerial restore_ahead(uint32_t device, Priority priority, JobSerial self) const;

  // ---- the device's own view -------------------------------------------------------------------

  /// A physical-free figure of `device` (an index into devices(); bytes, kUnknown = none) that
  /// colocd read itself (NVML): trusted. Re-estimates the memory used outside coloc as capacity -
  /// physical free - sum of coloc in-use, and serves waiters if the estimate fell. When the
  /// clients' in-use figures add up to more than the device shows used (a ledger is wrong, or
  /// allocations are in flight), a known estimate is not dropped to zero on their word: it is
  /// only capped by what the device shows used (so it reaches zero when the device shows nothing
  /// used). From then on the device is `measured`: clients' figures for it only prompt a new
  /// reading (take_short_devices). The driver's list of processes not attached to the device
  /// floors the estimate only when it was read with this figure (reconcile_device at the same
  /// `now`, as the sample does): an older list may name a process that has ended since, and a
  /// prompted reading in between keeps the floor the last sample set only through the estimate
  /// it kept. Unknown device index: ignored.
  void refresh_outside(uint32_t device, Bytes physical_free, Nanos now);
  /// A reading of client `id`'s driver overhead on `slot` (bytes: the driver's per-process figure
  /// minus the client's ledger, see overhead.h), booked as settle_overhead says (a higher one at
  /// once, a lower one once the previous reading agrees). It is charged to the job inside its
  /// limit: when the job's grants and overheads now pass its limit, its clients' grants on the
  /// device are trimmed to their in-use (so the next allocation asks, and is refused at its own
  /// limit); a lower overhead serves waiters. Unknown client or unattached slot: ignored.
  void set_overhead(ClientId id, uint32_t slot, Bytes overhead, Nanos now);
  /// colocd's reading of the driver's per-process figures on `device` (an index into devices();
  /// nullptr: the driver cannot tell, and what is booked stays, but no process counts as outside
  /// until a list comes again). `ours`: the list's pids are the ones colocd knows processes by
  /// (the engine checks that they are processes of its own PID namespace); else nothing is learnt
  /// from what it does not name. Kept for refresh_outside, and reconciled with each attached
  /// client's books (a process with several attachments shares its figure among them, in order):
  ///   claim     = min(page - excess, grant)   (client_in_use; the page: its ledger's in-use)
  ///   overhead  = figure - min(page, grant)   (set_overhead: the driver's memory for the process
  ///                                            beyond what its ledger holds within its grant)
  ///   excess    = page - figure               (the smaller of the last two readings)
  ///   overclaim = page - max(grant, figure) - kOverclaimSlack  (the smaller of the last two
  ///                                            readings; logged, shown)
  /// A client the list does not name holds nothing there (figure 0), unless its overhead was
  /// estimated from its context footprint (overhead.h). Unknown device: ignored.
  void reconcile_device(uint32_t device, const std::vector<ProcessFigure>* processes, Nanos now, bool ours = true);
  /// A page may claim this much (bytes) above both its grant and the driver's figure without
  /// being an overclaim: one context's charge (COLOC_CONTEXT_BYTES' default), which the ledger
  /// force-charges for a primary context the driver may make smaller.
  static constexpr Bytes kOverclaimSlack = 512ull << 20;
  /// The process's first context on `slot`'s device exists (ContextFootprint): `physical_free` is
  /// the device's free memory right after its creation (bytes; colocd's own reading when
  /// `measured`, else the client's word; kUnknown = none), `in_use` what its ledger held then
  /// (its context's charge included). When colocd knew the device's use at the admission (the
  /// baseline: memory used outside coloc then, as colocd read it, or on a device it cannot read
  /// the most any held client figure implied: OutsideFigures::highest), the driver overhead is
  ///     (capacity - physical_free) - outside then - coloc's in-use now (overheads included)
  /// i.e. the device's use now minus its use then, minus what coloc's books gained meanwhile:
  /// approximate (anything allocated outside coloc in that window counts too). It is booked like
  /// a set_overhead reading, but never above what the job could have been granted (its limit on
  /// the device minus its grants there, the device's available memory plus its unused
  /// reservation, and its user's room under max_per_user plus that reservation), since the
  /// process's in-use is its own word. A later per-process figure of the
  /// driver replaces it. Only the first footprint after an Attach counts; the figure then
  /// refreshes the device's outside estimate like any other. Unknown client or slot: ignored.
  void context_footprint(ClientId id, uint32_t slot, Bytes physical_free, Bytes in_use, bool measured, Nanos now);
  /// Writes into each attached client's control page what its job holds on the device beyond the
  /// client's own in-use (pages.h: ControlSlot::job_others): the other clients' in-use and every
  /// driver overhead of the job. O(attachments); on the engine's sampling timer, and for one
  /// device whenever a driver overhead there is booked (so the job's view never lags its books).
  void publish_job_others();
  void publish_job_others(uint32_t device);
  /// Sum of the attached clients' driver overheads on `device` (bytes).
  Bytes overhead(uint32_t device) const;

  /// Devices where an attach or grow since the last call found too little room (it parked or was
  /// refused device-full), each once, in order: the engine re-reads their physical free memory
  /// (the estimate of outside use may be stale). Cleared by the call.
  std::vector<uint32_t> take_short_devices();

  // ---- time -----------------------------------------------------------------------------------

  /// Ends waits whose timeout passed and a hold whose time is up; serves what then fits.
  void tick(Nanos now);
  /// The earliest time tick() has work to do (kNever when none).
  Nanos next_deadline() const;
  /// After a restart: until `until` (or end_hold), requests that need more device memory park,
  /// so that clients re-registering their grants find the memory they had.
  void hold_until(Nanos until);
  void end_hold(Nanos now);
  bool holding() const { return hold_until_ != 0; }

  /// colocd's settings were reloaded (SIGHUP): the headroom (recomputed on every device), the
  /// per-user cap and the default wait timeout (for jobs that start from now on) change now, and
  /// parked requests are looked at again (a smaller headroom or a higher cap may let them in).
  /// The grant step is kept (grants given are multiples of it). A larger headroom takes back no
  /// grant: it holds new ones until enough memory frees.
  void reconfigure(const BrokerConfig& config, Nanos now);

  // ---- outputs --------------------------------------------------------------------------------

  /// Replies to send, in the order decided (cleared by the call).
  std::vector<Reply> take_replies();
  /// Events for reports and logs, in order (cleared by the call).
  std::vector<Event> take_events();

  // ---- inspection -----------------------------------------------------------------------------

  const BrokerConfig& config() const { return config_; }
  const MemoryPolicy& policy() const { return policy_; }
  const std::vector<Device>& devices() const { return devices_; }
  const std::map<JobSerial, Job>& jobs() const { return jobs_; }
  const std::unordered_map<ClientId, Client>& clients() const { return clients_; }
  const std::vector<Waiter>& waiters() const { return waiters_; }
  const Job* find_job(const JobKey& key) const;
  const Client* find_client(ClientId id) const;
  /// The pids of the processes attached to `device` (an index into devices(); none beyond it).
  std::set<int32_t> attached_pids(uint32_t device) const;
  std::optional<uint32_t> find_device(const Uuid& uuid) const;
  /// The headroom the config gives a device of `capacity` bytes: headroom_bytes (at most the
  /// capacity), else headroom_fraction of it.
  Bytes headroom_for(Bytes capacity) const;

  /// The job's limit on `device` (bytes, kNoLimit = none): min(Job::limit, JobDevice::cap).
  Bytes limit_on(const Job& job, uint32_t device) const;

  /// capacity - headroom - outside (saturating at 0).
  Bytes usable(uint32_t device) const;
  /// usable - committed (saturating at 0).
  Bytes available(uint32_t device) const;
  /// Sum of the attached clients' in-use (client_in_use) on `device` (bytes).
  Bytes in_use(uint32_t device) const;
  /// What a client's claim on a slot counts for the books (bytes): its ledger's in-use
  /// (ledger_in_use) less what it claims beyond the driver's figure for the process (the slot's
  /// excess), and never more than colocd granted it there (its grant, or its resume floor): the
  /// ledger charges within the grant before each driver call, so anything above is not coloc's
  /// memory. A lying stats page spoils only its own job's figures.
  Bytes client_in_use(const Client& c, uint32_t slot) const;
  /// What the client's ledger says it holds on a slot (bytes, its word, clamped to the device's
  /// capacity): its stats page, or, after a resume and until its first request (by then it has
  /// copied its counters into the new stats page), the in-use its resumed ledger claimed (the
  /// floor), whichever is more.
  Bytes ledger_in_use(const Client& c, uint32_t slot) const;
  /// Sum over the job's clients of what their stats pages claim beyond what they can hold
  /// (ClientSlot::overclaim; bytes, 0 for an honest job).
  Bytes overclaimed(const Job& job) const;
  /// Sum of a user's commitments over all devices.
  Bytes user_committed(uint32_t uid) const;
  /// True when `job` has a parked growth request on `device`.
  bool parked_on(JobSerial job, uint32_t device) const;

  /// One waiting request on a device as `coloc status`, `jobs`, `top`, reports, /metrics and the
  /// client's control page show it (queue()).
  struct QueueEntry {
    const Waiter* waiter = nullptr;  ///< valid until the broker's next change
    uint32_t position = 0;           ///< 1-based, in the policy's order on the device
    proto::WaitReason reason = proto::WaitReason::kNone;
    JobSerial blocker = 0;  ///< kPriority, kQueue: the job of the request first in line there
    Bytes need = 0;         ///< what it must commit there beyond what its job commits now (bytes)
    Bytes missing = 0;      ///< kResources, kOutside: need - available (bytes)
    /// Its estimated start (ns, this clock; kNever: not known): backfill::project in strict order,
    /// from the expected ends of the jobs there; the head's shadow time for the first in line.
    Nanos start = kNever;
  };
  /// The requests waiting on `device` (admissions listing it, growths of slots there), in the
  /// policy's order, each with its reason (proto::WaitReason): kRestart while holding; kUserCap
  /// for one only its user's cap holds; the first in line, kOutside when it would fit were the
  /// memory used outside coloc freed, else kResources; behind it, kPriority when that one's job
  /// has a higher priority, else kQueue. Empty for an unknown device.
  std::vector<QueueEntry> queue(uint32_t device, Nanos now) const;
  /// What a waiting admission `w` would reserve on `device` at admission, and where that comes
  /// from (Footprint::kNone: nothing known; it asks its request, one CUDA context). {0, kNone} for
  /// a growth request or a device it does not list.
  std::pair<Bytes, Footprint> waiting_footprint(const Waiter& w, uint32_t device) const;

  /// Recomputes every sum from scratch and compares it with the books; returns "" when all agree,
  /// else a description of the first difference. (Tests; the engine asserts it in debug runs.)
  std::string audit() const;

 private:
  struct Decision;
  Job& job_of(const Client& c);
  /// The device `uuid`, made on first sight. `capacity` is colocd's own reading when `measured`
  /// (then it is the books' capacity from now on), else client `c`'s word: it sets the capacity
  /// of a device no process is attached to, and otherwise can only lower it.
  uint32_t device_for(const Uuid& uuid, Bytes capacity, bool measured, const Client& c, Nanos now);
  /// A client's physical-free figure (Attach, Grow, DriverOom): on a measured device a prompt to
  /// read it again; else one user's figure under the rule of outside.h. The in-use of (reporter,
  /// slot) is taken as min(stats page, `reported_in_use`); `request` is a driver OOM's failed
  /// request inside the grant (0 otherwise), part of what the reporter can show missing.
  void report_outside(uint32_t device, Bytes physical_free, Nanos now, const Client& reporter, uint32_t slot,
                      Bytes reported_in_use, Bytes request);
  /// Sum of coloc's in-use on `d` (resume floors and driver overheads included), with the reporter's figure as above.
  Bytes coloc_in_use(const Device& d, const Client* reporter, uint32_t slot, Bytes reported_in_use) const;
  void note_mismatch(Device& d, Bytes coloc, Bytes used);
  /// Memory the driver's last process list shows held on `d` by processes not attached to it
  /// (bytes; 0 when there is no list, or its pids are not colocd's).
  Bytes listed_outside(const Device& d) const;
  /// One reading of client `c`'s slot against the driver's figure (reconcile_device).
  void reconcile_client(Client& c, uint32_t slot, bool listed, Bytes figure, Nanos now);
  /// Sets the estimate; a lower one serves waiters (and may break a deadlock hidden behind it).
  void set_outside(uint32_t device, Bytes outside, Nanos now);
  void note_short(uint32_t device);
  /// Books `overhead` (bytes) as client `c`'s driver overhead on `slot` (see set_overhead).
  void book_overhead(Client& c, uint32_t slot, Bytes overhead, const char* source, Nanos now);
  /// The footprint a job reserves on a device where its limit is `limit`: min(limit,
  /// capacity - headroom), 0 without a limit.
  Bytes reservation_for(Bytes limit, const Device& dev) const;
  /// The reservation at a job's first admission on a device: its declared limit there if any,
  /// else its history's estimate `history` (0 = none), else its declared estimate `declared` (0 =
  /// none), within capacity - headroom; and where it came from.
  std::pair<Bytes, Footprint> footprint_for(Bytes limit, Bytes history, Bytes declared, const Device& dev) const;
  /// Raises job's reservation on `dev` to `wanted` if the whole raise fits now (see set_limit);
  /// the outcome, before/after filled in.
  ReservationChange try_raise(Job& job, uint32_t dev, Bytes wanted);
  void set_job_device(Job& job, uint32_t device, Bytes reserved, Bytes granted);
  void write_grant(Client& c, uint32_t slot, Bytes grant);
  Bytes lower_grant(Client& c, uint32_t slot, Bytes target);
  void trim_job(Job& job, uint32_t device);
  void clear_floors(Client& c);
  /// True when `w` waits on `device` (an admission listing it, or a growth of a slot there).
  bool waits_on(const Waiter& w, uint32_t device) const;
  /// What the policy sees of `w`: its job's priority, arrival order, admission, reservation.
  WaiterView view_of(const Waiter& w) const;
  bool waits_ahead(uint32_t device, const WaiterView& me, ClientId except_client, uint32_t except_seq) const;
  /// True when a growth request of a running job waits on `device` ahead of `me` in the policy's order.
  bool growth_waits_ahead(uint32_t device, const WaiterView& me) const;
  /// The backfill rule (backfill.h) for an admission of `job` on `dev` that needs `extra` more
  /// bytes committed there (`need`: its footprint there and whether it is known, its expected run)
  /// past `head`, the request first in line there. `growth_ahead`: a growth request waits ahead of
  /// it there (then it never goes ahead). Never lets anything ahead with backfill off, while
  /// holding after a restart, or once the device's promise to that head is overrun.
  struct BackfillCheck {
    bool ahead = false;
    backfill::Verdict verdict = backfill::Verdict::kWouldDelay;
    backfill::Shadow shadow;
  };
  BackfillCheck check_backfill(uint32_t dev, const Waiter& head, bool growth_ahead, const Job& job, const AttachNeed& need,
                               Bytes extra, Nanos now) const;
  /// `job` went ahead of the head (its arrival number `head`) on `dev` as `check` said: marks its
  /// standing there and keeps the device's promise to that head (the earliest finite shadow time).
  void note_backfill(uint32_t dev, uint64_t head, Job& job, const BackfillCheck& check, Nanos now);
  Decision decide_grow(Client& c, uint32_t slot, Bytes need, Nanos now, bool queued);
  Decision decide_attach(Client& c, const std::vector<AttachNeed>& devs, Nanos now, bool queued);
  void grant_attach(Client& c, uint32_t seq, const std::vector<AttachNeed>& devs,
                    const std::vector<Bytes>& grants, Nanos waited, Nanos now);
  /// Parks `w`; false (nothing parked) when the client already has kMaxParkedPerClient waiting.
  bool park(Client& c, Waiter w, Nanos now);
  void answer_waiter(size_t index, bool granted, Reason reason, Nanos now);
  void pump(Nanos now);
  /// Admits the restores that fit now (see "Suspension"); called at the end of every pump().
  void check_restores(Nanos now);
  /// True when `w` belongs to a job whose books are off the devices (a frozen request).
  bool is_frozen(const Waiter& w) const { return w.frozen; }
  void break_deadlock(uint32_t device, Nanos now);
  /// Bytes the job of `w` must commit on `device` beyond what it commits now to serve `w`.
  Bytes extra_need(const Waiter& w, uint32_t device) const;
  /// The parked request first in the policy's order on `device` (device-short ones only), or null.
  const Waiter* head_waiter(uint32_t device) const;
  /// True when `w` waits for memory used outside coloc: some is (outside > 0) and `w` would fit
  /// in capacity - headroom - committed without it.
  bool waits_for_outside(const Waiter& w, uint32_t device) const;
  /// `asked_in_use`: a growth's in-use when it was asked (kUnknown: the stats page's now).
  void refuse(Client& c, uint32_t seq, Reply::Kind kind, uint32_t slot, Reason reason, Bytes bytes,
              std::optional<uint32_t> device, Nanos waited, Nanos now, Bytes asked_in_use = kUnknown);
  void event(Event::Kind kind, const Job& job, Nanos now, std::optional<uint32_t> device = std::nullopt,
             bool admission = false, Reason reason = Reason::kNone, Bytes bytes = 0, Bytes in_use = 0);

  BrokerConfig config_;
  const MemoryPolicy& policy_;
  std::vector<Device> devices_;
  std::map<Uuid, uint32_t> device_index_;
  std::map<JobSerial, Job> jobs_;
  std::map<JobKey, JobSerial> job_index_;
  std::unordered_map<ClientId, Client> clients_;
  std::map<uint32_t, Bytes> user_committed_;
  std::vector<Waiter> waiters_;
  std::vector<Reply> replies_;
  std::vector<Event> events_;
  std::vector<uint32_t> short_devices_;
  std::vector<JobSerial> restores_;  ///< admitted restores for the engine (take_restores)
  ClientId next_client_ = 1;
  JobSerial next_job_ = 1;
  uint64_t next_order_ = 1;
  Nanos hold_until_ = 0;
};

}  // namespace coloc::broker
