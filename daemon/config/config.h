// daemon/config/config.h — colocd's settings: defaults, then a TOML file, then flags.
//
// One table drives everything (settings(), config_table.cpp): each setting's TOML key, its flag,
// its type, its default as text, its help, and whether SIGHUP can change it in a running colocd.
// The TOML parser, the CLI11 flags, `colocd --check-config`'s output and docs/operations.md's
// "Configuration" table (markdown_table(); a test compares the two) all come from it.
//
// The file. `--config FILE` (it must exist), else $COLOC_CONFIG when set (tests point it elsewhere;
// empty: no file), else /etc/coloc/colocd.toml when it exists. Top-level keys are the table's;
// besides them, `[devices."GPU-…"]` tables set one device's compute policy (keys policy, quantum,
// target_slowdown, as `coloc policy` names them): it applies at start where the state directory
// holds none for the device, and on SIGHUP it replaces the stored one. Flags override the file,
// the file overrides the defaults; on SIGHUP the flags given at start still win.
//
// Values. Sizes use the one grammar of coloc/size.h (a TOML string, or an integer of bytes);
// durations are "250ms", "5s", "2m", "1h" (or a number of seconds); counts are integers.
// Errors name the file, the line and the key ("colocd.toml:3: headroom: 'much' is not a size"),
// or the flag: an unknown key (with a "did you mean" from the table), a wrong TOML type (naming
// the expected one), a malformed value, an unreadable file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <sys/types.h>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/backfill.h"
#include "broker/preempt.h"
#include "broker/types.h"
#include "compute/compute_policy.h"
#include "util/result.h"

namespace coloc::config {

/// Where colocd looks for its file without --config.
inline constexpr const char* kDefaultConfigPath = "/etc/coloc/colocd.toml";

/// Headroom per device: a fraction of capacity, or a fixed number of bytes.
struct Headroom {
  double fraction = 0.02;
  std::optional<broker::Bytes> bytes;
};

/// Where a setting's value came from.
enum class Source : uint8_t { kDefault, kFile, kFlag };
/// "default", "file", "flag".
const char* source_name(Source s);

/// A device's compute policy from the file's `[devices."UUID"]` table.
struct DevicePolicy {
  compute::PolicySettings settings;  ///< unset keys: `coloc policy`'s defaults (100ms, 5%)
  int line = 0;                      ///< the table's line in the file (for messages)
};

/// A setting given as a flag: its TOML key and the flag's text (reapplied on every reload).
using FlagValues = std::vector<std::pair<std::string, std::string>>;

struct Config {
  std::string socket = "/run/coloc/colocd.sock";
  std::string state_dir = "/var/lib/coloc";
  Headroom headroom;
  std::string admin_group;  ///< "" = root only
  /// Members may run jobs at priority high (besides root and the admin group, who may anyway);
  /// "" = none. Anyone else asking for high is registered as normal.
  std::string high_priority_group;
  std::optional<broker::Bytes> max_per_user;
  std::string log_level = "info";
  broker::Bytes grant_step = 64ull << 20;
  broker::Nanos wait_timeout = 300'000'000'000;
  broker::Nanos admission_timeout = 0;  ///< how long an admission waits (0 = for ever)
  broker::backfill::Mode backfill = broker::backfill::Mode::kEasy;
  /// Preemption (issue 29): which jobs a high job waiting for memory may suspend to host memory;
  /// nullopt = "auto": best-effort where the driver's checkpoint API works (`coloc-ckpt check`),
  /// else off, said once at start.
  std::optional<broker::PreemptMode> preempt;
  /// A job is suspended at most once per this much running (ns; since it started or came back).
  broker::Nanos preempt_min_run = 60'000'000'000;
  /// Host memory a suspension leaves free: MemAvailable less this fraction of RAM must hold what
  /// it moves (0 to < 1).
  double suspend_host_reserve = 0.10;
  /// How long the helper waits for a process's work in flight before it gives up the suspension
  /// (cuCheckpointProcessLock's timeout; ns, 1 ms to 10 min).
  broker::Nanos suspend_lock_timeout = 10'000'000'000;
  /// The checkpoint helper (coloc-ckpt); "" = next to colocd, or ../lib/coloc/coloc-ckpt from it.
  std::string ckpt_helper;
  /// How long ended jobs' reports are kept (report_retention): reports older than `age` (0 = any
  /// age) and past the newest `count` (0 = any number) are deleted, off the loop.
  struct Retention {
    broker::Nanos age = 0;
    uint64_t count = 10000;
    bool operator==(const Retention&) const = default;
  } report_retention;
  broker::Nanos sample_interval = 100'000'000;
  broker::Nanos resume_grace = 5'000'000'000;
  std::string watcher = "auto";  ///< auto | bpf | pidfd
  /// Connections one uid other than root and the admin group may hold at once, registered or not
  /// (>= 1). 1024 leaves room for hundreds of jobs of one user (coloc run and its CUDA process
  /// are two connections) and keeps any one user far from colocd's descriptor limit.
  size_t max_connections_per_user = 1024;
  /// A connection that has sent no valid first message (Register or Admin) this long after it was
  /// accepted is closed. Clients send it at once; 5 s covers a loaded machine.
  broker::Nanos hello_timeout = 5'000'000'000;
  /// Where /metrics is served in the Prometheus text format, "HOST:PORT" ("127.0.0.1:9479");
  /// "" = off (the default).
  std::string metrics_listen;
  /// The compute policy of devices that have none of their own (neither a `[devices."UUID"]`
  /// table nor one `coloc policy` stored): keys policy, quantum, target_slowdown.
  compute::PolicySettings policy;
  bool history = true;                  ///< keep the run history (<state-dir>/history.db)
  size_t history_runs = 20;             ///< runs kept per fingerprint (1..1000)
  size_t history_fingerprints = 1000;   ///< fingerprints kept per user (1..1000000)
  /// The file's `[devices."UUID"]` tables.
  std::map<broker::Uuid, DevicePolicy> devices;

