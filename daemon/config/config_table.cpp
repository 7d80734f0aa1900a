// daemon/config/config_table.cpp — colocd's settings, one row each (config.h, settings()). Adding a
// setting here adds its TOML key, its flag, its line in --check-config and its row in the docs
// (tests/unit/daemon/config_test.cpp checks docs/operations.md against markdown_table()).
#include <sys/un.h>
#include <algorithm>
#include <string>

#include "config/config.h"

namespace coloc::config {

namespace {

Error invalid(std::string what) { return Error{0, std::move(what)}; }

Result<void> set_text(std::string& into, std::string_view text, const std::string& where, bool may_be_empty) {
  if (!may_be_empty && text.empty()) return invalid(where + ": must not be empty");
  if (text.find('\0') != std::string_view::npos) return invalid(where + ": contains a NUL byte");
  into = std::string(text);
  return {};
}

std::string show_headroom(const Config& c) {
  if (c.headroom.bytes) return format_bytes(*c.headroom.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g%%", c.headroom.fraction * 100);
  return buf;
}

constexpr unsigned kStr = kTomlString, kInt = kTomlInteger, kNum = kTomlInteger | kTomlFloat, kBool = kTomlBoolean;

// clang-format off
const Setting kSettings[] = {
  {"socket", "--socket", "a path", "/run/coloc/colocd.sock",
   "The Unix socket colocd listens on (under systemd, colocd.socket's wins)", false, true, kStr, "\"/run/coloc/other.sock\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     // sockaddr_un's sun_path holds 108 bytes with the terminating NUL (unix(7)): a longer path
     // cannot be bound, and colocd would fail at every start.
     constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
     if (t.size() > kMaxPath)
       return invalid(w + ": '" + std::string(t) + "' is " + std::to_string(t.size()) +
                      " bytes, too long for a Unix socket (at most " + std::to_string(kMaxPath) + ")");
     return set_text(c.socket, t, w, false);
   },
   [](const Config& c) { return c.socket; }},
  {"state_dir", "--state-dir", "a path", "/var/lib/coloc",
   "Directory for reports, the run history, policies and restart state", false, true, kStr, "\"/var/lib/coloc2\"",
   [](Config& c, std::string_view t, const std::string& w) { return set_text(c.state_dir, t, w, false); },
   [](const Config& c) { return c.state_dir; }},
  {"headroom", "--headroom", "a size or a percentage", "2%",
   "Memory kept free on each device: a percentage of its capacity, or a size", true, true, kStr | kInt, "\"4GiB\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto h = parse_headroom(t, w);
     if (!h) return h.error();
     c.headroom = h.value();
     return {};
   },
   show_headroom},
  {"admin_group", "--admin-group", "a group name", "",
   "Group whose members may change other users' jobs and set policies (\"\": root only)", true, true, kStr, "\"gpuadmin\"",
   [](Config& c, std::string_view t, const std::string& w) { return set_text(c.admin_group, t, w, true); },
   [](const Config& c) { return c.admin_group; }},
  {"high_priority_group", "--high-priority-group", "a group name", "",
   "Group whose members may run jobs at priority high (root and admin_group may anyway; \"\": none)", true, true, kStr,
   "\"research\"",
   [](Config& c, std::string_view t, const std::string& w) { return set_text(c.high_priority_group, t, w, true); },
   [](const Config& c) { return c.high_priority_group; }},
  {"max_per_user", "--max-per-user", "a size", "",
   "Cap on one user's grants over all devices (\"\": none)", true, true, kStr | kInt, "\"40GiB\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (t.empty()) {
       c.max_per_user.reset();
       return {};
     }
     auto b = parse_max_per_user(t, w);
     if (!b) return b.error();
     c.max_per_user = b.value();
     return {};
   },
   [](const Config& c) { return c.max_per_user ? format_bytes(*c.max_per_user) : std::string(); }},
  {"log_level", "--log-level", "a log level", "info",
   "trace, debug, info, warn, error, critical or off (the default is $COLOC_LOG_LEVEL when set)", true, true, kStr,
   "\"debug\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     static constexpr const char* levels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
     if (std::find(std::begin(levels), std::end(levels), t) == std::end(levels))
       return invalid(w + ": '" + std::string(t) + "' is not one of trace, debug, info, warn, error, critical, off");
     c.log_level = std::string(t);
     return {};
   },
   [](const Config& c) { return c.log_level; }},
  {"grant_step", "--grant-step", "a size", "64MiB",
   "Grants move in multiples of this", false, true, kStr | kInt, "\"128MiB\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto b = parse_bytes(t, w);
     if (!b) return b.error();
     if (b.value() == 0) return invalid(w + ": must be more than 0");
     c.grant_step = b.value();
     return {};
   },
   [](const Config& c) { return format_bytes(c.grant_step); }},
  {"wait_timeout", "--wait-timeout", "a duration", "300s",
   "How long a running job's request for more memory waits before it fails (a job's COLOC_WAIT_TIMEOUT wins)", true, true, kStr | kNum,
   "\"10m\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     c.wait_timeout = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.wait_timeout); }},
  {"admission_timeout", "--admission-timeout", "a duration", "",
   "How long a job waits for admission before it fails (\"\": for ever; a job's COLOC_WAIT_TIMEOUT wins)", true, true,
   kStr | kNum, "\"2h\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (t.empty()) {
       c.admission_timeout = 0;
       return {};
     }
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     if (d.value() == 0) return invalid(w + ": must be more than 0 (\"\" waits for ever)");
     c.admission_timeout = d.value();
     return {};
   },
   [](const Config& c) { return c.admission_timeout ? format_duration(c.admission_timeout) : std::string(); }},
  {"backfill", "--backfill", "easy or off", "easy",
   "Admit a waiting job ahead of the first in line when it cannot delay that one's start (easy), or keep strict order (off)",
   true, true, kStr, "\"off\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (!broker::backfill::parse_mode(t, &c.backfill))
       return invalid(w + ": '" + std::string(t) + "' is not one of easy, off");
     return {};
   },
   [](const Config& c) { return std::string(broker::backfill::mode_name(c.backfill)); }},
  {"preempt", "--preempt", "auto, off, best-effort or normal", "auto",
   "Which jobs a high job waiting for memory may suspend to host memory (auto: best-effort where the driver's "
   "checkpoint API works, else off)",
   true, true, kStr, "\"off\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (t == "auto") {
       c.preempt.reset();
       return {};
     }
     broker::PreemptMode m;
     if (!broker::parse_preempt_mode(std::string(t), &m))
       return invalid(w + ": '" + std::string(t) + "' is not one of auto, off, best-effort, normal");
     c.preempt = m;
     return {};
   },
   [](const Config& c) { return c.preempt ? std::string(broker::preempt_mode_name(*c.preempt)) : std::string("auto"); }},
  {"preempt_min_run", "--preempt-min-run", "a duration", "60s",
   "A job is suspended at most once per this much running", true, true, kStr | kNum, "\"5m\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     c.preempt_min_run = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.preempt_min_run); }},
  {"suspend_host_reserve", "--suspend-host-reserve", "a percentage", "10%",
   "Host memory (of RAM) a suspension must leave free beyond what it moves there", true, true, kStr, "\"20%\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto h = parse_headroom(t, w);
     if (!h) return h.error();
     if (h.value().bytes) return invalid(w + ": '" + std::string(t) + "' is not a percentage such as 10%");
     c.suspend_host_reserve = h.value().fraction;
     return {};
   },
   [](const Config& c) {
     char buf[64];
     std::snprintf(buf, sizeof buf, "%.10g%%", c.suspend_host_reserve * 100);
     return std::string(buf);
   }},
  {"suspend_lock_timeout", "--suspend-lock-timeout", "a duration", "10s",
   "How long a suspension waits for a process's work in flight (then it gives up, and another job is tried)", true,
   true, kStr | kNum, "\"30s\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     if (d.value() < 1'000'000 || d.value() > 600'000'000'000) return invalid(w + ": must be from 1ms to 10m");
     c.suspend_lock_timeout = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.suspend_lock_timeout); }},
  {"ckpt_helper", "--ckpt-helper", "a path", "",
   "The checkpoint helper colocd runs to suspend and restore jobs (\"\": coloc-ckpt next to colocd, or in "
   "../lib/coloc)",
   false, true, kStr, "\"/opt/coloc/lib/coloc/coloc-ckpt\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> { return set_text(c.ckpt_helper, t, w, true); },
   [](const Config& c) { return c.ckpt_helper; }},
  {"report_retention", "--report-retention", "an age and/or a count", "10000 reports",
   "Ended jobs' reports kept: those younger than the age (\"30d\") and among the newest count (\"5000 reports\"); "
   "both (\"30d, 5000 reports\"), or \"\" to keep every one",
   true, true, kStr, "\"30d, 5000 reports\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto r = parse_retention(t, w);
     if (!r) return r.error();
     c.report_retention = r.value();
     return {};
   },
   [](const Config& c) { return format_retention(c.report_retention); }},
  {"sample_interval", "--sample-interval", "a duration", "100ms",
   "How often the clients' stats pages and NVML are sampled (report timelines), at least 1ms", true, true, kStr | kNum,
   "\"250ms\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     if (d.value() < 1'000'000) return invalid(w + ": must be at least 1ms");
     c.sample_interval = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.sample_interval); }},
  {"resume_grace", "--resume-grace", "a duration", "5s",
   "After a restart, how long new requests wait (at most) for the running jobs to re-register", false, true, kStr | kNum,
   "\"10s\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     c.resume_grace = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.resume_grace); }},
  {"max_connections_per_user", "--max-connections-per-user", "a count", "1024",
   "Connections one user other than root and admin_group may hold at once, registered or not", true, false, kInt | kStr,
   "64",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto n = parse_count(t, w);
     if (!n) return n.error();
     c.max_connections_per_user = n.value();
     return {};
   },
   [](const Config& c) { return std::to_string(c.max_connections_per_user); }},
  {"hello_timeout", "--hello-timeout", "a duration", "5s",
   "A connection that sends no valid first message within this is closed (at least 1ms)", true, true, kStr | kNum,
   "\"2s\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto d = parse_duration(t, w);
     if (!d) return d.error();
     if (d.value() < 1'000'000) return invalid(w + ": must be at least 1ms");
     c.hello_timeout = d.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.hello_timeout); }},
  {"watcher", "--watcher", "auto, bpf or pidfd", "auto",
   "How colocd learns of process exits: auto (BPF, falling back to pidfds), bpf, or pidfd (--no-bpf: pidfd)", false,
   true, kStr, "\"pidfd\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (t != "auto" && t != "bpf" && t != "pidfd") return invalid(w + ": must be auto, bpf or pidfd");
     c.watcher = std::string(t);
     return {};
   },
   [](const Config& c) { return c.watcher; }},
  {"metrics_listen", "--metrics-listen", "HOST:PORT", "",
   "Where to serve Prometheus /metrics, e.g. 127.0.0.1:9479 (\"\": off; port 0: any free one, shown by coloc status)", true, true, kStr, "\"127.0.0.1:9479\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     if (!t.empty())
       if (auto hp = parse_host_port(t, w); !hp) return hp.error();
     c.metrics_listen = std::string(t);
     return {};
   },
   [](const Config& c) { return c.metrics_listen; }},
  {"policy", "--policy", "share, timeslice or priority", "share",
   "The compute policy of devices that have none of their own (as `coloc policy` sets one)", true, true, kStr,
   "\"timeslice\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto m = parse_policy_mode(t, w);
     if (!m) return m.error();
     c.policy.mode = m.value();
     return {};
   },
   [](const Config& c) { return std::string(compute::mode_name(c.policy.mode)); }},
  {"quantum", "--quantum", "a duration", "100ms",
   "timeslice: one quantum of that default policy, whole milliseconds from 1ms to 60s", true, true, kStr | kNum,
   "\"50ms\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto q = parse_quantum(t, w);
     if (!q) return q.error();
     c.policy.quantum = q.value();
     return {};
   },
   [](const Config& c) { return format_duration(c.policy.quantum); }},
  {"target_slowdown", "--target-slowdown", "a percentage", "5%",
   "priority: the most a high-priority job may be slowed against running alone, 1% to 50%", true, true, kStr | kInt,
   "\"10%\"",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto p = parse_target_slowdown(t, w);
     if (!p) return p.error();
     c.policy.target_pct = p.value();
     return {};
   },
   [](const Config& c) { return std::to_string(c.policy.target_pct) + "%"; }},
  {"history", "--history", "a boolean", "true",
   "Keep the run history (history.db in state_dir) and admit known jobs on their past peaks", false, false, kBool,
   "false",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto b = parse_bool(t, w);
     if (!b) return b.error();
     c.history = b.value();
     return {};
   },
   [](const Config& c) { return std::string(c.history ? "true" : "false"); }},
  {"history_runs", "--history-runs", "a count", "20",
   "Runs the history keeps per fingerprint (user, command, environment, device model), 1 to 1000", false, false,
   kInt | kStr, "50",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto n = parse_count(t, w);
     if (!n) return n.error();
     if (n.value() > 1000) return invalid(w + ": at most 1000");
     c.history_runs = n.value();
     return {};
   },
   [](const Config& c) { return std::to_string(c.history_runs); }},
  {"history_fingerprints", "--history-fingerprints", "a count", "1000",
   "Fingerprints the history keeps per user (the longest unused goes first), 1 to 1000000", false, false, kInt | kStr,
   "200",
   [](Config& c, std::string_view t, const std::string& w) -> Result<void> {
     auto n = parse_count(t, w);
     if (!n) return n.error();
     if (n.value() > 1'000'000) return invalid(w + ": at most 1000000");
     c.history_fingerprints = n.value();
     return {};
   },
   [](const Config& c) { return std::to_string(c.history_fingerprints); }},
};
// clang-format on

}  // namespace

