#include "format.h"

#include <pwd.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "coloc/size.h"

namespace coloc::cli {

using nlohmann::json;

std::string bytes_text(const json& v) {
  if (v.is_null()) return "none";
  if (!v.is_number()) return "?";
  char buf[32];
  return format_size(v.get<uint64_t>(), buf, sizeof buf);
}

uint64_t oom_request_bytes(const json& ev) {
  auto num = [&](const char* k) -> uint64_t {
    auto it = ev.find(k);
    if (it == ev.end() || !it->is_number()) return uint64_t(0);
    if (it->is_number_float()) return it->get<double>() > 0 ? uint64_t(it->get<double>()) : uint64_t(0);
    return it->is_number_unsigned() || it->get<int64_t>() >= 0 ? it->get<uint64_t>() : uint64_t(0);
  };
  // For a refused growth `request` is the whole need (in-use plus the allocation) and `in_use`
  // the in-use when it was asked (reports of older colocd versions: at the refusal); for an
  // admission in_use is 0.
  uint64_t request = num("request"), in_use = num("in_use");
  return request > in_use ? request - in_use : request;
}

std::string duration_text(double s) {
  char buf[48];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%d min %02d s", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%d h %02d min", int(s) / 3600, (int(s) % 3600) / 60);
  return buf;
}

std::string duration_range_text(double lo, double hi) {
  if (hi < lo) hi = lo;
  if (hi < 60) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f\u2013%.1f s", lo, hi);
    return buf;
  }
  return duration_text(lo) + " \u2013 " + duration_text(hi);
}

