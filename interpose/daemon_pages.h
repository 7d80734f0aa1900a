// interpose/daemon_pages.h — putting the daemon's control and stats pages where the hooks read and
// write (ControlArea, StatsArea: broker.h), and taking them away again in a forked child.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The hooks address the pages at fixed addresses (page-aligned static areas of libcoloc.so); a
// registration maps the daemon's memfds over them with mmap(MAP_FIXED), so the fast paths have no
// pointer to follow and nothing to check. Other threads keep allocating while the pages change:
//
//   1. the new pages are mapped at temporary addresses and checked (size, magic, layout);
//   2. every stats counter of the current area is copied into the new stats page, and remembered;
//   3. both areas are replaced (MAP_FIXED): from here on every update lands in the new page;
//   4. updates that landed in the old page between 2 and 3 are added to the new one: the old page
//      stays readable through a second mapping of its memfd (kept open for this), so the final
//      old values minus the copied ones are exactly the missed updates (in-use may go up and down:
//      the difference is taken modulo 2^64, which is exact for a sum). The peak takes the maximum.
//
// Nothing is sent to the daemon before this returns ("copy every stats counter of the old stats
// page into the new one before sending anything else", docs/daemon.md).
#pragma once

namespace coloc::interpose::daemon_pages {

/// Maps a RegisterReply's pages (control first, stats second) over the process's areas, carrying
/// the stats counters over as described above. Takes ownership of both descriptors (the stats one
/// is kept open for the next switch; the control one is closed). Returns 0, -EPROTO when the pages
/// are not what pages.h describes (nothing changed then), or -errno from mmap.
int adopt(int control_fd, int stats_fd);

/// True when the areas are the daemon's pages (the control area is then read-only).
bool mapped();

/// Replaces the areas by private copies (the stats counters zeroed; the control words as last
/// seen, but writable) and closes the stats descriptor. In a forked child, first thing (the child
/// never writes the parent's books: it owns no device memory); and after a registration that
/// failed once the pages were mapped (nothing was attached yet). No-op when the areas are not the
/// daemon's.
void privatize();

}  // namespace coloc::interpose::daemon_pages
