#include "engine/resume_state.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace coloc::engine {

std::optional<uint64_t> process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::string state, field;
  if (!(rest >> state)) return std::nullopt;  // field 3
  if (state == "Z" || state == "X") return std::nullopt;  // dead, not yet reaped
  for (int i = 4; i < 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  uint64_t start = 0;
  if (!(rest >> start)) return std::nullopt;  // field 22
  return start;
}

std::pair<uint64_t, int64_t> start_on_daemon_clocks(uint64_t start_ticks, uint64_t mono_now, int64_t wall_now_ms) {
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  const unsigned __int128 start_ns = (unsigned __int128)start_ticks * 1000000000u / unsigned(hz);
  timespec bt{};
  ::clock_gettime(CLOCK_BOOTTIME, &bt);  // /proc's start times count from boot, suspend included
  const unsigned __int128 boot_now = (unsigned __int128)bt.tv_sec * 1000000000u + unsigned(bt.tv_nsec);
  const uint64_t age = boot_now > start_ns ? uint64_t(boot_now - start_ns) : 0;
  return {mono_now > age ? mono_now - age : 0, wall_now_ms - int64_t(age / 1000000)};
}

Result<void> ResumeState::load() {
  std::ifstream in(path_);
  if (!in) {
    if (errno == ENOENT) return {};
    return Error::from_errno("read " + path_);
  }
  pid_t pid;
  uint64_t start;
  while (in >> pid >> start) {
    auto now = process_start_time(pid);
    if (now && *now == start) expected_[pid] = start;
  }
  return {};
}

void ResumeState::settle(pid_t pid) { expected_.erase(pid); }

size_t ResumeState::expected() {
  for (auto it = expected_.begin(); it != expected_.end();) {
    auto now = process_start_time(it->first);
    if (!now || *now != it->second) it = expected_.erase(it);
    else ++it;
  }
  return expected_.size();
}

void ResumeState::add(pid_t pid, uint64_t start_time) {
  auto& e = live_[pid];
  e.first = start_time;
  if (e.second++ == 0) dirty_ = true;
}

void ResumeState::remove(pid_t pid) {
  auto it = live_.find(pid);
  if (it == live_.end()) return;
  if (--it->second.second == 0) {
    live_.erase(it);
    dirty_ = true;
  }
}

Result<void> ResumeState::save_if_dirty() {
  if (!dirty_) return {};
  std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno("write " + tmp);
  std::string text;
  for (auto& [pid, e] : live_) text += std::to_string(pid) + " " + std::to_string(e.first) + "\n";
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e = Error::from_errno("write " + tmp);
      ::close(fd);
      return e;
    }
    off += size_t(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path_.c_str()) != 0) return Error::from_errno("rename " + tmp);
  dirty_ = false;
  return {};
}

}  // namespace coloc::engine
