// coloc/protocol.h — the wire protocol between colocd and its clients (libcoloc.so inside each
// job's process, and the coloc CLI). One header, compiled by both sides.
//
// Transport
//   AF_UNIX SOCK_SEQPACKET: every message is exactly one datagram, so a message is never split or
//   merged. One persistent connection per process. Every message starts with a Header; its `size`
//   must equal the datagram's length. Integers are host byte order (the socket never leaves the
//   machine). The daemon takes the peer's pid and uid from SO_PEERCRED, never from a message.
//
// Conversation (client side; docs/daemon.md has the full contract)
//   Register      -> RegisterReply (+ SCM_RIGHTS: control page fd, stats page fd; see pages.h)
//   Attach        -> AttachReply   (admission; the reply may be deferred while the job waits)
//   Grow          -> GrowReply     (may be deferred while the request is parked)
//   Shrink, DriverOom, ContextFootprint, Cancel, Goodbye: no reply.
//   Admin         -> AdminReply, one or more chunks (the CLI; no Register needed)
//   Error         <- the daemon explains why it is about to close the connection.
//   Every request that has a reply gets exactly one, echoing the request's `seq`; replies to
//   parked requests may come in any order. A Cancel of a parked request makes the daemon answer
//   that request at once (refused, reason kCancelled) unless it was already answered.
//
// Versions (kVersion is what this header speaks; the daemon also accepts kMinVersion..kVersion)
//   Bump kVersion for ANY change to the layout or meaning of an existing message: a field added,
//   removed, resized, reordered or reinterpreted, a new enum value a peer of the old version could
//   receive, or a changed rule (e.g. which messages have replies). Adding a new message type that
//   only a new client sends, or giving meaning to a reserved field whose zero value keeps the old
//   meaning, also bumps it, so that an old daemon refuses the new client cleanly.
//   When bumping: keep the previous layout of every changed message as `<Name>V<n>` with a decoder
//   that upgrades it with documented defaults, set kMinVersion to the oldest version still
//   accepted, and add a round-trip test for the old layout.
//   Header and ErrorMsg are frozen for all versions: a peer of any version can read a refusal.
//   History:
//     v1  first release.
//     v2  Register gained wait_timeout_ns and cmdline (the truncated command line for reports).
//         Every other message is identical in v1 and v2. A v1 Register is upgraded with
//         wait_timeout_ns = 0 (the daemon's default) and cmdline = "" (reports say "unknown").
//   A v1 client gets its replies in v1 (header.version = 1); they have the same layout.
//     v3  Register flag kRegAnchor (the job's anchor: `coloc run`, which attaches no device and
//         keeps the job, its limit, priority and reservations, alive between the command's
//         steps). Every layout is identical in v2 and v3; a v2 Register with kRegAnchor set is
//         malformed. A v2 daemon refuses a v3 client with kVersion: clients then speak v2 (and
//         `coloc run` runs without an anchor).
//     v4  The pages' layout 2 (pages.h: ControlSlot::job_others, the job's memory beyond the
//         process's own, for its view in cuMemGetInfo). Every message is identical in v3 and v4;
//         a v3 client gets layout-1 pages. A v3 daemon refuses a v4 client with kVersion:
//         clients then speak v3 (and see layout-1 pages, where job_others stays 0).
//     v5  Attach: each AttachDevice gained `cap` (the process's COLOC_MEM_LIMIT_<n> for the
//         device: the job's limit there is the smaller, and so is its reservation). A v4 Attach
//         (AttachV4) is upgraded with cap = 0 (none). LedgerEntry's `reserved` became `cap` (0 =
//         none), and it gained `overhead` (the driver overhead the dead daemon had booked, from
//         the pages' layout 3); Register keeps its v2-v4 layout as RegisterV4 (and v1 as
//         RegisterV1, both with LedgerEntryV4), upgraded with cap = overhead = 0 (a non-zero
//         `reserved` is malformed). Pages: layout 3 for v5 clients (pages.h). New message
//         ContextFootprint (only a v5 client sends it; below v5 it is malformed): the free memory
//         right after the process's first context on a device, from which colocd estimates the
//         driver overhead when it has no per-process figure (NVML). A v4 daemon refuses a v5
//         client with kVersion: clients then speak v4 (without caps and footprints).
//     v6  The pages' layout 4 (pages.h: a launch gate per slot, ControlPage::gates); a v5 client
//         gets layout-3 pages and is served without gating. Admin ops kPause and kResume (below
//         v6 they are malformed). Every message layout is identical in v5 and v6. A v5 daemon
//         refuses a v6 client with kVersion: clients then speak v5 (never gated).
//     v7  The pages' layout 5 (pages.h: completion tracking, the in-flight window, kWindow); a v6
//         client gets layout-4 pages (paused, never timesliced). Admin gave meaning to bytes of
//         its reserved0: `weight` (kSet with the new kSetWeight bit), `mode` and `quantum_ms`
//         (the new op kPolicy, whose `job` names a device: a UUID or a unique prefix of one, an
//         NVML index, or "all"). Below v7 those bytes must be zero and kPolicy is malformed. A
//         v6 daemon refuses a v7 client with kVersion: clients then speak v6.
//     v8  Priority is granted, not taken: `high` is for root and members of colocd's
//         --admin-group or --high-priority-group; anyone else asking for it is registered as
//         `normal`. RegisterReply gave meaning to its reserved0: `granted_priority` (the job's
//         priority + 1; 0 = not told) and `priority_flags` (kPriorityLowered: the Register asked
//         for a priority its caller may not have, and the job runs lower). Admin gave meaning to its
//         last reserved byte: `target_pct` (kPolicy with kPriority: the target slowdown, 0 = the
//         default), and a v8 daemon serves kPriority. Below v8 those bytes must be zero. Every
//         layout is identical in v7 and v8. A v7 daemon refuses a v8 client with kVersion: clients
//         then speak v7 (and are not told the priority they got).
//     v9  Estimation. Register gained `env_hash` (after cmdline_hash: XXH3-64 of the variables that
//         change a job's footprint, env_fingerprint() in wire.h), so a rerun of a known job is
//         admitted on its history; the v5-v8 layout is kept as RegisterV8 and upgraded with
//         env_hash = 0 and no kRegEnvHash flag (such a job gets no history). The pages' layout 6
//         (pages.h: StatsPage::est, the client's online prediction of its peak per slot); a v8
//         client gets layout-5 pages. Admin ops kHistory (list the run history) and
//         kHistoryForget (`job` names a fingerprint, or "all"). Below v9 they are malformed. A v8
//         daemon refuses a v9 client with kVersion: clients then speak v8.
//     v10 A declared estimate. Register gained `estimate` (after env_hash: the bytes per device
//         the job's analytic estimate says it needs, `coloc run --estimate-from` or
//         COLOC_MEM_ESTIMATE; colocd reserves it at admission when the job has no limit and no
//         history), valid only with the new flag kRegEstimate. The v9 layout is kept as
//         RegisterV9 and upgraded with estimate = 0 and no kRegEstimate (no declared estimate);
//         below v10 the flag is malformed, and a client speaking to an older daemon leaves the
//         flag and the field out. Pages are unchanged (layout 6). A v9 daemon refuses a v10
//         client with kVersion: clients then speak v9 (and their jobs get no declared estimate).
//     v11 A process's step within its job. Register gained `step` (after cmdline: kStepSize bytes,
//         a NUL-terminated label of [A-Za-z0-9._-], zeros after the NUL; COLOC_STEP, which the
//         Slurm plugin sets to the task's Slurm step: "batch", "extern", "0", "1", ...; colocd
//         shows it per process in the job's report), valid, and not empty, only with the new flag
//         kRegStep. The v10 layout is kept as RegisterV10 and upgraded with step = "" and no
//         kRegStep (no step); below v11 the flag is malformed, and a client speaking to an older
//         daemon leaves the flag and the field out. Pages are unchanged (layout 6). A v10 daemon
//         refuses a v11 client with kVersion: clients then speak v10 (and their processes'
//         steps are not reported).
//     v12 Pages of layout 7: StatsPage::busy_until, the end of each slot's last busy interval, so
//         colocd counts a job's device time as the union of its processes' intervals (pages.h).
//         Messages are unchanged. A v11 daemon refuses a v12 client with kVersion: clients then
//         speak v11 (and their job's device time is their busy_ns summed, capped by wall time).
//     v13 Pages of layout 8: ControlPage::queue, where the process's waiting request stands in its
//         device's queue (reason, position, the job first in line, what it asks and why, its
//         estimated start), which colocd writes and the client prints in its long-wait line
//         (pages.h). Two admin operations: kCancel (signal a job's processes, SIGKILL after a
//         grace; AdminMsg::mode is the signal and quantum_ms the grace) and kEnded (the jobs that
//         ended, from their reports). Message layouts are unchanged. A v12 daemon refuses a v13
//         client with kVersion: clients then speak v12 (and say what they said before; `coloc
//         cancel` and `coloc jobs --all` need v13).
//     v14 Pages of layout 9: StatsPage::not_suspendable, the client's preflight for suspension
//         (issue 29: what it did that a checkpoint cannot carry: managed memory), pages.h. One admin
//         operation, kSuspend (suspend a job's processes to host memory; kResume now ends a
//         suspension too), and one wait reason, kSuspended (a suspended job's restore, queued).
//         Message layouts are unchanged. A v13 daemon refuses a v14 client with kVersion: clients
//         then speak v13 (and their jobs are never suspended: colocd cannot see their preflight).
//
// Validation
//   decode() checks everything a peer could get wrong: the header, the exact size for the type and
//   version, enum values, counts, NUL-terminated strings with nothing but zeros after the NUL,
//   character sets, and that every reserved field and unused array entry is zero. encode() runs
//   the same checks, so a peer never sends what the other side would refuse.
//
// Rules for this header (it is compiled into libcoloc.so, which runs in other people's processes):
//   glibc and the C++ standard headers only; no exceptions, no allocation, no logging; every
//   function is noexcept and returns an error value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace coloc::proto {

/// The version this header speaks, and the oldest one a daemon built from it still accepts.
inline constexpr uint16_t kVersion = 14;
inline constexpr uint16_t kMinVersion = 1;

/// First four bytes of every message: "COLC" in memory order on little-endian machines.
inline constexpr uint32_t kMagic = 0x434c4f43u;

