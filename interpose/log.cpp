// interpose/log.cpp — see log.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "log.h"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace coloc::interpose {

namespace {

constinit std::atomic<uint8_t> g_level{uint8_t(LogLevel::off)};
constinit char g_job[64] = {};
__thread bool tl_logging __attribute__((tls_model("initial-exec"))) = false;

const char* level_word(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    case LogLevel::off: break;
  }
  return "";
}

int vformat(char* buf, int cap, LogLevel level, int pid, const char* fmt, va_list ap) {
  if (cap < 2) return 0;
  int n = std::snprintf(buf, size_t(cap), "coloc[%s %d]: %s: ", g_job, pid, level_word(level));
  if (n < 0) n = 0;
  if (n > cap - 2) n = cap - 2;
  int m = std::vsnprintf(buf + n, size_t(cap - n), fmt, ap);
  if (m < 0) m = 0;
  n += m;
  if (n > cap - 2) n = cap - 2;  // cut: keep room for the newline
  buf[n++] = '\n';
  buf[n] = '\0';
  return n;
}

}  // namespace

void log_start(LogLevel level, const char* job) {
  size_t i = 0;
  for (; job && job[i] && i < sizeof(g_job) - 1; ++i) g_job[i] = job[i];
  g_job[i] = '\0';
  g_level.store(uint8_t(level), std::memory_order_release);
}

void log_stop() { g_level.store(uint8_t(LogLevel::off), std::memory_order_release); }

bool log_enabled(LogLevel level) {
  return level != LogLevel::off && uint8_t(level) <= g_level.load(std::memory_order_acquire);
}

int log_format(char* buf, int cap, LogLevel level, int pid, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vformat(buf, cap, level, pid, fmt, ap);
  va_end(ap);
  return n;
}

void logf(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level) || tl_logging) return;
  tl_logging = true;
  int saved_errno = errno;  // the host may read errno after the call that logged
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vformat(buf, sizeof buf, level, int(getpid()), fmt, ap);
  va_end(ap);
  for (int off = 0; off < n;) {
    ssize_t w = ::write(2, buf + off, size_t(n - off));
    if (w > 0) { off += int(w); continue; }
    if (w < 0 && errno == EINTR) continue;
    break;  // stderr closed or full: drop the line, never block or fail the host
  }
  errno = saved_errno;
  tl_logging = false;
}

bool RateLimit::allow(uint64_t now_ns, uint64_t* suppressed) {
  if (now_ns == 0) now_ns = 1;  // 0 means "never reported"
  uint64_t last = last_ns_.load(std::memory_order_relaxed);
  // Within the interval, or another thread just took this slot: hold it back.
  if ((last != 0 && now_ns - last < interval_ns_) ||
      !last_ns_.compare_exchange_strong(last, now_ns, std::memory_order_relaxed)) {
    held_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  uint64_t held = held_.exchange(0, std::memory_order_relaxed);
  if (suppressed) *suppressed = held;
  return true;
}

void RateLimit::reset() {
  last_ns_.store(0, std::memory_order_relaxed);
  held_.store(0, std::memory_order_relaxed);
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace coloc::interpose
