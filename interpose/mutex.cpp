// interpose/mutex.cpp — see mutex.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "mutex.h"

#include <sched.h>
#include <time.h>

namespace coloc::interpose {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}
}  // namespace

void SpinMutex::lock_contended() {
  for (unsigned round = 0;; ++round) {
    // Wait until it looks free before trying again: reads do not take the cache line away from the
    // holder.
    while (held_.load(std::memory_order_relaxed)) {
      if (round < 64) {
        cpu_relax();
      } else if (round < 128) {
        sched_yield();
      } else {
        struct timespec ts{0, 50 * 1000};
        nanosleep(&ts, nullptr);
      }
      ++round;
    }
    if (!held_.exchange(true, std::memory_order_acquire)) return;
  }
}

}  // namespace coloc::interpose
