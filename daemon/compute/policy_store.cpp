#include "compute/policy_store.h"
#include "util/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace coloc::compute {

using nlohmann::json;

namespace {

constexpr int kFormat = 1;
/// A policy file is a few hundred bytes per device; anything this large is not one.
constexpr size_t kMaxFileBytes = 1u << 20;


}  // namespace

bool PolicyStore::parse_mode(const std::string& name, proto::PolicyMode* out) {
  for (proto::PolicyMode m : {proto::PolicyMode::kShare, proto::PolicyMode::kTimeslice, proto::PolicyMode::kPriority})
    if (name == mode_name(m)) {
      *out = m;
      return true;
    }
  return false;
}

json PolicyStore::to_json(const PolicySettings& s) {
  json j{{"mode", mode_name(s.mode)}, {"quantum_ms", s.quantum / 1'000'000}};
  if (s.mode == proto::PolicyMode::kPriority) j["target_pct"] = s.target_pct;
  return j;
}

std::optional<PolicySettings> PolicyStore::from_json(const json& j, std::string* why) {
  if (!j.is_object()) {
    *why = "a policy is not a JSON object";
    return std::nullopt;
  }
  PolicySettings s;
  auto mode = j.find("mode");
  if (mode == j.end() || !mode->is_string() || !parse_mode(mode->get<std::string>(), &s.mode)) {
    *why = "mode is not share, timeslice or priority";
    return std::nullopt;
  }
  auto q = j.find("quantum_ms");
  if (q != j.end()) {
    if (!q->is_number_unsigned() || q->get<uint64_t>() < proto::kMinQuantumMs || q->get<uint64_t>() > proto::kMaxQuantumMs) {
      *why = "quantum_ms is not an integer from " + std::to_string(proto::kMinQuantumMs) + " to " +
             std::to_string(proto::kMaxQuantumMs);
      return std::nullopt;
    }
    s.quantum = Nanos(q->get<uint64_t>()) * 1'000'000;
  }
  // The priority policy's target (absent: the default, as in files written before it existed).
  // Only priority keeps it; another mode's is checked, and left at the default.
  auto t = j.find("target_pct");
  if (t != j.end()) {
    if (!t->is_number_unsigned() || t->get<uint64_t>() < proto::kMinTargetPct || t->get<uint64_t>() > proto::kMaxTargetPct) {
      *why = "target_pct is not an integer from " + std::to_string(proto::kMinTargetPct) + " to " +
             std::to_string(proto::kMaxTargetPct);
      return std::nullopt;
    }
    if (s.mode == proto::PolicyMode::kPriority) s.target_pct = uint32_t(t->get<uint64_t>());
  }
  return s;
}

std::optional<PolicySettings> PolicyStore::for_device(const Uuid& dev) const {
  if (auto it = devices_.find(dev); it != devices_.end()) return it->second;
  if (default_) return default_;
  if (auto it = configured_.find(dev); it != configured_.end()) return it->second;
  return configured_default_;
}

void PolicyStore::apply(Scheduler& scheduler) const {
  for (const auto& [dev, s] : devices_) scheduler.set_policy(dev, s);
  for (const auto& [dev, s] : configured_)
    if (auto p = for_device(dev)) scheduler.set_policy(dev, *p);
}

void PolicyStore::apply_all(Scheduler& scheduler, const std::vector<Uuid>& devs) const {
  std::vector<Uuid> all = devs;
  for (const auto& [dev, s] : devices_) all.push_back(dev);
  for (const auto& [dev, s] : configured_) all.push_back(dev);
  for (const auto& [dev, s] : scheduler.policies()) all.push_back(dev);
  for (const Uuid& dev : all) scheduler.set_policy(dev, for_device(dev).value_or(PolicySettings{}));
}

bool PolicyStore::apply_new_device(const Uuid& dev, Scheduler& scheduler) const {
  auto s = for_device(dev);
  if (!s || scheduler.policy(dev) == *s) return false;
  scheduler.set_policy(dev, *s);
  return true;
}

std::vector<std::string> PolicyStore::load() {
  std::vector<std::string> problems;
  default_.reset();
  devices_.clear();
  ::unlink((path_ + ".tmp").c_str());  // a save cut short
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno != ENOENT) problems.push_back("cannot read " + path_ + ": " + std::strerror(errno) + "; every device shares");
    return problems;
  }
  std::string why;
  std::optional<PolicySettings> dflt;
  std::map<Uuid, PolicySettings> devs;
  if (!S_ISREG(st.st_mode)) {
    why = "it is not a regular file";
  } else if (size_t(st.st_size) > kMaxFileBytes) {
    why = "it is " + std::to_string(st.st_size) + " bytes, over " + std::to_string(kMaxFileBytes);
  } else {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (!in && !in.eof()) {
      why = "it cannot be read";
    } else if (j.is_discarded() || !j.is_object()) {
      why = "it is not a JSON object";
    } else if (!j.contains("format") || !j["format"].is_number_integer() || j["format"].get<int64_t>() != kFormat) {
      why = "format is not " + std::to_string(kFormat);
    } else if (!j.contains("devices") || !j["devices"].is_object()) {
      why = "devices is not an object";
    } else {
      if (j.contains("default") && !j["default"].is_null()) {
        std::string w;
        dflt = from_json(j["default"], &w);
        if (!dflt) why = "default: " + w;
      }
      for (auto it = j["devices"].begin(); why.empty() && it != j["devices"].end(); ++it) {
        Uuid u;
        if (!Uuid::parse(it.key(), &u)) {
          why = "'" + it.key() + "' is not a device UUID";
          break;
        }
        std::string w;
        auto s = from_json(it.value(), &w);
        if (!s) {
          why = it.key() + ": " + w;
          break;
        }
        devs[u] = *s;
      }
    }
  }
  if (why.empty()) {
    default_ = dflt;
    devices_ = std::move(devs);
    return problems;
  }
  const std::string aside = path_ + ".bad";
  const bool moved = ::rename(path_.c_str(), aside.c_str()) == 0;
  problems.push_back("the saved compute policies " + path_ + " are unusable (" + why + "); " +
                     (moved ? "kept as " + aside : std::string("left in place")) +
                     ": every device shares until `coloc policy` sets one");
  return problems;
}

Result<void> PolicyStore::save() const {
  json devs = json::object();
  for (const auto& [dev, s] : devices_) devs[dev.str()] = to_json(s);
  const std::string text =
      json{{"format", kFormat}, {"default", default_ ? to_json(*default_) : json(nullptr)}, {"devices", devs}}.dump(1) +
      "\n";
  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error::from_errno("write " + tmp);
  Result<void> w = write_all(fd, text, tmp);
  if (w && ::fsync(fd) != 0) w = Error::from_errno("fsync " + tmp);
  ::close(fd);
  if (!w) {
    ::unlink(tmp.c_str());
    return w;
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    Error e = Error::from_errno("rename " + tmp + " to " + path_);
    ::unlink(tmp.c_str());
    return e;
  }
  // The rename itself reaches the disk with the directory.
  const std::string dir = path_.rfind('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/'));
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

}  // namespace coloc::compute
