// interpose/runtime.h — bringing libcoloc.so up inside the host process, and its process-wide
// objects.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Initialisation happens three ways, whichever comes first: our constructor, the first hook that
// needs it (possibly before our constructor ran: another library's constructor may call cuInit),
// and the driver loader. runtime::ensure() is idempotent and thread-safe: one caller reads the
// options, starts the logger, installs the fork handlers and the exit report; concurrent callers
// wait for it (it takes no lock anyone else holds and calls nothing that can block); a caller that
// re-enters it on the same thread returns at once. Until it completes, log lines are dropped.
#pragma once

#include "ledger.h"

namespace coloc::interpose {

namespace runtime {
/// Brings the runtime up if it is not yet; `why` names the first caller (for the debug log).
void ensure(const char* why);
/// True once ensure() has completed (one acquire load).
bool ready();
/// Returns once no start-up is in progress on another thread (fork's prepare handler).
void wait_until_started();
/// Logs the errors about malformed settings, once per process (cuInit: only processes that use
/// CUDA report them, not every program of the job that LD_PRELOAD reaches). A forked child whose
/// parent reported them already stays quiet.
void report_option_errors();
}  // namespace runtime

/// This process's ledger.
Ledger& ledger();

}  // namespace coloc::interpose
