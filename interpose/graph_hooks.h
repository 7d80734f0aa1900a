// interpose/graph_hooks.h — what the rest of the interposer asks of the graph memory books
// (graph_hooks.cpp): whether a stream-ordered allocation is being captured into a graph, and the
// reconciliation of a device's graph memory pool with the driver.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda_api.h"

namespace coloc::interpose {

/// Stream captures begun through our hooks and not ended yet (a hint: a capture whose stream was
/// destroyed stays counted).
extern std::atomic<int> g_active_captures;

/// True when `stream` is capturing (asks the driver; call only when g_active_captures > 0).
/// `per_thread`: the entry point is a _ptsz one (NULL is the per-thread default stream).
bool stream_capturing(CUstream stream, bool per_thread);

/// A stream-ordered allocation of `bytes` that the driver recorded into the graph `stream` is
/// capturing: it becomes graph memory of that graph (charged when an executable graph made from it
/// is uploaded or launched), not a pool allocation.
void note_captured_alloc(CUstream stream, bool per_thread, uint64_t bytes);

/// Reconciles the books of `slot`'s graph memory pool with the driver's
/// CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT / USED_MEM_CURRENT. Off the fast path (where pools are
/// refreshed); does nothing when a graph hook holds the graph books (never waits). True when the
/// books changed.
bool refresh_graph_pool(int slot);

/// In a child after fork: forgets every graph, executable graph and capture (fork.cpp).
void graph_reset_in_child();

}  // namespace coloc::interpose
