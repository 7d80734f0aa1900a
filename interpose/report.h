// interpose/report.h — this process's ledger as JSON (COLOC_REPORT).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Written at exit (atexit and our destructor; once), by hand into a static buffer and out with
// write(2): no allocation, nothing from the host's C++ runtime, safe while other threads still run.
// A process that never called a hook (a forked child that never touched CUDA, an exec'd helper)
// writes nothing. The file is written to "<path>.tmp.<pid>" and renamed, so readers never see half
// a report.
//
// Layout (bytes are integers; a missing limit is null):
//   {"version":1,"job":"...","pid":N,"context_bytes":N,
//    "devices":[{"slot":0,"ordinal":0,"uuid":"GPU-...","total_bytes":N,"limit":N|null,
//                "in_use":{"total":N,"allocation":N,"pool":N,"vmm":N,"array":N,"context":N,"graph":N},
//                "peak":{ same keys },
//                "allocs":N,"frees":N,"failed":N,"refused":N,"untracked_frees":N,
//                "released_with_context":N}, ...],
//    "untracked_frees_unattributed":N,
//    "calls":{"cuInit":N, ... every hook ...}}
#pragma once

#include <cstddef>

namespace coloc::interpose {

/// Renders the report into buf[cap]. Returns its length, or -1 when cap is too small.
long render_report(char* buf, size_t cap);

/// Writes the report to `path`, "%p" replaced by the pid. True on success.
bool write_report(const char* path);

/// The exit hook: writes the COLOC_REPORT file, once per process (fork resets it).
void report_at_exit();
/// After fork, in the child: the child may write its own report.
void report_reset_in_child();

}  // namespace coloc::interpose