  // ---- where it came from ----
  std::string config_file;       ///< the file read ("" = none)
  std::string config_path;       ///< the file looked for (--config, $COLOC_CONFIG or the default; "" = none)
  bool config_required = false;  ///< --config named it: a missing file is an error
  std::map<std::string, Source> sources;  ///< by key: where each setting's value came from
  std::map<std::string, int> lines;       ///< by key: its line in the file (the keys the file set)
  FlagValues flags;                       ///< the flags given, reapplied over the file on reload
};

/// TOML value types a setting accepts (Setting::toml_types).
inline constexpr unsigned kTomlString = 1, kTomlInteger = 2, kTomlFloat = 4, kTomlBoolean = 8;

/// A setting of the table.
struct Setting {
  const char* key;            ///< TOML key, e.g. "headroom"
  const char* flag;           ///< its flag, e.g. "--headroom"
  const char* type;           ///< what the value is, for messages and docs: "a size or a percentage"
  const char* default_text;   ///< the default, as text (also in docs and --help)
  const char* help;           ///< one line for --help and the docs
  bool live;                  ///< SIGHUP changes it in a running colocd (else: needs a restart)
  bool quoted;                ///< shown as a TOML string (else as an integer or a boolean)
  unsigned toml_types;        ///< the TOML types it accepts: kTomlString | kTomlInteger | ...
  const char* example;        ///< a valid value other than the default (TOML text): tests, docs
  /// Parses `text` into `cfg`; errors name `where` (the flag, or "file:line: key").
  Result<void> (*set)(Config& cfg, std::string_view text, const std::string& where);
  /// The effective value, as text that set() reads back.
  std::string (*show)(const Config& cfg);
};

/// Every setting, in the order --check-config and the docs show them.
std::span<const Setting> settings();
/// The setting of TOML key `key`, or null.
const Setting* find_setting(std::string_view key);
/// The key of the table nearest to `key` by edit distance (Levenshtein), when it is close
/// (at most a third of its length, and at least 1, away); "" when none is.
std::string did_you_mean(std::string_view key);

/// A count >= 1 ("1024"). Errors name `what`.
Result<size_t> parse_count(std::string_view text, const std::string& what);
/// "2%" (0 < N < 100, decimals allowed) or a size. Errors name `what`.
Result<Headroom> parse_headroom(std::string_view text, const std::string& what);
/// A size (coloc/size.h). Errors name `what`.
Result<broker::Bytes> parse_bytes(std::string_view text, const std::string& what);
/// A per-user cap: a size > 0 (0 would refuse every job). Errors name `what`.
Result<broker::Bytes> parse_max_per_user(std::string_view text, const std::string& what);
/// "250ms", "5s", "2m", "1h", or a plain number of seconds (decimals allowed). Errors name `what`.
Result<broker::Nanos> parse_duration(std::string_view text, const std::string& what);
/// "HOST:PORT": a host name, an IPv4 address or a bracketed IPv6 address ("[::1]:9479"), and a
/// port 0..65535 (0: any free port, which the listener reports once bound). Returns (host without
/// brackets, port). Errors name `what`.
Result<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text, const std::string& what);
/// share, timeslice or priority (`coloc policy`'s modes). Errors name `what`.
Result<proto::PolicyMode> parse_policy_mode(std::string_view text, const std::string& what);
/// A timeslice quantum: a duration of whole milliseconds, 1ms..60s. Errors name `what`.
Result<broker::Nanos> parse_quantum(std::string_view text, const std::string& what);
/// The priority policy's target slowdown: "5%" or 5, 1..50 percent. Errors name `what`.
Result<uint32_t> parse_target_slowdown(std::string_view text, const std::string& what);
/// true/false (also on/off, yes/no, 1/0). Errors name `what`.
Result<bool> parse_bool(std::string_view text, const std::string& what);
/// report_retention: "" (keep every report), or a comma-separated age (a duration: "30d") and/or
/// count ("5000 reports"), each at most once and more than 0. Errors name `what`.
Result<Config::Retention> parse_retention(std::string_view text, const std::string& what);
std::string format_retention(const Config::Retention& r);
/// A duration as set() reads it back: "300s", "250ms", "1500us".
std::string format_duration(broker::Nanos ns);
/// A size as set() reads it back: "64MiB", "1GiB", or bytes ("1000").
std::string format_bytes(broker::Bytes b);

