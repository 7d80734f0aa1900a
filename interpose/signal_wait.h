// interpose/signal_wait.h — waiting inside the host's thread so that Ctrl-C still works.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// A wait for the daemon (admission, a parked grow, a daemon that is restarting) can last minutes.
// A pending SIGINT or SIGTERM must end it (the hook then returns CUDA_ERROR_OUT_OF_MEMORY and the
// application's own handling of the signal runs). We may not install a handler (the signals are
// the application's), nor use a signalfd (it needs the signal blocked in every thread and consumes
// it), nor consume the signal with sigwait. Instead, the pselect pattern:
//
//   - For the whole wait the thread blocks SIGINT and SIGTERM (pthread_sigmask), so one that
//     arrives between two waits stays pending instead of being lost.
//   - Each wait is a ppoll() whose temporary mask blocks every signal EXCEPT the SIGINT/SIGTERM
//     that the thread had unblocked before the wait. So ppoll returns EINTR only when one of those
//     two was delivered to this thread (its handler ran, or the default action ended the
//     process): the application saw its signal exactly once, and the wait ends.
//   - Before each ppoll, sigpending() is checked: a SIGINT/SIGTERM pending for this thread or the
//     process (e.g. blocked everywhere by an application that handles it with sigwait elsewhere)
//     ends the wait too, and is left pending for the application.
//   - Other signals stay blocked only while inside ppoll: they are delivered when it returns (every
//     wait is at most kSliceMs long) or go to another thread that accepts them. A wait never
//     changes a signal's disposition.
//
// The kernel gives a process-directed signal (kill, a terminal's Ctrl-C) to the main thread when
// that thread accepts it, so a wait in the main thread (Python's, where KeyboardInterrupt is
// raised) is the case this covers exactly. A wait in another thread ends only if the signal is
// delivered to it, or at the grant, the timeout, or the process's exit; documented.
#pragma once

#include <signal.h>

#include <cstdint>

namespace coloc::interpose {

class SignalWindow {
 public:
  /// Longest single ppoll (ms): other signals wait at most this long for delivery.
  static constexpr int kSliceMs = 100;

  /// Blocks SIGINT and SIGTERM in this thread until destruction (remembering the old mask).
  SignalWindow();
  /// Restores the thread's signal mask; a SIGINT/SIGTERM left pending is then delivered.
  ~SignalWindow();
  SignalWindow(const SignalWindow&) = delete;
  SignalWindow& operator=(const SignalWindow&) = delete;

  /// Waits until `fd` is readable (fd < 0: nothing to read, only time), `timeout_ms` passes (capped
  /// at kSliceMs), or SIGINT/SIGTERM arrives. Returns 1 (readable), 0 (time passed) or -1 (a
  /// stop signal: stopped() is true from then on).
  int wait(int fd, int timeout_ms);
  /// The same wait, but SIGINT/SIGTERM stay blocked (for the reply that must follow a Cancel):
  /// returns 1 or 0, never -1.
  int wait_uninterrupted(int fd, int timeout_ms);
  /// Waits on two descriptors (either may be < 0); returns a bit mask (1: fd0 readable or hung
  /// up, 2: fd1 readable), 0 when the time passed, -1 for a stop signal (never with
  /// `interruptible` false).
  int wait_either(int fd0, int fd1, int timeout_ms, bool interruptible);
  /// Waits until the 32-bit word at `word` is woken (FUTEX_WAKE on a shared mapping: no
  /// FUTEX_PRIVATE_FLAG) while it holds `expected`, `timeout_ms` passes (capped at kSliceMs), or a
  /// SIGINT/SIGTERM comes. A futex takes no signal mask, so the thread's mask is set around the
  /// call to the one ppoll uses (everything blocked but the SIGINT/SIGTERM it accepted before the
  /// window): a process-directed Ctrl-C goes to this thread, and an EINTR can only be theirs. One
  /// that lands in the few instructions between the mask change and the system call (either
  /// side) runs its handler without ending this wait; the wait then ends when the word changes.
  /// A SIGINT/SIGTERM the thread blocked before the window ends it at the next slice (sigpending).
  /// Returns 1 (woken, or the word had changed), 0 (time passed) or -1 (a stop signal: stopped()
  /// is true from then on).
  int wait_futex(const void* word, uint32_t expected, int timeout_ms);
  /// Sleeps `ns` nanoseconds unless a stop signal comes first. False when one did.
  bool sleep(uint64_t ns);
  /// True once a SIGINT/SIGTERM ended a wait or was seen pending.
  bool stopped() const { return stopped_; }

  /// Something to tell the user when a wait lasts long: `say(ctx, waited_ns)` is called from
  /// inside one of this window's waits on this thread, when `after_ns` nanoseconds
  /// (CLOCK_MONOTONIC) have passed since set_notice(), and again every time the nanoseconds it
  /// returned have passed since its last call (0: never again). At most one slice (kSliceMs)
  /// late. The callee may log; it must not wait.
  using NoticeFn = uint64_t (*)(void* ctx, uint64_t waited_ns);
  void set_notice(uint64_t after_ns, NoticeFn say, void* ctx);
  /// True once the notice was first said (the wait then says how it ended too).
  bool noticed() const { return noticed_; }

 private:
  bool stop_pending();
  void check_notice();
  NoticeFn notice_ = nullptr;
  void* notice_ctx_ = nullptr;
  uint64_t notice_start_ns_ = 0;  // CLOCK_MONOTONIC, ns
  uint64_t notice_at_ns_ = 0;     // CLOCK_MONOTONIC, ns
  bool noticed_ = false;
  bool notice_done_ = false;  // it asked not to be called again
  sigset_t old_;
  sigset_t inside_;  // the mask during ppoll
  bool stopped_ = false;
};

}  // namespace coloc::interpose
