// interpose/devices.cpp — see devices.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "devices.h"

#include <cstdio>
#include <cstring>

#include "driver.h"
#include "log.h"
#include "no_destroy.h"

namespace coloc::interpose {

namespace {

constinit NoDestroy<Devices> g_devices;

// This thread's last context lookup.
struct CtxCache {
  CUcontext ctx;
  int slot;
  uint32_t epoch;  // 0 never matches: Devices::epoch_ starts at 1
};
__thread CtxCache tl_ctx __attribute__((tls_model("initial-exec"))) = {nullptr, -1, 0};

constinit std::atomic<bool> g_warned_full{false};

}  // namespace

Devices& devices() { return g_devices.value; }

void format_uuid(const unsigned char u[16], char* buf) {
  std::snprintf(buf, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

int Devices::slot_of_uuid_locked(const unsigned char uuid[16]) const {
  for (int i = 0; i < kMaxDevices; ++i)
    if (used_[i].load(std::memory_order_relaxed) && std::memcmp(info_[i].uuid, uuid, 16) == 0) return i;
  return -1;
}

void Devices::cache_ordinal(CUdevice ordinal, int slot) {
  if (ordinal >= 0 && ordinal < kMaxOrdinals) ordinal_slot_[ordinal].store(slot + 1, std::memory_order_release);
}

int Devices::find_slot(CUdevice ordinal) {
  if (ordinal >= 0 && ordinal < kMaxOrdinals) {
    int s = ordinal_slot_[ordinal].load(std::memory_order_acquire);
    if (s) return s - 1;
  }
  CUuuid uuid{};
  CUresult r = call<Fn::cuDeviceGetUuid_v2>(&uuid, ordinal);
  if (r == CUDA_ERROR_NOT_SUPPORTED) r = call<Fn::cuDeviceGetUuid>(&uuid, ordinal);
  if (r != CUDA_SUCCESS) return -1;
  int slot;
  {
    MutexLock g(slots_mutex_);
    slot = slot_of_uuid_locked(reinterpret_cast<const unsigned char*>(uuid.bytes));
  }
  if (slot >= 0) cache_ordinal(ordinal, slot);
  return slot;
}

int Devices::attach(CUdevice ordinal, Refusal* why) {
  *why = Refusal::none;
  if (int s = find_slot(ordinal); s >= 0) return s;
  CUuuid uuid{};
  CUresult r = call<Fn::cuDeviceGetUuid_v2>(&uuid, ordinal);
  if (r == CUDA_ERROR_NOT_SUPPORTED) r = call<Fn::cuDeviceGetUuid>(&uuid, ordinal);
  if (r != CUDA_SUCCESS) return -1;
  size_t total = 0;
  if (call<Fn::cuDeviceTotalMem_v2>(&total, ordinal) != CUDA_SUCCESS) total = 0;

  // One attach at a time: admission may wait, and the broker must see each device once. The slots
  // lock is not held meanwhile (fork and lookups go on).
  MutexLock a(attach_mutex_);
  {
    MutexLock g(slots_mutex_);
    if (int s = slot_of_uuid_locked(reinterpret_cast<const unsigned char*>(uuid.bytes)); s >= 0) {  // attached by another thread meanwhile
      cache_ordinal(ordinal, s);
      return s;
    }
  }
  DeviceInfo d;
  d.ordinal = ordinal;
  std::memcpy(d.uuid, uuid.bytes, 16);
  d.total_bytes = total;
  int slot = broker().attach_device(d, why);  // sets the limit before anyone can charge the slot
  if (slot < 0 && *why != Refusal::none) return -1;
  {
    MutexLock g(slots_mutex_);
    if (slot < 0 || slot >= kMaxDevices || used_[slot].load(std::memory_order_relaxed)) {
      if (!g_warned_full.exchange(true, std::memory_order_relaxed))
        logf(LogLevel::error, "no device slot left (at most %d devices): memory on device %d is not accounted",
             kMaxDevices, ordinal);
      return -1;
    }
    d.slot = slot;
    info_[slot] = d;
    used_[slot].store(true, std::memory_order_release);
  }
  cache_ordinal(ordinal, slot);
  if (log_enabled(LogLevel::debug)) {
    char id[41];
    format_uuid(d.uuid, id);
    uint64_t limit = limit_of(slot);
    if (limit == kNoLimit)
      logf(LogLevel::debug, "device %d is %s (slot %d, %llu bytes, no limit)", ordinal, id, slot,
           (unsigned long long)total);
    else
      logf(LogLevel::debug, "device %d is %s (slot %d, %llu bytes, limit %llu bytes)", ordinal, id, slot,
           (unsigned long long)total, (unsigned long long)limit);
  }
  return slot;
}

int Devices::lookup_context(CUcontext ctx) {
  MutexLock g(table_mutex_);
  for (const CtxEntry& e : table_)
    if (e.ctx == ctx) return e.slot;
  return -1;
}

void Devices::remember_context(CUcontext ctx, int slot) {
  MutexLock g(table_mutex_);
  CtxEntry* free_entry = nullptr;
  for (CtxEntry& e : table_) {
    if (e.ctx == ctx) {
      e.slot = slot;
      return;
    }
    if (!e.ctx && !free_entry) free_entry = &e;
  }
  if (free_entry) *free_entry = CtxEntry{ctx, slot};
}

void Devices::forget_context(CUcontext ctx) {
  {
    MutexLock g(table_mutex_);
    for (CtxEntry& e : table_)
      if (e.ctx == ctx) e = CtxEntry{};
  }
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

// A current context on a device the process has not attached (made before our hooks could see
// it): attach it now, so its memory is accounted from here on.
int Devices::describe_current_device() {
  CUdevice dev = 0;
  if (call<Fn::cuCtxGetDevice>(&dev) != CUDA_SUCCESS) return -1;
  Refusal why;
  return attach(dev, &why);
}

Where Devices::current() {
  CUcontext ctx = nullptr;
  if (call<Fn::cuCtxGetCurrent>(&ctx) != CUDA_SUCCESS || !ctx) return Where{};
  uint32_t epoch = epoch_.load(std::memory_order_acquire);
  if (tl_ctx.ctx == ctx && tl_ctx.epoch == epoch) return Where{tl_ctx.slot, ctx};
  int slot = lookup_context(ctx);
  if (slot < 0) {
    slot = describe_current_device();
    if (slot >= 0) remember_context(ctx, slot);
  }
  if (slot >= 0) tl_ctx = CtxCache{ctx, slot, epoch};
  return Where{slot, ctx};
}

int Devices::known_current_slot() {
  CUcontext ctx = nullptr;
  if (call<Fn::cuCtxGetCurrent>(&ctx) != CUDA_SUCCESS || !ctx) return -1;
  return known_slot_of(ctx);
}

int Devices::known_slot_of(CUcontext ctx) {
  if (!ctx) return -1;
  const uint32_t epoch = epoch_.load(std::memory_order_acquire);
  if (tl_ctx.ctx == ctx && tl_ctx.epoch == epoch) return tl_ctx.slot;
  // Cached as current() does (the epoch read before the lookup: a context forgotten meanwhile
  // bumps it, so the entry is never trusted after that), so a launch at a gate finds its slot
  // without the table's mutex from the second on.
  const int slot = lookup_context(ctx);
  if (slot >= 0) tl_ctx = CtxCache{ctx, slot, epoch};
  return slot;
}

int Devices::slot_of_context(CUcontext ctx) {
  if (!ctx) return -1;
  uint32_t epoch = epoch_.load(std::memory_order_acquire);
  if (tl_ctx.ctx == ctx && tl_ctx.epoch == epoch) return tl_ctx.slot;
  int slot = lookup_context(ctx);
  if (slot >= 0) return slot;
  if (call<Fn::cuCtxPushCurrent_v2>(ctx) != CUDA_SUCCESS) return -1;
  slot = describe_current_device();
  CUcontext popped = nullptr;
  call<Fn::cuCtxPopCurrent_v2>(&popped);
  if (slot >= 0) remember_context(ctx, slot);
  return slot;
}

Where Devices::of_stream(CUstream stream) {
  // The NULL stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD run on the current context.
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return current();
  CUcontext ctx = nullptr;
  if (call<Fn::cuStreamGetCtx>(stream, &ctx) != CUDA_SUCCESS || !ctx) return Where{};
  return Where{slot_of_context(ctx), ctx};
}

void Devices::reset_in_child() {
  attach_mutex_.reinit_in_child();
  for (int i = 0; i < kMaxDevices; ++i) {
    context_mutex_[i].reinit_in_child();
    context_books_[i] = ContextBooks{};
  }
  table_mutex_.reinit_in_child();
  for (CtxEntry& e : table_) e = CtxEntry{};
  epoch_.fetch_add(1, std::memory_order_relaxed);
  slots_mutex_.unlock();
}

}  // namespace coloc::interpose
