#include "capture.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "context.h"

namespace simgpu {

namespace {

std::mutex g_mu;
std::vector<Stream*>* g_active;  // streams with a capture in progress (or invalidated), under g_mu
constinit std::atomic<uint32_t> g_count{0};
constinit std::atomic<uint64_t> g_next_thread{1};

std::vector<Stream*>& active() {
  if (!g_active) g_active = new std::vector<Stream*>();  // never destroyed: executors outlive main
  return *g_active;
}

bool blocking(const Stream& s) { return !(s.flags & CU_STREAM_NON_BLOCKING); }

}  // namespace

unsigned& thread_capture_mode() {
  static thread_local unsigned mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  return mode;
}

uint64_t thread_token() {
  static thread_local uint64_t token = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return token;
}

void capture_started(Stream& s) {
  std::lock_guard<std::mutex> lk(g_mu);
  active().push_back(&s);
  g_count.fetch_add(1, std::memory_order_relaxed);
}

void capture_ended(Stream& s) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto& v = active();
  auto it = std::find(v.begin(), v.end(), &s);
  if (it == v.end()) return;
  v.erase(it);
  g_count.fetch_sub(1, std::memory_order_relaxed);
}

void forget_captures(const Context& ctx) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto& v = active();
  const auto n = std::erase_if(v, [&](Stream* s) { return s->ctx == &ctx; });
  g_count.fetch_sub(uint32_t(n), std::memory_order_relaxed);
}

bool any_capture() { return g_count.load(std::memory_order_relaxed) != 0; }

CUresult check_unsafe_call() {
  if (!any_capture()) return CUDA_SUCCESS;
  const unsigned mode = thread_capture_mode();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const uint64_t me = thread_token();
  bool forbidden = false;
  std::lock_guard<std::mutex> lk(g_mu);
  for (Stream* s : active()) {
    const bool own = s->capture_thread == me && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool others_global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->capture_thread != me &&
                               s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || others_global) {
      s->capture_invalid.store(true, std::memory_order_relaxed);
      forbidden = true;
    }
  }
  return forbidden ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

bool implicit_capture(const Context& ctx, bool invalidate) {
  if (!any_capture()) return false;
  bool found = false;
  std::lock_guard<std::mutex> lk(g_mu);
  for (Stream* s : active()) {
    if (s->ctx != &ctx || !blocking(*s)) continue;
    if (invalidate) s->capture_invalid.store(true, std::memory_order_relaxed);
    found = true;
  }
  return found;
}

}  // namespace simgpu