/// Most devices one message (and one page, see pages.h) can describe.
inline constexpr uint32_t kMaxDevices = 16;
/// Buffer sizes of fixed strings, including the terminating NUL.
inline constexpr size_t kJobIdSize = 64;
inline constexpr size_t kCmdlineSize = 256;
/// (v11) Register::step: at most kStepSize-1 characters of [A-Za-z0-9._-] (see valid_step()).
inline constexpr size_t kStepSize = 16;
inline constexpr size_t kErrorTextSize = 200;
/// The largest datagram either side sends or accepts (an admin reply chunk with its header).
inline constexpr size_t kMaxMessage = 32768;
/// "Not known" for a byte count that a client could not measure (e.g. physical free memory).
inline constexpr uint64_t kUnknown = UINT64_MAX;
/// "No limit" for a limit field.
inline constexpr uint64_t kNoLimit = UINT64_MAX;

/// Default socket path; COLOC_SOCKET (environment) or --socket override it.
inline constexpr const char* kDefaultSocket = "/run/coloc/colocd.sock";

/// The manifest: every message type, once. X(name, number, layout struct, member of
/// Message::Body, who receives it). The MsgType enum, the names, the traits, the Message union and
/// the decoder's and re-encoder's dispatch table are generated from it.
#define COLOC_PROTO_MESSAGES(X)                                      \
  /* client -> daemon */                                             \
  X(Register, 1, RegisterMsg, reg, kDaemon)                          \
  X(Attach, 2, AttachMsg, attach, kDaemon)                           \
  X(Grow, 3, GrowMsg, grow, kDaemon)                                 \
  X(Shrink, 4, ShrinkMsg, shrink, kDaemon)                           \
  X(DriverOom, 5, DriverOomMsg, driver_oom, kDaemon)                 \
  X(ContextFootprint, 8, ContextFootprintMsg, context_footprint, kDaemon) \
  X(Cancel, 6, CancelMsg, cancel, kDaemon)                           \
  X(Goodbye, 7, GoodbyeMsg, goodbye, kDaemon)                        \
  X(Admin, 16, AdminMsg, admin, kDaemon)                             \
  /* daemon -> client */                                             \
  X(RegisterReply, 129, RegisterReplyMsg, register_reply, kClient)   \
  X(AttachReply, 130, AttachReplyMsg, attach_reply, kClient)         \
  X(GrowReply, 131, GrowReplyMsg, grow_reply, kClient)               \
  X(AdminReply, 144, AdminReplyMsg, admin_reply, kClient)            \
  X(Error, 255, ErrorMsg, error, kClient)

enum class MsgType : uint16_t {
#define COLOC_PROTO_ENUM(name, number, T, member, who) k##name = number,
  COLOC_PROTO_MESSAGES(COLOC_PROTO_ENUM)
#undef COLOC_PROTO_ENUM
};

/// Which side receives a message: a daemon accepts only client -> daemon types, a client only
/// the daemon's.
enum class Receiver : uint8_t { kDaemon, kClient };

/// Job priority: admission order, and who loses a broken deadlock.
enum class Priority : uint8_t { kBestEffort = 0, kNormal = 1, kHigh = 2 };
/// What a request that does not fit the device does: wait (park) or fail at once.
enum class OnFull : uint8_t { kWait = 0, kFail = 1 };

/// Outcome of a request that has a reply.
enum class Outcome : uint32_t { kGranted = 1, kRefused = 2 };

/// Why a request was refused (kNone when granted).
enum class Reason : uint32_t {
  kNone = 0,
  kOwnLimit = 1,        ///< would exceed the job's own limit: never waits
  kDeviceFull = 2,      ///< the device has no room and the job asked to fail (--on-full fail)
  kDeadlockBroken = 3,  ///< every job on the device was waiting; this one was chosen to fail
  kTimeout = 4,         ///< waited the job's wait timeout (COLOC_WAIT_TIMEOUT) without room
  kCancelled = 5,       ///< the client cancelled the wait (SIGINT/SIGTERM, its own timeout)
  kUserCap = 6,         ///< over the per-user cap on grants (--max-per-user)
  kBadRequest = 7,      ///< the request names a slot that is not attached, or similar misuse
  kJobCancelled = 8,    ///< (v13) the job was cancelled (`coloc cancel`): it gets nothing new
};

/// Why a request waits (issue 28; the set lives here, and only here: colocd decides it, its books
/// and reports carry it, the client's control page names it). One per waiting request, per device:
///   kPriority   behind a request of a job of higher priority (colocd names that job)
///   kQueue      behind a request the policy's order puts first (named)
///   kResources  first in line there: memory that coloc jobs hold is missing (how much, and who)
///   kOutside    first in line there: memory used outside coloc is what is missing
///   kUserCap    its user's cap (max_per_user) holds it, whatever the device has
///   kRestart    colocd's resume grace after a restart holds every new request
///   kSuspended  (v14) the job is suspended (its memory checkpointed to host memory): its restore
///               waits for the room it held, ahead of new admissions of the same or lower priority
/// A new reason goes at the end (a page carries the number; an older reader shows "?").
enum class WaitReason : uint8_t {
  kNone = 0,
  kPriority = 1,
  kQueue = 2,
  kResources = 3,
  kOutside = 4,
  kUserCap = 5,
  kRestart = 6,
  kSuspended = 7,
};
inline constexpr uint8_t kWaitReasons = 8;  ///< values 0..kWaitReasons-1

/// Why a client cancels a parked request.
enum class CancelWhy : uint32_t { kSignal = 1, kTimeout = 2, kShutdown = 3 };

/// Register flags.
inline constexpr uint16_t kRegResume = 1u << 0;  ///< re-registration after a daemon restart (ledger valid)
/// (v3) The job's anchor (`coloc run`): attaches no device (n_ledger 0, no Attach); while it is
/// registered the job lives on, and keeps its reservation on a device none of its processes is
/// attached to any more (between the steps of a multi-step command). Its Goodbye carries the
/// command's exit status, which becomes the job's.
inline constexpr uint16_t kRegAnchor = 1u << 1;
/// (v9) Register::env_hash is valid: the job may be admitted on its run history.
inline constexpr uint16_t kRegEnvHash = 1u << 2;
/// (v10) Register::estimate is valid (and not 0): the job declares its footprint per device from
/// an analytic estimate, reserved at admission when it has no limit and no history.
inline constexpr uint16_t kRegEstimate = 1u << 3;
/// (v11) Register::step is valid (and not empty): the process's step within its job (a Slurm
/// step: "batch", "extern", "0", ...), shown per process in the job's report.
inline constexpr uint16_t kRegStep = 1u << 4;

/// Admin operations (the CLI). Any user may read; kSet, kPause and kResume are checked against
/// SO_PEERCRED. kPause (v6): the job's launches wait at the gate on every device until kResume
/// (v6); its memory stays.
/// kPolicy (v7, admin only): sets the compute policy of the device(s) `job` names.
/// kHistory (v9): the run history colocd keeps (JSON; a fingerprint's command only to its owner
/// and root). kHistoryForget (v9): forgets the fingerprint `job` names (16 hex digits), or every
/// fingerprint the caller may forget ("all"); another user's needs root.
/// kCancel (v13, the job's owner and admins): `job` names the job; `mode` is the signal its
/// processes get first (1..kMaxSignal), `quantum_ms` the grace in ms before SIGKILL
/// (0..kMaxCancelGraceMs). A job waiting for admission leaves the queue at once.
/// kEnded (v13): the jobs that ended, newest first, from their reports (JSON; a job's command only
/// to its owner and admins, as kReport). `mem` is the earliest end to list (Unix ms; 0: any) and,
/// with `set_fields` kEndedUser, `quantum_ms` the uid whose jobs to list; the daemon applies both
/// before it caps the answer at its newest 1,000.
/// kSuspend (v14, the job's owner and admins): checkpoints every process of the job to host memory
/// (the driver's checkpoint API, run by colocd's helper), which frees its device memory; the answer
/// comes when the helper has started (the job shows "suspending", then "suspended" or why not).
/// kResume then ends a suspension as it ends a pause (an admin's suspension needs an admin).
enum class AdminOp : uint32_t {
  kStatus = 1, kJobs = 2, kSet = 3, kReport = 4, kPause = 5, kResume = 6, kPolicy = 7,
  kHistory = 8, kHistoryForget = 9, kCancel = 10, kEnded = 11, kSuspend = 12
};
/// kCancel's bounds: a signal number (Linux's, SIGRTMAX included) and the longest grace (1 h).
inline constexpr uint32_t kMaxSignal = 64, kMaxCancelGraceMs = 3600000;
/// The newest AdminOp of protocol `version`.
inline constexpr uint32_t last_admin_op(uint16_t version) {
  return version >= 14  ? uint32_t(AdminOp::kSuspend)
         : version >= 13 ? uint32_t(AdminOp::kEnded)
         : version >= 9 ? uint32_t(AdminOp::kHistoryForget)
         : version >= 7 ? uint32_t(AdminOp::kPolicy)
         : version >= 6 ? uint32_t(AdminOp::kResume)
                        : uint32_t(AdminOp::kReport);
}
/// AdminMsg::set_fields bits for kSet.
inline constexpr uint32_t kSetMem = 1u << 0;
inline constexpr uint32_t kSetPriority = 1u << 1;
inline constexpr uint32_t kSetWeight = 1u << 2;  ///< (v7)
/// AdminMsg::set_fields for kEnded (v13): `quantum_ms` is the uid whose ended jobs to list.
inline constexpr uint32_t kEndedUser = 1u << 0;
/// A job's weight under the timeslice policy: quanta per round (coloc set --weight).
inline constexpr uint8_t kMinWeight = 1, kMaxWeight = 100, kDefaultWeight = 1;
/// A device's compute policy (coloc policy). kPriority (served from v8; a v7 daemon refuses it as
/// kInvalid): jobs of priority high go first, the others are throttled so that a high job is
/// slowed by at most its target (AdminMsg::target_pct).
enum class PolicyMode : uint8_t { kShare = 0, kTimeslice = 1, kPriority = 2 };
/// The timeslice quantum (AdminMsg::quantum_ms): 0 = the default, else kMinQuantumMs..kMaxQuantumMs.
inline constexpr uint32_t kDefaultQuantumMs = 100, kMinQuantumMs = 1, kMaxQuantumMs = 60000;
/// The priority policy's target: the most a high-priority job may be slowed against its solo
/// speed, in percent (`coloc policy DEV priority --target-slowdown 5%`). 5% is the issue's
/// default; below 1% the measurement's own noise (a 1 s rate window) is larger than the target;
/// above 50% "high priority" would mean little.
inline constexpr uint32_t kDefaultTargetPct = 5, kMinTargetPct = 1, kMaxTargetPct = 50;

