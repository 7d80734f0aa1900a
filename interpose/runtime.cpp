// interpose/runtime.cpp — see runtime.h. Also our constructor and destructor.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "runtime.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "broker.h"
#include "daemon_broker.h"
#include "dlsym_entry.h"
#include "estimate.h"
#include "log.h"
#include "no_destroy.h"
#include "options.h"
#include "report.h"

extern char** environ;

namespace coloc::interpose {

void install_fork_handlers();  // fork.cpp

namespace {

constinit NoDestroy<Ledger> g_ledger(g_stats_area.page);

enum : int { kNotStarted = 0, kRunning = 1, kReady = 2 };
constinit std::atomic<int> g_state{kNotStarted};
__thread bool tl_initialising __attribute__((tls_model("initial-exec"))) = false;

void exit_hook() {
  report_at_exit();
  broker().at_exit();
}

// The daemon broker when a daemon is configured: COLOC_SOCKET, or the default socket exists, or
// COLOC_REQUIRE_DAEMON=1 (then at the default path when COLOC_SOCKET is not given). Else the
// LocalBroker stays: no socket, no thread, nothing.
void install_broker(const Options& o) {
  const char* path = o.socket[0] ? o.socket : nullptr;
  // (access, not stat: stat is versioned GLIBC_2.33; glibc_compat.h.)
  if (!path && ::access(proto::kDefaultSocket, F_OK) == 0) path = proto::kDefaultSocket;
  if (!path && o.require_daemon) path = proto::kDefaultSocket;
  if (!path) return;
  daemon_broker().set_socket(path);
  set_broker(&daemon_broker());
}

void bring_up(const char* why) {
  Options o;
  read_options(environ, int(getpid()), &o);
  set_options(o);
  log_start(o.log_level, o.job);
  // Malformed settings are reported at cuInit (report_option_errors), not here: LD_PRELOAD
  // reaches every program a job starts (shells, ls, date), and only CUDA processes use them.
  // A process that starts without COLOC_JOB names the job (<command>-<pid>) and its descendants
  // inherit the name, so that a launcher's workers share its limit. Only from our constructor:
  // then no other thread of the program can be reading the environment.
  if (!o.job_set && std::strcmp(why, "constructor") == 0) ::setenv("COLOC_JOB", o.job, 0);
  install_broker(options());
  // The ledger's allocations and frees feed the online estimate (a no-op until its thread runs).
  ledger().set_event_sink([](bool alloc, int slot, uint64_t bytes, uint64_t in_use) {
    estimate::record(alloc ? estimate::What::kAlloc : estimate::What::kFree, slot, bytes, in_use);
  });
  install_fork_handlers();
  atexit(exit_hook);
  logf(LogLevel::debug, "initialised from %s", why);
}

}  // namespace

Ledger& ledger() { return g_ledger.value; }

namespace runtime {

bool ready() { return g_state.load(std::memory_order_acquire) == kReady; }

void wait_until_started() {
  while (!tl_initialising && g_state.load(std::memory_order_acquire) == kRunning) sched_yield();
}

void report_option_errors() {
  static constinit std::atomic<bool> reported{false};
  if (reported.load(std::memory_order_relaxed) || reported.exchange(true, std::memory_order_relaxed)) return;
  const Options& o = options();
  for (int i = 0; i < o.n_errors; ++i) logf(LogLevel::error, "%s", o.errors[i]);
  if (o.job_given_length >= sizeof o.job)
    logf(LogLevel::warn,
         "COLOC_JOB is %zu characters, more than a job id holds (63): this process's job is '%s' (its first 54 "
         "characters and a hash of the whole name, so that long names with one prefix stay apart)",
         o.job_given_length, o.job);
}

void ensure(const char* why) {
  if (ready() || tl_initialising) return;
  int expected = kNotStarted;
  if (g_state.compare_exchange_strong(expected, kRunning, std::memory_order_acq_rel)) {
    tl_initialising = true;
    bring_up(why);
    tl_initialising = false;
    g_state.store(kReady, std::memory_order_release);
    return;
  }
  // Another thread is bringing the runtime up: it reads the environment and registers handlers,
  // nothing that can wait on us. Wait for it.
  while (!ready()) sched_yield();
}

}  // namespace runtime

}  // namespace coloc::interpose

// Our constructor: the earliest moment we are sure to run. Hooks may have run already.
__attribute__((constructor)) static void coloc_constructor() {
  coloc::interpose::resolve_real_dlsym();
  coloc::interpose::runtime::ensure("constructor");
}

// At unload (process exit): the report, if atexit has not written it yet.
__attribute__((destructor)) static void coloc_destructor() {
  coloc::interpose::report_at_exit();
  coloc::interpose::broker().at_exit();
}
