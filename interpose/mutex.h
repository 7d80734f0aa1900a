// interpose/mutex.h — the interposer's locks, both constant-initialised (usable before any
// constructor ran) and never throwing (std::mutex reports errors with exceptions, which must not
// cross into the host; and its error path would pull half of the C++ runtime in): Mutex, a pthread
// mutex, for sections that may wait; SpinMutex, for the ledger's short sections that never do.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <pthread.h>

#include <atomic>

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

/// A lock for critical sections of a few hundred instructions that never block and never call
/// the driver (the ledger's record shards and pool table): taking it is one atomic exchange and
/// releasing it one release store, where a pthread mutex costs two locked instructions and two
/// library calls (9.6-10.8 ns per uncontended pair against 3.0-3.2 ns, measured on the development
/// machine). A waiter spins briefly, then yields, then sleeps in 50 us steps, so a holder preempted
/// by the scheduler (or a host thread of higher real-time priority waiting) cannot make it burn a
/// CPU. Not for sections that may wait: use Mutex.
class SpinMutex {
 public:
  constexpr SpinMutex() = default;
  SpinMutex(const SpinMutex&) = delete;
  SpinMutex& operator=(const SpinMutex&) = delete;
  void lock() {
    if (!held_.exchange(true, std::memory_order_acquire)) [[likely]] return;
    lock_contended();
  }
  void unlock() { held_.store(false, std::memory_order_release); }
  /// Takes the lock if it is free; true when taken.
  bool try_lock() { return !held_.load(std::memory_order_relaxed) && !held_.exchange(true, std::memory_order_acquire); }
  /// In a child after fork only (see Mutex::reinit_in_child).
  void reinit_in_child() { held_.store(false, std::memory_order_relaxed); }

 private:
  void lock_contended();
  std::atomic<bool> held_{false};
};

/// Holds a Mutex (or SpinMutex) for a scope.
template <class M>
class BasicLock {
 public:
  explicit BasicLock(M& m) : m_(m) { m_.lock(); }
  ~BasicLock() { m_.unlock(); }
  BasicLock(const BasicLock&) = delete;
  BasicLock& operator=(const BasicLock&) = delete;

 private:
  M& m_;
};
using MutexLock = BasicLock<Mutex>;
using SpinLock = BasicLock<SpinMutex>;

}  // namespace coloc::interpose
