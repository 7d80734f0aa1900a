// interpose/hook_table.h — everything generated from hooks.def: the entry-point ids, their names,
// their policies and types, the table of real driver functions, and the name -> hook index.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "cuda_api.h"

namespace coloc::interpose {

/// One id per entry point of hooks.def: the hooks first (0 .. kHookCount-1), then the driver calls
/// coloc makes itself (kHookCount .. kFnCount-1).
enum class Fn : uint16_t {
#define COLOC_HOOK(policy, name, params, args) name,
#include "hooks.def"
#define COLOC_DRIVER(name) name,
#include "hooks.def"
};

/// Number of exported hooks.
inline constexpr unsigned kHookCount = 0
#define COLOC_HOOK(policy, name, params, args) +1
#include "hooks.def"
    ;
/// Number of entry points in the real-function table (hooks + driver calls).
inline constexpr unsigned kFnCount = kHookCount
#define COLOC_DRIVER(name) +1
#include "hooks.def"
    ;

/// Exact export names, indexed by Fn.
inline constexpr const char* kFnName[kFnCount] = {
#define COLOC_HOOK(policy, name, params, args) #name,
#include "hooks.def"
#define COLOC_DRIVER(name) #name,
#include "hooks.def"
};

/// What a hook does (see hooks.def).
enum class Policy : uint8_t { launch, alloc, release, pool, sync, context, query, resolve, init, graph, graph_launch, copy };

/// Policy of each hook, indexed by Fn (hooks only).
inline constexpr Policy kPolicy[kHookCount] = {
#define COLOC_HOOK(policy, name, params, args) Policy::policy,
#include "hooks.def"
};

inline constexpr unsigned index(Fn f) { return static_cast<unsigned>(f); }
inline constexpr bool is_hook(Fn f) { return index(f) < kHookCount; }

/// The function-pointer type of each entry point, as cuda.h declares it.
template <Fn id> struct FnType;
#define COLOC_HOOK(policy, name, params, args) \
  template <> struct FnType<Fn::name> { using type = decltype(&::name); };
#include "hooks.def"
#define COLOC_DRIVER(name) \
  template <> struct FnType<Fn::name> { using type = decltype(&::name); };
#include "hooks.def"

/// Real driver functions, indexed by Fn; null until the driver is loaded (driver.cpp) and for
/// entry points the driver does not export. Written only while loading the driver (every writer
/// stores the same values), then read with acquire loads.
extern std::atomic<void*> g_real[kFnCount];

/// The real driver function for `id`, or null.
template <Fn id> inline typename FnType<id>::type real() {
  return reinterpret_cast<typename FnType<id>::type>(g_real[index(id)].load(std::memory_order_acquire));
}

/// Addresses of our own exported hooks, indexed by Fn (defined in hooks.cpp).
extern void* const g_hook_addr[kHookCount];

namespace hook_table_detail {
struct NameIndex {
  std::string_view name;
  uint16_t fn;
};
inline constexpr std::array<NameIndex, kHookCount> sorted_names() {
  std::array<NameIndex, kHookCount> a{};
  for (unsigned i = 0; i < kHookCount; ++i) a[i] = {kFnName[i], uint16_t(i)};
  std::sort(a.begin(), a.end(), [](const NameIndex& x, const NameIndex& y) { return x.name < y.name; });
  return a;
}
}  // namespace hook_table_detail

/// Hooks sorted by name, built at compile time.
inline constexpr auto kHooksByName = hook_table_detail::sorted_names();

/// The hook exported under exactly `name`, or -1. Allocation-free, no library calls (the dlsym
/// filter uses it). O(log kHookCount).
inline int find_hook(const char* name) {
  if (!name) return -1;
  unsigned lo = 0, hi = kHookCount;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    std::string_view m = kHooksByName[mid].name;
    // Compare `name` (NUL-terminated) with m without strlen: stop at the first difference.
    int c = 0;
    size_t i = 0;
    for (;; ++i) {
      unsigned char a = static_cast<unsigned char>(name[i]);
      if (i == m.size()) { c = a == 0 ? 0 : 1; break; }
      unsigned char b = static_cast<unsigned char>(m[i]);
      if (a != b) { c = a < b ? -1 : 1; break; }
    }
    if (c == 0) return kHooksByName[mid].fn;
    if (c < 0) hi = mid; else lo = mid + 1;
  }
  return -1;
}

}  // namespace coloc::interpose