/// Applies the settings in TOML document `text` (read from `origin`, for messages) to `cfg`,
/// marking each key it sets as from the file. Errors: "origin:line: key: what".
Result<void> apply_toml(const std::string& text, const std::string& origin, Config& cfg);

/// Where setting `key`'s value came from, for messages: "file:line: key" (the file), its flag
/// ("--admin-group"), or the key (the default).
std::string origin_of(const Config& cfg, const std::string& key);
/// The group that group setting `key` (admin_group, high_priority_group) names: nullopt for "";
/// an error naming origin_of() when there is no such group ("colocd.toml:4: admin_group: no such
/// group 'gpu-admins'").
Result<std::optional<gid_t>> lookup_group(const Config& cfg, const std::string& key);
/// Both groups exist (lookup_group): a configuration error otherwise, as at start (exit 2),
/// on SIGHUP and in --check-config.
Result<void> check_groups(const Config& cfg);

/// Where colocd reads its file without --config: $COLOC_CONFIG when set (empty: no file), else
/// kDefaultConfigPath.
std::string default_config_path();

/// Builds a configuration: the defaults ($COLOC_LOG_LEVEL for log_level), then `path` ("" =
/// none; a missing file is an error only when `required`), then `flags` (key, text), which it
/// keeps in Config::flags. Errors name the file, line and key, or the flag.
Result<Config> load(const std::string& path, bool required, const FlagValues& flags);

/// The effective configuration as TOML, every key with where its value came from ("# default",
/// "# file", "# flag"), then the per-device tables: `colocd --check-config`'s output.
std::string describe(const Config& cfg);

/// The settings that differ between `a` and `b` (by their shown values), in table order.
std::vector<const Setting*> changed(const Config& a, const Config& b);

/// docs/operations.md's table of keys (markdown), generated from settings().
std::string markdown_table();

/// The outcome of parsing colocd's command line.
struct CommandLine {
  Config config;
  bool exit_now = false;      ///< --help was printed: exit with `exit_code`
  int exit_code = 0;
  bool check_config = false;  ///< --check-config: validate, print describe(), exit
};
/// Parses argv (CLI11): defaults, then the config file, then the flags. Prints --help itself.
/// Errors (a bad flag, an unreadable or invalid config file) name what is wrong.
Result<CommandLine> parse_command_line(int argc, const char* const* argv);

/// `colocd --check-config`: prints describe() of the configuration argv gives to `out`, or the
/// error to `err`. Also checks that the groups it names exist. Returns the exit status: 0 when
/// valid, 2 when not.
int check_config(int argc, const char* const* argv, std::FILE* out, std::FILE* err);

}  // namespace coloc::config