/// Admin reply status.
enum class AdminStatus : uint32_t {
  kOk = 0,
  kNotFound = 1,    ///< no such job (or report)
  kNotAllowed = 2,  ///< the caller may not do this (SO_PEERCRED)
  kInvalid = 3,     ///< a bad argument
  kAmbiguous = 4,   ///< the job name matches jobs of several users; name it as uid:job
  kInternal = 5,    ///< the daemon failed (e.g. could not read a report file)
};
/// RegisterReplyMsg::priority_flags (v8): the Register asked for a priority its caller may not
/// have (high: root, --admin-group and --high-priority-group only); the job runs at
/// granted_priority, which is lower.
inline constexpr uint8_t kPriorityLowered = 1u << 0;

/// AdminReplyMsg::flags: more chunks follow.
inline constexpr uint32_t kAdminMore = 1u << 0;
/// Largest payload of one AdminReply chunk (bytes of UTF-8 text, not NUL-terminated).
inline constexpr size_t kAdminChunk = 16384;

/// ErrorMsg::code: why the daemon closes the connection.
enum class ErrorCode : uint32_t {
  kVersion = 1,    ///< protocol version not supported (text names both versions)
  kMalformed = 2,  ///< a message failed decode()
  kOrder = 3,      ///< a message out of order (e.g. Attach before Register, a second Register)
  kRefused = 4,    ///< registration refused (text says why)
  kInternal = 5,   ///< the daemon could not serve the connection
};

// ---- layouts --------------------------------------------------------------------------------
// Every struct is trivially copyable with no implicit padding (checked below), so a message is
// exactly its bytes. Fields named reserved* must be zero.

/// 16 bytes in front of every message. Frozen for all versions.
struct Header {
  uint32_t magic;    ///< kMagic
  uint16_t version;  ///< the sender's protocol version
  uint16_t type;     ///< MsgType
  uint32_t size;     ///< total bytes of the message, this header included
  uint32_t seq;      ///< chosen by the client per request; a reply echoes it
};

/// A device's identity and what the client measured of it.
struct DeviceInfo {
  uint8_t uuid[16];        ///< cuDeviceGetUuid; never all zero
  uint64_t capacity;       ///< bytes (cuDeviceTotalMem); > 0
  uint64_t physical_free;  ///< bytes free on the device now (cuMemGetInfo) or kUnknown; <= capacity
};

/// One device of a process's ledger, sent on re-registration (Register with kRegResume).
struct LedgerEntry {
  DeviceInfo device;
  uint64_t in_use;  ///< bytes this process holds on the device now (everything: context included)
  uint64_t grant;   ///< bytes the daemon had granted this process (the control page's grant)
  uint64_t peak;    ///< bytes, this process's peak so far
  uint64_t limit;   ///< the job's limit on the device as the control page last showed it, or kNoLimit
  uint64_t cap;     ///< (v5) the process's own cap on the device (as AttachDevice::cap); 0 = none
  /// (v5) The driver overhead colocd had booked for the process on the device (the control page's
  /// `overhead`, pages layout 3), bytes, <= capacity; 0 = none or not known. The restarted daemon
  /// books it again until the driver's own figure replaces it.
  uint64_t overhead;
};

/// A ledger entry, protocol v1-v4 (no cap, no overhead; `reserved` must be zero).
struct LedgerEntryV4 {
  DeviceInfo device;
  uint64_t in_use;
  uint64_t grant;
  uint64_t peak;
  uint64_t limit;
  uint64_t reserved;
};

/// Register, protocol v1 (kept for v1 clients; see the version history above).
struct RegisterV1 {
  Header h;
  uint64_t limit;         ///< requested per-device limit in bytes (also the reservation), kNoLimit = none
  uint64_t cmdline_hash;  ///< XXH3-64 of /proc/self/cmdline (NUL-separated argv)
  uint8_t priority;       ///< Priority
  uint8_t on_full;        ///< OnFull
  uint16_t flags;         ///< kReg* bits
  uint32_t n_ledger;      ///< entries of `ledger` in use (kRegResume only, else 0); <= kMaxDevices
  char job[kJobIdSize];   ///< job id ("" = the process is its own job); see valid_job_id()
  LedgerEntryV4 ledger[kMaxDevices];  ///< slot i of the previous connection is entry i
};

/// Register, protocol v2-v4 (kept for those clients; the v5 layout differs only in its ledger).
struct RegisterV4 {
  Header h;
  uint64_t limit;
  uint64_t cmdline_hash;
  uint64_t wait_timeout_ns;
  uint8_t priority;
  uint8_t on_full;
  uint16_t flags;
  uint32_t n_ledger;
  char job[kJobIdSize];
  char cmdline[kCmdlineSize];
  LedgerEntryV4 ledger[kMaxDevices];
};

/// Register, protocol v5-v8 (kept for those clients; v9 added env_hash).
struct RegisterV8 {
  Header h;
  uint64_t limit;
  uint64_t cmdline_hash;
  uint64_t wait_timeout_ns;
  uint8_t priority;
  uint8_t on_full;
  uint16_t flags;
  uint32_t n_ledger;
  char job[kJobIdSize];
  char cmdline[kCmdlineSize];
  LedgerEntry ledger[kMaxDevices];
};

/// Register, protocol v9 (kept for those clients; v10 added estimate).
struct RegisterV9 {
  Header h;
  uint64_t limit;
  uint64_t cmdline_hash;
  uint64_t env_hash;
  uint64_t wait_timeout_ns;
  uint8_t priority;
  uint8_t on_full;
  uint16_t flags;
  uint32_t n_ledger;
  char job[kJobIdSize];
  char cmdline[kCmdlineSize];
  LedgerEntry ledger[kMaxDevices];
};

/// Register, protocol v10 (kept for those clients; v11 added step).
struct RegisterV10 {
  Header h;
  uint64_t limit;
  uint64_t cmdline_hash;
  uint64_t env_hash;
  uint64_t estimate;
  uint64_t wait_timeout_ns;
  uint8_t priority;
  uint8_t on_full;
  uint16_t flags;
  uint32_t n_ledger;
  char job[kJobIdSize];
  char cmdline[kCmdlineSize];
  LedgerEntry ledger[kMaxDevices];
};

/// Register (v11): the first message on a job's connection. Reply: RegisterReply + 2 fds.
struct RegisterMsg {
  Header h;
  uint64_t limit;            ///< as RegisterV1
  uint64_t cmdline_hash;     ///< as RegisterV1 (`coloc run`: of the command, without coloc's own options)
  /// (v9) XXH3-64 of the variables that change a footprint (wire::env_fingerprint); valid only
  /// with kRegEnvHash (an older client's job has none, and gets no history).
  uint64_t env_hash;
  /// (v10) Bytes per device the job's analytic estimate says it needs (COLOC_MEM_ESTIMATE, from
  /// `coloc run --estimate-from`); valid, and above 0, only with kRegEstimate (0 without it). Not a
  /// limit: colocd reserves it at admission when the job has neither a limit nor history.
  uint64_t estimate;
  uint64_t wait_timeout_ns;  ///< how long a parked request may wait; 0 = daemon default (300 s)
  uint8_t priority;          ///< Priority
  uint8_t on_full;           ///< OnFull
  uint16_t flags;            ///< kReg* bits
  uint32_t n_ledger;         ///< as RegisterV1
  char job[kJobIdSize];      ///< as RegisterV1
  char cmdline[kCmdlineSize];  ///< argv joined by spaces, truncated, no control characters
  /// (v11) The process's step within its job (COLOC_STEP; a Slurm step: "batch", "extern", "0",
  /// ...): 1 to kStepSize-1 characters of [A-Za-z0-9._-], NUL-terminated, zeros after the NUL;
  /// valid only with kRegStep, all zero without it (an older client's processes have none).
  char step[kStepSize];
  LedgerEntry ledger[kMaxDevices];
};

struct RegisterReplyMsg {
  Header h;
  uint64_t epoch;       ///< identifies this daemon run; changes on every start
  uint64_t limit;       ///< the limit the daemon assigned (<= requested), or kNoLimit
  uint64_t grant_step;  ///< bytes; grants move in multiples of this (default 64 MiB)
  uint32_t n_slots;     ///< slots already attached (resume: == n_ledger), others come from Attach
  uint16_t daemon_version;  ///< the daemon's own kVersion (may be newer than h.version)
  /// (v8) The priority the job runs at, as Priority + 1; 0 = not told (below v8). It is the job's:
  /// a process joining a job gets the job's priority whatever it asked for.
  uint8_t granted_priority;
  uint8_t priority_flags;  ///< (v8) kPriorityLowered, or 0
  char job[kJobIdSize];  ///< the job id the daemon filed the process under (derived when "" was sent)
};

/// One device of an admission request (v5).
struct AttachDevice {
  DeviceInfo device;
  uint64_t request;  ///< bytes needed at once (the context, first allocations); may be 0
  /// The process's own cap on this device in bytes (COLOC_MEM_LIMIT_<n>), 0 = none. At the job's
  /// first admission on the device its limit there becomes min(job limit, cap), and so does its
  /// reservation; later processes' caps hold only in their own processes.
  uint64_t cap;
};

/// Attach: admission at the first context. All listed devices are admitted together or not at all.
/// A device this process already attached is refused with kBadRequest.
struct AttachMsg {
  Header h;
  uint32_t n_devices;  ///< 1..kMaxDevices
  uint32_t reserved0;
  AttachDevice devices[kMaxDevices];
};

/// One device of an Attach, protocol v1-v4 (no cap).
struct AttachDeviceV4 {
  DeviceInfo device;
  uint64_t request;
};
/// Attach, protocol v1-v4 (kept for older clients; upgraded with cap = 0).
struct AttachV4 {
  Header h;
  uint32_t n_devices;
  uint32_t reserved0;
  AttachDeviceV4 devices[kMaxDevices];
};

/// Where a device of an Attach landed.
struct SlotGrant {
  uint32_t slot;  ///< index into the pages' slot arrays
  uint32_t reserved0;
  uint64_t grant;  ///< bytes granted to this process on the device
};

struct AttachReplyMsg {
  Header h;
  uint32_t outcome;    ///< Outcome
  uint32_t reason;     ///< Reason (kNone when granted)
  uint32_t n_devices;  ///< == the request's n_devices when granted, else 0
  uint32_t reserved0;
  uint64_t waited_ns;  ///< time the request spent parked in the daemon (admission wait)
  SlotGrant devices[kMaxDevices];  ///< in the order of the request
};

