// interpose/job_share.h — a job-wide limit without a daemon: the processes of one job (same uid,
// same COLOC_JOB) share one budget per device (by UUID, since ranks number their devices
// differently) through a small shared-memory segment.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// How. Each process holds a *share* of the job's limit on the device: its grant (broker.h), so the
// allocation fast path is unchanged (in-use within the grant: no shared memory touched). Going past
// the share asks the segment for more: one compare-and-swap on the job's total of shares, which can
// never pass the limit, so two processes allocating at the same instant never over-commit. A share
// keeps a little headroom (kHeadroom) so that not every allocation goes to the segment, and is
// given back when in-use falls well below it. A process that died without leaving (SIGKILL) is
// found when an allocation would not fit: its entry's pid no longer runs with the start time it
// joined with, and its share goes back to the job.
//
// The segment: /dev/shm/coloc-job.<uid>.<pid namespace>.<XXH64 of the job name>.<device UUID>
// (pids mean something only within one pid namespace, and container default job names such as
// python-1 repeat), created with
// O_CREAT | O_EXCL | O_NOFOLLOW and mode 0600; a segment that exists is used only if it is a
// regular file owned by this uid with mode 0600 and the right size and magic. Otherwise (or
// without /dev/shm) the limit stays per process, with a warning. The last process to leave
// removes the file.
#pragma once

#include <atomic>
#include <cstdint>

namespace coloc::interpose {

/// The shared-memory layout (plain data; every field is atomic or written before `magic`).
struct JobSegment {
  static constexpr uint32_t kMagic = 0x4a4c4f43u;  // "COLJ"
  static constexpr uint32_t kVersion = 1;
  static constexpr int kEntries = 256;  ///< processes of one job on one device at a time
  static constexpr uint32_t kClosed = 0x80000000u;  ///< in `users`: the last one left, being removed
  static constexpr uint32_t kBusy = 0xffffffffu;    ///< an entry's pid while it is being reclaimed

  struct alignas(64) Entry {
    std::atomic<uint32_t> pid;        ///< 0 = free
    uint32_t pad;
    std::atomic<uint64_t> start;      ///< the process's start time (clock ticks since boot, /proc)
    std::atomic<uint64_t> share;      ///< bytes of the job's limit it holds
  };

  std::atomic<uint32_t> magic;
  uint32_t version;
  std::atomic<uint32_t> users;        ///< entries in use; kClosed once the last one left
  uint32_t pad;
  std::atomic<uint64_t> total;        ///< sum of the entries' shares (bytes)
  uint64_t limit;                     ///< the creator's limit (bytes), to warn about different ones
  char pad2[32];
  Entry entries[kEntries];
};

/// This process's membership on one device slot. Not thread-safe by itself: LocalBroker calls it
/// under its own per-slot lock.
class JobShare {
 public:
  /// A share's headroom beyond in-use (bytes): limit / 64, between 2 MiB and 256 MiB.
  static uint64_t headroom(uint64_t limit);

  /// Joins (opening or creating the segment) the job `job` of this uid on device `uuid`, with
  /// this process's limit `limit` (bytes). False, with *why set (a static string), when the job
  /// cannot be shared: the caller keeps a per-process limit.
  bool join(const char* job, const unsigned char uuid[16], uint64_t limit, const char** why);
  bool joined() const { return seg_.load(std::memory_order_acquire) != nullptr; }
  /// The limit the job's first process joined with (bytes; 0 when not joined).
  uint64_t job_limit() const;
  /// Raises this process's share so that `wanted` bytes fit (plus headroom where the limit allows).
  /// Returns the new share, or 0 when the job's other processes hold too much (after reclaiming
  /// the shares of dead ones). *others = what they hold.
  uint64_t grow(uint64_t wanted, uint64_t* others);
  /// Lowers this process's share to `keep` bytes (never below what is asked; no-op if higher).
  void shrink(uint64_t keep);
  /// This process's share, and what the job's other processes hold now (bytes).
  uint64_t share() const { return share_.load(std::memory_order_relaxed); }
  /// Lock-free (any thread, any time).
  uint64_t others() const;
  /// Gives the share back and leaves; the last process removes the segment.
  void leave();
  /// In a fork child: forgets the parent's membership without touching the segment.
  void forget();

 private:
  int reclaim_dead();       // returns how many entries were reclaimed
  bool claim_entry();       // a free entry for this process (reclaiming its own pre-exec one)
  bool still_member();      // our entry is still ours (not reclaimed by a process that thought us dead)
  void sub_total(uint64_t bytes);

  std::atomic<JobSegment*> seg_{nullptr};
  int entry_ = -1;
  uint64_t limit_ = 0, start_ = 0;
  std::atomic<uint64_t> share_{0};
  char path_[160] = {};
};

/// The start time of process `pid` in clock ticks since boot (field 22 of /proc/PID/stat), or 0
/// when it cannot be read.
uint64_t process_start_ticks(int pid);
/// Whether the process `pid` that joined with start time `start` is gone: it does not exist
/// (kill(pid, 0) says ESRCH), or a process with another start time has its pid. A process that
/// cannot be examined (no descriptor left, /proc hidden) counts as alive.
bool process_gone(int pid, uint64_t start);

}  // namespace coloc::interpose
