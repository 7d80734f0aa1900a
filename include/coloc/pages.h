// coloc/pages.h — layouts of the two shared pages colocd hands each registered process (as memfd
// file descriptors with SCM_RIGHTS on the RegisterReply; see protocol.h).
//
// Control page: written by the daemon, mapped read-only by the client.
//   The daemon creates it with memfd_create(MFD_ALLOW_SEALING), maps it writable, then seals it
//   with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL: from then on nobody can
//   map it writable, mprotect a mapping writable, write(2) to it or change its size, so the job
//   cannot raise its own limit or grant. The client maps it PROT_READ, MAP_SHARED.
//   Daemon writes: magic, layout version, slot count and epoch once before sending; the gates
//   whenever they change (the launch gate, below); the job's priority when it
//   changes (coloc set); per slot, uuid then
//   `attached` (release) when the device is attached, `limit` when the job's limit changes
//   (coloc set), `grant` when the grant grows (before the GrowReply is sent) or shrinks.
//
// Stats page: written by the client, read by the daemon.
//   The daemon creates it the same way but seals only F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
//   (so a client cannot truncate it under the daemon's mapping), and maps it read-write; the
//   client maps it PROT_READ | PROT_WRITE, MAP_SHARED. The daemon treats every value as untrusted
//   (it clamps, and checks them against the device's physical free memory).
//
// The allocation fast path and the grant (the one rule both sides depend on)
//   The client keeps its bytes in use on a device in its stats slot's `in_use`, and admits an
//   allocation of `size` bytes without a message only like this:
//       uint64_t now = stats.in_use.fetch_add(size, std::memory_order_seq_cst) + size;
//       if (now <= control.grant.load(seq_cst) && now <= control.limit.load(relaxed)) -> allocate
//       else { stats.in_use.fetch_sub(size); slow path: own limit? fail : send Grow }
//   The daemon lowers a grant only like this:
//       control.grant.store(lower, seq_cst); u = stats.in_use.load(seq_cst);
//       if (u > lower) control.grant.store(round_up(u, grant_step)) and book that instead.
//   Either the daemon sees the allocation in `u`, or the client sees the lower grant (the two
//   seq_cst store/load pairs cannot both miss each other), so no allocation slips past the books.
//   Grants only grow in reply to a Grow/Attach, so a client never sees a grant it did not ask for
//   except after re-registration.
//
// The launch gate (layout 4)
//   Each slot has its own gate (SlotGate): a job on two devices may run on one and wait on the
//   other. The page's `gate` is their summary: kRun exactly when every slot's state is kRun, so a
//   launch in the common case costs one relaxed load (interpose/gate.h). The daemon changes a gate
//   only like this:
//       gates[s].state.store(new, release); summary.store(run-if-all-run, release);
//       gates[s].seq.fetch_add(1, release); futex(&gates[s].seq, FUTEX_WAKE, INT_MAX)
//   and a waiting client (the slot's state not kRun) like this:
//       q = gates[s].seq.load(acquire); if (gates[s].state.load(acquire) == kRun) go;
//       futex(&gates[s].seq, FUTEX_WAIT, q, timeout)   (shared: no FUTEX_PRIVATE_FLAG)
//   The client cannot write to the page, so it cannot say that it waits: the daemon wakes on every
//   change. A page of layout 3 or older has no gates: its summary stays kRun, and the client is
//   served without gating. From layout 5 the daemon also wakes `gate_seq` (bumped on every
//   change of any gate), so one thread of the client can watch every gate at once.
//
// Completion tracking and the in-flight window (layout 5)
//   In state kWindow a launch goes ahead while the job's work in flight on the device is below
//   the slot's `window_ns` of estimated device time. The client knows what is in flight from
//   events it records on the streams it launches on (from a pool, every few launches, never one
//   per launch) and that its own thread sees complete; it publishes the counts in the stats
//   page's TrackStats. The daemon hands a timeslice over only when the holder's TrackStats say
//   it has drained: every mark done, and no launch left without a mark after it (`tail` 0).
//
// Rules for this header: it is compiled into libcoloc.so; glibc and standard headers only. The
// fields every thread reads on a fast path are std::atomic, lock-free, read with relaxed loads
// except where the rule above says seq_cst.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "coloc/protocol.h"