/// Grow: this process needs its grant on `slot` to reach `need` bytes.
struct GrowMsg {
  Header h;
  uint32_t slot;
  uint32_t reserved0;
  uint64_t need;           ///< bytes; > the current grant
  uint64_t in_use;         ///< bytes this process holds on the device now
  uint64_t physical_free;  ///< bytes free on the device now, or kUnknown
};

struct GrowReplyMsg {
  Header h;
  uint32_t outcome;  ///< Outcome
  uint32_t reason;   ///< Reason
  uint32_t slot;
  uint32_t reserved0;
  uint64_t grant;      ///< the process's grant on the slot now (>= need when granted)
  uint64_t limit;      ///< the job's limit now, or kNoLimit
  uint64_t waited_ns;  ///< time parked in the daemon
};

/// Shrink: give back grant above `grant` bytes (lazy return of surplus). No reply; the control
/// page shows the new grant (never below what the stats page says is in use).
struct ShrinkMsg {
  Header h;
  uint32_t slot;
  uint32_t reserved0;
  uint64_t grant;   ///< the grant this process wants to keep, bytes
  uint64_t in_use;  ///< bytes in use now
};

/// DriverOom: the real driver returned CUDA_ERROR_OUT_OF_MEMORY for an allocation that fit the
/// grant. The books missed something; the daemon logs and counts it and re-reads the device.
struct DriverOomMsg {
  Header h;
  uint32_t slot;
  uint32_t reserved0;
  uint64_t request;        ///< bytes the failed allocation asked for
  uint64_t in_use;         ///< bytes this process holds on the device, not counting `request`
  uint64_t physical_free;  ///< bytes free on the device right after the failure, or kUnknown
};

/// ContextFootprint (v5): the process's first context on the device of `slot` exists now. Sent
/// once per slot, right after the driver created that context, with what the process read in
/// it. colocd takes the device's used memory then, minus what it had seen used (outside coloc and
/// in coloc's books) when it granted the admission, minus what coloc's books gained since, as the
/// driver's overhead for the process, when it has no per-process figure from the driver (NVML):
/// an approximation (docs/daemon.md). No reply.
struct ContextFootprintMsg {
  Header h;
  uint32_t slot;
  uint32_t reserved0;
  uint64_t physical_free;  ///< bytes free on the device right after the context was created (cuMemGetInfo); not kUnknown
  uint64_t in_use;         ///< bytes this process's ledger held on the device then (the context's charge included)
};

/// Cancel: abandon the parked request with seq `target_seq`.
struct CancelMsg {
  Header h;
  uint32_t target_seq;
  uint32_t why;  ///< CancelWhy
};

/// Goodbye: the process is exiting (from an on_exit handler).
struct GoodbyeMsg {
  Header h;
  int32_t exit_status;  ///< the value passed to exit(); valid when has_status == 1
  uint32_t has_status;  ///< 0 or 1
};

/// Admin: a CLI request. No Register needed; the uid comes from SO_PEERCRED.
struct AdminMsg {
  Header h;
  uint32_t op;          ///< AdminOp
  uint32_t set_fields;  ///< kSet: kSetMem | kSetPriority, at least one; else 0
  uint64_t mem;         ///< kSet with kSetMem: the new limit in bytes (> 0); else 0
  uint8_t priority;     ///< kSet with kSetPriority: Priority; else 0
  uint8_t weight;       ///< (v7) kSet with kSetWeight: kMinWeight..kMaxWeight; else 0
  uint8_t mode;         ///< (v7) kPolicy: PolicyMode; (v13) kCancel: the signal, 1..kMaxSignal; else 0
  /// (v8) kPolicy with kPriority: the target slowdown in percent, 0 (the default,
  /// kDefaultTargetPct) or kMinTargetPct..kMaxTargetPct; else 0.
  uint8_t target_pct;
  uint32_t quantum_ms;  ///< (v7) kPolicy with kTimeslice: 0 (default) or kMinQuantumMs..kMaxQuantumMs; (v13) kCancel: the grace in ms, 0..kMaxCancelGraceMs; else 0
  char job[kJobIdSize];  ///< kSet, kReport: "job" or "uid:job"; else ""
};

/// AdminReply: one chunk of the answer (JSON text on success, a message on failure), followed
/// by `length` bytes of payload in the same datagram.
struct AdminReplyMsg {
  Header h;
  uint32_t status;  ///< AdminStatus (the same on every chunk)
  uint32_t flags;   ///< kAdminMore when another chunk follows
  uint32_t length;  ///< payload bytes after this struct; <= kAdminChunk
  uint32_t reserved0;
};

/// Error: sent before the daemon closes a connection. Frozen for all versions.
struct ErrorMsg {
  Header h;
  uint32_t code;         ///< ErrorCode
  uint16_t min_version;  ///< the versions the daemon accepts
  uint16_t max_version;
  char text[kErrorTextSize];  ///< a sentence for people (printable ASCII, NUL-terminated)
};

