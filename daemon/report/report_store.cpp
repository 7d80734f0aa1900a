#include "report/report_store.h"
#include "util/fs.h"
#include "util/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace coloc::report {

ReportStore::ReportStore(std::string dir) : dir_(std::move(dir)) {}

Result<void> ReportStore::prepare(int gid) const {
  if (::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST) return Error::from_errno("mkdir " + dir_);
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0) return Error::from_errno("stat " + dir_);
  if (!S_ISDIR(st.st_mode)) return Error{ENOTDIR, dir_ + " is not a directory"};
  if (gid >= 0 && ::chown(dir_.c_str(), uid_t(-1), gid_t(gid)) != 0) return Error::from_errno("chown " + dir_);
  if (::chmod(dir_.c_str(), 0750) != 0) return Error::from_errno("chmod " + dir_);
  return {};
}

std::string ReportStore::sanitize(const std::string& job_id) {
  std::string out;
  for (char c : job_id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    out += ok ? c : '_';
    if (out.size() == 100) break;
  }
  if (out.empty()) out = "job";
  if (out[0] == '.') out[0] = '_';
  return out;
}

// The kernel stamps a file's mtime from a coarse clock (one tick: 1 to 10 ms), so two reports
// written within a tick would tie, and run_ids_of's "newest first" would be a coin toss. Each
// report's mtime is instead set explicitly from CLOCK_REALTIME at full nanosecond resolution, and
// strictly after the previous one this process wrote.
// Best effort: a file system that refuses to set times (some FUSE or NFS mounts) keeps the
// report, with the kernel's own mtime; one warning says so.
static void stamp_mtime(int fd, const std::string& path) {
  static std::atomic<int64_t> last_ns{0};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  int64_t ns = int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
  int64_t prev = last_ns.load();
  do {
    if (ns <= prev) ns = prev + 1;
  } while (!last_ns.compare_exchange_weak(prev, ns));
  const timespec times[2] = {{0, UTIME_OMIT}, {time_t(ns / 1000000000), long(ns % 1000000000)}};
  if (::futimens(fd, times) != 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log::get("report")->warn("cannot set the modification time of {} ({}): reports written within one clock tick may "
                               "list in either order", path, std::strerror(errno));
  }
}

static Result<void> write_synced(int fd, const std::string& text, const std::string& path) {
  if (auto r = write_all(fd, text, path); !r) return r;
  stamp_mtime(fd, path);
  if (::fsync(fd) != 0) return Error::from_errno("fsync " + path);
  return {};
}

namespace {
/// N of "<stem>.N.json" (1 for "<stem>.json").
int suffix_of(const std::string& path, const std::string& stem) {
  if (path.size() <= stem.size() + 6) return 1;  // "<stem>.json"
  return std::atoi(path.c_str() + stem.size() + 1);
}
}  // namespace

Result<std::string> ReportStore::write(const std::string& job_id, const std::string& text) const {
  const std::string stem = dir_ + "/" + sanitize(job_id);
  // An unnamed file in the directory (O_TMPFILE), named once it is whole: no temporary name to
  // delete afterwards (a file system that is made to skip recently deleted inodes, as ext4 is,
  // slows down when every report leaves one behind). Where O_TMPFILE is not supported, a named
  // temporary file.
  std::string tmpl;
  int fd = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0640);
  if (fd < 0) {
    tmpl = dir_ + "/.report.XXXXXX";
    fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return Error::from_errno("create a temporary file in " + dir_);
  }
  const std::string what = tmpl.empty() ? "a report in " + dir_ : tmpl;
  Result<void> w = write_synced(fd, text, what);
  if (w.ok() && ::fchmod(fd, 0640) != 0) w = Error::from_errno("chmod " + what);
  auto done = [&] {
    ::close(fd);
    if (!tmpl.empty()) ::unlink(tmpl.c_str());
  };
  if (!w.ok()) {
    done();
    return w.error();
  }
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  // Above the highest suffix filed: retention may have deleted older ones, and a free lower one
  // would list this newest report as the oldest.
  int first = 1;
  if (std::vector<std::string> filed = find(job_id); !filed.empty()) first = suffix_of(filed.front(), stem) + 1;
  for (int n = first; n < 100000; ++n) {
    std::string path = n == 1 ? stem + ".json" : stem + "." + std::to_string(n) + ".json";
    // link(2) fails rather than replace: a report is never overwritten.
    int rc = tmpl.empty() ? ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW)
                          : ::link(tmpl.c_str(), path.c_str());
    if (rc == 0) {
      done();
      return path;
    }
    if (errno != EEXIST) {
      Error e = Error::from_errno("link " + path);
      done();
      return e;
    }
  }
  done();
  return Error{EEXIST, "too many reports named " + stem};
}

std::vector<std::string> ReportStore::find(const std::string& job_id) const {
  // One pass over the directory: retention deletes the oldest reports first, so the suffixes
  // still filed under a reused id (a fixed COLOC_JOB) may start anywhere, after any gap.
  const std::string name = sanitize(job_id);
  std::vector<std::pair<long, std::string>> found;  // (suffix, path)
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string f = e->d_name;
      // "<name>.json" or "<name>.<N>.json", N a number from 2 without leading zeros
      if (f.size() < name.size() + 5 || f.compare(0, name.size(), name) != 0 || f.compare(f.size() - 5, 5, ".json") != 0)
        continue;
      const std::string mid = f.substr(name.size(), f.size() - 5 - name.size());
      long n = 1;
      if (!mid.empty()) {
        if (mid.size() < 2 || mid.size() > 7 || mid[0] != '.' || mid[1] == '0' ||
            mid.find_first_not_of("0123456789", 1) != std::string::npos)
          continue;
        n = std::stol(mid.substr(1));
        if (n < 2) continue;
      }
      found.emplace_back(n, dir_ + "/" + f);
    }
    ::closedir(d);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [n, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<std::string> ReportStore::run_ids_of(const std::string& name) const {
  const std::string stem = sanitize(name) + "-";
  std::vector<std::pair<int64_t, std::string>> found;  // (mtime ns, job id)
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return {};
  while (dirent* e = ::readdir(d)) {
    const std::string f = e->d_name;
    // NAME-xxxxxx.json: exactly six hex digits between the stem and ".json"
    if (f.size() != stem.size() + 6 + 5 || f.compare(0, stem.size(), stem) != 0 ||
        f.compare(f.size() - 5, 5, ".json") != 0)
      continue;
    const std::string hex = f.substr(stem.size(), 6);
    if (!std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
      continue;
    struct stat st;
    if (::stat((dir_ + "/" + f).c_str(), &st) != 0) continue;
    found.emplace_back(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, f.substr(0, f.size() - 5));
  }
  ::closedir(d);
  // Newest first; equal times (a file system that keeps whole seconds) by name, so the order at
  // least does not change from one call to the next.
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  std::vector<std::string> ids;
  for (auto& [t, id] : found) ids.push_back(id);
  return ids;
}

}  // namespace coloc::report
