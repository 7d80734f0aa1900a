// interpose/preflight.cpp — see preflight.h.
#include "preflight.h"

#include <atomic>

#include "broker.h"
#include "coloc/pages.h"

namespace coloc::interpose::preflight {

namespace {
constinit std::atomic<uint32_t> g_bits{0};

void publish(uint32_t bits) {
  // An older daemon's page has no such word (its bytes are reserved); the private area before
  // registration has layout 0.
  pages::StatsPage& s = stats();
  if (s.layout_version >= pages::kPreflightLayout) s.not_suspendable.fetch_or(bits, std::memory_order_relaxed);
}
}  // namespace

void note(uint32_t bits) noexcept {
  if ((g_bits.load(std::memory_order_relaxed) & bits) == bits) return;  // the common case: nothing new
  g_bits.fetch_or(bits, std::memory_order_relaxed);
  publish(bits);
}

uint32_t bits() noexcept { return g_bits.load(std::memory_order_relaxed); }

void republish() noexcept {
  if (uint32_t b = bits()) publish(b);
}

}  // namespace coloc::interpose::preflight
