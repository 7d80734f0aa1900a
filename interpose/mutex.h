// interpose/mutex.h — the interposer's mutex: a pthread mutex that is constant-initialised (usable
// before any constructor ran) and never throws (std::mutex reports errors with exceptions, which
// must not cross into the host; and its error path would pull half of the C++ runtime in).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <pthread.h>

namespace coloc::interpose {

/// Meets the Lockable requirements (use with std::lock_guard). Default (non-recursive) mutex.
class Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() { pthread_mutex_lock(&m_); }
  void unlock() { pthread_mutex_unlock(&m_); }
  /// Takes the mutex if it is free; true when taken.
  bool try_lock() { return pthread_mutex_trylock(&m_) == 0; }
  /// In a child after fork only: makes the mutex new and unlocked, whatever state the parent's
  /// threads left it in (they do not exist in the child). The data it guarded must be reset too.
  void reinit_in_child() { pthread_mutex_init(&m_, nullptr); }

 private:
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
};

/// Holds a Mutex for a scope.
class MutexLock {
 public:
  explicit MutexLock(Mutex& m) : m_(m) { m_.lock(); }
  ~MutexLock() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace coloc::interpose
