#include "device/outside_processes.h"

#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "util/log.h"

namespace coloc::device {

namespace {

/// Up to `max` bytes of a small /proc file ("" when it cannot be read).
std::string read_small(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  std::string out;
  char buf[1024];
  while (out.size() < max) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, max - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

/// The length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not one (overlong,
/// surrogate, beyond U+10FFFF, cut). *cp receives the code point.
size_t utf8_at(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

}  // namespace

std::string sanitize_command(std::string_view raw, size_t max_bytes) {
  while (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  std::string out;
  out.reserve(std::min(raw.size(), max_bytes + 4));
  std::vector<size_t> starts;  // where each character of `out` starts (for a clean cut)
  for (size_t i = 0; i < raw.size() && out.size() <= max_bytes;) {
    uint32_t cp = 0;
    size_t n = utf8_at(raw, i, &cp);
    starts.push_back(out.size());
    if (n == 0) {
      out += '?';
      i += 1;
      continue;
    }
    const bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F);
    const bool bidi = (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E ||
                      cp == 0x200F || cp == 0x061C;
    if (cp == 0) out += ' ';
    else if (control || bidi) out += '?';
    else out.append(raw.substr(i, n));
    i += n;
  }
  if (out.size() > max_bytes) {
    // Cut at a character boundary, leaving room for "...".
    size_t keep = 0;
    for (size_t s : starts)
      if (s + 3 <= max_bytes) keep = s;
    out.resize(keep);
    out += "...";
  }
  return out;
}

std::optional<uint64_t> read_start_time(int32_t pid, const std::string& proc_root) {
  if (pid <= 0) return std::nullopt;
  const std::string stat = read_small(proc_root + "/" + std::to_string(pid) + "/stat", 4096);
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const char* p = stat.c_str() + close + 1;
  for (int field = 3; field < 22; ++field) {  // skip fields 3..21
    while (*p == ' ') ++p;
    if (!*p) return std::nullopt;
    while (*p && *p != ' ') ++p;
  }
  while (*p == ' ') ++p;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p || errno) return std::nullopt;
  return uint64_t(v);
}

ProcInfo read_proc_info(int32_t pid, const std::string& proc_root) {
  ProcInfo info;
  if (pid <= 0) return info;
  const std::optional<uint64_t> start = read_start_time(pid, proc_root);
  const std::string dir = proc_root + "/" + std::to_string(pid);
  const std::string status = read_small(dir + "/status", 4096);
  if (auto at = status.find("\nUid:"); at != std::string::npos) {
    const char* p = status.c_str() + at + 5;
    char* end = nullptr;
    unsigned long v = std::strtoul(p, &end, 10);
    if (end != p && v <= 0xFFFFFFFFul) info.uid = uint32_t(v);
  }
  if (info.uid) {  // once per process while it is listed, not per status request
    struct passwd pw, *found = nullptr;
    char buf[4096];
    info.user = ::getpwuid_r(uid_t(*info.uid), &pw, buf, sizeof buf, &found) == 0 && found
                    ? sanitize_command(found->pw_name, 64)  // (a directory's name: still text, valid UTF-8 for JSON)
                    : std::to_string(*info.uid);
  }
  // Never cmdline here (read_cmdline, on the worker): comm is served without the mmap lock.
  std::string comm = read_small(dir + "/comm", 64);
  while (!comm.empty() && (comm.back() == '\n' || comm.back() == '\0')) comm.pop_back();
  if (!comm.empty()) info.command = "[" + sanitize_command(comm, 32) + "]";
  // The pid changed hands while we read (one process's uid, another's command): nothing is known.
  if (read_start_time(pid, proc_root) != start) return ProcInfo{};
  info.start_time = start;
  return info;
}

std::optional<std::string> read_cmdline(int32_t pid, uint64_t start_time, const std::string& proc_root) {
  if (pid <= 0) return std::nullopt;
  const std::string cmdline = read_small(proc_root + "/" + std::to_string(pid) + "/cmdline", kMaxCommandBytes * 4);
  // Read after the command line: a pid that changed hands before or during the read shows another
  // start time (or none, gone).
  if (read_start_time(pid, proc_root) != start_time) return std::nullopt;
  return sanitize_command(cmdline);
}

// The worker's state: its thread holds it too, so that it outlives an OutsideProcesses that
// detached a worker stuck in a read. Everything but proc_root (set before the thread starts,
// never changed) is guarded by mu.
struct OutsideProcesses::Worker {
  struct Result {
    int32_t pid;
    uint64_t start;
    std::optional<std::string> command;  ///< read_cmdline's answer
  };

  std::string proc_root;
  std::mutex mu;
  std::condition_variable work;          ///< the worker: something queued, or stop
  mutable std::condition_variable idle;  ///< wait_idle: the worker finished one
  std::deque<std::pair<int32_t, uint64_t>> queue;  ///< (pid, start time), at most kMaxQueued
  std::vector<Result> results;                     ///< answered, not yet taken by the loop
  bool busy = false;                               ///< reading one it took from the queue
  bool stop = false;                               ///< its OutsideProcesses is gone: leave

  void run() {
    std::unique_lock lk(mu);
    for (;;) {
      work.wait(lk, [&] { return stop || !queue.empty(); });
      if (stop) return;
      const auto [pid, start] = queue.front();
      queue.pop_front();
      busy = true;
      lk.unlock();
      std::optional<std::string> command = read_cmdline(pid, start, proc_root);  // may block: not under mu
      lk.lock();
      busy = false;
      if (stop) return;
      results.push_back({pid, start, std::move(command)});
      idle.notify_all();
    }
  }
};

OutsideProcesses::OutsideProcesses(std::string proc_root) : proc_root_(std::move(proc_root)) {}

OutsideProcesses::~OutsideProcesses() {
  if (!worker_) return;
  {
    std::lock_guard lk(worker_->mu);
    worker_->stop = true;
    worker_->queue.clear();
  }
  worker_->work.notify_all();
  worker_->idle.notify_all();
  // The thread was detached at its start: one stuck in a read ends when the read does (it holds
  // the state), or with the process.
}

bool OutsideProcesses::request(int32_t pid, uint64_t start) {
  if (no_worker_) return false;
  if (!worker_) {
    auto w = std::make_shared<Worker>();
    w->proc_root = proc_root_;
    // The thread takes no signal (colocd reads its own from a signalfd on the loop's thread: a
    // SIGTERM delivered here would kill the daemon instead of stopping it).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      std::thread([w] { w->run(); }).detach();
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    } catch (const std::exception& e) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      no_worker_ = true;
      log::get("engine")->error("processes outside coloc: cannot start the thread that reads their command lines "
                                "({}): they show as [comm]",
                                e.what());
      return false;
    }
    worker_ = std::move(w);
  }
  {
    std::lock_guard lk(worker_->mu);
    if (worker_->queue.size() >= kMaxQueued) return false;
    worker_->queue.emplace_back(pid, start);
  }
  worker_->work.notify_one();
  return true;
}

void OutsideProcesses::take_results() {
  if (!worker_) return;
  std::vector<Worker::Result> results;
  {
    std::lock_guard lk(worker_->mu);
    results.swap(worker_->results);
  }
  for (Worker::Result& r : results) {
    auto it = cache_.find(r.pid);
    // Only for the process it was asked for: the pid may have changed hands since.
    if (it == cache_.end() || it->second.info.start_time != r.start) continue;
    it->second.command_read = true;
    it->second.requested = false;
    if (!r.command || r.command->empty()) continue;  // gone, changed hands, or no command line: "[comm]" stays
    it->second.info.command = *r.command;
    for (auto& [uuid, list] : lists_)
      for (OutsideProcess& p : list.shown)
        if (p.pid == r.pid && p.info.start_time == r.start) p.info.command = *r.command;
  }
}

bool OutsideProcesses::wait_idle(std::chrono::milliseconds bound) const {
  if (!worker_) return true;
  std::unique_lock lk(worker_->mu);
  return worker_->idle.wait_for(lk, bound, [&] { return worker_->queue.empty() && !worker_->busy; });
}

void OutsideProcesses::update(const broker::Uuid& uuid, const std::vector<ProcessMemory>& procs,
                              const std::set<int32_t>& coloc_pids) {
  take_results();
  std::vector<ProcessMemory> outside;
  std::set<int32_t> pids;
  for (const ProcessMemory& p : procs)
    if (p.pid > 0 && !coloc_pids.count(p.pid) && pids.insert(p.pid).second) outside.push_back(p);
  // The largest first (a figure the driver does not give last), then by pid.
  std::sort(outside.begin(), outside.end(), [](const ProcessMemory& a, const ProcessMemory& b) {
    const bool ka = a.used != broker::kUnknown, kb = b.used != broker::kUnknown;
    if (ka != kb) return ka;
    if (ka && a.used != b.used) return a.used > b.used;
    return a.pid < b.pid;
  });
  OutsideList list;
  for (const ProcessMemory& p : outside) {
    if (list.shown.size() == kMaxPerDevice) {
      ++list.more;
      continue;
    }
    // The cached entry is this process's only while the pid has the same start time: a pid that
    // exited and was reused (by another user) is read again. One that cannot be read (gone, or
    // no start time) is not cached: the next reading tries again.
    const std::optional<uint64_t> start = read_start_time(p.pid, proc_root_);
    auto it = cache_.find(p.pid);
    if (it == cache_.end() || !start || it->second.info.start_time != start) {
      ProcInfo info = read_proc_info(p.pid, proc_root_);
      if (!info.start_time) {
        cache_.erase(p.pid);
        list.shown.push_back({p.pid, std::move(info), p.used});
        continue;
      }
      it = cache_.insert_or_assign(p.pid, Entry{std::move(info)}).first;
    }
    // Its command line on the worker (asked again when the queue was full).
    Entry& e = it->second;
    if (!e.command_read && !e.requested) e.requested = request(p.pid, *e.info.start_time);
    list.shown.push_back({p.pid, e.info, p.used});
  }
  lists_[uuid] = std::move(list);
  pids_[uuid] = std::move(pids);
  prune_cache();
}

void OutsideProcesses::forget(const broker::Uuid& uuid) {
  lists_.erase(uuid);
  pids_.erase(uuid);
  prune_cache();
}

const OutsideList* OutsideProcesses::find(const broker::Uuid& uuid) const {
  auto it = lists_.find(uuid);
  return it == lists_.end() ? nullptr : &it->second;
}

void OutsideProcesses::prune_cache() {
  // A pid no device lists any more has ended (or freed the device): its number may be reused.
  for (auto it = cache_.begin(); it != cache_.end();) {
    bool listed = false;
    for (const auto& [u, pids] : pids_) listed |= pids.count(it->first) > 0;
    it = listed ? std::next(it) : cache_.erase(it);
  }
  // Nor does the worker read what nobody asks for any more (a process gone, a pid reused): a
  // worker stuck on one process would otherwise keep the queue full of the dead.
  if (!worker_) return;
  std::lock_guard lk(worker_->mu);
  auto& q = worker_->queue;
  q.erase(std::remove_if(q.begin(), q.end(),
                         [&](const std::pair<int32_t, uint64_t>& r) {
                           auto it = cache_.find(r.first);
                           return it == cache_.end() || it->second.info.start_time != r.second;
                         }),
          q.end());
}

}  // namespace coloc::device
