// simgpu/os.h — the few operating-system facts simgpu relies on: whether a process is still the
// one that registered (pid + start time, so pid reuse is noticed), futex waits on shared memory,
// and the monotonic clock.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>

namespace simgpu {

/// Start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot), or 0 when
/// there is no such process or it is a zombie (a zombie has finished: it counts as dead).
uint64_t process_start_time(pid_t pid);

/// True while process `pid` exists, is not a zombie, and started at `start_time`.
inline bool process_alive(pid_t pid, uint64_t start_time) {
  return start_time != 0 && process_start_time(pid) == start_time;
}

/// True when process `pid` is stopped: state 'T' (SIGSTOP, SIGTSTP, ...) or 't' (stopped by a
/// tracer) in /proc/<pid>/stat. False when it runs, sleeps, or does not exist.
bool process_stopped(pid_t pid);

/// CLOCK_MONOTONIC in nanoseconds.
uint64_t now_ns();

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (returns at once if it has passed).
void sleep_until_ns(uint64_t deadline_ns);

/// Blocks while *word == expected, for at most `timeout_ns`; spurious returns are allowed.
/// `word` may live in memory shared between processes (a non-private futex).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns);

/// Wakes every thread, in any process, blocked in futex_wait on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);

}  // namespace simgpu
