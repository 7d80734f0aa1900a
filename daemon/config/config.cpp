#include "config/config.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
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

/// A config file is a few kilobytes; anything this large is not one (and is not read into memory).
constexpr off_t kMaxFileBytes = 1 << 20;

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

const char* source_name(Source s) {
  switch (s) {
    case Source::kDefault: return "default";
    case Source::kFile: return "file";
    case Source::kFlag: return "flag";
  }
  return "?";
}

// ---- values -------------------------------------------------------------------------------------

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
  static constexpr Unit units[] = {{"ms", 1e6}, {"us", 1e3}, {"ns", 1}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}};
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
    return invalid(what + ": '" + t + "' is not a duration (e.g. 250ms, 5s, 2m, 1h, 2d, or seconds)");
  return broker::Nanos(std::llround(*v * scale));
}

Result<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text, const std::string& what) {
  const std::string t(text);
  auto bad = [&](const std::string& why) {
    return invalid(what + ": '" + t + "' is not HOST:PORT (" + why + "; e.g. 127.0.0.1:9479)");
  };
  const size_t colon = t.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = t.substr(0, colon);
  const std::string port = t.substr(colon + 1);
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad("an IPv6 address goes in brackets");
    host = host.substr(1, host.size() - 2);
    for (char c : host)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return bad("not an IPv6 address");
  } else {
    if (host.empty()) return bad("no host");
    for (char c : host)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
        return bad(host.find(':') != std::string::npos ? "an IPv6 address goes in brackets" : "not a host name");
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("the port is not a number");
  const unsigned long p = std::stoul(port);
  if (p > 65535) return bad("the port is not from 0 to 65535");
  return std::make_pair(host, uint16_t(p));
}

Result<proto::PolicyMode> parse_policy_mode(std::string_view text, const std::string& what) {
  for (proto::PolicyMode m : {proto::PolicyMode::kShare, proto::PolicyMode::kTimeslice, proto::PolicyMode::kPriority})
    if (text == compute::mode_name(m)) return m;
  return invalid(what + ": '" + std::string(text) + "' is not share, timeslice or priority");
}

Result<broker::Nanos> parse_quantum(std::string_view text, const std::string& what) {
  auto d = parse_duration(text, what);
  if (!d) return d;
  const broker::Nanos ms = 1'000'000;
  if (d.value() % ms != 0 || d.value() < broker::Nanos(proto::kMinQuantumMs) * ms ||
      d.value() > broker::Nanos(proto::kMaxQuantumMs) * ms)
  {
    // The duration it read, when the text does not say it plainly ("'0.0005' (500us) is not ...").
    const std::string shown = format_duration(d.value());
    return invalid(what + ": '" + trim(text) + "'" + (trim(text) == shown ? "" : " (" + shown + ")") +
                   " is not whole milliseconds from 1ms to 60s");
  }
  return d;
}

Result<uint32_t> parse_target_slowdown(std::string_view text, const std::string& what) {
  std::string t = trim(text);
  if (!t.empty() && t.back() == '%') t = trim(std::string_view(t).substr(0, t.size() - 1));
  auto v = parse_number(t);
  if (!v || *v != std::floor(*v) || *v < proto::kMinTargetPct || *v > proto::kMaxTargetPct)
    return invalid(what + ": '" + trim(text) + "' is not a whole percentage from " + std::to_string(proto::kMinTargetPct) +
                   "% to " + std::to_string(proto::kMaxTargetPct) + "%");
  return uint32_t(*v);
}

Result<bool> parse_bool(std::string_view text, const std::string& what) {
  const std::string t = trim(text);
  if (t == "true" || t == "on" || t == "yes" || t == "1") return true;
  if (t == "false" || t == "off" || t == "no" || t == "0") return false;
  return invalid(what + ": '" + t + "' is not true or false");
}