#define COLOC_PROTO_LAYOUT(T, bytes)                                 \
  static_assert(std::is_trivially_copyable_v<T>, #T);                \
  static_assert(std::has_unique_object_representations_v<T>, #T " has padding"); \
  static_assert(sizeof(T) == (bytes), #T " size changed: bump kVersion")
COLOC_PROTO_LAYOUT(Header, 16);
COLOC_PROTO_LAYOUT(DeviceInfo, 32);
COLOC_PROTO_LAYOUT(LedgerEntry, 80);
COLOC_PROTO_LAYOUT(LedgerEntryV4, 72);
COLOC_PROTO_LAYOUT(RegisterV1, 1256);
COLOC_PROTO_LAYOUT(RegisterV4, 1520);
COLOC_PROTO_LAYOUT(RegisterV8, 1648);
COLOC_PROTO_LAYOUT(RegisterV9, 1656);
COLOC_PROTO_LAYOUT(RegisterV10, 1664);
COLOC_PROTO_LAYOUT(RegisterMsg, 1680);
COLOC_PROTO_LAYOUT(RegisterReplyMsg, 112);
COLOC_PROTO_LAYOUT(AttachDevice, 48);
COLOC_PROTO_LAYOUT(AttachMsg, 792);
COLOC_PROTO_LAYOUT(AttachDeviceV4, 40);
COLOC_PROTO_LAYOUT(AttachV4, 664);
COLOC_PROTO_LAYOUT(ContextFootprintMsg, 40);
COLOC_PROTO_LAYOUT(SlotGrant, 16);
COLOC_PROTO_LAYOUT(AttachReplyMsg, 296);
COLOC_PROTO_LAYOUT(GrowMsg, 48);
COLOC_PROTO_LAYOUT(GrowReplyMsg, 56);
COLOC_PROTO_LAYOUT(ShrinkMsg, 40);
COLOC_PROTO_LAYOUT(DriverOomMsg, 48);
COLOC_PROTO_LAYOUT(CancelMsg, 24);
COLOC_PROTO_LAYOUT(GoodbyeMsg, 24);
COLOC_PROTO_LAYOUT(AdminMsg, 104);
COLOC_PROTO_LAYOUT(AdminReplyMsg, 32);
COLOC_PROTO_LAYOUT(ErrorMsg, 224);
#undef COLOC_PROTO_LAYOUT
static_assert(sizeof(AdminReplyMsg) + kAdminChunk <= kMaxMessage);
static_assert(sizeof(RegisterMsg) <= kMaxMessage);

// ---- errors ---------------------------------------------------------------------------------

/// Why decode() or encode() rejected a message.
enum class Error : uint8_t {
  kNone = 0,
  kShort,         ///< fewer bytes than a header, or than the type needs
  kTooLong,       ///< more bytes than the type has, or than kMaxMessage
  kBadMagic,
  kBadVersion,    ///< outside kMinVersion..kVersion
  kBadType,       ///< unknown type, or a type the receiver never receives
  kSizeMismatch,  ///< header.size differs from the datagram length
  kBadEnum,       ///< an enum field holds an unknown value
  kBadString,     ///< no NUL, bytes after the NUL, or a forbidden character
  kReserved,      ///< a reserved field or unused entry is not zero
  kBadCount,      ///< a count out of range
  kBadValue,      ///< a value out of range (zero uuid, free > capacity, slot out of range, ...)
  kNoSpace,       ///< encode(): the buffer is too small
};

/// A short static description of `e` (never NULL).
inline const char* error_name(Error e) noexcept {
  switch (e) {
    case Error::kNone: return "ok";
    case Error::kShort: return "message too short";
    case Error::kTooLong: return "message too long";
    case Error::kBadMagic: return "bad magic";
    case Error::kBadVersion: return "unsupported protocol version";
    case Error::kBadType: return "unknown or unexpected message type";
    case Error::kSizeMismatch: return "header size differs from the datagram length";
    case Error::kBadEnum: return "enum field out of range";
    case Error::kBadString: return "malformed string field";
    case Error::kReserved: return "reserved field not zero";
    case Error::kBadCount: return "count out of range";
    case Error::kBadValue: return "field value out of range";
    case Error::kNoSpace: return "buffer too small";
  }
  return "unknown error";
}

/// Result of decode()/encode(): `error` plus, on failure, `field` naming what was wrong (a static
/// string such as "Attach.devices[2].device.uuid"), for the daemon's log.
struct Status {
  Error error = Error::kNone;
  const char* field = "";
  constexpr explicit operator bool() const noexcept { return error == Error::kNone; }
};

/// Result of encode(): the datagram length, or 0 with `status` saying why.
struct Encoded {
  size_t size = 0;
  Status status;
};

/// Names for logs and reports. Never NULL; "?" for values outside the enum.
inline const char* reason_name(Reason r) noexcept {
  switch (r) {
    case Reason::kNone: return "none";
    case Reason::kOwnLimit: return "own-limit";
    case Reason::kDeviceFull: return "device-full";
    case Reason::kDeadlockBroken: return "deadlock-broken";
    case Reason::kTimeout: return "timeout";
    case Reason::kCancelled: return "cancelled";
    case Reason::kUserCap: return "user-cap";
    case Reason::kBadRequest: return "bad-request";
    case Reason::kJobCancelled: return "job-cancelled";
  }
  return "?";
}
/// The reason a peer of protocol `version` can read: kJobCancelled (v13) goes to older clients as
/// kCancelled, which they show as an interrupted wait.
inline constexpr Reason reason_for_version(Reason r, uint16_t version) noexcept {
  return r == Reason::kJobCancelled && version < 13 ? Reason::kCancelled : r;
}
/// "Priority", "Queue", "Resources", "Outside", "UserCap", "Restart", "Suspended" (Slurm's REASON style), "None";
/// "?" for values outside the enum.
inline const char* wait_reason_name(WaitReason r) noexcept {
  switch (r) {
    case WaitReason::kNone: return "None";
    case WaitReason::kPriority: return "Priority";
    case WaitReason::kQueue: return "Queue";
    case WaitReason::kResources: return "Resources";
    case WaitReason::kOutside: return "Outside";
    case WaitReason::kUserCap: return "UserCap";
    case WaitReason::kRestart: return "Restart";
    case WaitReason::kSuspended: return "Suspended";
  }
  return "?";
}
inline const char* priority_name(Priority p) noexcept {
  switch (p) {
    case Priority::kBestEffort: return "best-effort";
    case Priority::kNormal: return "normal";
    case Priority::kHigh: return "high";
  }
  return "?";
}
/// Parses "high", "normal", "best-effort" into `out`; false for anything else.
inline bool parse_priority(const char* s, Priority* out) noexcept {
  if (!s) return false;
  if (std::strcmp(s, "high") == 0) { *out = Priority::kHigh; return true; }
  if (std::strcmp(s, "normal") == 0) { *out = Priority::kNormal; return true; }
  if (std::strcmp(s, "best-effort") == 0) { *out = Priority::kBestEffort; return true; }
  return false;
}

// ---- field checks ---------------------------------------------------------------------------

namespace detail {

template <size_t N>
constexpr bool all_zero(const uint8_t (&b)[N]) noexcept {
  for (size_t i = 0; i < N; ++i)
    if (b[i] != 0) return false;
  return true;
}
inline bool bytes_zero(const void* p, size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != 0) return false;
  return true;
}

/// Character classes of string fields.
enum class Charset { kJobId, kText, kStep };
inline bool char_ok(unsigned char c, Charset cs) noexcept {
  if (cs == Charset::kJobId) return c > 0x20 && c < 0x7f && c != '/' && c != '\\';
  if (cs == Charset::kStep)
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  return c >= 0x20 && c != 0x7f;  // text: printable ASCII and any UTF-8 byte
}

/// A fixed char array holds a NUL-terminated string of allowed characters and zeros after it.
template <size_t N>
inline bool string_ok(const char (&s)[N], Charset cs) noexcept {
  size_t i = 0;
  for (; i < N && s[i] != '\0'; ++i)
    if (!char_ok(static_cast<unsigned char>(s[i]), cs)) return false;
  if (i == N) return false;  // no terminator
  for (; i < N; ++i)
    if (s[i] != '\0') return false;
  return true;
}

inline Status fail(Error e, const char* field) noexcept { return Status{e, field}; }

inline Status check_device(const DeviceInfo& d, const char* f_uuid, const char* f_cap,
                           const char* f_free) noexcept {
  if (all_zero(d.uuid)) return fail(Error::kBadValue, f_uuid);
  if (d.capacity == 0 || d.capacity == kUnknown) return fail(Error::kBadValue, f_cap);
  if (d.physical_free != kUnknown && d.physical_free > d.capacity) return fail(Error::kBadValue, f_free);
  return {};
}

inline Status check_ledger(const LedgerEntry* ledger, uint32_t n, uint16_t flags) noexcept {
  if (n > kMaxDevices) return fail(Error::kBadCount, "Register.n_ledger");
  if (!(flags & kRegResume) && n != 0) return fail(Error::kBadCount, "Register.n_ledger");
  if ((flags & kRegAnchor) && n != 0) return fail(Error::kBadCount, "Register.n_ledger (anchor)");
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    const LedgerEntry& e = ledger[i];
    if (i >= n) {
      if (!bytes_zero(&e, sizeof e)) return fail(Error::kReserved, "Register.ledger (unused entry)");
      continue;
    }
    if (Status s = check_device(e.device, "Register.ledger.device.uuid", "Register.ledger.device.capacity",
                                "Register.ledger.device.physical_free");
        !s)
      return s;
    if (e.limit == 0) return fail(Error::kBadValue, "Register.ledger.limit");
    if (e.cap == kUnknown) return fail(Error::kBadValue, "Register.ledger.cap");
    if (e.overhead > e.device.capacity) return fail(Error::kBadValue, "Register.ledger.overhead");
    if (e.peak < e.in_use) return fail(Error::kBadValue, "Register.ledger.peak");
    for (uint32_t j = 0; j < i; ++j)
      if (std::memcmp(ledger[j].device.uuid, e.device.uuid, 16) == 0)
        return fail(Error::kBadValue, "Register.ledger (duplicate device)");
  }
  return {};
}

inline Status check_common_register(uint64_t limit, uint8_t priority, uint8_t on_full, uint16_t flags,
                                    const char (&job)[kJobIdSize]) noexcept {
  if (limit == 0) return fail(Error::kBadValue, "Register.limit");
  if (priority > uint8_t(Priority::kHigh)) return fail(Error::kBadEnum, "Register.priority");
  if (on_full > uint8_t(OnFull::kFail)) return fail(Error::kBadEnum, "Register.on_full");
  if (flags & ~(kRegResume | kRegAnchor | kRegEnvHash | kRegEstimate | kRegStep))
    return fail(Error::kReserved, "Register.flags");
  if (!string_ok(job, Charset::kJobId)) return fail(Error::kBadString, "Register.job");
  return {};
}

inline bool outcome_ok(uint32_t o) noexcept { return o == uint32_t(Outcome::kGranted) || o == uint32_t(Outcome::kRefused); }
inline bool reason_ok(uint32_t r) noexcept { return r <= uint32_t(Reason::kJobCancelled); }
inline Status check_outcome(uint32_t outcome, uint32_t reason, const char* f_outcome, const char* f_reason) noexcept {
  if (!outcome_ok(outcome)) return fail(Error::kBadEnum, f_outcome);
  if (!reason_ok(reason)) return fail(Error::kBadEnum, f_reason);
  // granted <=> no reason
  if ((outcome == uint32_t(Outcome::kGranted)) != (reason == uint32_t(Reason::kNone)))
    return fail(Error::kBadValue, f_reason);
  return {};
}

/// A v1-v4 ledger in the v5 layout (cap and overhead 0); its reserved words must be zero.
inline Status upgrade_ledger(const LedgerEntryV4 (&from)[kMaxDevices], LedgerEntry (&to)[kMaxDevices]) noexcept {
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    if (from[i].reserved != 0) return fail(Error::kReserved, "Register.ledger.reserved");
    to[i] = LedgerEntry{from[i].device, from[i].in_use, from[i].grant, from[i].peak, from[i].limit, 0, 0};
  }
  return {};
}
/// Copies the fields two Register layouts share (header, limit, hash, priority, on_full, flags,
/// ledger count, job; and wait timeout and command line where both have them), not the ledger.
template <class From, class To>
inline void copy_register_fields(const From& from, To& to) noexcept {
  to.h = from.h;
  to.limit = from.limit;
  to.cmdline_hash = from.cmdline_hash;
  to.priority = from.priority;
  to.on_full = from.on_full;
  to.flags = from.flags;
  to.n_ledger = from.n_ledger;
  std::memcpy(to.job, from.job, sizeof to.job);
  if constexpr (requires { from.env_hash; to.env_hash; }) to.env_hash = from.env_hash;
  if constexpr (requires { from.estimate; to.estimate; }) to.estimate = from.estimate;
  if constexpr (requires { from.step; to.step; }) std::memcpy(to.step, from.step, sizeof to.step);
  if constexpr (requires { from.wait_timeout_ns; to.wait_timeout_ns; }) {
    to.wait_timeout_ns = from.wait_timeout_ns;
    std::memcpy(to.cmdline, from.cmdline, sizeof to.cmdline);
  }
}
/// A v5 ledger in the v1-v4 layout (its caps and overheads left out).
inline void downgrade_ledger(const LedgerEntry (&from)[kMaxDevices], LedgerEntryV4 (&to)[kMaxDevices]) noexcept {
  for (uint32_t i = 0; i < kMaxDevices; ++i)
    to[i] = LedgerEntryV4{from[i].device, from[i].in_use, from[i].grant, from[i].peak, from[i].limit, 0};
}

}  // namespace detail

/// True when `s` (NUL-terminated, may be NULL) is a valid job id: at most kJobIdSize-1 bytes of
/// printable ASCII without spaces, '/' or '\\'. The empty string is valid (the daemon derives one).
inline bool valid_job_id(const char* s) noexcept {
  if (!s) return false;
  size_t n = 0;
  for (; s[n] != '\0'; ++n) {
    if (n + 1 >= kJobIdSize) return false;
    if (!detail::char_ok(static_cast<unsigned char>(s[n]), detail::Charset::kJobId)) return false;
  }
  return true;
}

/// True when `s` (NUL-terminated, may be NULL) is a valid step label (Register::step, v11): 1 to
/// kStepSize-1 characters of [A-Za-z0-9._-]. The empty string is not one (it means "no step").
inline bool valid_step(const char* s) noexcept {
  if (!s || s[0] == '\0') return false;
  for (size_t n = 0; s[n] != '\0'; ++n) {
    if (n + 1 >= kStepSize) return false;
    if (!detail::char_ok(static_cast<unsigned char>(s[n]), detail::Charset::kStep)) return false;
  }
  return true;
}

// ---- per-message validation (the body, after the header has been checked) -------------------

