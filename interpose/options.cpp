// interpose/options.cpp — see options.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "options.h"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include <errno.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "coloc/size.h"

extern char* program_invocation_short_name;  // glibc

namespace coloc::interpose {

namespace {

const char* apply_limit(Options& o, const char* value, int ordinal) {
  SizeParse p = parse_size(value);
  const char* err = p ? nullptr : p.error;
  // 2^64-1 is the protocol's "no limit" marker (kNoLimit), not a size anyone can mean: a value
  // that reaches it is malformed, like any other value that cannot be a limit.
  if (!err && *p.bytes >= kNoLimit)
    err = "2^64-1 bytes or more is the protocol's no-limit marker, not a limit";
  // 0 would admit nothing (not even a CUDA context); `coloc run --mem 0` refuses it too.
  if (!err && *p.bytes == 0) err = "0 is not a limit (it admits nothing; unset the variable for no limit)";
  uint64_t v = err ? kNoLimit : *p.bytes;
  if (ordinal < 0) {
    o.mem_limit = v;
  } else {
    o.mem_limit_ordinal[ordinal] = v;
    o.has_ordinal_limit[ordinal] = true;
  }
  return err;
}

const char* apply_estimate(Options& o, const char* value, int) {
  SizeParse p = parse_size(value);
  const char* err = p ? nullptr : p.error;
  if (!err && *p.bytes == 0) err = "0 is not an estimate (unset the variable for none)";
  if (!err && *p.bytes >= kNoLimit) err = "2^64-1 bytes or more is not an estimate";
  o.mem_estimate = err ? 0 : *p.bytes;
  return err;
}

const char* apply_level(Options& o, const char* value, int) {
  static constexpr struct { const char* word; LogLevel level; } words[] = {
      {"off", LogLevel::off},   {"error", LogLevel::error}, {"warn", LogLevel::warn},
      {"warning", LogLevel::warn}, {"info", LogLevel::info}, {"debug", LogLevel::debug},
  };
  for (const auto& w : words)
    if (std::strcmp(value, w.word) == 0) {
      o.log_level = w.level;
      return nullptr;
    }
  o.log_level = LogLevel::warn;
  return "not one of off, error, warn, info, debug";
}

const char* apply_job(Options& o, const char* value, int) {
  if (!*value) return "empty";
  o.job_set = true;
  size_t n = std::strlen(value);
  o.job_given_length = n;
  if (n < sizeof o.job) {
    std::memcpy(o.job, value, n + 1);
    return nullptr;
  }
  // Too long for a job id (63 bytes): its first 54 bytes, '-', and 8 hex digits of XXH32 of the
  // whole, so that two long names with one prefix stay two jobs (reported at cuInit).
  constexpr size_t kKeep = sizeof o.job - 1 - 9;
  std::memcpy(o.job, value, kKeep);
  std::snprintf(o.job + kKeep, sizeof o.job - kKeep, "-%08x", unsigned(XXH32(value, n, 0)));
  return nullptr;
}

const char* apply_step(Options& o, const char* value, int) {
  o.step[0] = '\0';
  if (!*value) return nullptr;  // empty: no step
  if (!proto::valid_step(value)) return "not a step label (1 to 15 of A-Z a-z 0-9 . _ -)";
  std::memcpy(o.step, value, std::strlen(value) + 1);
  return nullptr;
}

const char* apply_report(Options& o, const char* value, int) {
  size_t n = std::strlen(value);
  if (n >= sizeof o.report) {
    o.report[0] = '\0';
    return "path too long";
  }
  std::memcpy(o.report, value, n + 1);
  return nullptr;
}

const char* apply_context_bytes(Options& o, const char* value, int) {
  SizeParse p = parse_size(value);
  // 0 would charge nothing for a context, which costs the device hundreds of MiB.
  const char* err = !p ? p.error : *p.bytes == 0 ? "0 is not a context's cost (a CUDA context takes device memory)" : nullptr;
  o.context_bytes = err ? kDefaultContextBytes : *p.bytes;
  return err;
}

const char* apply_socket(Options& o, const char* value, int) {
  size_t n = std::strlen(value);
  if (n >= sizeof o.socket) {
    o.socket[0] = '\0';
    return "path too long for a Unix socket (at most 107 bytes)";
  }
  std::memcpy(o.socket, value, n + 1);
  return nullptr;
}

const char* apply_priority(Options& o, const char* value, int) {
  if (proto::parse_priority(value, &o.priority)) return nullptr;
  o.priority = proto::Priority::kNormal;
  return "not one of high, normal, best-effort";
}

const char* apply_on_full(Options& o, const char* value, int) {
  if (std::strcmp(value, "wait") == 0) o.on_full = proto::OnFull::kWait;
  else if (std::strcmp(value, "fail") == 0) o.on_full = proto::OnFull::kFail;
  else {
    o.on_full = proto::OnFull::kWait;
    return "not one of wait, fail";
  }
  return nullptr;
}

const char* apply_wait_timeout(Options& o, const char* value, int) {
  uint64_t ns = 0;
  const char* err = parse_duration(value, &ns);
  if (!err && ns == 0) err = "must be more than 0";
  o.wait_timeout_ns = err ? 0 : ns;
  return err;
}

const char* apply_require_daemon(Options& o, const char* value, int) {
  for (const char* yes : {"1", "yes", "true", "on"})
    if (std::strcmp(value, yes) == 0) {
      o.require_daemon = true;
      std::snprintf(o.require_daemon_text, sizeof o.require_daemon_text, "%s", yes);  // echoed in messages
      return nullptr;
    }
  o.require_daemon = false;
  for (const char* no : {"0", "no", "false", "off", ""})
    if (std::strcmp(value, no) == 0) return nullptr;
  return "not one of 1, 0, yes, no, true, false, on, off";
}

// libstdc++'s string_view::starts_with goes through substr(), which can throw: not in here.
bool has_prefix(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

// Parses a decimal ordinal that makes up all of `s`; -1 when it is not one.
int parse_ordinal(std::string_view s) {
  if (s.empty() || s.size() > 3) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

void add_error(Options& o, const char* fmt, const char* a, const char* b, const char* c) {
  if (o.n_errors >= Options::kMaxErrors) return;
  std::snprintf(o.errors[o.n_errors++], sizeof o.errors[0], fmt, a, b, c);
}

const char* fallback_of(const OptionSpec& s) {
  if (s.apply == apply_limit) return "no limit applies";
  if (s.apply == apply_estimate) return "no estimate is declared";
  if (s.apply == apply_level) return "using warn";
  if (s.apply == apply_context_bytes) return "using the default 512 MiB";
  if (s.apply == apply_report) return "no report will be written";
  if (s.apply == apply_socket) return "looking for the daemon at the default socket";
  if (s.apply == apply_priority) return "using normal";
  if (s.apply == apply_on_full) return "using wait";
  if (s.apply == apply_wait_timeout) return "using the daemon's default";
  if (s.apply == apply_require_daemon) return "not required";
  return "ignored";
}

}  // namespace

const OptionSpec kOptionSpecs[] = {
    {"COLOC_MEM_LIMIT", "memory limit for every device (size)", apply_limit},
    {"COLOC_MEM_LIMIT_", "memory limit for one device, numbered as this process numbers it (size)",
     apply_limit},
    {"COLOC_MEM_ESTIMATE",
     "the job's estimated footprint per device (size; coloc run --estimate-from sets it): reserved at admission "
     "when it has no limit and no history",
     apply_estimate},
    {"COLOC_LOG_LEVEL", "off|error|warn|info|debug (default warn), on stderr", apply_level},
    {"COLOC_JOB", "job name (default <command>-<pid>)", apply_job},
    {"COLOC_STEP", "the process's step within its job (the Slurm plugin sets it: batch, extern, 0, 1, ...), for reports",
     apply_step},
    {"COLOC_REPORT", "path of the JSON ledger written at exit; %p is replaced by the pid", apply_report},
    {"COLOC_CONTEXT_BYTES", "device memory charged per CUDA context (size, default 512MiB)",
     apply_context_bytes},
    {"COLOC_SOCKET", "the daemon's socket (default /run/coloc/colocd.sock, when it exists)", apply_socket},
    {"COLOC_PRIORITY", "high|normal|best-effort (default normal): admission order, deadlock victim",
     apply_priority},
    {"COLOC_ON_FULL", "wait|fail (default wait): what an allocation does when the device is full",
     apply_on_full},
    {"COLOC_WAIT_TIMEOUT", "how long an allocation or admission may wait (250ms, 5s, 2m; default 300s)",
     apply_wait_timeout},
    {"COLOC_REQUIRE_DAEMON", "1: wait up to COLOC_WAIT_TIMEOUT for the daemon, else fail cuInit",
     apply_require_daemon},
};
const int kOptionSpecCount = int(sizeof kOptionSpecs / sizeof kOptionSpecs[0]);

void read_options(char* const* env, int pid, Options* out) {
  Options& o = *out;
  for (char* const* e = env; e && *e; ++e) {
    std::string_view kv(*e);
    if (!has_prefix(kv, "COLOC_")) continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key(kv.data(), eq);
    const char* value = *e + eq + 1;
    for (int i = 0; i < kOptionSpecCount; ++i) {
      const OptionSpec& s = kOptionSpecs[i];
      std::string_view name(s.name);
      int ordinal = -1;
      if (name.back() == '_') {
        if (key.size() <= name.size() || !has_prefix(key, name)) continue;
        ordinal = parse_ordinal(std::string_view(key.data() + name.size(), key.size() - name.size()));
        if (ordinal < 0 || ordinal >= kMaxOrdinals) {
          char k[64];
          std::snprintf(k, sizeof k, "%.*s", int(key.size()), key.data());
          add_error(o, "%s: not a device ordinal 0..63%s%s; ignored", k, "", "");
          break;
        }
      } else if (key != name) {
        continue;
      }
      if (const char* err = s.apply(o, value, ordinal)) {
        char k[64];
        std::snprintf(k, sizeof k, "%.*s", int(key.size()), key.data());
        char msg[104];
        std::snprintf(msg, sizeof msg, "%s; %s", err, fallback_of(s));
        add_error(o, "%s=\"%.80s\": %s", k, value, msg);
      }
      break;
    }
  }
  if (!o.job[0]) {
    const char* cmd = program_invocation_short_name;
    std::snprintf(o.job, sizeof o.job, "%s-%d", cmd && *cmd ? cmd : "job", pid);
  }
}

const char* parse_duration(const char* text, uint64_t* ns) {
  std::string_view s(text ? text : "");
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  if (s.empty()) return "empty duration";
  // The number: digits, optionally a fraction.
  unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
  size_t i = 0;
  bool digits = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    whole = whole * 10 + unsigned(s[i] - '0');
    digits = true;
    if (whole > UINT64_MAX) return "duration too long";
  }
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      digits = true;
      if (frac_scale < (unsigned __int128)1000000000000000000ULL) {
        frac = frac * 10 + unsigned(s[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (!digits) return "not a duration (e.g. 250ms, 5s, 2m, 1h, 2d, or seconds)";
  std::string_view unit(s.data() + i, s.size() - i);
  static constexpr struct { const char* name; uint64_t ns; } units[] = {
      {"", 1000000000ull}, {"s", 1000000000ull}, {"ms", 1000000ull}, {"us", 1000ull},
      {"ns", 1ull},        {"m", 60000000000ull}, {"h", 3600000000000ull}, {"d", 86400000000000ull},
  };
  for (const auto& u : units) {
    if (unit != std::string_view(u.name)) continue;
    unsigned __int128 total = whole * u.ns + frac * u.ns / frac_scale;
    if (total > UINT64_MAX - 1) return "duration too long";
    *ns = uint64_t(total);
    return nullptr;
  }
  return "unknown unit (use ns, us, ms, s, m, h or d)";
}

uint64_t limit_for_ordinal(const Options& o, int ordinal) {
  if (ordinal >= 0 && ordinal < kMaxOrdinals && o.has_ordinal_limit[ordinal]) return o.mem_limit_ordinal[ordinal];
  return o.mem_limit;
}

uint64_t device_cap_for_ordinal(const Options& o, int ordinal) {
  if (ordinal >= 0 && ordinal < kMaxOrdinals && o.has_ordinal_limit[ordinal]) return o.mem_limit_ordinal[ordinal];
  return kNoLimit;
}

namespace {
constinit Options g_options;
}

const Options& options() { return g_options; }

void set_options(const Options& o) { g_options = o; }

}  // namespace coloc::interpose
