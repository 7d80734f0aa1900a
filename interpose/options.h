// interpose/options.h — the interposer's settings, read once from the environment through one
// table (kOptionSpecs).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Sizes use the one grammar of include/coloc/size.h ("20GiB", "1.5G", "500MB", plain bytes). A
// malformed value never aborts the job: it is reported once (read_options collects the message;
// the runtime logs it as an error) and the setting falls back as its row says.
#pragma once

#include <cstdint>

#include "coloc/protocol.h"
#include "log.h"

namespace coloc::interpose {

/// "No limit" for a device (and the value of an unset limit); the protocol's value.
inline constexpr uint64_t kNoLimit = UINT64_MAX;
/// Ordinals that may have their own limit (COLOC_MEM_LIMIT_0 .. COLOC_MEM_LIMIT_63).
inline constexpr int kMaxOrdinals = 64;
/// Default cost of one CUDA context: 512 MiB, a typical CUDA 12/13 context on Hopper as
/// nvidia-smi shows it (it varies with the GPU, driver and lazy module loading). A context's real
/// cost cannot be measured before it exists, so it is configured (COLOC_CONTEXT_BYTES).
inline constexpr uint64_t kDefaultContextBytes = 512ull << 20;

/// Settings of this process.
struct Options {
  uint64_t mem_limit = kNoLimit;               ///< COLOC_MEM_LIMIT: bytes, every device
  uint64_t mem_limit_ordinal[kMaxOrdinals] = {};  ///< COLOC_MEM_LIMIT_<n>: bytes, when has_ordinal_limit[n]
  /// COLOC_MEM_ESTIMATE: bytes per device the job's analytic estimate says it needs (`coloc run
  /// --estimate-from`); 0 = none. Not a limit: sent in Register (v10) for colocd to reserve at
  /// admission when the job has no limit and no history.
  uint64_t mem_estimate = 0;
  bool has_ordinal_limit[kMaxOrdinals] = {};      ///< COLOC_MEM_LIMIT_<n> was given (even malformed)
  LogLevel log_level = LogLevel::warn;         ///< COLOC_LOG_LEVEL
  char job[64] = {};                           ///< COLOC_JOB, or "<command>-<pid>"
  char report[512] = {};                       ///< COLOC_REPORT path ("%p" = pid); empty = none
  uint64_t context_bytes = kDefaultContextBytes;  ///< COLOC_CONTEXT_BYTES
  bool job_set = false;                        ///< COLOC_JOB was given (else this process names the job and exports COLOC_JOB to its children)
  size_t job_given_length = 0;                 ///< COLOC_JOB's length as given (> 63: `job` is shortened)
  /// COLOC_STEP: the process's step within its job (the Slurm plugin sets it: "batch", "extern",
  /// "0", ...), 1 to 15 characters of [A-Za-z0-9._-] (proto::valid_step); empty = none (also
  /// when the value was malformed: then ignored, with one error line at cuInit). Sent in
  /// Register (v11) for the job's report.
  char step[proto::kStepSize] = {};

  // The daemon (docs/daemon.md, "The client contract").
  char socket[108] = {};                       ///< COLOC_SOCKET (sockaddr_un's size); empty = not given
  proto::Priority priority = proto::Priority::kNormal;  ///< COLOC_PRIORITY: high|normal|best-effort
  proto::OnFull on_full = proto::OnFull::kWait;         ///< COLOC_ON_FULL: wait|fail
  uint64_t wait_timeout_ns = 0;                ///< COLOC_WAIT_TIMEOUT in ns; 0 = the daemon's default (300 s)
  bool require_daemon = false;                 ///< COLOC_REQUIRE_DAEMON=1: no daemon fails cuInit
  char require_daemon_text[8] = "1";           ///< COLOC_REQUIRE_DAEMON as the user wrote it (1, yes, true, on)

  static constexpr int kMaxErrors = 8;
  char errors[kMaxErrors][256] = {};           ///< messages for malformed values, to log once
  int n_errors = 0;
};

/// Fills `out` from `env` (KEY=VALUE strings, NULL-terminated, like environ) and `pid` (for the
/// default job name). Unknown COLOC_* variables are ignored. Allocation-free.
void read_options(char* const* env, int pid, Options* out);

/// Parses a duration: "250ms", "5s", "2m", "1h", "1.5s", "300us", "10ns", or a plain number of
/// seconds. Stores nanoseconds in *ns (saturating at 2^64-1 is an error: at most ~584 years).
/// Returns nullptr, or a static message saying what is wrong. Allocation-free.
const char* parse_duration(const char* text, uint64_t* ns);

/// The limit in bytes for the device this process numbers `ordinal`: COLOC_MEM_LIMIT_<ordinal>
/// when given (kNoLimit if it was malformed), else COLOC_MEM_LIMIT, else kNoLimit.
uint64_t limit_for_ordinal(const Options& o, int ordinal);

/// The per-device cap in bytes for the device this process numbers `ordinal`: COLOC_MEM_LIMIT_<n>
/// when given (kNoLimit if it was malformed), else kNoLimit. Under a daemon this is the only local
/// limit: COLOC_MEM_LIMIT is the registration request, and the daemon's limit (control page) holds.
uint64_t device_cap_for_ordinal(const Options& o, int ordinal);

/// One row of the option table.
struct OptionSpec {
  const char* name;     ///< variable name; a name ending in '_' is a prefix followed by an ordinal
  const char* meaning;  ///< for docs and error messages
  /// Parses `value` into `o` (ordinal is -1 for plain names); on error returns a static message
  /// describing the problem and the fallback, else nullptr.
  const char* (*apply)(Options& o, const char* value, int ordinal);
};

/// The option table.
extern const OptionSpec kOptionSpecs[];
extern const int kOptionSpecCount;

/// This process's options: the defaults until runtime init has read the environment. Written
/// only by runtime init (before it publishes "ready") and by single-threaded tests.
const Options& options();
/// Replaces this process's options (runtime init, tests).
void set_options(const Options& o);

}  // namespace coloc::interpose