inline Status validate(const RegisterMsg& m) noexcept {
  if (Status s = detail::check_common_register(m.limit, m.priority, m.on_full, m.flags, m.job); !s) return s;
  if (!(m.flags & kRegEnvHash) && m.env_hash != 0) return detail::fail(Error::kReserved, "Register.env_hash");
  if (!(m.flags & kRegEstimate) && m.estimate != 0) return detail::fail(Error::kReserved, "Register.estimate");
  if ((m.flags & kRegEstimate) && m.estimate == 0) return detail::fail(Error::kBadValue, "Register.estimate");
  if (!detail::string_ok(m.cmdline, detail::Charset::kText)) return detail::fail(Error::kBadString, "Register.cmdline");
  if (!detail::string_ok(m.step, detail::Charset::kStep)) return detail::fail(Error::kBadString, "Register.step");
  if (!(m.flags & kRegStep) && m.step[0] != '\0') return detail::fail(Error::kReserved, "Register.step");
  if ((m.flags & kRegStep) && m.step[0] == '\0') return detail::fail(Error::kBadValue, "Register.step");
  return detail::check_ledger(m.ledger, m.n_ledger, m.flags);
}
inline Status validate(const RegisterReplyMsg& m) noexcept {
  if (m.limit == 0) return detail::fail(Error::kBadValue, "RegisterReply.limit");
  if (m.grant_step == 0) return detail::fail(Error::kBadValue, "RegisterReply.grant_step");
  if (m.n_slots > kMaxDevices) return detail::fail(Error::kBadCount, "RegisterReply.n_slots");
  if (m.daemon_version < kMinVersion) return detail::fail(Error::kBadValue, "RegisterReply.daemon_version");
  if (m.granted_priority > uint8_t(Priority::kHigh) + 1) return detail::fail(Error::kBadEnum, "RegisterReply.granted_priority");
  if (m.priority_flags & ~kPriorityLowered) return detail::fail(Error::kReserved, "RegisterReply.priority_flags");
  // Lowered: told, and below high.
  if ((m.priority_flags & kPriorityLowered) &&
      (m.granted_priority == 0 || m.granted_priority > uint8_t(Priority::kHigh)))
    return detail::fail(Error::kBadValue, "RegisterReply.priority_flags");
  if (!detail::string_ok(m.job, detail::Charset::kJobId) || m.job[0] == '\0')
    return detail::fail(Error::kBadString, "RegisterReply.job");
  return {};
}
inline Status validate(const AttachMsg& m) noexcept {
  if (m.n_devices == 0 || m.n_devices > kMaxDevices) return detail::fail(Error::kBadCount, "Attach.n_devices");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "Attach.reserved0");
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    const AttachDevice& d = m.devices[i];
    if (i >= m.n_devices) {
      if (!detail::bytes_zero(&d, sizeof d)) return detail::fail(Error::kReserved, "Attach.devices (unused entry)");
      continue;
    }
    if (Status s = detail::check_device(d.device, "Attach.devices.device.uuid", "Attach.devices.device.capacity",
                                        "Attach.devices.device.physical_free");
        !s)
      return s;
    if (d.request > d.device.capacity) return detail::fail(Error::kBadValue, "Attach.devices.request");
    if (d.cap == kUnknown) return detail::fail(Error::kBadValue, "Attach.devices.cap");
    for (uint32_t j = 0; j < i; ++j)
      if (std::memcmp(m.devices[j].device.uuid, d.device.uuid, 16) == 0)
        return detail::fail(Error::kBadValue, "Attach.devices (duplicate device)");
  }
  return {};
}
inline Status validate(const AttachReplyMsg& m) noexcept {
  if (Status s = detail::check_outcome(m.outcome, m.reason, "AttachReply.outcome", "AttachReply.reason"); !s) return s;
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "AttachReply.reserved0");
  bool granted = m.outcome == uint32_t(Outcome::kGranted);
  if (granted ? (m.n_devices == 0 || m.n_devices > kMaxDevices) : m.n_devices != 0)
    return detail::fail(Error::kBadCount, "AttachReply.n_devices");
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    const SlotGrant& g = m.devices[i];
    if (i >= m.n_devices) {
      if (!detail::bytes_zero(&g, sizeof g)) return detail::fail(Error::kReserved, "AttachReply.devices (unused entry)");
      continue;
    }
    if (g.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "AttachReply.devices.slot");
    if (g.reserved0 != 0) return detail::fail(Error::kReserved, "AttachReply.devices.reserved0");
  }
  return {};
}
inline Status validate(const GrowMsg& m) noexcept {
  if (m.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "Grow.slot");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "Grow.reserved0");
  if (m.need == 0 || m.need == kUnknown) return detail::fail(Error::kBadValue, "Grow.need");
  if (m.in_use == kUnknown) return detail::fail(Error::kBadValue, "Grow.in_use");
  return {};
}
inline Status validate(const GrowReplyMsg& m) noexcept {
  if (Status s = detail::check_outcome(m.outcome, m.reason, "GrowReply.outcome", "GrowReply.reason"); !s) return s;
  if (m.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "GrowReply.slot");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "GrowReply.reserved0");
  if (m.limit == 0) return detail::fail(Error::kBadValue, "GrowReply.limit");
  return {};
}
inline Status validate(const ShrinkMsg& m) noexcept {
  if (m.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "Shrink.slot");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "Shrink.reserved0");
  if (m.in_use == kUnknown || m.grant == kUnknown) return detail::fail(Error::kBadValue, "Shrink.grant");
  return {};
}
inline Status validate(const DriverOomMsg& m) noexcept {
  if (m.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "DriverOom.slot");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "DriverOom.reserved0");
  if (m.in_use == kUnknown) return detail::fail(Error::kBadValue, "DriverOom.in_use");
  return {};
}
inline Status validate(const ContextFootprintMsg& m) noexcept {
  if (m.slot >= kMaxDevices) return detail::fail(Error::kBadValue, "ContextFootprint.slot");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "ContextFootprint.reserved0");
  if (m.physical_free == kUnknown) return detail::fail(Error::kBadValue, "ContextFootprint.physical_free");
  if (m.in_use == kUnknown) return detail::fail(Error::kBadValue, "ContextFootprint.in_use");
  return {};
}
inline Status validate(const CancelMsg& m) noexcept {
  if (m.why < uint32_t(CancelWhy::kSignal) || m.why > uint32_t(CancelWhy::kShutdown))
    return detail::fail(Error::kBadEnum, "Cancel.why");
  return {};
}
inline Status validate(const GoodbyeMsg& m) noexcept {
  if (m.has_status > 1) return detail::fail(Error::kBadValue, "Goodbye.has_status");
  if (!m.has_status && m.exit_status != 0) return detail::fail(Error::kReserved, "Goodbye.exit_status");
  return {};
}
inline Status validate(const AdminMsg& m) noexcept {
  if (m.op < uint32_t(AdminOp::kStatus) || m.op > last_admin_op(kVersion)) return detail::fail(Error::kBadEnum, "Admin.op");
  if (!detail::string_ok(m.job, detail::Charset::kJobId)) return detail::fail(Error::kBadString, "Admin.job");
  if (m.op == uint32_t(AdminOp::kPolicy)) {
    if (m.set_fields != 0 || m.mem != 0 || m.priority != 0 || m.weight != 0)
      return detail::fail(Error::kReserved, "Admin.set_fields");
    if (m.mode > uint8_t(PolicyMode::kPriority)) return detail::fail(Error::kBadEnum, "Admin.mode");
    if (m.mode != uint8_t(PolicyMode::kTimeslice) ? m.quantum_ms != 0
                                                   : m.quantum_ms != 0 && (m.quantum_ms < kMinQuantumMs || m.quantum_ms > kMaxQuantumMs))
      return detail::fail(Error::kBadValue, "Admin.quantum_ms");
    if (m.mode != uint8_t(PolicyMode::kPriority) ? m.target_pct != 0
                                                 : m.target_pct != 0 && (m.target_pct < kMinTargetPct || m.target_pct > kMaxTargetPct))
      return detail::fail(Error::kBadValue, "Admin.target_pct");
    if (m.job[0] == '\0') return detail::fail(Error::kBadString, "Admin.job (the device)");
    return {};
  }
  if (m.op == uint32_t(AdminOp::kEnded)) {
    if (m.priority != 0 || m.weight != 0 || m.mode != 0 || m.target_pct != 0) return detail::fail(Error::kReserved, "Admin.mode");
    if (m.set_fields & ~kEndedUser) return detail::fail(Error::kBadValue, "Admin.set_fields");
    if (!(m.set_fields & kEndedUser) && m.quantum_ms != 0) return detail::fail(Error::kReserved, "Admin.quantum_ms");
    if (m.job[0] != '\0') return detail::fail(Error::kBadString, "Admin.job");
    return {};
  }
  if (m.op == uint32_t(AdminOp::kCancel)) {
    if (m.set_fields != 0 || m.mem != 0 || m.priority != 0 || m.weight != 0 || m.target_pct != 0)
      return detail::fail(Error::kReserved, "Admin.set_fields");
    if (m.mode < 1 || m.mode > kMaxSignal) return detail::fail(Error::kBadValue, "Admin.mode (the signal)");
    if (m.quantum_ms > kMaxCancelGraceMs) return detail::fail(Error::kBadValue, "Admin.quantum_ms (the grace)");
    if (m.job[0] == '\0') return detail::fail(Error::kBadString, "Admin.job");
    return {};
  }
  if (m.mode != 0 || m.quantum_ms != 0 || m.target_pct != 0) return detail::fail(Error::kReserved, "Admin.mode");
  bool is_set = m.op == uint32_t(AdminOp::kSet);
  bool needs_job = is_set || m.op == uint32_t(AdminOp::kReport) || m.op == uint32_t(AdminOp::kPause) ||
                   m.op == uint32_t(AdminOp::kResume) || m.op == uint32_t(AdminOp::kHistoryForget) ||
                   m.op == uint32_t(AdminOp::kSuspend);
  if (needs_job != (m.job[0] != '\0')) return detail::fail(Error::kBadString, "Admin.job");
  if (!is_set) {
    if (m.set_fields != 0 || m.mem != 0 || m.priority != 0 || m.weight != 0)
      return detail::fail(Error::kReserved, "Admin.set_fields");
    return {};
  }
  if (m.set_fields == 0 || (m.set_fields & ~(kSetMem | kSetPriority | kSetWeight)))
    return detail::fail(Error::kBadValue, "Admin.set_fields");
  if ((m.set_fields & kSetWeight) ? (m.weight < kMinWeight || m.weight > kMaxWeight) : (m.weight != 0))
    return detail::fail(Error::kBadValue, "Admin.weight");
  if ((m.set_fields & kSetMem) ? (m.mem == 0) : (m.mem != 0)) return detail::fail(Error::kBadValue, "Admin.mem");
  if (m.set_fields & kSetPriority) {
    if (m.priority > uint8_t(Priority::kHigh)) return detail::fail(Error::kBadEnum, "Admin.priority");
  } else if (m.priority != 0) {
    return detail::fail(Error::kReserved, "Admin.priority");
  }
  return {};
}
inline Status validate(const AdminReplyMsg& m) noexcept {
  if (m.status > uint32_t(AdminStatus::kInternal)) return detail::fail(Error::kBadEnum, "AdminReply.status");
  if (m.flags & ~kAdminMore) return detail::fail(Error::kReserved, "AdminReply.flags");
  if (m.length > kAdminChunk) return detail::fail(Error::kBadValue, "AdminReply.length");
  if (m.reserved0 != 0) return detail::fail(Error::kReserved, "AdminReply.reserved0");
  return {};
}
inline Status validate(const ErrorMsg& m) noexcept {
  if (m.code < uint32_t(ErrorCode::kVersion) || m.code > uint32_t(ErrorCode::kInternal))
    return detail::fail(Error::kBadEnum, "Error.code");
  if (!detail::string_ok(m.text, detail::Charset::kText)) return detail::fail(Error::kBadString, "Error.text");
  return {};
}

