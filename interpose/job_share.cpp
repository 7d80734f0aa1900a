// interpose/job_share.cpp — see job_share.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "job_share.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "glibc_compat.h"
#include "log.h"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace coloc::interpose {

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// Reads /proc/PID/stat into buf (NUL-terminated); false when it cannot.
bool read_stat(int pid, char* buf, size_t cap) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n;
  do n = ::read(fd, buf, cap - 1);
  while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// Waits (bounded: about a second) for a segment another process is creating to be initialised.
bool wait_initialised(JobSegment* s) {
  for (int i = 0; i < 1000; ++i) {
    if (s->magic.load(std::memory_order_acquire) == JobSegment::kMagic) return true;
    struct timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace

uint64_t process_start_ticks(int pid) {
  char buf[1024];
  if (!read_stat(pid, buf, sizeof buf)) return 0;
  // The command (field 2) is in parentheses and may hold anything: fields go on after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (++p; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  return std::strtoull(p, nullptr, 10);
}

bool process_gone(int pid, uint64_t start) {
  if (pid <= 0) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  uint64_t now = process_start_ticks(pid);
  if (now == 0) {
    // It exists (or may): gone only if /proc says it does not.
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d", pid);
    return ::access(path, F_OK) != 0 && errno == ENOENT && ::access("/proc/self", F_OK) == 0;
  }
  return start != 0 && now != start;  // its pid now belongs to another process
}

uint64_t JobShare::headroom(uint64_t limit) {
  uint64_t h = limit / 64;
  if (h < 2 * kMiB) h = 2 * kMiB;
  if (h > 256 * kMiB) h = 256 * kMiB;
  return h;
}

bool JobShare::join(const char* job, const unsigned char uuid[16], uint64_t limit, const char** why) {
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
  // The pid namespace, as the inode of /proc/self/ns/pid ("pid:[4026531836]"); 0 when unknown.
  char ns[64] = {};
  unsigned long long ns_id = 0;
  ssize_t nl = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (nl > 0) std::sscanf(ns, "pid:[%llu]", &ns_id);
  std::snprintf(path_, sizeof path_, "/dev/shm/coloc-job.%u.%llu.%016llx.%s", unsigned(getuid()), ns_id,
                (unsigned long long)XXH64(job, std::strlen(job), 0), hex);
  const uint64_t start = process_start_ticks(int(getpid()));
  start_ = start;
  limit_ = limit;
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool created = true;
    int fd = ::open(path_, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = ::open(path_, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;  // its last user removed it just now: create it
    }
    if (fd < 0) {
      *why = errno == ELOOP ? "the segment's path is a symbolic link" : "cannot open a segment in /dev/shm";
      return false;
    }
    struct stat st{};
    if (::syscall(SYS_fstat, fd, &st) != 0) {
      ::close(fd);
      *why = "cannot fstat the segment";
      return false;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 07777) != 0600) {
      ::close(fd);
      *why = "the segment exists but is not a private file of this user (mode 0600)";
      return false;
    }
    if (created && ::ftruncate(fd, sizeof(JobSegment)) != 0) {
      ::close(fd);
      ::unlink(path_);
      *why = "cannot size the segment";
      return false;
    }
    if (!created) {
      // The creator sizes it right after creating it.
      for (int i = 0; i < 1000 && ::lseek(fd, 0, SEEK_END) < off_t(sizeof(JobSegment)); ++i) {
        struct timespec ts{0, 1000000};
        nanosleep(&ts, nullptr);
      }
      if (::lseek(fd, 0, SEEK_END) != off_t(sizeof(JobSegment))) {
        ::close(fd);
        *why = "the segment has the wrong size (another coloc version?)";
        return false;
      }
    }
    void* m = ::mmap(nullptr, sizeof(JobSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) {
      *why = "cannot map the segment";
      return false;
    }
    auto* s = static_cast<JobSegment*>(m);
    if (created) {
      s->version = JobSegment::kVersion;
      s->limit = limit;
      s->magic.store(JobSegment::kMagic, std::memory_order_release);
    } else if (!wait_initialised(s) || s->version != JobSegment::kVersion) {
      ::munmap(m, sizeof(JobSegment));
      *why = "the segment was never initialised, or is of another coloc version";
      return false;
    }
    // Count ourselves in, unless the last user is removing it (then make a new one).
    uint32_t u = s->users.load(std::memory_order_acquire);
    bool counted = false;
    while (!(u & JobSegment::kClosed)) {
      if (s->users.compare_exchange_weak(u, u + 1, std::memory_order_acq_rel)) {
        counted = true;
        break;
      }
    }
    if (!counted) {
      ::munmap(m, sizeof(JobSegment));
      sched_yield();
      continue;
    }
    seg_.store(s, std::memory_order_release);
    share_.store(0, std::memory_order_relaxed);
    if (claim_entry()) return true;
    seg_.store(nullptr, std::memory_order_release);
    s->users.fetch_sub(1, std::memory_order_acq_rel);
    ::munmap(m, sizeof(JobSegment));
    *why = "more processes in the job than the segment holds (256)";
    return false;
  }
  *why = "the segment kept being removed while joining";
  return false;
}

bool JobShare::claim_entry() {
  JobSegment* s = seg_.load(std::memory_order_relaxed);
  const uint32_t me = uint32_t(getpid());
  // An entry of this very process (same pid, same start time) is its image before an exec: the
  // driver gave that image's memory back, so its share goes back to the job.
  for (int i = 0; i < JobSegment::kEntries; ++i) {
    JobSegment::Entry& e = s->entries[i];
    uint32_t pid = me;
    if (e.start.load(std::memory_order_relaxed) != start_ || e.pid.load(std::memory_order_acquire) != me) continue;
    if (!e.pid.compare_exchange_strong(pid, JobSegment::kBusy, std::memory_order_acq_rel)) continue;
    uint64_t was = e.share.exchange(0, std::memory_order_acq_rel);
    entry_ = i;
    sub_total(was);
    e.pid.store(me, std::memory_order_release);
    s->users.fetch_sub(1, std::memory_order_acq_rel);  // it was counted in once already
    return true;
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < JobSegment::kEntries; ++i) {
      uint32_t expected = 0;
      if (s->entries[i].pid.compare_exchange_strong(expected, JobSegment::kBusy, std::memory_order_acq_rel)) {
        s->entries[i].share.store(0, std::memory_order_relaxed);
        s->entries[i].start.store(start_, std::memory_order_relaxed);
        s->entries[i].pid.store(me, std::memory_order_release);
        entry_ = i;
        return true;
      }
    }
    if (round == 0 && reclaim_dead() == 0) break;  // full: make room from the dead, once
  }
  return false;
}

bool JobShare::still_member() {
  JobSegment* s = seg_.load(std::memory_order_relaxed);
  return s && entry_ >= 0 && s->entries[entry_].pid.load(std::memory_order_acquire) == uint32_t(getpid()) &&
         s->entries[entry_].start.load(std::memory_order_relaxed) == start_;
}

void JobShare::sub_total(uint64_t bytes) {
  JobSegment* s = seg_.load(std::memory_order_relaxed);
  uint64_t t = s->total.load(std::memory_order_acquire);
  while (!s->total.compare_exchange_weak(t, t > bytes ? t - bytes : 0, std::memory_order_acq_rel)) {
  }
}

uint64_t JobShare::job_limit() const {
  JobSegment* s = seg_.load(std::memory_order_acquire);
  return s ? s->limit : 0;
}

uint64_t JobShare::others() const {
  JobSegment* s = seg_.load(std::memory_order_acquire);
  if (!s) return 0;
  uint64_t t = s->total.load(std::memory_order_acquire);
  uint64_t mine = share_.load(std::memory_order_relaxed);
  return t > mine ? t - mine : 0;
}

uint64_t JobShare::grow(uint64_t wanted, uint64_t* others_out) {
  JobSegment* seg = seg_.load(std::memory_order_relaxed);
  const uint64_t h = headroom(limit_);
  if (!still_member()) {
    // Another process took us for dead and gave our share back: join again, holding nothing.
    share_.store(0, std::memory_order_relaxed);
    seg->users.fetch_add(1, std::memory_order_acq_rel);
    if (!claim_entry()) {
      seg->users.fetch_sub(1, std::memory_order_acq_rel);
      return 0;
    }
    logf(LogLevel::warn, "job share: this process's entry was reclaimed by another process; joined again");
  }
  bool reclaimed = false;
  for (;;) {
    const uint64_t mine = share_.load(std::memory_order_relaxed);
    uint64_t t = seg->total.load(std::memory_order_acquire);
    uint64_t others = t > mine ? t - mine : 0;
    *others_out = others;
    if (others > limit_ || wanted > limit_ - others) {
      if (!reclaimed) {
        reclaimed = true;
        if (reclaim_dead() > 0) continue;
      }
      return 0;
    }
    uint64_t target = wanted > limit_ - h ? limit_ : wanted + h;
    if (target > limit_ - others) target = limit_ - others;
    if (target <= mine) return mine;
    if (!seg->total.compare_exchange_weak(t, others + target, std::memory_order_acq_rel)) continue;
    share_.store(target, std::memory_order_relaxed);
    seg->entries[entry_].share.store(target, std::memory_order_release);
    logf(LogLevel::debug, "job share: grew to %llu (wanted %llu, others %llu, total was %llu)",
         (unsigned long long)target, (unsigned long long)wanted, (unsigned long long)others, (unsigned long long)t);
    return target;
  }
}

void JobShare::shrink(uint64_t keep) {
  JobSegment* seg = seg_.load(std::memory_order_relaxed);
  const uint64_t mine = share_.load(std::memory_order_relaxed);
  if (!seg || keep >= mine) return;
  share_.store(keep, std::memory_order_relaxed);
  if (!still_member()) return;  // reclaimed meanwhile: the job has our share back already
  seg->entries[entry_].share.store(keep, std::memory_order_release);
  sub_total(mine - keep);
}

int JobShare::reclaim_dead() {
  JobSegment* seg = seg_.load(std::memory_order_relaxed);
  int n = 0;
  for (int i = 0; i < JobSegment::kEntries; ++i) {
    JobSegment::Entry& e = seg->entries[i];
    uint32_t pid = e.pid.load(std::memory_order_acquire);
    if (pid == 0 || pid == JobSegment::kBusy || i == entry_) continue;
    uint64_t start = e.start.load(std::memory_order_relaxed);
    if (!process_gone(int(pid), start)) continue;
    if (!e.pid.compare_exchange_strong(pid, JobSegment::kBusy, std::memory_order_acq_rel)) continue;
    uint64_t s = e.share.exchange(0, std::memory_order_acq_rel);
    sub_total(s);
    e.start.store(0, std::memory_order_relaxed);
    e.pid.store(0, std::memory_order_release);
    seg->users.fetch_sub(1, std::memory_order_acq_rel);
    logf(LogLevel::debug, "job share: process %u left without leaving: %llu bytes of its share go back to the job",
         pid, (unsigned long long)s);
    ++n;
  }
  return n;
}

void JobShare::leave() {
  JobSegment* seg = seg_.load(std::memory_order_relaxed);
  if (!seg) return;
  shrink(0);
  reclaim_dead();  // so that the last one out is the last one left, and removes the file
  if (still_member()) {
    seg->entries[entry_].start.store(0, std::memory_order_relaxed);
    seg->entries[entry_].pid.store(0, std::memory_order_release);
    // The last one out closes the segment (no one can join it any more) and removes it.
    uint32_t u = seg->users.load(std::memory_order_acquire);
    for (;;) {
      uint32_t next = u <= 1 ? JobSegment::kClosed : u - 1;
      if (seg->users.compare_exchange_weak(u, next, std::memory_order_acq_rel)) break;
    }
    if (u <= 1) ::unlink(path_);
  }
  seg_.store(nullptr, std::memory_order_release);
  ::munmap(seg, sizeof(JobSegment));
  entry_ = -1;
}

void JobShare::forget() {
  // The parent's mapping is shared: leave it mapped (a few KiB) rather than risk anything.
  seg_.store(nullptr, std::memory_order_relaxed);
  entry_ = -1;
  share_.store(0, std::memory_order_relaxed);
}

}  // namespace coloc::interpose
