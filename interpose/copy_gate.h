// interpose/copy_gate.h — the gate of the stream-ordered copies and memsets (policy `copy` in
// hooks.def: cuMemcpyAsync, cuMemcpy{HtoD,DtoH,DtoD}Async, cuMemcpyPeerAsync, cuMemcpy2D/3DAsync,
// cuMemcpy3DPeerAsync, cuMemcpyBatchAsync, cuMemcpy3DBatchAsync, cuMemsetD8/16/32Async,
// cuMemsetD2D8/16/32Async, every ABI and _ptsz).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Fast path: one relaxed load of the gate summary on the control page (gate_closed, gate.h). Only
// when it is not RUN does the copy see the broker, which may hold it while its stream's device
// belongs to another job (Broker::copy_wait). Copies are not counted as launches.
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>

#include "broker.h"
#include "gate.h"
#include "hook_table.h"

namespace coloc::interpose {

namespace copy_detail {
constexpr bool ends_with(const char* s, const char* suffix) {
  size_t n = 0, m = 0;
  while (s[n]) ++n;
  while (suffix[m]) ++m;
  if (m > n) return false;
  for (size_t i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}
}  // namespace copy_detail

/// The stream argument of copy entry point `id` called with `args`. Every copy and memset entry
/// point of the driver takes its stream last (checked at compile time).
template <Fn id, class... A>
inline CUstream copy_stream(const A&... args) {
  static_assert(sizeof...(A) > 0);
  using Last = std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>;
  static_assert(std::is_same_v<std::remove_cv_t<Last>, CUstream>, "a copy entry point takes its stream last");
  return std::get<sizeof...(A) - 1>(std::forward_as_tuple(args...));
}

/// Whether copy entry point `id` is a per-thread-default-stream (_ptsz) variant.
template <Fn id>
inline constexpr bool per_thread_copy = copy_detail::ends_with(kFnName[index(id)], "_ptsz");

/// Passes the copy gate for a copy or memset of entry point `id` with its arguments `args`: nothing
/// but one relaxed load while the gate summary is RUN; otherwise Broker::copy_wait decides (its
/// stream picks the device and says whether it is capturing). The ticket says whether to track it
/// after the driver call (copy_after): a holder's copies are device work in flight like kernels.
template <Fn id, class... A>
inline GateTicket copy_pass(const A&... args) {
  if (gate_closed() != uint32_t(pages::GateState::kRun)) [[unlikely]]
    return broker().copy_wait(copy_stream<id>(args...), per_thread_copy<id>);
  return {};
}

/// After the driver call of a copy that passed with ticket `t`: tracks it when the ticket says so.
template <Fn id, class... A>
inline void copy_after(const GateTicket& t, CUresult rc, const A&... args) {
  if (t.track) [[unlikely]]
    broker().launched(t, copy_stream<id>(args...), per_thread_copy<id>, rc);
}

}  // namespace coloc::interpose