// ---- type traits: which struct is which message ---------------------------------------------

template <class T> struct MsgTraits;
#define COLOC_PROTO_TRAIT(name, number, T, member, who)       \
  template <> struct MsgTraits<T> {                           \
    static constexpr MsgType kType = MsgType::k##name;        \
    static constexpr Receiver kReceiver = Receiver::who;      \
  };
COLOC_PROTO_MESSAGES(COLOC_PROTO_TRAIT)
#undef COLOC_PROTO_TRAIT

// ---- decode ----------------------------------------------------------------------------------

/// A decoded message: the header as received and the body in the current (v2) layout. A v1
/// Register arrives here upgraded (see the version history). For AdminReply, `payload` points
/// into the caller's buffer (valid as long as it is) and `payload_len` is its length.
struct Message {
  Header h{};
  union Body {
#define COLOC_PROTO_MEMBER(name, number, T, member, who) T member;
    COLOC_PROTO_MESSAGES(COLOC_PROTO_MEMBER)
#undef COLOC_PROTO_MEMBER
  } body;
  const char* payload = nullptr;
  uint32_t payload_len = 0;

  Message() noexcept { std::memset(&body, 0, sizeof body); }
  MsgType type() const noexcept { return MsgType(h.type); }
};

/// Reads the header of `data` (len bytes) without judging the body. Errors: kShort, kTooLong,
/// kBadMagic, kSizeMismatch. kBadVersion when the version is outside kMinVersion..kVersion;
/// `*out` is filled even then, so the daemon can name the peer's version in its refusal.
inline Status decode_header(const void* data, size_t len, Header* out) noexcept {
  if (len < sizeof(Header)) return detail::fail(Error::kShort, "Header");
  if (len > kMaxMessage) return detail::fail(Error::kTooLong, "Header");
  std::memcpy(out, data, sizeof(Header));
  if (out->magic != kMagic) return detail::fail(Error::kBadMagic, "Header.magic");
  if (out->size != len) return detail::fail(Error::kSizeMismatch, "Header.size");
  if (out->version < kMinVersion || out->version > kVersion) return detail::fail(Error::kBadVersion, "Header.version");
  return {};
}

/// The message type's name ("Grow"), or "?".
inline const char* type_name(uint16_t t) noexcept;
template <class T>
inline Encoded encode(const T& msg, uint32_t seq, void* buf, size_t cap, uint16_t version = kVersion) noexcept;
inline Encoded encode_admin_reply(AdminReplyMsg reply, const char* payload, size_t len, uint32_t seq, void* buf,
                                  size_t cap, uint16_t version = kVersion) noexcept;

namespace detail {

/// Decodes a body of layout T into `*into` (exact size, then validate()).
template <class T>
inline Status decode_body(const void* data, size_t len, Message* /*out*/, T* into) noexcept {
  if (len < sizeof(T)) return fail(Error::kShort, type_name(uint16_t(MsgTraits<T>::kType)));
  if (len > sizeof(T)) return fail(Error::kTooLong, type_name(uint16_t(MsgTraits<T>::kType)));
  std::memcpy(into, data, sizeof(T));
  return validate(*into);
}

/// Register: v1, v2-v4, v5-v8, v9 and v10 have their own layouts, upgraded with defaults.
inline Status decode_body(const void* data, size_t len, Message* out, RegisterMsg* into) noexcept {
  const uint16_t v = out->h.version;
  if (v >= 11) {
    if (len < sizeof(RegisterMsg)) return fail(Error::kShort, "Register");
    if (len > sizeof(RegisterMsg)) return fail(Error::kTooLong, "Register");
    std::memcpy(into, data, sizeof(RegisterMsg));
    return validate(*into);
  }
  std::memset(into, 0, sizeof *into);
  if (v == 10) {  // no step
    RegisterV10 old;
    if (len < sizeof old) return fail(Error::kShort, "Register(v10)");
    if (len > sizeof old) return fail(Error::kTooLong, "Register(v10)");
    std::memcpy(&old, data, sizeof old);
    copy_register_fields(old, *into);
    std::memcpy(into->ledger, old.ledger, sizeof into->ledger);
  } else if (v == 9) {  // no declared estimate
    RegisterV9 old;
    if (len < sizeof old) return fail(Error::kShort, "Register(v9)");
    if (len > sizeof old) return fail(Error::kTooLong, "Register(v9)");
    std::memcpy(&old, data, sizeof old);
    copy_register_fields(old, *into);
    std::memcpy(into->ledger, old.ledger, sizeof into->ledger);
  } else if (v >= 5) {  // no environment hash: the job gets no history
    RegisterV8 old;
    if (len < sizeof old) return fail(Error::kShort, "Register(v8)");
    if (len > sizeof old) return fail(Error::kTooLong, "Register(v8)");
    std::memcpy(&old, data, sizeof old);
    copy_register_fields(old, *into);
    std::memcpy(into->ledger, old.ledger, sizeof into->ledger);
  } else if (v >= 2) {
    RegisterV4 old;
    if (len < sizeof old) return fail(Error::kShort, "Register(v4)");
    if (len > sizeof old) return fail(Error::kTooLong, "Register(v4)");
    std::memcpy(&old, data, sizeof old);
    copy_register_fields(old, *into);
    if (Status s = upgrade_ledger(old.ledger, into->ledger); !s) return s;
  } else {
    RegisterV1 old;  // no wait timeout (the daemon's default), no command line (reports say "unknown")
    if (len < sizeof old) return fail(Error::kShort, "Register(v1)");
    if (len > sizeof old) return fail(Error::kTooLong, "Register(v1)");
    std::memcpy(&old, data, sizeof old);
    copy_register_fields(old, *into);
    if (Status s = upgrade_ledger(old.ledger, into->ledger); !s) return s;
  }
  if (v < 3 && (into->flags & kRegAnchor)) return fail(Error::kReserved, "Register.flags (anchor: v3)");
  if (v < 9 && (into->flags & kRegEnvHash)) return fail(Error::kReserved, "Register.flags (environment hash: v9)");
  if (v < 10 && (into->flags & kRegEstimate)) return fail(Error::kReserved, "Register.flags (estimate: v10)");
  if (v < 11 && (into->flags & kRegStep)) return fail(Error::kReserved, "Register.flags (step: v11)");
  return validate(*into);
}

/// Attach: v1-v4 have their own layout (AttachV4), upgraded with cap = 0 (none).
inline Status decode_body(const void* data, size_t len, Message* out, AttachMsg* into) noexcept {
  if (out->h.version >= 5) {
    if (len < sizeof(AttachMsg)) return fail(Error::kShort, "Attach");
    if (len > sizeof(AttachMsg)) return fail(Error::kTooLong, "Attach");
    std::memcpy(into, data, sizeof(AttachMsg));
    return validate(*into);
  }
  AttachV4 v4;
  if (len < sizeof v4) return fail(Error::kShort, "Attach(v4)");
  if (len > sizeof v4) return fail(Error::kTooLong, "Attach(v4)");
  std::memcpy(&v4, data, sizeof v4);
  std::memset(into, 0, sizeof *into);
  into->h = v4.h;
  into->n_devices = v4.n_devices;
  into->reserved0 = v4.reserved0;
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    into->devices[i].device = v4.devices[i].device;
    into->devices[i].request = v4.devices[i].request;
  }
  return validate(*into);
}

/// ContextFootprint: a v5 message; an older peer never sends it.
inline Status decode_body(const void* data, size_t len, Message* out, ContextFootprintMsg* into) noexcept {
  if (out->h.version < 5) return fail(Error::kBadType, "ContextFootprint (v5)");
  if (len < sizeof *into) return fail(Error::kShort, "ContextFootprint");
  if (len > sizeof *into) return fail(Error::kTooLong, "ContextFootprint");
  std::memcpy(into, data, sizeof *into);
  return validate(*into);
}

/// Admin: one layout in every version; kPause and kResume are v6 ops, kPolicy and the weight, mode
/// and quantum fields v7, the target v8.
inline Status decode_body(const void* data, size_t len, Message* out, AdminMsg* into) noexcept {
  if (len < sizeof *into) return fail(Error::kShort, "Admin");
  if (len > sizeof *into) return fail(Error::kTooLong, "Admin");
  std::memcpy(into, data, sizeof *into);
  if (into->op > last_admin_op(out->h.version))
    return fail(Error::kBadEnum, "Admin.op (pause and resume: v6; policy: v7; history: v9; cancel and ended: v13; suspend: v14)");
  if (out->h.version < 7 && (into->weight != 0 || into->mode != 0 || into->target_pct != 0 || into->quantum_ms != 0))
    return fail(Error::kReserved, "Admin.reserved0 (weight, mode, quantum: v7)");
  if (out->h.version < 8 && into->target_pct != 0) return fail(Error::kReserved, "Admin.target_pct (v8)");
  return validate(*into);
}

/// RegisterReply: one layout in every version; the granted priority and its flags are v8.
inline Status decode_body(const void* data, size_t len, Message* out, RegisterReplyMsg* into) noexcept {
  if (len < sizeof *into) return fail(Error::kShort, "RegisterReply");
  if (len > sizeof *into) return fail(Error::kTooLong, "RegisterReply");
  std::memcpy(into, data, sizeof *into);
  if (out->h.version < 8 && (into->granted_priority != 0 || into->priority_flags != 0))
    return fail(Error::kReserved, "RegisterReply.reserved0 (granted priority: v8)");
  return validate(*into);
}

/// AdminReply: a fixed part, then `length` bytes of payload.
inline Status decode_body(const void* data, size_t len, Message* out, AdminReplyMsg* into) noexcept {
  if (len < sizeof(AdminReplyMsg)) return fail(Error::kShort, "AdminReply");
  std::memcpy(into, data, sizeof(AdminReplyMsg));
  if (Status s = validate(*into); !s) return s;
  if (len != sizeof(AdminReplyMsg) + into->length) return fail(Error::kSizeMismatch, "AdminReply.length");
  out->payload = static_cast<const char*>(data) + sizeof(AdminReplyMsg);
  out->payload_len = into->length;
  return {};
}

template <class T, T Message::Body::*Member>
inline Status decode_as(const void* data, size_t len, Message* out) noexcept {
  return decode_body(data, len, out, &(out->body.*Member));
}

