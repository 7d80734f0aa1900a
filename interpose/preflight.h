// interpose/preflight.h — the process's preflight for suspension (issue 29): what it did that the
// driver's checkpoint API cannot carry (pages.h, StatsPage::not_suspendable). colocd reads it
// before it locks a process, and never locks one that fails it.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// no allocation, no locks: note() may run on any thread, inside any hook.
#pragma once

#include <cstdint>

namespace coloc::interpose::preflight {

/// Records `bits` (pages::kUsed*) for the life of the process: in a process-wide word, and on the
/// stats page when colocd's page (layout 9 or newer) is mapped.
void note(uint32_t bits) noexcept;
/// Everything noted so far.
uint32_t bits() noexcept;
/// Copies what was noted onto a newly adopted stats page (daemon_pages::adopt, after the switch).
void republish() noexcept;

}  // namespace coloc::interpose::preflight
