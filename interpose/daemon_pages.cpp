// interpose/daemon_pages.cpp — see daemon_pages.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "daemon_pages.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "broker.h"
#include "ledger.h"
#include "preflight.h"

namespace coloc::interpose::daemon_pages {

namespace {

constexpr size_t kPage = pages::kPageSize;
constexpr int kSlotCounters = 8;                                // StatsSlot's
constexpr int kCounters = kSlotCounters + 2 * int(pages::kGateStates);  // and GateStats' (layout 4)

// The stats page's memfd, kept open while it is mapped over the stats area (-1: not a daemon page).
constinit std::atomic<int> g_stats_fd{-1};
// Set before the first MAP_FIXED: from then on a forked child must privatize the areas.
constinit std::atomic<bool> g_mapped{false};

// Counter `i` of `slot`: StatsSlot's eight, then GateStats' (in a page of an older layout the
// gate counters are that page's zero tail: carried over, never read by its daemon).
std::atomic<uint64_t>* counters(pages::StatsPage& p, int slot, int i) {
  pages::StatsSlot& s = p.slots[slot];
  std::atomic<uint64_t>* all[kSlotCounters] = {&s.in_use, &s.peak, &s.allocs, &s.frees, &s.failures,
                                               &s.wait_memory_ns, &s.wait_admission_ns, &s.launches};
  if (i < kSlotCounters) return all[i];
  i -= kSlotCounters;
  pages::GateStats& g = p.gates[slot];
  return i < int(pages::kGateStates) ? &g.wait_ns[i] : &g.waits[i - int(pages::kGateStates)];
}

// Maps `fd` (one page) at a kernel-chosen address; nullptr on failure.
void* map_temp(int fd, int prot) {
  void* p = ::mmap(nullptr, kPage, prot, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Replaces the page at `area` (MAP_FIXED). The raw system call, not mmap(): a sanitizer's mmap
// interceptor takes a fixed mapping for a plain write to the range, racing with the atomic
// accesses other threads keep making there; the kernel replaces the page whole, so they see the
// old page or the new one, each consistent (which is all the carry-over of adopt() relies on).
bool map_fixed(void* area, int prot, int flags, int fd) {
  long r = ::syscall(SYS_mmap, area, kPage, prot, flags | MAP_FIXED, fd, 0L);
  return r != -1 && reinterpret_cast<void*>(r) == area;
}

// (lseek, not fstat: fstat is versioned GLIBC_2.33; glibc_compat.h.)
bool one_page(int fd) { return ::lseek(fd, 0, SEEK_END) == off_t(kPage); }

}  // namespace

int adopt(int control_fd, int stats_fd) {
  int rc = 0;
  void* tmp_c = nullptr;
  void* tmp_s = nullptr;
  if (!one_page(control_fd) || !one_page(stats_fd)) rc = -EPROTO;
  if (rc == 0 && (!(tmp_c = map_temp(control_fd, PROT_READ)) || !(tmp_s = map_temp(stats_fd, PROT_READ | PROT_WRITE))))
    rc = -errno;
  if (rc == 0) {
    auto* c = static_cast<const pages::ControlPage*>(tmp_c);
    auto* s = static_cast<const pages::StatsPage*>(tmp_s);
    if (c->magic != pages::kControlMagic || c->layout_version < pages::kMinLayoutVersion ||
        c->layout_version > pages::kLayoutVersion || c->slot_count != pages::kSlots ||
        s->magic != pages::kStatsMagic || s->layout_version != c->layout_version || s->slot_count != pages::kSlots)
      rc = -EPROTO;
  }
  if (rc != 0) {
    if (tmp_c) ::munmap(tmp_c, kPage);
    if (tmp_s) ::munmap(tmp_s, kPage);
    ::close(control_fd);
    ::close(stats_fd);
    return rc;
  }

  // 2. Copy the counters, remembering what was copied. The old page is read through a mapping of
  // its own memfd when it is a daemon page (a private area has no other writer: nothing is
  // attached before the first registration).
  auto* fresh = static_cast<pages::StatsPage*>(tmp_s);
  int old_fd = g_stats_fd.load(std::memory_order_acquire);
  auto* old = old_fd >= 0 ? static_cast<pages::StatsPage*>(map_temp(old_fd, PROT_READ)) : nullptr;
  pages::StatsPage& from = old ? *old : stats();
  uint64_t copied[kMaxDevices][kCounters];
  for (int slot = 0; slot < kMaxDevices; ++slot)
    for (int i = 0; i < kCounters; ++i) {
      copied[slot][i] = counters(from, slot, i)->load(std::memory_order_seq_cst);
      counters(*fresh, slot, i)->store(copied[slot][i], std::memory_order_relaxed);
    }

  // 3. Switch. Every update from here on lands in the new pages.
  g_mapped.store(true, std::memory_order_seq_cst);
  bool c = map_fixed(&g_control_area, PROT_READ, MAP_SHARED, control_fd);
  bool s = map_fixed(&g_stats_area, PROT_READ | PROT_WRITE, MAP_SHARED, stats_fd);
  if (!c || !s) rc = -errno;  // out of mappings: cannot happen in practice

  // 4. What landed in the old page between the copy and the switch.
  if (old && s) {
    for (int slot = 0; slot < kMaxDevices; ++slot)
      for (int i = 0; i < kCounters; ++i) {
        uint64_t final_value = counters(*old, slot, i)->load(std::memory_order_seq_cst);
        std::atomic<uint64_t>* to = counters(stats(), slot, i);
        if (i == 1) atomic_max(*to, final_value);  // peak
        else if (uint64_t delta = final_value - copied[slot][i]) to->fetch_add(delta, std::memory_order_seq_cst);
      }
  }
  if (old) ::munmap(old, kPage);
  ::munmap(tmp_c, kPage);
  ::munmap(tmp_s, kPage);
  ::close(control_fd);
  if (s) {
    preflight::republish();  // what the process did before this page: colocd must see it
    g_stats_fd.store(stats_fd, std::memory_order_release);
    if (old_fd >= 0) ::close(old_fd);
  } else {
    ::close(stats_fd);
  }
  return rc;
}

bool mapped() { return g_mapped.load(std::memory_order_acquire); }

void privatize() {
  if (!g_mapped.load(std::memory_order_acquire)) return;
  // The control words as the parent last saw them, in a private writable page.
  alignas(16) static unsigned char copy[kPage];
  void* area = &g_control_area;
  std::memcpy(copy, area, kPage);
  map_fixed(area, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  std::memcpy(area, copy, kPage);
  // The child is nobody's to gate: its gates open (a child of a process that used CUDA cannot
  // launch anyway; one that did not registers anew).
  pages::ControlPage& c = control();
  for (pages::SlotGate& g : c.gates) g.state.store(uint32_t(pages::GateState::kRun), std::memory_order_relaxed);
  c.gate.store(uint32_t(pages::GateState::kRun), std::memory_order_release);
  map_fixed(&g_stats_area, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  int fd = g_stats_fd.exchange(-1, std::memory_order_acq_rel);
  if (fd >= 0) ::close(fd);
  g_mapped.store(false, std::memory_order_release);
}

}  // namespace coloc::interpose::daemon_pages