Result<Config::Retention> parse_retention(std::string_view text, const std::string& what) {
  Config::Retention r{0, 0};
  const std::string all = trim(text);
  if (all.empty()) return r;
  auto bad = [&](const std::string& why) {
    return invalid(what + ": '" + all + "' " + why + " (e.g. \"30d\", \"5000 reports\", \"30d, 5000 reports\", or \"\")");
  };
  bool has_age = false, has_count = false;
  size_t from = 0;
  for (;;) {
    const size_t comma = all.find(',', from);
    const std::string part = trim(std::string_view(all).substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (part.empty()) return bad("has an empty part");
    // "N reports" ("1 report" too); a bare number is neither (seconds or a count? it says not).
    const std::string_view unit = part.ends_with("reports") ? "reports" : part.ends_with("report") ? "report" : "";
    if (part.find_first_not_of("0123456789.") == std::string::npos)
      return bad("has '" + part + "' without a unit: write \"" + part + " reports\" for a count, or \"" + part +
                 "d\" (or s, m, h) for an age");
    if (!unit.empty()) {
      const std::string n = trim(std::string_view(part).substr(0, part.size() - unit.size()));
      if (n.find_first_of(" \t") != std::string::npos) return bad("has '" + part + "': separate an age and a count with a comma");
      if (has_count) return bad("gives the count twice");
      if (n.empty() || n.size() > 12 || n.find_first_not_of("0123456789") != std::string::npos || std::stoull(n) == 0)
        return bad("has a count that is not a whole number above 0");
      r.count = std::stoull(n);
      has_count = true;
    } else {
      if (has_age) return bad("gives the age twice");
      auto d = parse_duration(part, what);
      if (!d) return bad("has '" + part + "', neither an age (a duration) nor a count (N reports)");
      if (d.value() == 0) return bad("has an age of 0");
      r.age = d.value();
      has_age = true;
    }
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return r;
}

std::string format_retention(const Config::Retention& r) {
  std::string out;
  if (r.age) out = r.age % 86'400'000'000'000 == 0 ? std::to_string(r.age / 86'400'000'000'000) + "d" : format_duration(r.age);
  if (r.count) out += (out.empty() ? "" : ", ") + std::to_string(r.count) + " reports";
  return out;
}

std::string format_duration(broker::Nanos ns) {
  if (ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

std::string format_bytes(broker::Bytes b) {
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (b == 0 || b % 1024 != 0) return std::to_string(b);
  int u = -1;
  while (b % 1024 == 0 && u < 5) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

// ---- the file -----------------------------------------------------------------------------------

namespace {

const char* toml_type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

std::string expected_types(unsigned mask) {
  std::vector<std::string> names;
  if (mask & kTomlString) names.push_back("a string");
  if (mask & kTomlInteger) names.push_back("an integer");
  if (mask & kTomlFloat) names.push_back("a float");
  if (mask & kTomlBoolean) names.push_back("a boolean");
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

unsigned type_bit(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return kTomlString;
    case toml::node_type::integer: return kTomlInteger;
    case toml::node_type::floating_point: return kTomlFloat;
    case toml::node_type::boolean: return kTomlBoolean;
    default: return 0;
  }
}

/// A TOML scalar as the text set() reads.
std::string scalar_text(const toml::node& n) {
  if (auto s = n.value_exact<std::string>()) return *s;
  if (auto i = n.value_exact<int64_t>()) return std::to_string(*i);
  if (auto b = n.value_exact<bool>()) return *b ? "true" : "false";
  if (auto d = n.value_exact<double>()) {
    // The shortest text that reads back as the same double: 0.0005, not 0.00050000000000000001.
    char buf[64];
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, *d);
      if (std::strtod(buf, nullptr) == *d) break;
    }
    return buf;
  }
  return "";
}

/// "origin:line: key"
std::string where(const std::string& origin, const toml::node& n, const std::string& key) {
  return origin + ":" + std::to_string(n.source().begin.line) + ": " + key;
}

/// Checks `n`'s TOML type against `mask`; "origin:line: key: expected ..., not ...".
Result<void> check_type(const toml::node& n, unsigned mask, const std::string& at) {
  if (type_bit(n.type()) & mask) return {};
  return invalid(at + ": expected " + expected_types(mask) + ", not " + toml_type_name(n.type()));
}

/// The keys of a `[devices."UUID"]` table.
struct DeviceKey {
  const char* key;
  unsigned types;
  Result<void> (*set)(compute::PolicySettings& s, std::string_view text, const std::string& where);
};
const DeviceKey kDeviceKeys[] = {
    {"policy", kTomlString,
     [](compute::PolicySettings& s, std::string_view t, const std::string& w) -> Result<void> {
       auto m = parse_policy_mode(t, w);
       if (!m) return m.error();
       s.mode = m.value();
       return {};
     }},
    {"quantum", kTomlString | kTomlInteger | kTomlFloat,
     [](compute::PolicySettings& s, std::string_view t, const std::string& w) -> Result<void> {
       auto q = parse_quantum(t, w);
       if (!q) return q.error();
       s.quantum = q.value();
       return {};
     }},
    {"target_slowdown", kTomlString | kTomlInteger,
     [](compute::PolicySettings& s, std::string_view t, const std::string& w) -> Result<void> {
       auto p = parse_target_slowdown(t, w);
       if (!p) return p.error();
       s.target_pct = p.value();
       return {};
     }},
};

Result<void> apply_devices(const toml::node& node, const std::string& origin, Config& cfg) {
  const toml::table* devs = node.as_table();
  if (!devs)
    return invalid(where(origin, node, "devices") + ": expected a table of devices by UUID ([devices.\"GPU-...\"]), not " +
                   toml_type_name(node.type()));
  std::map<broker::Uuid, DevicePolicy> out;
  for (auto&& [k, dn] : *devs) {
    const std::string name(k.str());
    const std::string at = where(origin, dn, "devices.\"" + name + "\"");
    broker::Uuid uuid;
    if (!broker::Uuid::parse(name, &uuid))
      return invalid(at + ": '" + name + "' is not a device UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L shows)");
    const toml::table* t = dn.as_table();
    if (!t) return invalid(at + ": expected a table (policy, quantum, target_slowdown), not " + toml_type_name(dn.type()));
    DevicePolicy dp;
    dp.line = int(dn.source().begin.line);
    bool has_policy = false;
    for (auto&& [dk, vn] : *t) {
      const std::string key(dk.str());
      const std::string vat = where(origin, vn, "devices.\"" + name + "\"." + key);
      const DeviceKey* spec = nullptr;
      for (const DeviceKey& d : kDeviceKeys)
        if (key == d.key) spec = &d;
      if (!spec) {
        std::string hint;
        for (const DeviceKey& d : kDeviceKeys)
          if (did_you_mean(key) == d.key) hint = std::string(" (did you mean ") + d.key + "?)";
        return invalid(vat + ": unknown setting of a device" + hint + "; a device takes policy, quantum, target_slowdown");
      }
      if (auto r = check_type(vn, spec->types, vat); !r) return r;
      if (auto r = spec->set(dp.settings, scalar_text(vn), vat); !r) return r;
      has_policy |= key == std::string("policy");
    }
    if (!has_policy) return invalid(at + ": policy is missing (share, timeslice or priority)");
    if (out.count(uuid)) return invalid(at + ": the device appears twice (UUIDs are case-insensitive)");
    out[uuid] = dp;
  }
  cfg.devices = std::move(out);
  return {};
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
  // Into a copy: a bad file changes nothing.
  Config next = cfg;
  toml::table& tbl = parsed.table();
  for (auto&& [k, node] : tbl) {
    const std::string key(k.str());
    const std::string at = where(origin, node, key);
    if (key == "devices") {
      if (auto r = apply_devices(node, origin, next); !r) return r;
      continue;
    }
    const Setting* s = find_setting(key);
    if (!s) {
      std::string near = did_you_mean(key);
      return invalid(at + ": unknown setting" + (near.empty() ? "" : " (did you mean " + near + "?)"));
    }
    if (auto r = check_type(node, s->toml_types, at); !r) return r;
    if (auto r = s->set(next, scalar_text(node), at); !r) return r;
    next.sources[key] = Source::kFile;
    next.lines[key] = int(node.source().begin.line);
  }
  cfg = std::move(next);
  return {};
}

std::string default_config_path() {
  if (const char* env = std::getenv("COLOC_CONFIG")) return env;
  return kDefaultConfigPath;
}

namespace {
Result<Config> load_unescaped(const std::string& path, bool required, const FlagValues& flags);
}  // namespace

namespace {
/// Errors quote the file (keys, values, a path): its control characters, an escape sequence for
/// the terminal or a line break in the log, are shown as \u00XX.
std::string escape_controls(const std::string& what) {
  std::string text;
  for (unsigned char c : what) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      text += buf;
    } else {
      text += char(c);
    }
  }
  return text;
}
}  // namespace

Result<Config> load(const std::string& path, bool required, const FlagValues& flags) {
  auto r = load_unescaped(path, required, flags);
  if (r) return r;
  return Error{r.error().err, escape_controls(r.error().what)};
}

std::string origin_of(const Config& cfg, const std::string& key) {
  auto src = cfg.sources.find(key);
  const Source from = src == cfg.sources.end() ? Source::kDefault : src->second;
  if (from == Source::kFlag)
    if (const Setting* s = find_setting(key)) return s->flag;
  if (from == Source::kFile)
    if (auto l = cfg.lines.find(key); l != cfg.lines.end() && !cfg.config_file.empty())
      return cfg.config_file + ":" + std::to_string(l->second) + ": " + key;
  return key;
}

Result<std::optional<gid_t>> lookup_group(const Config& cfg, const std::string& key) {
  const std::string& name = key == "admin_group" ? cfg.admin_group : cfg.high_priority_group;
  if (name.empty()) return std::optional<gid_t>();
  struct group gr, *found = nullptr;
  char buf[4096];
  if (::getgrnam_r(name.c_str(), &gr, buf, sizeof buf, &found) != 0 || !found)
    return invalid(escape_controls(origin_of(cfg, key) + ": no such group '" + name + "'"));
  return std::optional<gid_t>(found->gr_gid);
}

Result<void> check_groups(const Config& cfg) {
  for (const char* key : {"admin_group", "high_priority_group"})
    if (auto r = lookup_group(cfg, key); !r) return r.error();
  return {};
}

namespace {
Result<Config> load_unescaped(const std::string& path, bool required, const FlagValues& flags) {
  Config cfg;
  for (const Setting& s : settings()) cfg.sources[s.key] = Source::kDefault;
  if (const char* env = std::getenv("COLOC_LOG_LEVEL"); env && *env)
    if (auto r = find_setting("log_level")->set(cfg, env, "COLOC_LOG_LEVEL"); !r) return r.error();
  cfg.config_path = path;
  cfg.config_required = required;
  int fd = -1;
  if (!path.empty()) {
    // Not std::ifstream: a FIFO or a device named by mistake must not block or fill memory.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
      if (errno != ENOENT || required) return Error{errno, "cannot read the config file " + path};
    }  // else no file at the default path: the defaults
  }
  if (!path.empty() && fd >= 0) {
    struct stat st;
    std::string text;
    std::string why;
    if (::fstat(fd, &st) != 0) why = std::string("fstat: ") + std::strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (st.st_size > kMaxFileBytes) why = std::to_string(st.st_size) + " bytes, over 1 MiB";
    if (why.empty()) {
      text.resize(size_t(st.st_size));
      size_t got = 0;
      while (got < text.size()) {
        ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          if (n < 0) why = std::string("read: ") + std::strerror(errno);
          break;
        }
        got += size_t(n);
      }
      text.resize(got);
    }
    ::close(fd);
    if (!why.empty()) return invalid("cannot read the config file " + path + ": " + why);
    if (auto r = apply_toml(text, path, cfg); !r) return r.error();
    cfg.config_file = path;
  }
  for (const auto& [key, text] : flags) {
    const Setting* s = find_setting(key);
    if (!s) return invalid("unknown setting " + key);
    if (auto r = s->set(cfg, text, s->flag); !r) return r.error();
    cfg.sources[key] = Source::kFlag;
  }
  cfg.flags = flags;
  return cfg;
}
}  // namespace

