#include "engine/resume_state.h"

#include <fcntl.h>
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
