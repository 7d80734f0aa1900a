#include "report/job_state_store.h"
#include "util/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "report/job_recorder.h"
#include "report/report_store.h"

namespace coloc::report {

using nlohmann::json;

namespace {

constexpr int kFormat = 1;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}


}  // namespace

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

Result<void> JobStateStore::prepare() const {
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return Error::from_errno("mkdir " + dir_);
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0) return Error::from_errno("stat " + dir_);
  if (!S_ISDIR(st.st_mode)) return Error{ENOTDIR, dir_ + " is not a directory"};
  if (::chmod(dir_.c_str(), 0700) != 0) return Error::from_errno("chmod " + dir_);
  return {};
}

std::string JobStateStore::path(const broker::JobKey& key) const {
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a(key.str()));
  return dir_ + "/" + std::to_string(key.uid) + "." + ReportStore::sanitize(key.id).substr(0, 80) + "." + hash + ".json";
}

json JobStateStore::to_json(const SavedJob& j) {
  json pids = json::array();
  for (auto& [pid, start] : j.pids) pids.push_back({pid, start});
  return {{"format", kFormat},
          {"uid", j.key.uid},
          {"job", j.key.id},
          {"limit", j.limit},
          {"priority", j.priority},
          {"paused", j.paused.empty() ? json(nullptr) : json(j.paused)},
          {"weight", j.weight},
          {"pids", pids},
          {"saved_mono_ns", j.saved_mono},
          {"saved_unix_ms", j.saved_unix_ms},
          {"boot_id", j.boot_id},
          {"recorder", j.recorder},
          {"estimate", j.estimate}};
}

Result<SavedJob> JobStateStore::from_json(const json& j) {
  auto bad = [](const std::string& what) { return Error{EINVAL, what}; };
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || !j["format"].is_number_integer() || j["format"].get<int64_t>() != kFormat)
    return bad("format is not " + std::to_string(kFormat));
  for (const char* k : {"uid", "limit", "saved_mono_ns"})
    if (!j.contains(k) || !j[k].is_number_unsigned()) return bad(std::string(k) + " is not a non-negative integer");
  for (const char* k : {"job", "priority", "boot_id"})
    if (!j.contains(k) || !j[k].is_string()) return bad(std::string(k) + " is not a string");
  if (!j.contains("saved_unix_ms") || !j["saved_unix_ms"].is_number_integer()) return bad("saved_unix_ms is not an integer");
  if (!j.contains("pids") || !j["pids"].is_array() || j["pids"].size() > 100000) return bad("pids is not an array");
  if (!j.contains("recorder") || !j["recorder"].is_object()) return bad("recorder is not an object");
  SavedJob s;
  if (j["uid"].get<uint64_t>() > UINT32_MAX) return bad("uid is out of range");
  s.key = {uint32_t(j["uid"].get<uint64_t>()), j["job"].get<std::string>()};
  if (s.key.id.empty()) return bad("job is empty");
  s.limit = j["limit"].get<uint64_t>();
  s.priority = j["priority"].get<std::string>();
  if (j.contains("paused") && !j["paused"].is_null()) {  // absent in states saved before pause existed
    if (!j["paused"].is_string() || (j["paused"] != "owner" && j["paused"] != "admin"))
      return bad("paused is not \"owner\", \"admin\" or null");
    s.paused = j["paused"].get<std::string>();
  }
  if (j.contains("weight")) {  // absent in states saved before weights existed: the default
    if (!j["weight"].is_number_unsigned() || j["weight"].get<uint64_t>() < proto::kMinWeight ||
        j["weight"].get<uint64_t>() > proto::kMaxWeight)
      return bad("weight is not an integer from " + std::to_string(proto::kMinWeight) + " to " +
                 std::to_string(proto::kMaxWeight));
    s.weight = uint32_t(j["weight"].get<uint64_t>());
  }
  if (j.contains("estimate") && !j["estimate"].is_null()) {  // absent in states saved before estimation
    if (!j["estimate"].is_object()) return bad("estimate is not an object or null");
    s.estimate = j["estimate"];
  }
  s.saved_mono = j["saved_mono_ns"].get<uint64_t>();
  s.saved_unix_ms = j["saved_unix_ms"].get<int64_t>();
  s.boot_id = j["boot_id"].get<std::string>();
  for (const json& p : j["pids"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || p[0].get<int64_t>() <= 0 ||
        p[0].get<int64_t>() > INT32_MAX || !p[1].is_number_unsigned())
      return bad("pids holds an entry that is not [pid, start time]");
    s.pids.emplace_back(pid_t(p[0].get<int64_t>()), p[1].get<uint64_t>());
  }
  s.recorder = j["recorder"];
  return s;
}