template <class T, T Message::Body::*Member>
inline Encoded reencode_as(const Message& m, void* buf, size_t cap) noexcept {
  return encode(m.body.*Member, m.h.seq, buf, cap, m.h.version);
}
template <>
inline Encoded reencode_as<AdminReplyMsg, &Message::Body::admin_reply>(const Message& m, void* buf, size_t cap) noexcept {
  return encode_admin_reply(m.body.admin_reply, m.payload, m.payload_len, m.h.seq, buf, cap, m.h.version);
}

/// One row per message type, generated from the manifest.
struct MessageInfo {
  MsgType type;
  const char* name;
  Receiver receiver;
  Status (*decode)(const void* data, size_t len, Message* out) noexcept;
  Encoded (*reencode)(const Message& m, void* buf, size_t cap) noexcept;
};

inline constexpr MessageInfo kMessages[] = {
#define COLOC_PROTO_ROW(name, number, T, member, who) \
  {MsgType::k##name, #name, Receiver::who, &decode_as<T, &Message::Body::member>, &reencode_as<T, &Message::Body::member>},
    COLOC_PROTO_MESSAGES(COLOC_PROTO_ROW)
#undef COLOC_PROTO_ROW
};

inline const MessageInfo* find_message(uint16_t type) noexcept {
  for (const MessageInfo& m : kMessages)
    if (uint16_t(m.type) == type) return &m;
  return nullptr;
}

}  // namespace detail

inline const char* type_name(uint16_t t) noexcept {
  const detail::MessageInfo* info = detail::find_message(t);
  return info ? info->name : "?";
}

/// Decodes one datagram into `*out`. Checks everything listed under "Validation" above; on
/// failure `*out` holds no meaningful body. Never reads beyond `len`, never allocates or throws.
inline Status decode(const void* data, size_t len, Receiver who, Message* out) noexcept {
  Status s = decode_header(data, len, &out->h);
  if (!s) {
    // An Error message is readable at any version (it says why we are refused).
    if (s.error != Error::kBadVersion || who != Receiver::kClient || out->h.type != uint16_t(MsgType::kError)) return s;
  }
  out->payload = nullptr;
  out->payload_len = 0;
  const detail::MessageInfo* info = detail::find_message(out->h.type);
  if (!info || info->receiver != who) return detail::fail(Error::kBadType, "Header.type");
  return info->decode(data, len, out);
}

/// Encodes a decoded message again, at its own version and seq (the decoder is canonical: this
/// gives back the bytes it came from). Errors as encode().
inline Encoded encode_message(const Message& m, void* buf, size_t cap) noexcept {
  const detail::MessageInfo* info = detail::find_message(m.h.type);
  if (!info) return Encoded{0, detail::fail(Error::kBadType, "Header.type")};
  return info->reencode(m, buf, cap);
}

// ---- encode ---------------------------------------------------------------------------------

namespace detail {
/// Writes `old`, a message in an older version's layout with its header filled in but for the
/// size, into `buf` (cap bytes).
template <class Old>
inline Encoded write_layout(Old old, void* buf, size_t cap) noexcept {
  Encoded r;
  old.h.size = uint32_t(sizeof old);
  if (cap < sizeof old) { r.status = fail(Error::kNoSpace, "buffer"); return r; }
  std::memcpy(buf, &old, sizeof old);
  r.size = sizeof old;
  return r;
}
}  // namespace detail

/// Writes `msg` with a filled-in header (magic, `version`, type, size, `seq`) into `buf` (cap
/// bytes). The body is validated first; `msg.h` is ignored. `version` must be in
/// kMinVersion..kVersion; a Register at version 1 is written in the RegisterV1 layout, dropping
/// wait_timeout_ns and cmdline; below version 5 an Attach is written in the AttachV4 layout and a
/// Register's ledger caps as 0, dropping the caps; below 9 a Register leaves out its environment
/// hash (and kRegEnvHash), below 10 its estimate (and kRegEstimate), below 11 its step (and
/// kRegStep); a ContextFootprint below 5 and an Admin
/// kPause/kResume below 6, kPolicy or a weight, mode or quantum below 7, and an Admin target or a
/// RegisterReply's granted priority (or its flags) below 8, are kBadVersion.
template <class T>
inline Encoded encode(const T& msg, uint32_t seq, void* buf, size_t cap, uint16_t version) noexcept {
  Encoded r;
  if (version < kMinVersion || version > kVersion) { r.status = detail::fail(Error::kBadVersion, "version"); return r; }
  T copy = msg;
  copy.h = Header{kMagic, version, uint16_t(MsgTraits<T>::kType), uint32_t(sizeof(T)), seq};
  if (Status s = validate(copy); !s) { r.status = s; return r; }
  if constexpr (std::is_same_v<T, ContextFootprintMsg>) {
    if (version < 5) { r.status = detail::fail(Error::kBadVersion, "ContextFootprint (v5)"); return r; }
  }
  if constexpr (std::is_same_v<T, AdminMsg>) {
    if (copy.op > last_admin_op(version)) {
      r.status = detail::fail(Error::kBadVersion, "Admin.op (pause and resume: v6; policy: v7; history: v9; cancel and ended: v13; suspend: v14)");
      return r;
    }
    if (version < 7 && (copy.weight != 0 || copy.mode != 0 || copy.quantum_ms != 0)) {
      r.status = detail::fail(Error::kBadVersion, "Admin.weight, mode, quantum_ms (v7)");
      return r;
    }
    if (version < 8 && copy.target_pct != 0) { r.status = detail::fail(Error::kBadVersion, "Admin.target_pct (v8)"); return r; }
  }
  if constexpr (std::is_same_v<T, RegisterReplyMsg>) {
    if (version < 8 && (copy.granted_priority != 0 || copy.priority_flags != 0)) {
      r.status = detail::fail(Error::kBadVersion, "RegisterReply.granted_priority, priority_flags (v8)");
      return r;
    }
  }
  if constexpr (std::is_same_v<T, AttachMsg>) {
    if (version < 5) {  // an older daemon knows no caps: they are left out
      AttachV4 v4;
      std::memset(&v4, 0, sizeof v4);
      v4.h = copy.h;
      v4.n_devices = copy.n_devices;
      v4.reserved0 = copy.reserved0;
      for (uint32_t i = 0; i < kMaxDevices; ++i) {
        v4.devices[i].device = copy.devices[i].device;
        v4.devices[i].request = copy.devices[i].request;
      }
      return detail::write_layout(v4, buf, cap);
    }
  }
  if constexpr (std::is_same_v<T, RegisterMsg>) {
    if (version < 3 && (copy.flags & kRegAnchor)) { r.status = detail::fail(Error::kReserved, "Register.flags (anchor: v3)"); return r; }
    if (version < 9 && (copy.flags & kRegEnvHash)) {  // an older daemon keeps no history: left out
      copy.flags = uint16_t(copy.flags & ~kRegEnvHash);
      copy.env_hash = 0;
    }
    if (version < 10 && (copy.flags & kRegEstimate)) {  // an older daemon reserves no estimate: left out
      copy.flags = uint16_t(copy.flags & ~kRegEstimate);
      copy.estimate = 0;
    }
    if (version < 11 && (copy.flags & kRegStep)) {  // an older daemon reports no steps: left out
      copy.flags = uint16_t(copy.flags & ~kRegStep);
      std::memset(copy.step, 0, sizeof copy.step);
    }
    if (version == 1) {  // no wait timeout, command line, caps or overheads
      RegisterV1 v1;
      std::memset(&v1, 0, sizeof v1);
      detail::copy_register_fields(copy, v1);
      detail::downgrade_ledger(copy.ledger, v1.ledger);
      return detail::write_layout(v1, buf, cap);
    }
    if (version == 10) {
      RegisterV10 v10;
      std::memset(&v10, 0, sizeof v10);
      detail::copy_register_fields(copy, v10);
      std::memcpy(v10.ledger, copy.ledger, sizeof v10.ledger);
      return detail::write_layout(v10, buf, cap);
    }
    if (version == 9) {
      RegisterV9 v9;
      std::memset(&v9, 0, sizeof v9);
      detail::copy_register_fields(copy, v9);
      std::memcpy(v9.ledger, copy.ledger, sizeof v9.ledger);
      return detail::write_layout(v9, buf, cap);
    }
    if (version >= 5 && version < 9) {
      RegisterV8 v8;
      std::memset(&v8, 0, sizeof v8);
      detail::copy_register_fields(copy, v8);
      std::memcpy(v8.ledger, copy.ledger, sizeof v8.ledger);
      return detail::write_layout(v8, buf, cap);
    }
    if (version < 5) {  // an older daemon knows no caps or overheads: they are left out
      RegisterV4 v4;
      std::memset(&v4, 0, sizeof v4);
      detail::copy_register_fields(copy, v4);
      detail::downgrade_ledger(copy.ledger, v4.ledger);
      return detail::write_layout(v4, buf, cap);
    }
  }
  if (cap < sizeof(T)) { r.status = detail::fail(Error::kNoSpace, "buffer"); return r; }
  std::memcpy(buf, &copy, sizeof(T));
  r.size = sizeof(T);
  return r;
}

/// Writes one AdminReply chunk: the header struct followed by `len` payload bytes (len <=
/// kAdminChunk). `reply.length` is set from `len`.
inline Encoded encode_admin_reply(AdminReplyMsg reply, const char* payload, size_t len, uint32_t seq, void* buf,
                                  size_t cap, uint16_t version) noexcept {
  Encoded r;
  if (version < kMinVersion || version > kVersion) { r.status = detail::fail(Error::kBadVersion, "version"); return r; }
  if (len > kAdminChunk) { r.status = detail::fail(Error::kBadValue, "AdminReply.length"); return r; }
  reply.length = uint32_t(len);
  reply.h = Header{kMagic, version, uint16_t(MsgType::kAdminReply), uint32_t(sizeof reply + len), seq};
  if (Status s = validate(reply); !s) { r.status = s; return r; }
  if (cap < sizeof reply + len) { r.status = detail::fail(Error::kNoSpace, "buffer"); return r; }
  std::memcpy(buf, &reply, sizeof reply);
  if (len) std::memcpy(static_cast<char*>(buf) + sizeof reply, payload, len);
  r.size = sizeof reply + len;
  return r;
}

/// Copies the NUL-terminated `src` into the fixed field `dst` (zero-filling the rest), cutting
/// it to fit; returns false if it had to cut.
template <size_t N>
inline bool set_string(char (&dst)[N], const char* src) noexcept {
  std::memset(dst, 0, N);
  if (!src) return true;
  size_t n = std::strlen(src);
  bool fits = n < N;
  if (!fits) n = N - 1;
  std::memcpy(dst, src, n);
  return fits;
}

}  // namespace coloc::proto