namespace coloc::pages {

/// Size of each page in bytes (one 4 KiB page; both layouts fit with room to grow).
inline constexpr size_t kPageSize = 4096;
/// Device slots per page; a slot index comes from AttachReply / RegisterReply (resume).
inline constexpr uint32_t kSlots = proto::kMaxDevices;
/// Page magics and the layout version. Bump kLayoutVersion (and proto::kVersion) on any change.
///   1  first release.
///   2  ControlSlot::job_others (was reserved1, zero). Same size and offsets otherwise. colocd
///      makes layout-1 pages for clients speaking protocol v3 or older, layout 2 for v4; a client
///      accepts both (in a layout-1 page the field is the zero reserved word: "not known").
///   3  ControlSlot::overhead (the slot's last 8 bytes, zero padding before). Layout 3 for
///      protocol v5; a client accepts all three (in an older page the word is zero: "none").
///   4  ControlPage::gates (one SlotGate per slot, after the slots; zero = kRun, so an older page
///      reads as "never gated"). Layout 4 for protocol v6; a client accepts all four.
///   5  ControlPage::compute (the in-flight window per slot), StatsPage::track (completion
///      tracking per slot), GateState::kWindow given meaning, `gate_seq` woken on every change.
///      Layout 5 for protocol v7; a client accepts all five. A layout-4 client is paused but
///      never timesliced (it could not report its drain).
///   6  StatsPage::est (the process's online prediction of its peak per slot, client writes).
///      Layout 6 for protocol v9; a client accepts all six. colocd reads no prediction from an
///      older page (the job is admitted on `--mem` or its history only).
///   7  StatsPage::busy_until (the end of the last busy interval per slot, client writes). Layout
///      7 for protocol v12; a client accepts all seven. colocd counts a job's device time as the
///      union of its processes' busy intervals only from layout-7 pages (an older page's
///      busy_ns is added as it comes, capped by the wall time as a whole).
///   8  ControlPage::queue (where the process's waiting request stands in its device's queue,
///      daemon writes). Layout 8 for protocol v13; a client accepts all eight (in an older page
///      it reads nothing, and says what it said before).
///   9  StatsPage::not_suspendable (the client's preflight for suspension, client writes; carved
///      from the header's reserved bytes). Layout 9 for protocol v14; a client accepts all nine.
///      colocd suspends no process whose page is older (it cannot see what the process did).
inline constexpr uint32_t kControlMagic = 0x50434c43u;  // "CLCP"
inline constexpr uint32_t kStatsMagic = 0x53434c43u;    // "CLCS"
inline constexpr uint16_t kLayoutVersion = 9;
inline constexpr uint16_t kMinLayoutVersion = 1;
/// The page layout colocd makes for a client speaking protocol `version`.
inline constexpr uint16_t layout_for_protocol(uint16_t version) {
  return version >= 14 ? 9 : version >= 13 ? 8 : version >= 12 ? 7 : version >= 9 ? 6 : version >= 7 ? 5 : version >= 6 ? 4 : version >= 5 ? 3 : version >= 4 ? 2 : 1;
}
/// The oldest layout with the preflight for suspension (StatsPage::not_suspendable).
inline constexpr uint16_t kPreflightLayout = 9;
/// StatsPage::not_suspendable bits: what the process did that a checkpoint cannot carry (the
/// driver's checkpoint API refuses a process with live managed memory; cuda.h, CUDA_CHECKPOINT).
/// Sticky: a bit once set stays set for the process's life.
inline constexpr uint32_t kUsedManaged = 1u << 0;  ///< cuMemAllocManaged succeeded
/// The reason a bit set stands for ("managed memory"), for logs and status; the first set wins.
inline const char* not_suspendable_reason(uint32_t bits) {
  return (bits & kUsedManaged) ? "managed memory (cuMemAllocManaged)" : bits ? "unknown" : "";
}
/// The oldest layout with the queue note (ControlPage::queue).
inline constexpr uint16_t kQueueLayout = 8;
/// The oldest layout with the end of each slot's last busy interval (StatsPage::busy_until).
inline constexpr uint16_t kBusyLayout = 7;
/// The oldest layout with the online prediction (StatsPage::est).
inline constexpr uint16_t kEstimateLayout = 6;
/// The oldest layout with launch gates (ControlPage::gates).
inline constexpr uint16_t kGatedLayout = 4;
/// The oldest layout with completion tracking (ControlPage::compute, StatsPage::track): a client
/// whose page is older cannot report its drain and is never timesliced.
inline constexpr uint16_t kTrackedLayout = 5;

/// A launch gate's state. A launch waits in every state but kRun (interpose/gate.h); the state
/// says why (the job report's gate wait by cause).
enum class GateState : uint32_t {
  kRun = 0,        ///< launch freely
  /// (layout 5) launch while the job's work in flight on the device is under the slot's
  /// `window_ns`, tracking completions (the holder of a timeslice; a throttled job under the
  /// priority policy); wait for completions while it is over
  kWindow = 1,
  kTimeslice = 2,  ///< wait until this job holds the device (its quantum)
  kPaused = 3,     ///< wait until `coloc resume`
};
inline constexpr uint32_t kGateStates = 4;

/// (layout 4) One device's launch gate (see "The launch gate" above).
struct SlotGate {
  std::atomic<uint32_t> state;  ///< GateState of launches on the slot's device
  std::atomic<uint32_t> seq;    ///< the futex word: bumped after every change of `state`
};

/// (layout 5) One device's compute settings (daemon writes).
struct SlotCompute {
  /// The in-flight window in kWindow: estimated device time (ns) the job may have queued on the
  /// device; 0 = no bound. The client holds to it from its first launch, before it has an
  /// estimate, and stops when its oldest unfinished work has run longer than this (the rules:
  /// interpose/tracker.h, "The bound").
  std::atomic<uint64_t> window_ns;
  /// CLOCK_MONOTONIC ns at which this job's turn on the device ends (timeslice holder), else 0.
  /// Informational: the daemon, not the client, ends the turn.
  std::atomic<uint64_t> turn_end_ns;
};

/// One device of the control page (one cache line).
struct alignas(64) ControlSlot {
  std::atomic<uint32_t> attached;  ///< 0 = unused; 1 = uuid valid (stored with release)
  uint32_t reserved0;
  uint8_t uuid[16];                ///< the device (cuDeviceGetUuid)
  std::atomic<uint64_t> limit;     ///< the job's limit on the device in bytes, proto::kNoLimit = none
  std::atomic<uint64_t> grant;     ///< bytes granted to this process on the device
  std::atomic<uint64_t> reservation;  ///< bytes the job holds by admission on the device (informational)
  /// (layout 2) Bytes the job holds on the device beyond this process's own in-use: its other
  /// processes' in-use and every driver overhead of the job, this process's included (colocd
  /// writes it on its sampling timer, and when it books a driver overhead on the device; 0 = none,
  /// or not known). The job's view in cuMemGetInfo, and a refusal's figures at the job's limit.
  std::atomic<uint64_t> job_others;
  /// (layout 3) The driver overhead colocd books for this process on the device (bytes; 0 = none
  /// or not known): sent back in the ledger on re-registration (LedgerEntry::overhead), so a
  /// restarted colocd keeps it until the driver's own figure replaces it.
  std::atomic<uint64_t> overhead;
};

/// The control page (daemon writes, client reads).
/// (layout 8) What a queue note's `asks` is: the footprint the job reserves at admission, by its
/// source, or the request itself.
enum class AskSource : uint32_t {
  kNone = 0,
  kMem = 1,       ///< its declared limit (--mem, COLOC_MEM_LIMIT)
  kHistory = 2,   ///< its footprint from earlier runs (coloc history)
  kEstimate = 3,  ///< its declared estimate (COLOC_MEM_ESTIMATE, coloc run --estimate-from)
  kContext = 4,   ///< nothing known: one CUDA context
  kGrowth = 5,    ///< a running job's growth: what its grant must grow by
};

/// (layout 8) Where the process's waiting request stands in its device's queue (issue 28; colocd's
/// Broker::queue). colocd writes it on its sampling timer while a request of the process waits,
/// and clears it (reason 0) once none does; the client reads it to tell its user (the stderr line
/// of a long wait). A seqlock: colocd makes `seq` odd, writes the fields (relaxed), makes `seq` even
/// again (release); a reader loads `seq` (acquire), the fields, then `seq` again, and uses what it
/// read only when both loads match and are even. colocd's word, read by the client only to print.
struct QueueNote {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> reason;    ///< proto::WaitReason; 0 = no request of the process waits
  std::atomic<uint32_t> source;    ///< AskSource of `asks`
  std::atomic<uint32_t> position;  ///< 1-based, in the device's queue
  std::atomic<uint64_t> asks;      ///< bytes it must commit there beyond what its job commits now
  std::atomic<uint64_t> missing;   ///< bytes short (reasons Resources and Outside), else 0
  std::atomic<uint64_t> start_ms;  ///< its estimated start, Unix ms; 0 = not known
  /// The job first in line (reasons Priority and Queue): its id's bytes, 8 to a word in memory
  /// order, NUL-padded (at most 63 bytes and a NUL).
  std::atomic<uint64_t> behind[8];
  uint8_t reserved[24];
};

struct ControlPage {
  uint32_t magic;            ///< kControlMagic
  uint16_t layout_version;   ///< kLayoutVersion
  uint16_t slot_count;       ///< kSlots
  uint64_t epoch;            ///< RegisterReply::epoch of the daemon that made the page
  std::atomic<uint32_t> gate;      ///< summary: kRun iff every gates[s].state is kRun (fast path, relaxed)
  std::atomic<uint32_t> gate_seq;  ///< bumped on every change of any gate (informational)
  std::atomic<uint32_t> priority;  ///< the job's proto::Priority now (coloc set); sent back on re-registration
  uint8_t reserved[36];
  ControlSlot slots[kSlots];
  SlotGate gates[kSlots];  ///< (layout 4) per slot; all zero (kRun) in older layouts
  SlotCompute compute[kSlots];  ///< (layout 5) per slot; zero in older layouts
  QueueNote queue;              ///< (layout 8) zero in older layouts
};

/// One device of the stats page (one cache line). All counters only grow, except in_use.
struct alignas(64) StatsSlot {
  std::atomic<uint64_t> in_use;             ///< bytes held now (context included); see the fast-path rule
  std::atomic<uint64_t> peak;               ///< bytes, max of in_use
  std::atomic<uint64_t> allocs;             ///< successful allocations
  std::atomic<uint64_t> frees;              ///< frees (tracked and untracked)
  std::atomic<uint64_t> failures;           ///< allocations that returned CUDA_ERROR_OUT_OF_MEMORY
  std::atomic<uint64_t> wait_memory_ns;     ///< time allocations spent waiting for a grant
  std::atomic<uint64_t> wait_admission_ns;  ///< time spent waiting for admission (Attach)
  std::atomic<uint64_t> launches;           ///< kernel launches (flushed from thread-local counts)
};

/// (layout 4) One device's launch-gate counters (one cache line), indexed by GateState (the
/// kRun entries stay zero: a launch in RUN does not wait).
struct alignas(64) GateStats {
  std::atomic<uint64_t> wait_ns[kGateStates];  ///< time launches spent waiting at the gate, by why
  std::atomic<uint64_t> waits[kGateStates];    ///< launches that waited, by why
};

/// (layout 5) One device's completion tracking (one cache line; client writes, daemon reads and
/// treats as untrusted: a lying client only hurts its own turns, never another job's gates).
struct alignas(64) TrackStats {
  std::atomic<uint64_t> marks;       ///< events recorded after the job's launches on the device
  std::atomic<uint64_t> marks_done;  ///< of those, seen complete (never above `marks`)
  std::atomic<uint64_t> busy_ns;     ///< device time of the completed work, stamped on the host (ns)
  std::atomic<uint64_t> launches;    ///< launches made in kWindow (tracked)
  std::atomic<uint64_t> tail;        ///< streams with launches that no mark follows yet
  std::atomic<uint64_t> waiting;     ///< threads waiting at the gate now (the job wants the device)
  std::atomic<uint64_t> last_launch_ns;  ///< CLOCK_MONOTONIC ns of the last tracked launch or gate wait
  std::atomic<uint64_t> window_waits;    ///< launches that waited for the in-flight window
};

/// (layout 6) One device's online prediction of this process's peak (half a cache line; client
/// writes, daemon reads; see estimator/online.h for how it is made). The daemon treats it as
/// untrusted: it only ever sets the reservation of the process's own job, capped by the device,
/// which the job could take anyway by allocating. Written in this order: every field, then
/// `seq` (release); the daemon reads `seq` (acquire) first and last and uses a reading only when
/// both match and are even (a seqlock: the writer makes `seq` odd while it writes).
struct EstimateStats {
  std::atomic<uint32_t> seq;         ///< seqlock word: odd while the client writes
  std::atomic<uint16_t> state;       ///< est::OnlineState: 0 learning, 1 stable, 2 changing, 3 none
  std::atomic<uint16_t> confidence;  ///< 0..1000 (per mille)
  std::atomic<uint64_t> predicted_peak;  ///< bytes; 0 = no prediction (never stable)
  std::atomic<uint64_t> period_ns;       ///< the iteration period; 0 = none
  std::atomic<uint64_t> stable_since_ns; ///< CLOCK_MONOTONIC ns the period became stable; 0 = never
};

/// The stats page (client writes, daemon reads). The header's first three fields are written by
/// the daemon before it sends the page; the client must not change them.
struct StatsPage {
  uint32_t magic;           ///< kStatsMagic
  uint16_t layout_version;  ///< kLayoutVersion
  uint16_t slot_count;      ///< kSlots
  /// (layout 5) Launches between their check of a kWindow gate and their tracking (the driver
  /// call in between). The client adds 1 (seq_cst), then reads the gate again (seq_cst) and goes
  /// only if it is still kWindow; it subtracts 1 once the launch is counted in TrackStats. The
  /// daemon stores a closed gate (seq_cst), then counts the holder drained only while this is 0,
  /// so a launch that saw the gate open is never missed by the drain.
  std::atomic<uint64_t> launching;
  /// (layout 9) The preflight for suspension: kUsedManaged and later bits (client sets, with
  /// fetch_or, relaxed; colocd reads it before it locks the process). Zero: nothing seen.
  std::atomic<uint32_t> not_suspendable;
  uint8_t reserved[44];
  StatsSlot slots[kSlots];
  GateStats gates[kSlots];  ///< (layout 4) per slot; unused (zero) in older layouts
  TrackStats track[kSlots];  ///< (layout 5) per slot; unused (zero) in older layouts
  EstimateStats est[kSlots];  ///< (layout 6) per slot; unused (zero) in older layouts
  /// (layout 7) Per slot: CLOCK_MONOTONIC ns at which the busy interval last added to
  /// TrackStats::busy_ns ended (the completion's stamp); 0 = none yet. The tracker thread stores it
  /// (relaxed) before it adds the interval's length to busy_ns (release), so a reader that loads
  /// busy_ns (acquire) and then this sees an end at least as new as the intervals it counted. A
  /// process's intervals on a slot are disjoint and in order, so the work added since the
  /// reader's last look lies between the end it saw then and this one: colocd takes a job's device
  /// time as the union of its processes' intervals by this (compute/device_time.h).
  std::atomic<uint64_t> busy_until[kSlots];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "page counters must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "page words must be lock-free");
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
static_assert(sizeof(ControlSlot) == 64 && sizeof(StatsSlot) == 64);
static_assert(offsetof(ControlPage, gate) == 16);
static_assert(offsetof(ControlPage, priority) == 24);
static_assert(offsetof(ControlPage, slots) == 64);
static_assert(offsetof(ControlSlot, uuid) == 8);
static_assert(offsetof(ControlSlot, limit) == 24);
static_assert(offsetof(ControlSlot, grant) == 32);
static_assert(offsetof(ControlSlot, job_others) == 48);
static_assert(offsetof(ControlSlot, overhead) == 56);
static_assert(offsetof(StatsPage, slots) == 64 && offsetof(StatsPage, launching) == 8);
static_assert(offsetof(StatsSlot, in_use) == 0);
static_assert(offsetof(StatsSlot, launches) == 56);
static_assert(sizeof(SlotGate) == 8 && offsetof(ControlPage, gates) == 64 + 64 * kSlots);
static_assert(sizeof(SlotCompute) == 16 && offsetof(ControlPage, compute) == 64 + 72 * kSlots);
static_assert(sizeof(QueueNote) == 128 && offsetof(ControlPage, queue) == 64 + 88 * kSlots);
static_assert(sizeof(ControlPage) == 64 + 88 * kSlots + 128 && sizeof(ControlPage) <= kPageSize);
static_assert(sizeof(GateStats) == 64 && offsetof(StatsPage, gates) == 64 + 64 * kSlots);
static_assert(sizeof(TrackStats) == 64 && offsetof(StatsPage, track) == 64 + 128 * kSlots);
static_assert(sizeof(EstimateStats) == 32 && offsetof(StatsPage, est) == 64 + 192 * kSlots);
static_assert(offsetof(StatsPage, busy_until) == 64 + 224 * kSlots);
static_assert(sizeof(StatsPage) == 64 + 232 * kSlots && sizeof(StatsPage) <= kPageSize);
static_assert(std::atomic<uint16_t>::is_always_lock_free, "page half-words must be lock-free");

/// A queue note's fields as plain values (write_queue_note, read_queue_note).
struct QueueNoteValue {
  uint32_t reason = 0;  ///< proto::WaitReason; 0 = none waits
  uint32_t source = 0;  ///< AskSource
  uint32_t position = 0;
  uint64_t asks = 0, missing = 0, start_ms = 0;
  char behind[64] = {};  ///< NUL-terminated
  bool operator==(const QueueNoteValue& o) const noexcept {
    if (reason != o.reason || source != o.source || position != o.position || asks != o.asks ||
        missing != o.missing || start_ms != o.start_ms)
      return false;
    for (size_t i = 0; i < sizeof behind; ++i)
      if (behind[i] != o.behind[i]) return false;
    return true;
  }
};

/// colocd's side of the seqlock (QueueNote): `v.behind` is cut to 63 bytes.
inline void write_queue_note(QueueNote& n, const QueueNoteValue& v) noexcept {
  const uint32_t s = n.seq.load(std::memory_order_relaxed);
  n.seq.store(s | 1u, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  n.reason.store(v.reason, std::memory_order_relaxed);
  n.source.store(v.source, std::memory_order_relaxed);
  n.position.store(v.position, std::memory_order_relaxed);
  n.asks.store(v.asks, std::memory_order_relaxed);
  n.missing.store(v.missing, std::memory_order_relaxed);
  n.start_ms.store(v.start_ms, std::memory_order_relaxed);
  for (size_t w = 0; w < 8; ++w) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8; ++b) {
      const size_t i = w * 8 + b;
      const uint8_t c = i < 63 ? uint8_t(v.behind[i]) : 0;
      word |= uint64_t(c) << (8 * b);
    }
    n.behind[w].store(word, std::memory_order_relaxed);
  }
  n.seq.store((s | 1u) + 1u, std::memory_order_release);
}

/// The client's side: false when colocd was writing (try again later). A `behind` that is not
/// NUL-terminated within 63 bytes is cut there.
inline bool read_queue_note(const QueueNote& n, QueueNoteValue* v) noexcept {
  const uint32_t s1 = n.seq.load(std::memory_order_acquire);
  if (s1 & 1u) return false;
  v->reason = n.reason.load(std::memory_order_relaxed);
  v->source = n.source.load(std::memory_order_relaxed);
  v->position = n.position.load(std::memory_order_relaxed);
  v->asks = n.asks.load(std::memory_order_relaxed);
  v->missing = n.missing.load(std::memory_order_relaxed);
  v->start_ms = n.start_ms.load(std::memory_order_relaxed);
  for (size_t w = 0; w < 8; ++w) {
    const uint64_t word = n.behind[w].load(std::memory_order_relaxed);
    for (size_t b = 0; b < 8; ++b) v->behind[w * 8 + b] = char((word >> (8 * b)) & 0xff);
  }
  v->behind[63] = 0;
  std::atomic_thread_fence(std::memory_order_acquire);
  return n.seq.load(std::memory_order_relaxed) == s1;
}

}  // namespace coloc::pages