namespace {

/// Replaces `target` with `text`: a temporary file in the same directory, then rename(2).
Result<void> replace_file(const std::string& target, const std::string& text) {
  const std::string tmp = target + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno("write " + tmp);
  Result<void> w = write_all(fd, text, tmp);
  ::close(fd);
  if (!w.ok()) {
    ::unlink(tmp.c_str());
    return w;
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    Error e = Error::from_errno("rename " + tmp);
    ::unlink(tmp.c_str());
    return e;
  }
  return {};
}

}  // namespace

Result<void> JobStateStore::save(const SavedJob& job) const {
  const std::string text = to_json(job).dump();
  if (text.size() > kMaxFileBytes)
    return Error{EFBIG, "the state of job " + job.key.str() + " is " + std::to_string(text.size()) + " bytes, over " +
                            std::to_string(kMaxFileBytes) + ": not saved"};
  return replace_file(path(job.key), text);
}

Result<void> JobStateStore::save_alive(const DaemonAlive& a) const {
  return replace_file(dir_ + "/colocd.alive",
                      json{{"mono_ns", a.mono}, {"unix_ms", a.unix_ms}, {"boot_id", a.boot_id}}.dump() + "\n");
}

std::optional<DaemonAlive> JobStateStore::load_alive() const {
  std::ifstream in(dir_ + "/colocd.alive");
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("mono_ns") || !j["mono_ns"].is_number_unsigned() || !j.contains("unix_ms") ||
      !j["unix_ms"].is_number_integer() || !j.contains("boot_id") || !j["boot_id"].is_string())
    return std::nullopt;
  return DaemonAlive{j["mono_ns"].get<uint64_t>(), j["unix_ms"].get<int64_t>(), j["boot_id"].get<std::string>()};
}

void JobStateStore::remove(const broker::JobKey& key) const { ::unlink(path(key).c_str()); }

JobStateStore::Loaded JobStateStore::load() const {
  Loaded out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    if (errno != ENOENT) out.problems.push_back("cannot read " + dir_ + ": " + std::strerror(errno));
    return out;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n);
    else if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) ::unlink((dir_ + "/" + n).c_str());  // a save cut short
  }
  ::closedir(d);
  for (const std::string& n : names) {
    const std::string p = dir_ + "/" + n;
    std::string why;
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
      why = std::string("cannot stat it: ") + std::strerror(errno);
    } else if (size_t(st.st_size) > kMaxFileBytes) {
      why = "it is " + std::to_string(st.st_size) + " bytes, over " + std::to_string(kMaxFileBytes);
    } else {
      std::ifstream in(p, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      json j = json::parse(ss.str(), nullptr, false);
      if (j.is_discarded()) {
        why = "it is not JSON";
      } else if (auto s = from_json(j); !s) {
        why = s.error().message();
      } else if (path(s.value().key) != p) {
        why = "it names job " + s.value().key.str() + ", which belongs in another file";
      } else if (auto r = JobRecorder::from_state(s.value().recorder, 0); !r) {
        why = r.error().message();
      } else if (!(r.value().key() == s.value().key)) {
        why = "its recorder belongs to job " + r.value().key().str() + ", not " + s.value().key.str();
      } else {
        out.jobs.push_back(std::move(s.value()));
        continue;
      }
    }
    std::string aside = p + ".bad";
    bool moved = ::rename(p.c_str(), aside.c_str()) == 0;
    out.problems.push_back("saved job state " + p + " is unusable (" + why + "); " +
                           (moved ? "kept as " + aside : std::string("left in place")) +
                           ": that job's report will not include what happened before the restart");
  }
  return out;
}

}  // namespace coloc::report
