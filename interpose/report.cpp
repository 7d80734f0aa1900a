// interpose/report.cpp — see report.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "report.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "devices.h"
#include "gate.h"
#include "log.h"
#include "options.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

// Appends to a fixed buffer; remembers overflow instead of writing past the end.
class Out {
 public:
  Out(char* buf, size_t cap) : buf_(buf), cap_(cap) {}
  Out& raw(const char* s) {
    while (*s) put(*s++);
    return *this;
  }
  Out& u64(uint64_t v) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = char('0' + v % 10); while ((v /= 10) != 0);
    while (n) put(tmp[--n]);
    return *this;
  }
  Out& str(const char* s) {  // a JSON string, escaped
    put('"');
    for (; *s; ++s) {
      unsigned char c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        put('\\');
        put(char(c));
      } else if (c < 0x20) {
        static const char hex[] = "0123456789abcdef";
        raw("\\u00");
        put(hex[c >> 4]);
        put(hex[c & 15]);
      } else {
        put(char(c));
      }
    }
    put('"');
    return *this;
  }
  Out& key(const char* k) { return str(k).raw(":"); }
  bool ok() const { return !overflow_; }
  size_t size() const { return n_; }

 private:
  void put(char c) {
    if (n_ < cap_) buf_[n_++] = c;
    else overflow_ = true;
  }
  char* buf_;
  size_t cap_;
  size_t n_ = 0;
  bool overflow_ = false;
};

void kinds(Out& o, uint64_t total, const uint64_t (&per_kind)[kKinds]) {
  o.raw("{").key("total").u64(total);
  for (int k = 0; k < kKinds; ++k) o.raw(",").key(kind_name(Kind(k))).u64(per_kind[k]);
  o.raw("}");
}

bool any_hook_called() {
  for (unsigned i = 0; i < kHookCount; ++i)
    if (total_calls(Fn(i))) return true;
  return false;
}

constinit std::atomic<bool> g_written{false};
constinit char g_buffer[1 << 16];

}  // namespace

long render_report(char* buf, size_t cap) {
  Out o(buf, cap);
  const Options& opt = options();
  o.raw("{").key("version").u64(1);
  o.raw(",").key("job").str(opt.job);
  o.raw(",").key("pid").u64(uint64_t(getpid()));
  o.raw(",").key("context_bytes").u64(opt.context_bytes);
  o.raw(",").key("devices").raw("[");
  bool first = true;
  for (int s = 0; s < kMaxDevices; ++s) {
    if (!devices().slot_used(s)) continue;
    const DeviceInfo& d = devices().info(s);
    DeviceCounts c = ledger().counts(s);
    char uuid[41];
    format_uuid(d.uuid, uuid);
    uint64_t limit = limit_of(s);
    if (!first) o.raw(",");
    first = false;
    o.raw("{").key("slot").u64(uint64_t(s));
    o.raw(",").key("ordinal").u64(uint64_t(d.ordinal));
    o.raw(",").key("uuid").str(uuid);
    o.raw(",").key("total_bytes").u64(d.total_bytes);
    o.raw(",").key("limit");
    if (limit == kNoLimit) o.raw("null");
    else o.u64(limit);
    o.raw(",").key("in_use");
    kinds(o, c.in_use, c.kind_in_use);
    o.raw(",").key("peak");
    kinds(o, c.peak, c.kind_peak);
    o.raw(",").key("allocs").u64(c.allocs);
    o.raw(",").key("frees").u64(c.frees);
    o.raw(",").key("failed").u64(c.failed);
    o.raw(",").key("refused").u64(c.refused);
    o.raw(",").key("untracked_frees").u64(c.untracked_frees);
    o.raw(",").key("released_with_context").u64(c.released_with_context);
    o.raw("}");
  }
  o.raw("]");
  o.raw(",").key("untracked_frees_unattributed").u64(ledger().unattributed_untracked_frees());
  o.raw(",").key("calls").raw("{");
  for (unsigned i = 0; i < kHookCount; ++i) {
    if (i) o.raw(",");
    o.key(kFnName[i]).u64(total_calls(Fn(i)));
  }
  o.raw("}}\n");
  return o.ok() ? long(o.size()) : -1;
}

bool write_report(const char* path) {
  // "%p" -> pid, into a fixed buffer.
  char final_path[600];
  size_t n = 0;
  for (const char* p = path; *p && n + 24 < sizeof final_path; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      n += size_t(std::snprintf(final_path + n, sizeof final_path - n, "%d", int(getpid())));
      ++p;
    } else {
      final_path[n++] = *p;
    }
  }
  final_path[n] = '\0';
  char tmp_path[640];
  std::snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%d", final_path, int(getpid()));

  long len = render_report(g_buffer, sizeof g_buffer);
  if (len < 0) return false;
  int fd = ::open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  for (long off = 0; off < len;) {
    ssize_t w = ::write(fd, g_buffer + off, size_t(len - off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = false;
      break;
    }
    off += w;
  }
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp_path, final_path) == 0;
  if (!ok) ::unlink(tmp_path);
  return ok;
}

void report_at_exit() {
  const char* path = options().report;
  if (!path[0] || !any_hook_called()) return;
  if (g_written.exchange(true, std::memory_order_acq_rel)) return;
  int saved_errno = errno;
  if (!write_report(path))
    logf(LogLevel::error, "cannot write the report to %s: %s", path, std::strerror(errno));
  errno = saved_errno;
}

void report_reset_in_child() { g_written.store(false, std::memory_order_relaxed); }

}  // namespace coloc::interpose
