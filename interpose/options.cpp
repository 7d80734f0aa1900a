// interpose/options.cpp — see options.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "options.h"

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
  uint64_t v = p ? *p.bytes : kNoLimit;
  if (ordinal < 0) {
    o.mem_limit = v;
  } else {
    o.mem_limit_ordinal[ordinal] = v;
    o.has_ordinal_limit[ordinal] = true;
  }
  return p ? nullptr : p.error;
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
  size_t n = std::strlen(value);
  if (n >= sizeof o.job) n = sizeof o.job - 1;
  std::memcpy(o.job, value, n);
  o.job[n] = '\0';
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
  o.context_bytes = p ? *p.bytes : kDefaultContextBytes;
  return p ? nullptr : p.error;
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
  if (s.apply == apply_level) return "using warn";
  if (s.apply == apply_context_bytes) return "using the default 512 MiB";
  if (s.apply == apply_report) return "no report will be written";
  return "ignored";
}

}  // namespace

const OptionSpec kOptionSpecs[] = {
    {"COLOC_MEM_LIMIT", "memory limit for every device (size)", apply_limit},
    {"COLOC_MEM_LIMIT_", "memory limit for one device, numbered as this process numbers it (size)",
     apply_limit},
    {"COLOC_LOG_LEVEL", "off|error|warn|info|debug (default warn), on stderr", apply_level},
    {"COLOC_JOB", "job name (default <command>-<pid>)", apply_job},
    {"COLOC_REPORT", "path of the JSON ledger written at exit; %p is replaced by the pid", apply_report},
    {"COLOC_CONTEXT_BYTES", "device memory charged per CUDA context (size, default 512MiB)",
     apply_context_bytes},
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
        char msg[96];
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

uint64_t limit_for_ordinal(const Options& o, int ordinal) {
  if (ordinal >= 0 && ordinal < kMaxOrdinals && o.has_ordinal_limit[ordinal]) return o.mem_limit_ordinal[ordinal];
  return o.mem_limit;
}

namespace {
constinit Options g_options;
}

const Options& options() { return g_options; }

void set_options(const Options& o) { g_options = o; }

}  // namespace coloc::interpose