std::span<const Setting> settings() { return kSettings; }

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : kSettings)
    if (key == s.key) return &s;
  return nullptr;
}

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string did_you_mean(std::string_view key) {
  if (key.size() > 200) return "";  // nobody misspells that much; and the cost is quadratic
  std::string best;
  size_t best_d = size_t(-1);
  auto consider = [&](std::string_view cand) {
    size_t d = edit_distance(key, cand);
    if (d < best_d) {
      best_d = d;
      best = std::string(cand);
    }
  };
  for (const Setting& s : kSettings) consider(s.key);
  consider("devices");
  return best_d <= std::max<size_t>(1, best.size() / 3) ? best : std::string();
}

std::string markdown_table() {
  std::string out = "| key | flag | type | default | live | what |\n|---|---|---|---|---|---|\n";
  for (const Setting& s : kSettings) {
    std::string dflt = *s.default_text ? std::string("`") + s.default_text + "`" : std::string("`\"\"` (none)");
    std::string help = s.help;
    for (size_t p = 0; (p = help.find('|', p)) != std::string::npos; p += 2) help.replace(p, 1, "\\|");
    out += std::string("| `") + s.key + "` | `" + s.flag + "` | " + s.type + " | " + dflt + " | " +
           (s.live ? "yes" : "restart") + " | " + help + " |\n";
  }
  return out;
}

}  // namespace coloc::config
