// interpose/broker.cpp — the control and stats pages, the broker pointer, and LocalBroker.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "broker.h"

#include <cstdio>
#include <cstring>

#include "coloc/size.h"

#include "glibc_compat.h"
#include "log.h"
#include "no_destroy.h"

namespace coloc::interpose {

constinit ControlArea g_control_area{};
constinit StatsArea g_stats_area{};

namespace {
constinit NoDestroy<LocalBroker> g_local_broker;
constinit std::atomic<Broker*> g_broker{nullptr};
constinit std::atomic<uint64_t> g_surplus_floor[kMaxDevices] = {};
constinit std::atomic<uint64_t> g_local_limit[kMaxDevices] = {};  // set at attach, before any charge
}  // namespace

std::atomic<uint64_t>& surplus_floor(int slot) { return g_surplus_floor[slot]; }
std::atomic<uint64_t>& local_limit(int slot) { return g_local_limit[slot]; }

const char* refusal_name(Refusal r) {
  switch (r) {
    case Refusal::none: return "none";
    case Refusal::own_limit: return "own limit";
    case Refusal::device_full: return "device full";
    case Refusal::deadlock_broken: return "deadlock broken";
    case Refusal::not_admitted: return "not admitted";
    case Refusal::timeout: return "timeout";
    case Refusal::cancelled: return "interrupted by a signal";
    case Refusal::user_cap: return "user cap";
    case Refusal::no_daemon: return "no daemon";
    case Refusal::job_cancelled: return "job cancelled";
  }
  return "?";
}

Broker& broker() {
  Broker* b = g_broker.load(std::memory_order_acquire);
  return b ? *b : g_local_broker.value;
}

void set_broker(Broker* b) { g_broker.store(b, std::memory_order_release); }

int LocalBroker::attach_device(const DeviceInfo& d, Refusal* why) {
  *why = Refusal::none;
  int slot = next_slot_.load(std::memory_order_relaxed);
  if (slot >= kMaxDevices) return -1;
  next_slot_.store(slot + 1, std::memory_order_relaxed);  // callers are serialised by Devices
  uint64_t limit = limit_for_ordinal(options(), d.ordinal);
  pages::ControlSlot& c = control().slots[slot];
  std::memcpy(c.uuid, d.uuid, sizeof c.uuid);
  c.limit.store(limit, std::memory_order_relaxed);
  c.grant.store(limit, std::memory_order_relaxed);
  c.reservation.store(0, std::memory_order_relaxed);
  local_limit(slot).store(kNoLimit, std::memory_order_relaxed);  // the limit is on the control area
  surplus_floor(slot).store(0, std::memory_order_relaxed);
  if (limit != kNoLimit) {
    MutexLock g(shared_[slot].mu);
    shared_[slot].wanted = true;
    join_locked(slot);
  }
  c.attached.store(1, std::memory_order_release);
  return slot;
}

void LocalBroker::join_locked(int slot) {
  Shared& sh = shared_[slot];
  pages::ControlSlot& c = control().slots[slot];
  const char* why = "";
  const uint64_t limit = c.limit.load(std::memory_order_relaxed);
  if (sh.share.join(options().job, c.uuid, limit, &why)) {
    set_share_locked(slot, 0);  // nothing held yet: the first charge asks for a share
    if (uint64_t first = sh.share.job_limit(); first != limit) {
      char a[32], b[32];
      format_size(first, a, sizeof a);
      format_size(limit, b, sizeof b);
      logf(LogLevel::warn, "job %s: its first process's limit on device slot %d is %s, this process's is %s: each "
           "process holds the job's total to its own limit", options().job, slot, a, b);
    }
    return;
  }
  sh.failed = true;
  c.grant.store(c.limit.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  logf(LogLevel::warn, "the limit on device slot %d cannot be shared by the processes of job %s (%s): it is per "
       "process", slot, options().job, why);
}

void LocalBroker::set_share_locked(int slot, uint64_t share) {
  const uint64_t h = JobShare::headroom(control().slots[slot].limit.load(std::memory_order_relaxed));
  control().slots[slot].grant.store(share, std::memory_order_seq_cst);
  surplus_floor(slot).store(share > 2 * h ? share - 2 * h : 0, std::memory_order_relaxed);
}

uint64_t LocalBroker::unattached_limit(int ordinal) { return limit_for_ordinal(options(), ordinal); }

Refusal LocalBroker::grow(int slot, uint64_t wanted) {
  if (wanted > limit_of(slot)) return Refusal::own_limit;
  Shared& sh = shared_[slot];
  MutexLock g(sh.mu);
  if (!sh.wanted || sh.failed) return Refusal::own_limit;  // grant = limit: past it is past the limit
  if (!sh.share.joined()) join_locked(slot);               // a fork child joins on its first charge
  if (sh.failed) return Refusal::none;                     // grant = limit now: try again
  uint64_t others = 0;
  uint64_t share = sh.share.grow(wanted, &others);
  if (share == 0) {
    sh.refused_others = others;
    return Refusal::own_limit;
  }
  set_share_locked(slot, share);
  return Refusal::none;
}

void LocalBroker::surplus(int slot, uint64_t in_use) {
  Shared& sh = shared_[slot];
  if (!sh.mu.try_lock()) return;  // a grow is under way: it sets the share anyway
  if (sh.share.joined()) {
    const uint64_t h = JobShare::headroom(control().slots[slot].limit.load(std::memory_order_relaxed));
    uint64_t keep = in_use + h;
    if (keep < sh.share.share()) {
      // Lower the grant first, then look at in-use again (the fast-path rule of pages.h): a charge
      // that raced past the new grant is either seen here or sees the grant and asks again.
      control().slots[slot].grant.store(keep, std::memory_order_seq_cst);
      uint64_t now = stats().slots[slot].in_use.load(std::memory_order_seq_cst);
      if (now > keep) keep = now;
      sh.share.shrink(keep);
      set_share_locked(slot, sh.share.share());
    }
  }
  sh.mu.unlock();
}

bool LocalBroker::driver_oom(int slot, uint64_t request, uint64_t, int attempt) {
  if (attempt == 0)
    logf(LogLevel::info, "the driver is out of memory on device slot %d (request %llu bytes, within the limit)",
         slot, (unsigned long long)request);
  return false;
}

void LocalBroker::describe_refusal(int slot, Refusal why, char* out, size_t cap) {
  if (!cap) return;
  out[0] = '\0';
  if (slot < 0 || why != Refusal::own_limit) return;
  Shared& sh = shared_[slot];
  MutexLock g(sh.mu);
  if (!sh.share.joined() || sh.refused_others == 0) return;
  char others[32];
  format_size(sh.refused_others, others, sizeof others);
  std::snprintf(out, cap, "; the limit is job-wide: the job's other processes hold %s of it", others);
  sh.refused_others = 0;
}

GateTicket LocalBroker::gate_wait(uint32_t, CUstream, bool) { return {}; }

uint64_t LocalBroker::job_others(int slot) { return shared_[slot].share.others(); }  // lock-free

void LocalBroker::at_exit() {
  for (Shared& sh : shared_) {
    MutexLock g(sh.mu);
    sh.share.leave();
  }
}

// Slots and limits describe the same job in the child, but the parent's shares are the parent's:
// the child holds nothing until its first charge joins the job as a process of its own.
void LocalBroker::after_fork_child() {
  for (int slot = 0; slot < kMaxDevices; ++slot) {
    Shared& sh = shared_[slot];
    sh.mu.reinit_in_child();
    if (!sh.wanted || sh.failed) continue;
    sh.share.forget();
    set_share_locked(slot, 0);
  }
}

}  // namespace coloc::interpose
