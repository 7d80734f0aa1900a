// daemon/config/config.h — colocd's settings: defaults, a TOML file (--config), then flags.
//
//   setting          flag               TOML key          default
//   socket           --socket PATH      socket            /run/coloc/colocd.sock
//   state directory  --state-dir DIR    state_dir         /var/lib/coloc
//   headroom         --headroom SIZE|N% headroom          2% of each device
//   admin group      --admin-group NAME admin_group       none (root only)
//   high priority    --high-priority-group NAME  high_priority_group  none (high: root and the admin group only)
//   per-user cap     --max-per-user SIZE max_per_user     none
//   log level        --log-level LEVEL  log_level         $COLOC_LOG_LEVEL, else info
//   grant step       --grant-step SIZE  grant_step        64MiB
//   wait timeout     --wait-timeout DUR wait_timeout      300s (a client's COLOC_WAIT_TIMEOUT wins)
//   sample interval  --sample-interval  sample_interval   100ms (stats pages -> report timelines)
//   restart hold     --resume-grace DUR resume_grace      5s (max; ends when all expected clients are back)
//   connections cap  --max-connections-per-user N  max_connections_per_user  1024 (root, --admin-group: none)
//   first message    --hello-timeout DUR hello_timeout    5s (a connection that sends no valid first message is closed)
//   process watcher  --watcher MODE     watcher           auto (BPF + pidfd, falling back to pidfd); bpf; pidfd
//                    --no-bpf                             (same as --watcher pidfd)
//   metrics          --metrics-listen HOST:PORT  metrics_listen  off (Prometheus /metrics, e.g. 127.0.0.1:9479)
// Sizes use the one grammar of coloc/size.h; durations are "250ms", "5s", "2m" or a plain number
// of seconds. Unknown TOML keys and malformed values are errors that name the key or flag.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "broker/types.h"
#include "util/result.h"

namespace coloc::config {

/// Headroom per device: a fraction of capacity, or a fixed number of bytes.
struct Headroom {
  double fraction = 0.02;
  std::optional<broker::Bytes> bytes;
};

struct Config {
  std::string socket = "/run/coloc/colocd.sock";
  std::string state_dir = "/var/lib/coloc";
  std::string config_file;  ///< "" = none
  Headroom headroom;
  std::string admin_group;  ///< "" = root only
  /// Members may run jobs at priority high (besides root and the admin group, who may anyway);
  /// "" = none. Anyone else asking for high is registered as normal.
  std::string high_priority_group;
  std::optional<broker::Bytes> max_per_user;
  std::string log_level = "info";
  broker::Bytes grant_step = 64ull << 20;
  broker::Nanos wait_timeout = 300'000'000'000;
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
};

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

/// Applies the settings in TOML document `text` (read from `origin`, for messages) to `cfg`.
Result<void> apply_toml(const std::string& text, const std::string& origin, Config& cfg);

/// The outcome of parsing colocd's command line.
struct CommandLine {
  Config config;
  bool exit_now = false;  ///< --help or --version was printed: exit with `exit_code`
  int exit_code = 0;
};
/// Parses argv (CLI11): defaults, then the --config file, then the flags. Prints --help itself.
/// Errors (a bad flag, an unreadable or invalid config file) name what is wrong.
Result<CommandLine> parse_command_line(int argc, const char* const* argv);

}  // namespace coloc::config