std::string away_span_text(const json& r) {
  if (!r.value("ended_while_daemon_away", false)) return "";
  auto s = [&](const char* k) {
    auto it = r.find(k);
    return it != r.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (!s("ended_after").empty() && !s("ended_before").empty())
    return "between " + s("ended_after") + " and " + s("ended_before");
  return "after " + (s("end").empty() ? std::string("?") : s("end"));
}

std::string ran_text(const json& r) {
  auto num = [&](const char* k) -> std::optional<double> {
    auto it = r.find(k);
    return it != r.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
  };
  const double lo = num("duration_s").value_or(0.0);
  if (!r.value("ended_while_daemon_away", false)) return duration_text(lo);
  if (auto hi = num("duration_max_s")) return duration_range_text(lo, *hi);
  return "at least " + duration_text(lo);
}

namespace {

/// A simple left-aligned table: columns sized to their widest cell. A cell's control characters
/// show as '?': what a report on disk says reaches no terminal as an escape sequence.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) {
    for (std::string& cell : row)
      for (char& c : cell)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    rows_.push_back(std::move(row));
  }
  std::string render(const std::string& indent = "") const {
    std::vector<size_t> w;
    for (auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    std::ostringstream o;
    for (auto& r : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      o << line << "\n";
    }
    return o.str();
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string str(const json& v, const char* key, const std::string& dflt = "?") {
  auto it = v.find(key);
  if (it == v.end() || it->is_null()) return dflt;
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

}  // namespace

std::string short_uuid(const std::string& u) { return u.size() > 12 ? u.substr(0, 12) + "..." : u; }

std::string policy_text(const json& policy) {
  if (!policy.is_object()) return "share";
  const std::string mode = str(policy, "mode", "share");
  if (mode == "priority" && policy.contains("target_pct"))
    return "priority, target slowdown " + str(policy, "target_pct") + "%";
  if (mode != "timeslice") return mode;
  return "timeslice, quantum " + str(policy, "quantum_ms") + " ms";
}

std::string short_policy_text(const json& policy) {
  if (!policy.is_object()) return "share";
  const std::string mode = str(policy, "mode", "share");
  if (mode == "priority" && policy.contains("target_pct")) return "priority " + str(policy, "target_pct") + "%";
  if (mode != "timeslice") return mode;
  return "timeslice " + str(policy, "quantum_ms") + "ms";
}

std::string device_index_text(const json& dev) {
  auto it = dev.find("index");
  if (it == dev.end() || !it->is_number()) return "-";
  return it->dump() + (dev.value("index_from", std::string()) == "colocd" ? "*" : "");
}

std::string share_text(const json& v) {
  if (!v.is_number()) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", v.get<double>() * 100);
  return buf;
}

std::string job_share_text(const json& dev, const json& job) {
  const json policy = dev.value("policy", json());
  if (!policy.is_object() || str(policy, "mode", "share") != "timeslice") return "-";
  return share_text(job.value("gpu_share", json()));
}

size_t display_width(const std::string& text) {
  size_t w = 0;
  for (unsigned char c : text) w += (c & 0xC0) != 0x80;  // code points (every one we print is one column wide)
  return w;
}

std::string fit_text(const std::string& text, size_t columns) {
  if (display_width(text) <= columns) return text;
  if (columns <= 3) return std::string(columns, '.');
  std::string out;
  size_t w = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {  // a character starts here
      if (w == columns - 3) break;
      ++w;
    }
    out += text[i];
  }
  return out + "...";
}

std::string outside_processes_text(const json& dev, size_t columns) {
  auto it = dev.find("outside_processes");
  if (it == dev.end() || !it->is_array()) return "";  // not known (no NVML), or an older colocd
  auto m = dev.find("outside_processes_more");
  const size_t more = m != dev.end() && m->is_number_integer() && m->get<int64_t>() > 0 ? m->get<size_t>() : 0;
  const size_t n = it->size() + more;
  if (n == 0) return "";
  std::ostringstream o;
  o << "\n  " << n << (n == 1 ? " process" : " processes") << " outside coloc:\n";
  std::vector<std::vector<std::string>> rows;
  for (const json& p : *it) {
    if (!p.is_object()) continue;
    const json used = p.value("used_bytes", json());
    rows.push_back({str(p, "pid"), str(p, "user", p.contains("uid") && p["uid"].is_number() ? p["uid"].dump() : "?"),
                    used.is_number() ? bytes_text(used) : "?", str(p, "command", "?")});
  }
  std::vector<size_t> w = {3, 4, 13};  // PID, USER, DEVICE MEMORY
  for (auto& r : rows)
    for (size_t i = 0; i < 3; ++i) w[i] = std::max(w[i], display_width(r[i]));
  auto line = [&](const std::vector<std::string>& r) {
    std::string l = "  ";
    for (size_t i = 0; i < 3; ++i) l += r[i] + std::string(w[i] - display_width(r[i]) + 2, ' ');
    const size_t used = display_width(l);
    l += fit_text(r[3], columns > used + 8 ? columns - used : 8);
    return l + "\n";
  };
  o << line({"PID", "USER", "DEVICE MEMORY", "COMMAND"});
  for (auto& r : rows) o << line(r);
  if (more > 0) o << "  ... and " << more << " more\n";
  return o.str();
}

json devices_by_index(const json& devices) {
  json out = devices.is_array() ? devices : json::array();
  auto key = [](const json& d) {
    const json i = d.is_object() ? d.value("index", json()) : json();
    return i.is_number_integer() && i.get<int64_t>() >= 0 ? i.get<uint64_t>() : UINT64_MAX;
  };
  std::stable_sort(out.begin(), out.end(), [&](const json& a, const json& b) { return key(a) < key(b); });
  return out;
}

std::string status_table(const json& s, bool wide) {
  std::ostringstream o;
  const json& d = s.at("daemon");
  o << "colocd pid " << str(d, "pid") << " · protocol " << str(d, "protocol") << " · watcher " << str(d, "watcher")
    << " · memory policy " << str(d, "policy") << " · up " << duration_text(d.value("uptime_s", 0.0)) << "\n";
  if (d.value("holding_for_restart", false)) o << "holding new requests while jobs re-register\n";
  if (s.at("devices").empty()) o << "\nNo devices yet (colocd lists the devices NVML shows, and those its jobs create a context on).\n";
  bool colocd_numbered = false;
  for (const json& dev : devices_by_index(s.at("devices"))) {
    // "0  GPU-...  timeslice, quantum 100 ms · turn: JOB" (the turn on a line of its own when long)
    const std::string index = device_index_text(dev);
    colocd_numbered |= index.back() == '*';
    std::string head = index + "  " + str(dev, "uuid") + "  " + policy_text(dev.value("policy", json()));
    const json holder = dev.value("holder", json());
    o << "\n" << head;
    if (holder.is_string()) {
      const std::string turn = "turn: " + holder.get<std::string>();
      if (display_width(head) + 3 + turn.size() <= 100) o << " · " << turn;
      else o << "\n  " << turn;
    }
    o << "\n";
    std::vector<std::string> head_cols = {"CAPACITY", "HEADROOM", "OUTSIDE COLOC"};
    std::vector<std::string> row = {bytes_text(dev["capacity"]), bytes_text(dev["headroom"]), bytes_text(dev["outside"])};
    if (wide) {
      head_cols.push_back("GRANTED");
      row.push_back(bytes_text(dev["granted"]));
    }
    head_cols.insert(head_cols.end(), {"COMMITTED", "IN USE"});
    row.insert(row.end(), {bytes_text(dev["committed"]), bytes_text(dev["in_use"])});
    if (wide) {
      head_cols.push_back("DRIVER OVERHEAD");
      row.push_back(bytes_text(dev.value("driver_overhead", json(0))));
    }
    head_cols.push_back("AVAILABLE");
    row.push_back(bytes_text(dev["available"]));
    Table t(head_cols);
    t.add(row);
    o << t.render("  ");
    if (dev.value("driver_ooms", 0) > 0) o << "  driver OOMs inside grants: " << dev["driver_ooms"] << "\n";
    if (dev.value("over_committed", false))
      o << "  over-committed: commitments exceed what is usable (memory really in use after a late\n"
           "  resume); nothing more is granted here until they fit\n";
    if (dev.at("jobs").empty()) {
      o << "  no jobs\n";
      o << outside_processes_text(dev, 100);
      continue;
    }
    // PREDICTED (the online prediction of a job's peak) only where a job has one, or always with
    // --wide: the default table stays within 100 columns in the common case.
    bool any_prediction = wide;
    for (const json& job : dev.at("jobs")) any_prediction |= job.contains("predicted_peak") && job["predicted_peak"].is_number();
    std::vector<std::string> cols = {"JOB", "USER", "PRIORITY", "STATE", "LIMIT"};
    if (wide) cols.push_back("RESERVED");
    cols.push_back("IN USE");
    if (any_prediction) cols.push_back("PREDICTED");
    if (wide) cols.insert(cols.end(), {"DRIVER OVERHEAD", "PEAK", "GRANTED"});
    cols.insert(cols.end(), {"WEIGHT", "GPU SHARE"});
    Table j(cols);
    for (const json& job : dev.at("jobs")) {
      std::vector<std::string> r = {str(job, "job"), str(job, "user"), str(job, "priority"), job_state_text(job),
                                    bytes_text(job["limit"])};
      if (wide) {  // with where it came from, when not a declared limit
        std::string res = bytes_text(job["reserved"]);
        const std::string src = str(job, "reservation_source", "none");
        if (src == "history" || src == "estimate" || src == "online") res += " (" + src + ")";
        r.push_back(res);
      }
      r.push_back(bytes_text(job["in_use"]));
      // The online prediction of the job's peak (estimator/online.h); "-" until it is stable.
      if (any_prediction)
        r.push_back(job.contains("predicted_peak") && job["predicted_peak"].is_number() ? bytes_text(job["predicted_peak"])
                                                                                       : "-");
      if (wide)
        r.insert(r.end(), {bytes_text(job.value("driver_overhead", json(0))), bytes_text(job["peak"]),
                           bytes_text(job["granted"])});
      r.insert(r.end(), {str(job, "weight", "1"), job_share_text(dev, job)});
      j.add(r);
    }
    o << "\n" << j.render("  ");
    // Its queue: each waiting job's place, reason and estimated start.
    std::vector<std::pair<int64_t, std::string>> waiting;
    for (const json& job : dev.at("jobs"))
      if (job.contains("queue") && job["queue"].is_object())
        waiting.emplace_back(job["queue"].value("position", int64_t(0)),
                             str(job, "job") + ": " + queue_sentence(job["queue"], int64_t(::time(nullptr))));
    std::sort(waiting.begin(), waiting.end());
    if (!waiting.empty()) o << "  waiting:\n";
    // Within 100 columns: wrapped after a "; " or ", " (continuation lines indented further).
    for (const auto& [pos, line] : waiting) {
      std::string rest = line, indent = "    ";
      while (display_width(indent + rest) > 100) {
        const size_t room = 100 - indent.size();
        size_t cut = rest.rfind("; ", room - 1);
        if (cut == std::string::npos || cut == 0) cut = rest.rfind(", ", room - 1);
        if (cut == std::string::npos || cut == 0) break;
        o << indent << rest.substr(0, cut + 1) << "\n";
        rest = rest.substr(cut + 2);
        indent = "      ";
      }
      o << indent << rest << "\n";
    }
    o << outside_processes_text(dev, 100);
  }
  // Jobs whose processes claim more in their stats pages than they can hold (a lying or broken
  // client): colocd counts only what they hold; said here so an admin can look at them.
  if (s.contains("jobs") && s["jobs"].is_array())
    for (const json& job : s["jobs"]) {
      const json over = job.value("overclaimed", json(0));
      if (!over.is_number_unsigned() || over.get<uint64_t>() == 0) continue;
      o << "\n! job " << str(job, "job") << " (" << str(job, "user") << "): its processes claim " << bytes_text(over)
        << " more than they hold; colocd counts only what they hold\n";
    }
  if (colocd_numbered) o << "\n* numbered by colocd: NVML does not list the device\n";
  if (!wide && !s.at("devices").empty()) o << "\n(coloc status --wide adds reservations, driver overhead, peaks and grants)\n";
  return o.str();
}

/// The priority controller's state in a few words: "idle" (no high-priority job shares the
/// device with others), "probing", or the others' share of the gaps and the measured slowdown.
static std::string controller_text(const json& c) {
  if (!c.is_object() || !c.value("active", false)) return "idle";
  if (c.value("probing", false)) return "probing";
  char buf[96];
  std::snprintf(buf, sizeof buf, "allow %.2f, slowdown %.1f%%", c.value("allow", 0.0), c.value("slowdown", 0.0) * 100);
  return buf;
}

std::string policy_table(const json& s) {
  auto it = s.find("policies");
  if (it == s.end() || !it->is_object()) return "";
  const json& p = *it;
  std::ostringstream o;
  if (p.at("devices").empty()) o << "No devices yet (colocd learns of them from NVML and from its jobs).\n";
  else {
    // The priority policy's target slowdown in a column of its own, when a device has that policy.
    bool any_priority = false;
    for (const json& dev : p.at("devices"))
      any_priority |= str(dev.value("policy", json::object()), "mode", "share") == "priority";
    std::vector<std::string> cols = {"INDEX", "DEVICE", "POLICY", "QUANTUM", "TURN"};
    if (any_priority) {
      cols.push_back("TARGET");
      cols.push_back("CONTROLLER");
    }
    Table t(cols);
    bool colocd_numbered = false, unseen = false;
    for (const json& dev : p.at("devices")) {
      const json pol = dev.value("policy", json::object());
      const std::string mode = str(pol, "mode", "share");
      std::string index = device_index_text(dev);
      colocd_numbered |= index.back() == '*';
      unseen |= !dev.value("seen", true);
      std::vector<std::string> row = {index, str(dev, "uuid"), mode, mode == "timeslice" ? str(pol, "quantum_ms") + " ms" : "-",
                                      dev.value("holder", json()).is_string() ? dev["holder"].get<std::string>() : "-"};
      if (any_priority) {
        row.push_back(mode == "priority" && pol.contains("target_pct") ? str(pol, "target_pct") + "%" : "-");
        row.push_back(mode == "priority" ? controller_text(dev.value("control", json())) : "-");
      }
      t.add(row);
    }
    o << t.render();
    if (colocd_numbered) o << "* numbered by colocd: NVML does not list the device\n";
    if (unseen) o << "- not seen since colocd started: it keeps its policy for when it comes back\n";
  }
  if (p.contains("default") && p["default"].is_object())
    o << "Devices colocd learns of later: " << policy_text(p["default"]) << " (coloc policy all)\n";
  return o.str();
}

std::string policy_set_text(const json& r) {
  std::ostringstream o;
  if (r.value("all", false))
    o << "every device, and each device colocd learns of later: " << policy_text(r.value("default", json())) << "\n";
  for (const json& dev : r.at("devices")) {
    const std::string now = policy_text(dev.value("policy", json())), was = policy_text(dev.value("was", json()));
    o << "device " << device_index_text(dev) << " " << str(dev, "uuid") << ": " << now;
    if (was != now) o << " (was " << was << ")";
    else o << " (unchanged)";
    o << "\n";
  }
  if (r.at("devices").empty()) o << "no device is known yet\n";
  return o.str();
}

std::string set_text(const json& r) {
  std::ostringstream o;
  o << "job " << str(r, "job") << ": limit " << bytes_text(r["limit"]) << ", priority " << str(r, "priority")
    << ", weight " << str(r, "weight", "1") << ", in use " << bytes_text(r["in_use"]) << "\n";
  if (!r.contains("reservation_changes")) return o.str();
  for (const json& ch : r.at("reservation_changes")) {
    const std::string outcome = str(ch, "outcome");
    o << "  reservation on " << short_uuid(str(ch, "uuid")) << ": ";
    if (outcome == "raised" || outcome == "lowered")
      o << outcome << " from " << bytes_text(ch["before"]) << " to " << bytes_text(ch["after"]) << "\n";
    else if (outcome.rfind("kept", 0) == 0)
      o << outcome << " (" << bytes_text(ch["before"]) << "; wanted " << bytes_text(ch["wanted"]) << ", available "
        << bytes_text(ch["available"]) << "); the job grows past it by ordinary grants when memory is free\n";
    else
      o << outcome << " (" << bytes_text(ch["after"]) << ")\n";
  }
  return o.str();
}

std::string pause_text(const json& r, bool pause) {
  const std::string job = str(r, "job");
  const json was = r.value("was", json(nullptr));
  const json by = r.value("paused_by", json(nullptr));
  std::ostringstream o;
  if (pause) {
    o << "job " << job << (was.is_null() ? " paused" : " was already paused")
      << ": its launches wait on every device; its memory stays";
    if (by == "admin") o << " (paused by an admin)";
    o << ". `coloc resume " << job << "` lets it run again.\n";
    if (uint64_t n = r.value("ungated_processes", uint64_t(0)); n > 0)
      o << "warning: " << n << (n == 1 ? " process" : " processes") << " of the job speak an older protocol "
        << "(libcoloc.so older than colocd, protocol v5 or below) and are not held by the pause\n";
  } else {
    const json ended = r.value("ended", json::array());
    const bool suspension = std::find(ended.begin(), ended.end(), json("suspension")) != ended.end();
    if (suspension) {
      const json s = r.value("suspension", json(nullptr));
      const std::string state = s.is_object() ? s.value("state", std::string()) : std::string("running");
      o << "job " << job << (was.is_null() ? "" : " resumed from its pause, and")
        << (state == "restoring" || state == "running" ? " is being restored"
                                                        : "'s restore waits for the memory it held (reason Suspended)")
        << "\n";
    } else {
      o << "job " << job << (was.is_null() ? " was neither paused nor suspended" : " resumed") << "\n";
    }
  }
  return o.str();
}

std::string suspend_text(const json& r, bool started_only) {
  const std::string job = str(r, "job");
  const json s = r.value("suspension", json(nullptr));
  std::ostringstream o;
  if (!s.is_object()) {
    o << "job " << job << " was not suspended: " << r.value("suspend_error", std::string("it runs on")) << "\n";
    return o.str();
  }
  const std::string state = s.value("state", std::string());
  if (r.value("already", false)) {
    o << "job " << job << " was already " << state << "\n";
    return o.str();
  }
  if (state == "suspending" && started_only) {
    o << "job " << job << " is being suspended (`coloc jobs` shows when it is)\n";
    return o.str();
  }
  o << "job " << job << " " << state;
  if (s.contains("checkpoint_s") && s["checkpoint_s"].is_number())
    o << " in " << duration_text(s["checkpoint_s"].get<double>());
  o << ": " << bytes_text(s.value("bytes", json(0))) << " in host memory, its GPU memory free. `coloc resume " << job
    << "` restores it.\n";
  return o.str();
}

std::optional<uint32_t> resolve_user(const std::string& user, std::string* error) {
  if (!user.empty() && user.size() <= 10 && user.find_first_not_of("0123456789") == std::string::npos) {
    const uint64_t uid = std::stoull(user);
    if (uid < 0xffffffffull) return uint32_t(uid);  // (uid_t)-1 is no user
  } else if (!user.empty()) {
    std::vector<char> buf(16384);
    passwd pw{}, *found = nullptr;
    if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found) return uint32_t(found->pw_uid);
  }
  *error = "'" + user + "': no such user (a name of this machine, or a uid)";
  return std::nullopt;
}

namespace {
// With the date always: `--since 2d` lists two days' times.
std::string local_time_text(int64_t unix_ms) {
  const time_t t = time_t(unix_ms / 1000);
  tm at{};
  ::localtime_r(&t, &at);
  char buf[32];
  std::strftime(buf, sizeof buf, "%b %d %H:%M:%S", &at);
  return buf;
}
}  // namespace

std::string ended_table(const json& ended) {
  const json& list = ended.value("jobs", json::array());
  const bool indexed = ended.value("indexed", true);
  if (list.empty()) return indexed ? "No ended jobs.\n" : "No ended jobs yet (colocd is still reading the reports).\n";
  Table t({"JOB", "USER", "START", "END", "EXIT", "PEAK", "WAITED", "COMMAND"});
  for (const json& e : list) {
    if (!e.is_object()) continue;
    auto num = [&](const char* k) -> std::optional<double> {
      auto it = e.find(k);
      return it != e.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
    };
    auto ms = [&](const char* k) { return int64_t(std::clamp(num(k).value_or(0), 0.0, 1e15)); };
    std::string exit = num("exit_status") ? std::to_string(int64_t(*num("exit_status")))
                       : num("exit_signal") ? "signal " + std::to_string(int64_t(*num("exit_signal")))
                                            : "-";
    // What a report on disk says, at most so wide.
    auto fit = [](std::string s, size_t most) { return s.size() > most ? s.substr(0, most - 3) + "..." : s; };
    if (e.contains("cancelled_by") && e["cancelled_by"].is_string())
      exit += " (cancelled by " + fit(e["cancelled_by"].get<std::string>(), 32) + ")";
    std::string command = e.contains("command") && e["command"].is_string() ? e["command"].get<std::string>() : "(hidden)";
    if (command.size() > 60) command = command.substr(0, 27) + "..." + command.substr(command.size() - 30);
    t.add({fit(str(e, "job"), 64), fit(str(e, "user"), 32), local_time_text(ms("start_unix_ms")),
           local_time_text(ms("end_unix_ms")), exit, bytes_text(e.value("peak", json(nullptr))),
           duration_text(std::clamp(num("waited_s").value_or(0), 0.0, 1e12)), command});
  }
  std::string out = t.render();
  if (!indexed) out += "(colocd is still reading the reports: older jobs may be missing)\n";
  if (ended.contains("total") && ended["total"].is_number_unsigned() && ended["total"].get<uint64_t>() > 1000)
    out += "(from the newest 1000 of " + std::to_string(ended["total"].get<uint64_t>()) +
           " ended jobs; an older one's report: coloc report JOB)\n";
  return out;
}

std::string cancel_text(const json& r) {
  std::ostringstream o;
  const json all = r.value("signalled", json::array());
  json sig = json::array();  // those the signal reached; the others ended before it
  for (const json& e : all)
    if (!(e.is_object() && e.value("ended", false))) sig.push_back(e);
  const size_t ended = all.size() - sig.size();
  const int signal = r.value("signal", 15);
  const char* name = ::sigabbrev_np(signal);
  o << "job " << str(r, "job") << " cancelled";
  if (r.value("left_queue", false)) o << ": it left the queue";
  o << (r.value("left_queue", false) ? "; " : ": ");
  if (sig.empty()) {
    o << "none of its processes was still running\n";
    return o.str();
  }
  o << "SIG" << (name ? name : std::to_string(signal).c_str()) << " sent to " << sig.size()
    << (sig.size() == 1 ? " process" : " processes");
  if (ended) o << " (" << ended << " more had just ended)";
  const uint64_t grace = r.value("grace_ms", uint64_t(0));
  if (signal != SIGKILL)
    o << ", SIGKILL to those still running " << (grace ? "after " + duration_text(double(grace) / 1000) : std::string("at once"));
  o << "\n";
  if (r.value("slurm", false)) o << "note: it said it runs under Slurm, which will see its step fail (scancel ends a Slurm job)\n";
  return o.str();
}

std::string job_state_text(const json& j) {
  const std::string state = str(j, "state");
  const std::string compute = j.value("compute_state", std::string("running"));
  if (compute == "paused") return state == "running" ? "paused" : state + "+paused";
  if (compute == "waiting-quantum") return state == "running" ? "waiting-quantum" : state + "+quantum";
  if (compute == "throttled") return state == "running" ? "throttled" : state + "+throttled";
  return state;
}

std::string queue_reason_text(const json& q) {
  if (!q.is_object()) return "-";
  const std::string reason = str(q, "reason", "?");
  if ((reason == "Priority" || reason == "Queue") && q.contains("behind") && q["behind"].is_string())
    return reason + "(" + q["behind"].get<std::string>() + ")";
  return reason;
}

std::string queue_start_text(const json& q, int64_t now_unix_s) {
  if (!q.is_object()) return "-";
  auto ms = q.find("estimated_start_ms");
  auto in = q.find("estimated_start_s");
  if (ms == q.end() || !ms->is_number() || in == q.end() || !in->is_number()) return "unknown";
  if (in->get<double>() < 1) return "now";
  const time_t t = time_t(ms->get<int64_t>() / 1000);
  tm at{};
  ::localtime_r(&t, &at);
  char buf[32];
  std::strftime(buf, sizeof buf, t - now_unix_s >= 86400 ? "~%b %d %H:%M" : "~%H:%M", &at);
  return buf;
}

std::string queue_sentence(const json& q, int64_t now_unix_s) {
  if (!q.is_object()) return "";
  std::ostringstream o;
  o << "#" << str(q, "position") << " in line: " << str(q, "reason");
  const std::string reason = str(q, "reason", "?");
  if (reason == "Priority")
    o << ": behind " << str(q, "behind") << ", of a higher priority";
  else if (reason == "Queue")
    o << ": behind " << str(q, "behind") << ", first in line";
  else if (reason == "Resources" || reason == "Outside") {
    o << ": " << bytes_text(q.value("missing", json(0))) << " missing";
    if (reason == "Outside") o << ", used outside coloc";
    auto held = q.find("held_by");
    if (held != q.end() && held->is_array() && !held->empty()) {
      o << ", held by ";
      for (size_t i = 0; i < held->size(); ++i)
        o << (i ? ", " : "") << str((*held)[i], "job") << " (" << bytes_text((*held)[i].value("bytes", json(0))) << ")";
    }
  } else if (reason == "UserCap")
    o << ": its user's jobs hold what colocd's max_per_user allows";
  else if (reason == "Restart")
    o << ": colocd restarted and waits for its running jobs to come back";
  else if (reason == "Suspended")
    o << ": its job is suspended to host memory; it goes on once the job is restored";
  const std::string source = str(q, "asks_source", "");
  static const std::map<std::string, std::string> kSource = {{"mem", "--mem"},
                                                             {"history", "its earlier runs"},
                                                             {"estimate", "its estimate"},
                                                             {"context", "one CUDA context"},
                                                             {"growth", "to grow"}};
  auto src = kSource.find(source);
  o << "; asks " << bytes_text(q.value("asks", json(0))) << (src != kSource.end() ? " (" + src->second + ")" : "");
  o << "; starts " << queue_start_text(q, now_unix_s);
  return o.str();
}

std::string jobs_table(const json& jobs) {
  const json& list = jobs.at("jobs");
  if (list.empty()) return "No jobs.\n";
  const int64_t now_s = int64_t(::time(nullptr));
  Table t({"JOB", "USER", "PRIORITY", "WEIGHT", "STATE", "REASON", "START", "LIMIT", "IN USE", "DRIVER OVERHEAD", "PEAK",
           "GRANTED", "DEVICES", "PIDS"});
  for (const json& j : list) {
    std::string devs, pids, lower;
    for (const json& d : j.at("devices")) {
      devs += (devs.empty() ? "" : ",") + short_uuid(str(d, "uuid"));
      // A device where the job's limit is lower (the COLOC_MEM_LIMIT_<n> of the process that
      // brought the job there): the job-wide figure alone would read as room it does not have.
      auto dl = d.find("limit");
      if (dl == d.end() || !dl->is_number()) continue;
      const json& jl = j["limit"];
      if (jl.is_null() || (jl.is_number() && dl->get<uint64_t>() < jl.get<uint64_t>()))
        lower += (lower.empty() ? "" : ", ") + bytes_text(*dl) + " on " + short_uuid(str(d, "uuid"));
    }
    for (const json& p : j.at("pids")) pids += (pids.empty() ? "" : ",") + p.dump();
    const json q = j.value("queue", json());
    t.add({str(j, "job"), str(j, "user"), str(j, "priority"), str(j, "weight", "1"), job_state_text(j),
           queue_reason_text(q), queue_start_text(q, now_s), bytes_text(j["limit"]) + (lower.empty() ? "" : " (" + lower + ")"), bytes_text(j["in_use"]),
           bytes_text(j.value("driver_overhead", json(0))), bytes_text(j["peak"]), bytes_text(j["granted"]),
           devs.empty() ? "-" : devs, pids});
  }
  return t.render();
}

std::string steps_table(const json& r) {
  auto procs = r.find("processes");
  if (procs == r.end() || !procs->is_array()) return "";
  struct Step {
    std::string label;
    uint64_t count = 0;
    std::string pids;
    std::vector<std::string> ends;
  };
  constexpr uint64_t kMaxPids = 8;  // listed per step; the rest are counted
  std::vector<Step> steps;
  bool any = false;
  for (const json& p : *procs) {
    if (!p.is_object()) continue;
    const std::string label = str(p, "step", "-");
    any |= label != "-";
    auto s = std::find_if(steps.begin(), steps.end(), [&](const Step& x) { return x.label == label; });
    if (s == steps.end()) s = steps.insert(steps.end(), Step{label});
    if (s->count < kMaxPids) s->pids += (s->pids.empty() ? "" : ", ") + str(p, "pid");
    ++s->count;
    std::string end = !str(p, "exit_code", "").empty() ? str(p, "exit_code")
                      : !str(p, "signal", "").empty()  ? "signal " + str(p, "signal")
                      : str(p, "noticed_by", "").empty() ? "running"
                                                         : "unknown";
    if (std::find(s->ends.begin(), s->ends.end(), end) == s->ends.end()) s->ends.push_back(end);
  }
  if (!any) return "";
  Table t({"STEP", "PROCESSES", "PIDS", "EXIT"});
  for (const Step& s : steps) {
    std::string pids = s.pids;
    if (s.count > kMaxPids) pids += " +" + std::to_string(s.count - kMaxPids) + " more";
    std::string ends;
    for (const std::string& e : s.ends) ends += (ends.empty() ? "" : ", ") + e;
    t.add({s.label, std::to_string(s.count), pids, ends});
  }
  return t.render("  ");
}

std::string report_table(const json& r) {
  std::ostringstream o;
  o << "Job " << str(r, "job") << " (user " << str(r, "user") << ", priority " << str(r, "priority") << ")\n";
  o << "Command: " << str(r, "command") << "\n";
  o << "Started " << str(r, "start");
  if (r.value("complete", false)) {
    if (r.value("ended_while_daemon_away", false))  // when exactly is not known: both bounds
      o << " · ended while colocd was away, " << away_span_text(r) << " · ran " << ran_text(r);
    else
      o << " · ended " << str(r, "end") << " · ran " << ran_text(r);
    if (!r["exit_status"].is_null()) o << " · exit status " << r["exit_status"].dump();
    else if (!r["exit_signal"].is_null()) o << " · killed by signal " << r["exit_signal"].dump();
    else o << " · exit status unknown";
  } else {
    o << " · still running (" << duration_text(r.value("duration_s", 0.0)) << " so far)";
  }
  o << "\n";
  if (auto c = r.find("cancelled"); c != r.end() && c->is_object()) {
    const int sig = c->value("signal", 0);
    const char* name = sig > 0 ? ::sigabbrev_np(sig) : nullptr;
    o << "Cancelled by " << str(*c, "by") << " at " << str(*c, "at") << " (coloc cancel, "
      << (name ? "SIG" + std::string(name) : "signal " + std::to_string(sig)) << ")\n";
  }
  // Other reports filed under the same job id (colocd names them when there are).
  if (r.contains("other_reports") && r["other_reports"].is_array() && !r["other_reports"].empty()) {
    o << "This is report " << str(r, "report_name") << "; other reports of this job id:";
    for (const json& n : r["other_reports"]) o << " " << (n.is_string() ? n.get<std::string>() : n.dump());
    o << " (coloc report NAME shows one)\n";
  }
  o << "\n";
  Table t({"DEVICE", "LIMIT", "PEAK", "DRIVER OVERHEAD", "ALLOCS", "FREES", "FAILED", "LAUNCHES", "WAIT MEMORY",
           "WAIT ADMISSION", "OOM EVENTS"});
  for (const json& d : r.at("devices"))
    t.add({str(d, "uuid"), bytes_text(d["limit"]), bytes_text(d["peak"]), bytes_text(d.value("driver_overhead", json(0))),
           str(d, "allocations"), str(d, "frees"),
           str(d, "failures"), str(d, "kernel_launches"), duration_text(d.value("wait_memory_s", 0.0)),
           duration_text(d.value("wait_admission_s", 0.0)), std::to_string(d.at("oom_events").size())});
  o << t.render();
  // Where each reservation came from, and the online prediction (estimator/online.h).
  for (const json& d : r.at("devices")) {
    const std::string src = d.contains("reservation_source") && d["reservation_source"].is_string()
                                ? d["reservation_source"].get<std::string>()
                                : "";
    const bool predicted = d.contains("predicted_peak") && d["predicted_peak"].is_number();
    if (src.empty() && !predicted) continue;  // an older daemon's report
    o << "\n" << short_uuid(str(d, "uuid")) << ": reservation " << bytes_text(d.value("reservation", json(0)));
    if (src == "mem") o << " (--mem)";
    else if (src == "history") o << " (from the job's history)";
    else if (src == "estimate") o << " (from its estimate: coloc run --estimate-from / COLOC_MEM_ESTIMATE)";
    else if (src == "online") o << " (from its online prediction)";
    else o << " (none: it grew by ordinary grants)";
    if (predicted) {
      o << "; predicted peak " << bytes_text(d["predicted_peak"]);
      const json p = d.value("prediction", json());
      if (p.is_object()) {
        if (p.contains("stable_s") && p["stable_s"].is_number()) {
          char buf[96];
          std::snprintf(buf, sizeof buf, " (stable from +%.2f s; an iteration every %.1f ms)", p["stable_s"].get<double>(),
                        p.value("period_ms", 0.0));
          o << buf;
        }
      }
    } else if (d.contains("prediction") && d["prediction"].is_object()) {
      o << "; no prediction (" << str(d["prediction"], "state") << ": its iterations never repeated)";
    }
    o << "\n";
    if (d.contains("reservation_kept") && d["reservation_kept"].is_object())
      o << "  a higher prediction (" << bytes_text(d["reservation_kept"]["wanted"]) << ") did not raise it: "
        << str(d["reservation_kept"], "outcome") << " (" << bytes_text(d["reservation_kept"]["available"])
        << " available then)\n";
  }
  bool any_oom = false, any_wait = false;
  for (const json& d : r.at("devices")) {
    any_oom |= !d.at("oom_events").empty();
    any_wait |= !d.at("waits").empty();
  }
  if (any_oom) {
    o << "\nOOM events (allocations coloc refused):\n";
    Table e({"AT", "DEVICE", "REASON", "REQUEST", "IN USE"});
    for (const json& d : r.at("devices"))
      for (const json& ev : d.at("oom_events")) {
        char at[32];
        std::snprintf(at, sizeof at, "+%.2f s", ev.value("t_s", 0.0));
        e.add({at, short_uuid(str(d, "uuid")), str(ev, "reason") + (ev.value("admission", false) ? " (admission)" : ""),
               bytes_text(json(oom_request_bytes(ev))), bytes_text(ev["in_use"])});
      }
    o << e.render("  ");
  }
  // Launches held at the launch gate (coloc pause; time-slicing), by cause, where any waited.
  std::ostringstream gate;
  for (const json& d : r.at("devices")) {
    const json gw = d.value("gate_wait_s", json::object()), gn = d.value("gate_waited_launches", json::object());
    std::string parts;
    for (const char* cause : {"quantum", "window", "pause"}) {
      const uint64_t n = gn.value(cause, uint64_t(0));
      if (n == 0) continue;
      parts += std::string(parts.empty() ? "" : ", ") + cause + " " + duration_text(gw.value(cause, 0.0)) + " (" +
               std::to_string(n) + (n == 1 ? " launch)" : " launches)");
    }
    if (!parts.empty()) gate << "  " << short_uuid(str(d, "uuid")) << ": " << parts << "\n";
  }
  if (!gate.str().empty()) o << "\nLaunches held at the gate:\n" << gate.str();
  // Compute on timesliced devices: device time from completions, turns, launches by gate state.
  std::ostringstream compute;
  for (const json& d : r.at("devices")) {
    const double gpu = d.value("gpu_time_s", 0.0);
    const uint64_t turns = d.value("turns_count", uint64_t(0)), timeouts = d.value("drain_timeouts", uint64_t(0));
    const json lb = d.value("launches_by_gate", json::object());
    const uint64_t window = lb.value("window", uint64_t(0)), run = lb.value("run", uint64_t(0));
    if (gpu <= 0 && turns == 0 && window == 0) continue;
    compute << "  " << short_uuid(str(d, "uuid")) << ": GPU time " << duration_text(gpu) << " · " << turns
            << (turns == 1 ? " turn" : " turns");
    if (timeouts) compute << " (" << timeouts << " not drained in time)";
    compute << " · launches " << window << " holding the device, " << run << " with the gate open";
    if (const uint64_t ww = d.value("window_waits", uint64_t(0))) compute << ", " << ww << " waited for the window";
    compute << "\n";
  }
  if (!compute.str().empty()) o << "\nCompute (timesliced devices):\n" << compute.str();
  if (any_wait) {
    o << "\nWaits:\n";
    Table w({"FROM", "TO", "DEVICE", "FOR", "OUTCOME"});
    for (const json& d : r.at("devices"))
      for (const json& wt : d.at("waits")) {
        char from[32], to[32];
        std::snprintf(from, sizeof from, "+%.2f s", wt.value("start_s", 0.0));
        std::snprintf(to, sizeof to, "+%.2f s", wt.value("end_s", 0.0));
        w.add({from, to, short_uuid(str(d, "uuid")), str(wt, "kind"),
               str(wt, "outcome") + (wt.value("across_restart", false) ? " (across a colocd restart)" : "")});
      }
    o << w.render("  ");
  }
  // Where its processes ran: their steps within the job (Slurm job steps; COLOC_STEP).
  if (const std::string steps = steps_table(r); !steps.empty()) o << "\nProcesses by step:\n" << steps;
  return o.str();
}

}  // namespace coloc::cli