// ---- showing it ---------------------------------------------------------------------------------

namespace {

std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string setting_line(const Setting& s, const Config& cfg) {
  const std::string v = s.show(cfg);
  return std::string(s.key) + " = " + (s.quoted ? toml_quote(v) : v);
}

}  // namespace

std::string describe(const Config& cfg) {
  std::string out = "# colocd's effective configuration\n";
  if (!cfg.config_file.empty()) out += "# file: " + cfg.config_file + "\n";
  else if (cfg.config_path.empty()) out += "# file: none ($COLOC_CONFIG is empty)\n";
  else out += "# file: none (" + cfg.config_path + " does not exist)\n";
  size_t width = 0;
  for (const Setting& s : settings()) width = std::max(width, setting_line(s, cfg).size());
  for (const Setting& s : settings()) {
    std::string line = setting_line(s, cfg);
    line.resize(std::max(line.size(), width), ' ');
    auto it = cfg.sources.find(s.key);
    out += line + "  # " + source_name(it == cfg.sources.end() ? Source::kDefault : it->second) + "\n";
  }
  for (const auto& [uuid, dp] : cfg.devices) {
    out += "\n[devices.\"" + uuid.str() + "\"]  # file, line " + std::to_string(dp.line) + "\n";
    out += "policy = \"" + std::string(compute::mode_name(dp.settings.mode)) + "\"\n";
    // Only the key of its policy: timeslice has a quantum, priority a target slowdown, share neither.
    if (dp.settings.mode == proto::PolicyMode::kTimeslice)
      out += "quantum = \"" + format_duration(dp.settings.quantum) + "\"\n";
    if (dp.settings.mode == proto::PolicyMode::kPriority)
      out += "target_slowdown = \"" + std::to_string(dp.settings.target_pct) + "%\"\n";
  }
  return out;
}

