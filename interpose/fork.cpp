// interpose/fork.cpp — the only place with pthread_atfork: what libcoloc.so does around fork().
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Locks held across fork, taken in this order before it and released in reverse after it:
//   1. the broker's own locks                  (Broker::before_fork; LocalBroker and DaemonBroker
//                                               hold none: a thread may wait minutes for admission,
//                                               and fork must not wait for it)
//   2. Devices' slots lock                     (so the child sees every device slot whole)
// And one wait: a runtime start-up in progress on another thread finishes first. No path takes
// lock 1 while holding lock 2. Every other lock (the ledger's pool and shard locks, the context
// table, the per-device context locks, Devices' attach lock, the daemon broker's registration and
// attach locks, the daemon link's connection, table and reader locks) guards state the child throws
// away: they are not held across fork, and the child makes them new (Mutex::reinit_in_child)
// instead. The logger holds no
// lock (one write(2) per line from a stack buffer), the call counters are lock-free, and the driver
// loader takes none.
//
// In the child (DataLoader workers, fork+exec helpers): the broker goes first (a daemon broker
// swaps its shared pages for private ones before anything is reset), then the ledger, the contexts
// and the call counters are emptied — the child owns no device memory and no context, and a CUDA
// driver refuses a forked child anyway — and the report may be written again (for the child's own
// calls, if it makes any). Device slots and limits stay: they describe the same job. All of it is
// O(locks + slots): a child that never touches CUDA costs nothing more.
#include <pthread.h>

#include "broker.h"
#include "devices.h"
#include "estimate.h"
#include "gate.h"
#include "graph_hooks.h"
#include "glibc_compat.h"
#include "report.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

void prepare() {
  broker().before_fork();
  runtime::wait_until_started();
  devices().lock_slots();
}

void parent() {
  devices().unlock_slots();
  broker().after_fork_parent();
}

void child() {
  broker().after_fork_child();  // first: it may swap shared pages for private ones
  ledger().reset_in_child();
  devices().reset_in_child();
  reset_calls_in_child();
  report_reset_in_child();
  graph_reset_in_child();
  estimate::reset_in_child();
}

}  // namespace

/// Installs the fork handlers (runtime init, once).
void install_fork_handlers() { pthread_atfork(prepare, parent, child); }

}  // namespace coloc::interpose
