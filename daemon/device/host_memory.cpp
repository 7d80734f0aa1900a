#include "device/host_memory.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace coloc::device {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<MemInfo> parse_meminfo(std::string_view text) {
  std::optional<uint64_t> total, available;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon), rest = trim(line.substr(colon + 1));
    if (key != "MemTotal" && key != "MemAvailable") continue;
    if (rest.size() < 3 || rest.substr(rest.size() - 3) != " kB") return std::nullopt;
    uint64_t kib;
    if (!parse_u64(trim(rest.substr(0, rest.size() - 3)), &kib) || kib > (UINT64_MAX >> 10)) return std::nullopt;
    (key == "MemTotal" ? total : available) = kib << 10;
  }
  if (!total || !available) return std::nullopt;
  return MemInfo{*total, *available};
}

std::optional<std::string> parse_cgroup_path(std::string_view text) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.substr(0, 3) == "0::") {
      std::string_view path = trim(line.substr(3));
      if (path.empty() || path.front() != '/' || path.find("..") != std::string_view::npos) return std::nullopt;
      return std::string(path);
    }
  }
  return std::nullopt;
}

bool parse_memory_max(std::string_view text, std::optional<uint64_t>* limit) {
  text = trim(text);
  if (text == "max") {
    *limit = std::nullopt;
    return true;
  }
  uint64_t v;
  if (!parse_u64(text, &v)) return false;
  *limit = v;
  return true;
}

std::optional<HostRoom> host_room(pid_t pid, double reserve_fraction, const std::string& proc_root,
                                  const std::string& cgroup_root) {
  auto meminfo_text = slurp(proc_root + "/meminfo");
  if (!meminfo_text) return std::nullopt;
  auto mi = parse_meminfo(*meminfo_text);
  if (!mi) return std::nullopt;
  if (!(reserve_fraction >= 0)) reserve_fraction = 0;
  if (reserve_fraction > 1) reserve_fraction = 1;
  const auto reserve = uint64_t(double(mi->total) * reserve_fraction);
  HostRoom r;
  r.host = mi->available > reserve ? mi->available - reserve : 0;
  auto cg_text = slurp(proc_root + "/" + std::to_string(pid) + "/cgroup");
  auto path = cg_text ? parse_cgroup_path(*cg_text) : std::nullopt;
  if (!path) return r;
  // The nearest limit up the tree binds: a job's cgroup may be limited by a parent (a Slurm job's
  // step inside its job's cgroup, a systemd slice).
  std::string dir = *path;
  for (;;) {
    auto max_text = slurp(cgroup_root + dir + "/memory.max");
    auto cur_text = slurp(cgroup_root + dir + "/memory.current");
    std::optional<uint64_t> limit;
    uint64_t current = 0;
    if (max_text && cur_text && parse_memory_max(*max_text, &limit) && limit && parse_u64(trim(*cur_text), &current)) {
      const uint64_t room = *limit > current ? *limit - current : 0;
      if (!r.cgroup || room < *r.cgroup) {
        r.cgroup = room;
        r.cgroup_path = dir;
      }
    }
    if (dir == "/" || dir.empty()) break;
    size_t slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  return r;
}

}  // namespace coloc::device
