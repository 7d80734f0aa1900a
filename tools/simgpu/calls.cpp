#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "entry.h"

namespace simgpu {

namespace {
constinit std::atomic<CallCounter*> g_counters{nullptr};
}

void CallCounter::publish() {
  CallCounter* head = g_counters.load(std::memory_order_relaxed);
  do {
    next = head;
  } while (!g_counters.compare_exchange_weak(head, this, std::memory_order_release, std::memory_order_relaxed));
}

bool write_call_counts(const char* path) {
  std::vector<std::pair<std::string, uint64_t>> rows;
  for (CallCounter* c = g_counters.load(std::memory_order_acquire); c; c = c->next)
    rows.emplace_back(c->name, c->count.load(std::memory_order_relaxed));
  std::sort(rows.begin(), rows.end());
  std::string json = "{";
  for (size_t i = 0; i < rows.size(); ++i)
    json += (i ? ", \"" : "\"") + rows[i].first + "\": " + std::to_string(rows[i].second);
  json += "}\n";

  std::string file(path);
  for (size_t at = file.find("%p"); at != std::string::npos; at = file.find("%p", at))
    file.replace(at, 2, std::to_string(getpid()));
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, json.data(), json.size()) == ssize_t(json.size());
  ::close(fd);
  return ok;
}

}  // namespace simgpu
