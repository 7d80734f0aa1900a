// interpose/quiet_thread.h — how libcoloc.so starts its own threads (coloc-link, coloc-track,
// coloc-est).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <cstddef>

namespace coloc::interpose {

/// Starts a detached thread running `fn(arg)` with a stack of `stack` bytes and every signal
/// blocked (it takes none of the application's signals: its handlers and sigwait loops see them
/// as before). The caller's signal mask is unchanged on return. Returns 0, or pthread_create's
/// error (then no thread runs). Off hot paths only.
int start_quiet_thread(void* (*fn)(void*), void* arg, size_t stack);

}  // namespace coloc::interpose
