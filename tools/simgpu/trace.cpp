#include "trace.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace simgpu {

static constexpr char kHeader[] = "pid,device,context,stream,launch_id,kernel,start_ns,end_ns\n";

bool Trace::open(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "simgpu: cannot open SIMGPU_TRACE " + path + ": " + std::strerror(errno);
    return false;
  }
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size == 0) {
    if (::write(fd, kHeader, sizeof kHeader - 1) != ssize_t(sizeof kHeader - 1)) {
      *error = "simgpu: cannot write SIMGPU_TRACE " + path + ": " + std::strerror(errno);
      flock(fd, LOCK_UN);
      ::close(fd);
      return false;
    }
  }
  flock(fd, LOCK_UN);
  fd_ = fd;
  return true;
}

void Trace::write(const TraceSlice& s) const {
  if (fd_ < 0) return;
  char name[128];
  std::snprintf(name, sizeof name, "%s", s.kernel ? s.kernel : "?");
  for (char* c = name; *c; ++c)
    if (*c == ',' || *c == '\n' || *c == '\r') *c = '_';
  char line[256];
  int n = std::snprintf(line, sizeof line, "%d,%d,%u,%u,%llu,%s,%llu,%llu\n", int(s.pid), s.device, s.context,
                        s.stream, (unsigned long long)s.launch_id, name, (unsigned long long)s.start_ns,
                        (unsigned long long)s.end_ns);
  if (n > 0 && size_t(n) < sizeof line) {
    ssize_t w = ::write(fd_, line, size_t(n));
    (void)w;  // a full disk loses trace lines, never the simulation
  }
}

}  // namespace simgpu
