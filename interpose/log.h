// interpose/log.h — the interposer's logger: one write(2) per line to stderr.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Each line is formatted into a stack buffer (no heap) and written with a single write(2) to fd 2,
// so lines from several threads never interleave and the logger holds no lock (nothing to do at
// fork). A thread-local guard drops a message logged while this thread is already logging. Until
// log_start() has run (options read), nothing is written: early paths stay silent. Usable during
// exit. Lines look like
//   coloc[train-1234 1234]: warning: <message>
#pragma once

#include <atomic>
#include <cstdint>

namespace coloc::interpose {

/// Verbosity, from COLOC_LOG_LEVEL (off|error|warn|info|debug).
enum class LogLevel : uint8_t { off, error, warn, info, debug };

/// Enables the logger at `level`; `job` (copied, truncated to 63 bytes) goes in the prefix.
void log_start(LogLevel level, const char* job);
/// Disables the logger again (tests).
void log_stop();
/// True when a message at `level` would be written.
bool log_enabled(LogLevel level);
/// printf-style; appends a newline; lines longer than 1 KiB are cut. Never allocates.
void logf(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/// Formats one line (prefix + message + '\n') into buf[cap]; returns its length. Exposed for tests.
/// `pid` is the process id to show.
int log_format(char* buf, int cap, LogLevel level, int pid, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/// Lets one event through per `interval_ns`, counting the ones it holds back. Lock-free; use one
/// per kind of event (e.g. one per device for out-of-memory warnings).
class RateLimit {
 public:
  /// At most one event per `interval_ns` (default one second).
  explicit constexpr RateLimit(uint64_t interval_ns = 1000000000ull) : interval_ns_(interval_ns) {}
  /// True when the event at time `now_ns` (CLOCK_MONOTONIC) should be reported; then *suppressed
  /// is the number of events held back since the last one reported.
  bool allow(uint64_t now_ns, uint64_t* suppressed);
  /// Forget history (after fork).
  void reset();

 private:
  uint64_t interval_ns_;
  std::atomic<uint64_t> last_ns_{0};  ///< time of the last event reported; 0 = none yet
  std::atomic<uint64_t> held_{0};
};

/// CLOCK_MONOTONIC in ns.
uint64_t monotonic_ns();

}  // namespace coloc::interpose
