// daemon/broker/types.h — the words the broker's books are written in: bytes, times, device
// UUIDs, job keys, and the replies and events the broker hands back to the engine.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "coloc/protocol.h"

namespace coloc::broker {

using Bytes = uint64_t;  ///< bytes of device memory
using Nanos = uint64_t;  ///< monotonic time in ns (CLOCK_MONOTONIC in the daemon, a fake clock in tests)
using ClientId = uint64_t;  ///< one registered connection (normally one process); never reused
using JobSerial = uint64_t;  ///< one run of a job (a job id can be reused after the job ends); never reused

using proto::OnFull;
using proto::Priority;
using proto::Reason;

inline constexpr Bytes kNoLimit = proto::kNoLimit;
inline constexpr Bytes kUnknown = proto::kUnknown;
inline constexpr Nanos kNever = UINT64_MAX;

/// Rounds `b` up to a multiple of `step` (> 0), saturating at UINT64_MAX.
inline Bytes round_up(Bytes b, Bytes step) {
  Bytes r = b % step;
  if (r == 0) return b;
  Bytes add = step - r;
  return b > UINT64_MAX - add ? UINT64_MAX : b + add;
}

/// A device's identity (cuDeviceGetUuid).
struct Uuid {
  std::array<uint8_t, 16> bytes{};
  auto operator<=>(const Uuid&) const = default;
  /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
  std::string str() const;
  static Uuid from(const uint8_t (&b)[16]);
  /// The inverse of str() (hex digits of either case); false for anything else.
  static bool parse(const std::string& text, Uuid* out);
};

/// A job is keyed by (uid, id): names never collide across users.
struct JobKey {
  uint32_t uid = 0;
  std::string id;
  auto operator<=>(const JobKey&) const = default;
  /// "uid:id"
  std::string str() const { return std::to_string(uid) + ":" + id; }
};

/// What a client asks when it registers (from Register, pid/uid from SO_PEERCRED).
struct ClientSpec {
  uint32_t uid = 0;
  int32_t pid = 0;
  std::string job_id;        ///< never empty (the engine derives one)
  Priority priority = Priority::kNormal;
  OnFull on_full = OnFull::kWait;
  Bytes limit = kNoLimit;    ///< requested per-device limit and reservation
  Nanos wait_timeout = 0;    ///< 0 = the broker's default
  uint64_t age = 0;          ///< larger = younger (process start time); orders deadlock victims
  /// The job's anchor (`coloc run`, proto::kRegAnchor): attaches nothing; while one is registered
  /// the job keeps its reservation on devices none of its processes is attached to.
  bool anchor = false;
  /// The job's declared estimate per device (Register v10, kRegEstimate: COLOC_MEM_ESTIMATE, from
  /// `coloc run --estimate-from`), bytes; 0 = none. Not a limit: its reservation at a first
  /// admission when it has neither a limit nor history there.
  Bytes estimate = 0;
};

/// What the driver counts for one process on a device (NVML's per-process figure): `used` in
/// bytes, kUnknown when the driver does not say (NVML_VALUE_NOT_AVAILABLE).
struct ProcessFigure {
  int32_t pid = 0;
  Bytes used = kUnknown;
};

/// One device of an Attach request.
struct AttachRequest {
  Uuid uuid;
  Bytes capacity = 0;
  Bytes physical_free = kUnknown;
  Bytes request = 0;  ///< bytes needed at once
  bool measured = false;  ///< capacity and physical_free are colocd's own reading (NVML), not the client's
  /// The process's own cap on the device (COLOC_MEM_LIMIT_<n>), kNoLimit = none: at the job's first
  /// admission there its limit on the device becomes min(job limit, cap) (Broker::limit_on).
  Bytes cap = kNoLimit;
  /// The job's known footprint on the device from its run history (bytes; 0 = none): its
  /// reservation there at its first admission when it declares no limit (`--mem` comes first).
  Bytes estimate = 0;
  /// The job's expected time from admission to end on the device, from its run history (ns; the
  /// median of its fingerprint's clean runs there; 0 = not known): its expected end once admitted
  /// (JobDevice::expected_end), which the backfill rule reads (backfill.h).
  Nanos run = 0;
};

/// Where a job's reservation on a device comes from. Precedence: a declared limit (`--mem`, or a
/// process's COLOC_MEM_LIMIT_<n>) over the run history over the job's declared estimate over the
/// online prediction. A stable prediction above a history or estimate reservation still raises
/// it (neither is a limit).
enum class Footprint : uint8_t {
  kNone = 0,  ///< nothing known: no reservation (the job grows by ordinary grants)
  kMem,       ///< the declared limit
  kHistory,   ///< the run history's estimate at admission (est::history_estimate)
  kOnline,    ///< the job's own stable online prediction (estimator/online.h)
  kEstimate,  ///< the job's declared analytic estimate at admission (ClientSpec::estimate)
};
/// "none", "mem", "history", "online", "estimate".
inline const char* footprint_name(Footprint f) {
  switch (f) {
    case Footprint::kMem: return "mem";
    case Footprint::kHistory: return "history";
    case Footprint::kOnline: return "online";
    case Footprint::kEstimate: return "estimate";
    case Footprint::kNone: break;
  }
  return "none";
}

/// Where a job stands in a suspension (issue 29: its processes checkpointed to host memory by the
/// driver's checkpoint API; Broker::begin_suspend .. end_restore, broker_suspend.cpp).
enum class Suspension : uint8_t {
  kNone = 0,    ///< running
  kSuspending,  ///< the helper locks and checkpoints its processes; its books are as they were
  kSuspended,   ///< checkpointed: its memory is on the host, its restore request waits for room
  kRestoring,   ///< its restore was admitted: what it needs is reserved while the helper restores
  kLost,        ///< a restore failed: its processes stay checkpointed (or FAILED); never retried
};
/// "running", "suspending", "suspended", "restoring", "lost".
inline const char* suspension_name(Suspension s) {
  switch (s) {
    case Suspension::kSuspending: return "suspending";
    case Suspension::kSuspended: return "suspended";
    case Suspension::kRestoring: return "restoring";
    case Suspension::kLost: return "lost";
    case Suspension::kNone: break;
  }
  return "running";
}

/// One device of a resumed ledger (Register with kRegResume); its index is its slot.
struct ResumeEntry {
  Uuid uuid;
  Bytes capacity = 0;
  Bytes physical_free = kUnknown;
  Bytes in_use = 0;
  Bytes grant = 0;
  /// The job's limit on the device as the client last saw it (its control page), 0 = not known.
  /// Below the job's limit it was a cap there (Broker::resume), and holds there again.
  Bytes limit = kNoLimit;
  bool measured = false;  ///< capacity and physical_free are colocd's own reading (NVML), not the client's
  /// The process's own cap on the device (as AttachRequest::cap). It binds that process only (its
  /// library holds it there): resume does not make it the job's. The job's cap there, when it had
  /// one, shows in `limit`.
  Bytes cap = kNoLimit;
  Bytes overhead = 0;     ///< the driver overhead the previous daemon had booked for it there (bytes)
  /// What the driver holds for the process on the device, as colocd read it at the
  /// re-registration (bytes; 0 when its list does not name the process; kUnknown when colocd
  /// cannot tell: no per-process figures, or a list whose pids are not colocd's).
  Bytes driver_used = kUnknown;
};

/// A reply the engine must send for a request that has one (Attach or Grow).
struct Reply {
  enum class Kind { kAttach, kGrow } kind = Kind::kGrow;
  ClientId client = 0;
  uint32_t seq = 0;
  bool granted = false;
  Reason reason = Reason::kNone;
  Nanos waited = 0;
  // kGrow:
  uint32_t slot = 0;
  Bytes grant = 0;
  Bytes limit = kNoLimit;
  // kAttach, in request order:
  struct SlotGrant {
    uint32_t slot;
    Bytes grant;
  };
  std::vector<SlotGrant> slots;
};

/// Something that happened, for reports and logs.
struct Event {
  enum class Kind {
    kJobStarted,   ///< a job's first client registered
    kJobEnded,     ///< its last client left
    kAdmitted,     ///< the job was admitted on `device` (reservation held)
    kWaitBegin,    ///< a request parked (memory or admission)
    kWaitEnd,      ///< a parked request was answered (`reason` kNone when granted)
    kRefused,      ///< a request was refused (an OOM for the job); `reason` says why
    kDriverOom,    ///< the client reported a driver OOM inside a grant
  } kind;
  JobSerial job = 0;
  JobKey key;
  Nanos at = 0;
  Uuid device;             ///< for device events
  bool admission = false;  ///< kWaitBegin/kWaitEnd/kRefused: an admission rather than growth
  Reason reason = Reason::kNone;
  Bytes bytes = 0;   ///< the request (need or request size)
  Bytes in_use = 0;  ///< the client's bytes in use at the time, when known
};

}  // namespace coloc::broker
