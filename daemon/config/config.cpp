#include "config/config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
// toml++ without exceptions: parse() returns a result we can test (no exception crosses this file).
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "coloc/size.h"

namespace coloc::config {

namespace {

/// A setting that is not valid: a sentence for people (no errno: it is not a failed system call).
Error invalid(std::string what) { return Error{0, std::move(what)}; }

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

/// Parses a non-negative decimal number; nullopt on anything else.
std::optional<double> parse_number(const std::string& s) {
  if (s.empty() || s.front() == '-' || s.front() == '+') return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

}  // namespace

Result<broker::Bytes> parse_bytes(std::string_view text, const std::string& what) {
  SizeParse p = parse_size(text);
  if (!p) return invalid(what + ": '" + std::string(text) + "' is not a size (" + p.error + ")");
  return *p.bytes;
}

Result<broker::Bytes> parse_max_per_user(std::string_view text, const std::string& what) {
  auto b = parse_bytes(text, what);
  if (!b) return b;
  // A cap of 0 would refuse every job of every user: surely a mistake (leave the setting out for
  // no cap).
  if (b.value() == 0) return invalid(what + ": must be more than 0 (leave it out for no cap)");
  return b;
}

Result<size_t> parse_count(std::string_view text, const std::string& what) {
  std::string t = trim(text);
  auto v = parse_number(t);
  if (!v || *v < 1 || *v != std::floor(*v) || *v > 1e9)
    return invalid(what + ": '" + t + "' is not a whole number from 1 to 1000000000");
  return size_t(*v);
}

Result<Headroom> parse_headroom(std::string_view text, const std::string& what) {
  std::string t = trim(text);
  Headroom h;
  if (!t.empty() && t.back() == '%') {
    auto v = parse_number(trim(std::string_view(t).substr(0, t.size() - 1)));
    if (!v || *v >= 100) return invalid(what + ": '" + t + "' is not a percentage below 100%");
    h.fraction = *v / 100.0;
    return h;
  }
  auto b = parse_bytes(t, what);
  if (!b) return invalid(b.error().what + " or a percentage such as 2%");
  h.bytes = b.value();
  return h;
}

Result<broker::Nanos> parse_duration(std::string_view text, const std::string& what) {
  std::string t = trim(text);
  struct Unit {
    const char* suffix;
    double ns;
  };
  static constexpr Unit units[] = {{"ms", 1e6}, {"us", 1e3}, {"ns", 1}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  double scale = 1e9;
  std::string num = t;
  for (const Unit& u : units) {
    std::string_view sv(t);
    std::string_view suf(u.suffix);
    if (sv.size() > suf.size() && sv.substr(sv.size() - suf.size()) == suf) {
      scale = u.ns;
      num = trim(sv.substr(0, sv.size() - suf.size()));
      break;
    }
  }
  auto v = parse_number(num);
  if (!v || *v * scale > 1.8e19)
    return invalid(what + ": '" + t + "' is not a duration (e.g. 250ms, 5s, 2m, or seconds)");
  return broker::Nanos(*v * scale);
}

namespace {

/// A TOML value as text: strings as they are, integers as decimal, floats too.
std::optional<std::string> scalar_text(const toml::node& n) {
  if (auto s = n.value<std::string>()) return *s;
  if (n.is_integer()) {
    auto i = n.value<int64_t>();
    if (i && *i >= 0) return std::to_string(*i);
    return std::nullopt;
  }
  if (n.is_floating_point()) {
    std::ostringstream o;
    o << *n.value<double>();
    return o.str();
  }
  return std::nullopt;
}

}  // namespace

Result<void> apply_toml(const std::string& text, const std::string& origin, Config& cfg) {
  toml::parse_result parsed = toml::parse(text, origin);
  if (!parsed) {
    const auto& err = parsed.error();
    std::ostringstream o;
    o << origin << ":" << err.source().begin.line << ":" << err.source().begin.column << ": " << err.description();
    return invalid(o.str());
  }
  toml::table& tbl = parsed.table();
  for (auto&& [k, node] : tbl) {
    const std::string key(k.str());
    const std::string where = origin + ": " + key;
    auto value = scalar_text(node);
    if (!value) return invalid(where + ": expected a string or a non-negative number");
    const std::string& v = *value;
    if (key == "socket") {
      cfg.socket = v;
    } else if (key == "state_dir") {
      cfg.state_dir = v;
    } else if (key == "headroom") {
      auto h = parse_headroom(v, where);
      if (!h) return h.error();
      cfg.headroom = h.value();
    } else if (key == "admin_group") {
      cfg.admin_group = v;
    } else if (key == "high_priority_group") {
      cfg.high_priority_group = v;
    } else if (key == "max_per_user") {
      auto b = parse_max_per_user(v, where);
      if (!b) return b.error();
      cfg.max_per_user = b.value();
    } else if (key == "log_level") {
      cfg.log_level = v;
    } else if (key == "grant_step") {
      auto b = parse_bytes(v, where);
      if (!b) return b.error();
      if (b.value() == 0) return invalid(where + ": must be more than 0");
      cfg.grant_step = b.value();
    } else if (key == "wait_timeout" || key == "sample_interval" || key == "resume_grace" || key == "hello_timeout") {
      auto d = parse_duration(v, where);
      if (!d) return d.error();
      (key == "wait_timeout"      ? cfg.wait_timeout
       : key == "sample_interval" ? cfg.sample_interval
       : key == "hello_timeout"   ? cfg.hello_timeout
                                  : cfg.resume_grace) = d.value();
    } else if (key == "max_connections_per_user") {
      auto n = parse_count(v, where);
      if (!n) return n.error();
      cfg.max_connections_per_user = n.value();
    } else if (key == "watcher") {
      if (v != "auto" && v != "bpf" && v != "pidfd") return invalid(where + ": must be auto, bpf or pidfd");
      cfg.watcher = v;
    } else if (key == "metrics_listen") {
      cfg.metrics_listen = v;
    } else {
      return invalid(where + ": unknown setting");
    }
  }
  return {};
}

Result<CommandLine> parse_command_line(int argc, const char* const* argv) {
  CommandLine out;
  Config& cfg = out.config;
  if (const char* env = std::getenv("COLOC_LOG_LEVEL"); env && *env) cfg.log_level = env;

  CLI::App app{"colocd: the coloc node daemon. Keeps the books of GPU memory for every job on this machine,\n"
               "admits jobs when their footprint fits, and makes allocations wait instead of crash.",
               "colocd"};
  std::string socket, state_dir, config_file, headroom, admin_group, high_priority_group, max_per_user, log_level, grant_step,
      wait_timeout, sample_interval, resume_grace, watcher, max_connections, hello_timeout, metrics_listen;
  bool no_bpf = false;
  app.add_option("--socket", socket, "Unix socket to listen on (default /run/coloc/colocd.sock)");
  app.add_option("--state-dir", state_dir, "Directory for reports and restart state (default /var/lib/coloc)");
  app.add_option("--config", config_file, "TOML file with the same settings (flags override it)");
  app.add_option("--headroom", headroom, "Memory kept free on each device: a size or a percentage (default 2%)");
  app.add_option("--admin-group", admin_group, "Group whose members may change other users' jobs (default: root only)");
  app.add_option("--high-priority-group", high_priority_group,
                 "Group whose members may run jobs at priority high (root and --admin-group may anyway; others asking "
                 "for high run as normal)");
  app.add_option("--max-per-user", max_per_user, "Cap on one user's grants over all devices (default none)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off (default info, or $COLOC_LOG_LEVEL)");
  app.add_option("--grant-step", grant_step, "Grants move in multiples of this (default 64MiB)");
  app.add_option("--wait-timeout", wait_timeout, "Default wait for memory before failing (default 300s)");
  app.add_option("--sample-interval", sample_interval, "How often stats pages are sampled for reports (default 100ms)");
  app.add_option("--resume-grace", resume_grace, "After a restart, how long to hold new requests for jobs to re-register (default 5s)");
  app.add_option("--max-connections-per-user", max_connections,
                 "Connections one user may hold at once, registered or not (default 1024; root and --admin-group: no cap)");
  app.add_option("--hello-timeout", hello_timeout,
                 "Close a connection that sends no valid first message within this (default 5s)");
  app.add_option("--watcher", watcher, "Process watcher: auto (BPF with pidfd fallback), bpf, or pidfd")
      ->check(CLI::IsMember({"auto", "bpf", "pidfd"}));
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus /metrics on HOST:PORT, e.g. 127.0.0.1:9479 (default off)");
  app.add_flag("--no-bpf", no_bpf, "Do not use BPF (same as --watcher pidfd)");
  app.footer("Sizes: 64MiB, 2G, 1.5GiB, 500MB, or bytes. Durations: 250ms, 5s, 2m, or seconds.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    out.exit_now = true;
    return out;
  } catch (const CLI::ParseError& e) {
    return invalid(e.what());
  }

  if (!config_file.empty()) {
    std::ifstream in(config_file);
    if (!in) return Error{errno ? errno : ENOENT, "cannot read --config " + config_file};
    std::stringstream ss;
    ss << in.rdbuf();
    if (auto r = apply_toml(ss.str(), config_file, cfg); !r) return r.error();
    cfg.config_file = config_file;
  }
  if (!socket.empty()) cfg.socket = socket;
  if (!state_dir.empty()) cfg.state_dir = state_dir;
  if (!headroom.empty()) {
    auto h = parse_headroom(headroom, "--headroom");
    if (!h) return h.error();
    cfg.headroom = h.value();
  }
  if (!admin_group.empty()) cfg.admin_group = admin_group;
  if (!high_priority_group.empty()) cfg.high_priority_group = high_priority_group;
  if (!max_per_user.empty()) {
    auto b = parse_max_per_user(max_per_user, "--max-per-user");
    if (!b) return b.error();
    cfg.max_per_user = b.value();
  }
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!grant_step.empty()) {
    auto b = parse_bytes(grant_step, "--grant-step");
    if (!b) return b.error();
    if (b.value() == 0) return invalid("--grant-step: must be more than 0");
    cfg.grant_step = b.value();
  }
  struct Dur {
    const std::string& text;
    const char* flag;
    broker::Nanos& into;
  };
  for (Dur d : {Dur{wait_timeout, "--wait-timeout", cfg.wait_timeout}, Dur{sample_interval, "--sample-interval", cfg.sample_interval},
                Dur{resume_grace, "--resume-grace", cfg.resume_grace}, Dur{hello_timeout, "--hello-timeout", cfg.hello_timeout}}) {
    if (d.text.empty()) continue;
    auto v = parse_duration(d.text, d.flag);
    if (!v) return v.error();
    d.into = v.value();
  }
  if (cfg.sample_interval < 1'000'000) return invalid("sample interval: must be at least 1ms");
  if (cfg.hello_timeout < 1'000'000) return invalid("hello timeout: must be at least 1ms");
  if (!max_connections.empty()) {
    auto n = parse_count(max_connections, "--max-connections-per-user");
    if (!n) return n.error();
    cfg.max_connections_per_user = n.value();
  }
  if (!watcher.empty()) cfg.watcher = watcher;
  if (no_bpf) cfg.watcher = "pidfd";
  if (!metrics_listen.empty()) cfg.metrics_listen = metrics_listen;
  if (cfg.socket.empty() || cfg.state_dir.empty()) return invalid("socket and state directory must not be empty");
  return out;
}

}  // namespace coloc::config
