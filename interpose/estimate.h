// interpose/estimate.h — the online estimate of this process's peak, fed from the ledger.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Why here, in the job's process: detection needs every allocation and free in order, with its
// size, and the launches between them. Sending them to colocd would cost a message (or a shared
// ring colocd must drain fast enough) per event for every process on the node; here each event
// costs one slot of a process-local ring, and only the result (a few words per device, on the
// stats page) crosses to colocd, which reads it on its sampling timer. A lying process can only
// set its own job's reservation, which it could take anyway by allocating.
//
// Hot path (the ledger's commits and releases, the synchronize hooks): record() claims a slot of
// a lock-free multi-producer ring with one fetch_add, writes three words and publishes them with a
// sequence number. No clock, no system call, no lock, no allocation. The launches since the
// thread's previous event are read from this thread's own call counters (gate.h), so the launch
// hook itself pays nothing for the estimate.
//
// The `coloc-est` thread (started at the first device admission by colocd; never without a
// daemon, where nobody would read the result) drains the ring every few milliseconds, stamps what
// it drained with the time, feeds est::PeriodDetector (estimator/online.h), and publishes each
// device's prediction in the stats page's EstimateStats (pages.h, layout 6) under its seqlock.
// Events lost to a full ring (the thread fell 8192 events behind) restart detection.
#pragma once

#include <cstdint>

namespace coloc::interpose::estimate {

/// What happened (values of est::EventKind).
enum class What : uint8_t { kAlloc = 1, kFree = 2, kSync = 3 };

/// Records one event on device `slot` (0..15): `size` bytes allocated or freed (0 for a
/// synchronize), `in_use` the slot's bytes in use right after it. Lock-free; a no-op until
/// start() ran.
void record(What what, int slot, uint64_t size, uint64_t in_use);

/// True while events are recorded (the thread runs): lets a caller skip finding the device.
bool active();

/// Starts the `coloc-est` thread once (later calls do nothing). Call off the hot path, e.g. after
/// an admission; it blocks every signal in the new thread.
void start();

/// In the child after fork: no thread, an empty ring, a new detector.
void reset_in_child();

}  // namespace coloc::interpose::estimate
