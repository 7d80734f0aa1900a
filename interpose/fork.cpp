// interpose/fork.cpp — the only place with pthread_atfork: what libcoloc.so does around fork().
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Lock order (every lock of libcoloc.so; acquired in this order before fork, released in reverse):
//   1. the broker's own locks           (Broker::before_fork)
//   2. Devices: slots, context table, each slot's context lock in slot order
//   3. Ledger: pools, then the 64 record shards in index order
// No code path takes a lock of a lower number while holding one of a higher number (the hooks
// never hold two at once except Ledger::lock_all and Devices::lock_all themselves). The logger
// holds no lock (one write(2) per line from a stack buffer), the call counters are lock-free, and
// the driver loader takes none.
//
// In the child (DataLoader workers, fork+exec helpers): every lock is released, the ledger, the
// contexts and the call counters are emptied — the child owns no device memory and no context, and
// a CUDA driver refuses a forked child anyway — and the report may be written again (for the
// child's own calls, if it makes any). Device slots and limits stay: they describe the same job.
// All of it is O(locks + slots): a child that never touches CUDA costs nothing more.
#include <pthread.h>

#include "broker.h"
#include "devices.h"
#include "gate.h"
#include "glibc_compat.h"
#include "report.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

void prepare() {
  broker().before_fork();
  devices().lock_all();
  ledger().lock_all();
}

void parent() {
  ledger().unlock_all();
  devices().unlock_all();
  broker().after_fork_parent();
}

void child() {
  broker().after_fork_child();  // first: it may swap shared pages for private ones
  ledger().reset_in_child();
  devices().reset_in_child();
  reset_calls_in_child();
  report_reset_in_child();
}

}  // namespace

/// Installs the fork handlers (runtime init, once).
void install_fork_handlers() { pthread_atfork(prepare, parent, child); }

}  // namespace coloc::interpose
