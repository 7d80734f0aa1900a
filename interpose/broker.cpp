// interpose/broker.cpp — the control and stats pages, the broker pointer, and LocalBroker.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "broker.h"

#include <cstring>

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
  c.attached.store(1, std::memory_order_release);
  return slot;
}

uint64_t LocalBroker::unattached_limit(int ordinal) { return limit_for_ordinal(options(), ordinal); }

// The grant equals the limit, so wanting more than the grant is wanting more than the limit.
Refusal LocalBroker::grow(int, uint64_t) { return Refusal::own_limit; }

void LocalBroker::surplus(int, uint64_t) {}

bool LocalBroker::driver_oom(int slot, uint64_t request, uint64_t, int attempt) {
  if (attempt == 0)
    logf(LogLevel::info, "the driver is out of memory on device slot %d (request %llu bytes, within the limit)",
         slot, (unsigned long long)request);
  return false;
}

void LocalBroker::gate_wait(uint32_t) {}

// Slots and limits describe the same job in the child: nothing to do.
void LocalBroker::after_fork_child() {}

}  // namespace coloc::interpose