std::vector<const Setting*> changed(const Config& a, const Config& b) {
  std::vector<const Setting*> out;
  for (const Setting& s : settings())
    if (s.show(a) != s.show(b)) out.push_back(&s);
  return out;
}

// ---- the command line ---------------------------------------------------------------------------

Result<CommandLine> parse_command_line(int argc, const char* const* argv) {
  CommandLine out;
  CLI::App app{"colocd: the coloc node daemon. Keeps the books of GPU memory for every job on this machine,\n"
               "admits jobs when their footprint fits, and makes allocations wait instead of crash.",
               "colocd"};
  std::string config_file;
  bool no_bpf = false;
  app.add_option("--config", config_file,
                 std::string("TOML file with the same settings (flags override it; default ") + kDefaultConfigPath +
                     " when it exists, or $COLOC_CONFIG)");
  app.add_flag("--check-config", out.check_config,
               "Validate the configuration, print it (each key with where it came from) and exit: 0 valid, 2 not");
  const auto table = settings();
  std::vector<std::string> values(table.size());
  std::vector<CLI::Option*> opts(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const Setting& s = table[i];
    std::string help = s.help;
    help += *s.default_text ? std::string(" (default ") + s.default_text + ")" : std::string(" (default none)");
    opts[i] = app.add_option(s.flag, values[i], help);
  }
  app.add_flag("--no-bpf", no_bpf, "Do not use BPF (same as --watcher pidfd)");
  app.footer("Sizes: 64MiB, 2G, 1.5GiB, 500MB, or bytes. Durations: 250ms, 5s, 2m, 1h, 2d, or seconds.\n"
             "SIGHUP reloads the config file (flags still win); docs/operations.md has every key.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    out.exit_now = true;
    return out;
  } catch (const CLI::ParseError& e) {
    return invalid(e.what());
  }

  FlagValues flags;
  for (size_t i = 0; i < table.size(); ++i)
    if (opts[i]->count() > 0) flags.emplace_back(table[i].key, values[i]);
  if (no_bpf) flags.emplace_back("watcher", "pidfd");
  const bool given = app.count("--config") > 0;
  if (given && config_file.empty()) return invalid("--config: give a file");
  auto cfg = load(given ? config_file : default_config_path(), given, flags);
  if (!cfg) return cfg.error();
  out.config = std::move(cfg.value());
  return out;
}

int check_config(int argc, const char* const* argv, std::FILE* out, std::FILE* err) {
  auto cl = parse_command_line(argc, argv);
  if (!cl) {
    std::fprintf(err, "colocd: %s\n", cl.error().message().c_str());
    return 2;
  }
  if (cl.value().exit_now) return cl.value().exit_code;
  const Config& cfg = cl.value().config;
  if (auto r = check_groups(cfg); !r) {
    std::fprintf(err, "colocd: %s\n", r.error().message().c_str());
    return 2;
  }
  std::fputs(describe(cfg).c_str(), out);
  std::fflush(out);
  return 0;
}

}  // namespace coloc::config