namespace coloc::cli {

namespace {
/// The FAILED cell of `coloc history`: "-", or how many of the kept runs failed and why ("2: own
/// limit, killed"; a cause that ended several runs shows its count: "3: device x2, cancelled").
std::string failures_text(const json& f) {
  const json failures = f.value("failures", json::object());
  if (!failures.is_object() || failures.empty()) return "-";
  static const std::pair<const char*, const char*> kWhy[] = {{"oom-limit", "own limit"}, {"oom-device", "device"},
                                                             {"oom", "out of memory"},   {"killed", "killed"},
                                                             {"cancelled", "cancelled"}};
  uint64_t total = 0;
  std::string why;
  for (const auto& [key, text] : kWhy) {
    const uint64_t n = failures.contains(key) && failures[key].is_number_unsigned() ? failures[key].get<uint64_t>() : 0;
    if (n == 0) continue;
    total += n;
    why += std::string(why.empty() ? "" : ", ") + text + (n > 1 ? " x" + std::to_string(n) : "");
  }
  return total ? std::to_string(total) + ": " + why : "-";
}
}  // namespace

std::string history_table(const json& h, bool wide) {
  std::ostringstream o;
  const json& list = h.value("fingerprints", json::array());
  if (!h.value("usable", true)) {
    o << "Run history is off";
    if (h.contains("path") && h["path"].is_string()) o << " (" << h["path"].get<std::string>() << ": see colocd's log)";
    o << ".\n";
    return o.str();
  }
  if (list.empty()) return h.value("loaded", true) ? "No run history.\n" : "No run history (colocd is still reading it).\n";
  Table t({"FINGERPRINT", "USER", "MODEL", "RUNS", "FAILED", "P50", "P95", "ESTIMATE", "TYPICAL RUN", "LAST RUN", "COMMAND"});
  bool any_floor = false;
  for (const json& f : list) {
    std::string command = f.contains("command") && f["command"].is_string() ? f["command"].get<std::string>() : "(hidden)";
    // Cut in the middle: a command's start names the program, its end often the run (arguments).
    if (!wide && command.size() > 60) command = command.substr(0, 27) + "..." + command.substr(command.size() - 30);
    // Failed runs only: their largest peak is a floor of what the job needs, not its footprint.
    const bool floor = f.value("lower_bound", false);
    any_floor |= floor;
    const uint64_t run_ms = f.value("run_ms", uint64_t(0));
    t.add({str(f, "fingerprint"), str(f, "user"), str(f, "model"), str(f, "runs"), failures_text(f), bytes_text(f["p50"]),
           bytes_text(f["p95"]), (floor ? "\u2265 " : "") + bytes_text(f["estimate"]),
           run_ms ? duration_text(double(run_ms) / 1000) : "-", str(f, "last_end"), command});
  }
  std::string out = t.render();
  if (any_floor)
    out += "\n\u2265: no run ended cleanly; the largest failed run's peak (out of memory, or killed) is a lower bound of "
           "what the job needs\nFAILED: runs that ran out of memory at their own limit or on a full device, were killed, "
           "or were cancelled\n";
  return out;
}

std::string history_forget_text(const json& reply, const std::string& what) {
  const uint64_t n = reply.value("forgotten", uint64_t(0));
  if (what == "all")
    return n == 0 ? std::string("No fingerprint to forget.\n")
                  : "Forgot " + std::to_string(n) + " fingerprint" + (n == 1 ? "" : "s") + ".\n";
  return "Forgot fingerprint " + what + ".\n";
}

}  // namespace coloc::cli
