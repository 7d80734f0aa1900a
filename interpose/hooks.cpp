// interpose/hooks.cpp — the exported hooks, generated from hooks.def. All interposition lives in
// this one translation unit; each hook forwards to ordinary functions.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// cuda_api.h makes cuda.h declare every real export name; each definition below must match that
// declaration exactly (extern "C" functions cannot be overloaded), so the compiler checks every
// signature in hooks.def. Policies:
//   launch   count on this thread and, in state RUN, tail-call the driver (launch_fast); the rest
//            out of line (launch_slow): the thread's first count, every 4096th (which flushes the
//            launch counts to the stats page), and the launch gate;
//   graph_launch  count as a launch, then coloc::interpose::graph_launch::<name> (charge, gate, call);
//   copy     copy_pass (the copy gate, copy_gate.h), then call the driver;
//   others   HookScope (count, lazy init, nesting), then coloc::interpose::<policy>::<name> (handlers.h).
#include "copy_gate.h"
#include "driver.h"
#include "gate.h"
#include "handlers.h"
#include "hook_scope.h"

#define COLOC_EXPORT __attribute__((visibility("default")))

namespace ci = coloc::interpose;

// The parameter names of a manifest entry without their parentheses: `COLOC_UNPACK args`.
#define COLOC_UNPACK(...) __VA_ARGS__

#define COLOC_DEFINE_launch(name, params, args)         \
  extern "C" COLOC_EXPORT CUresult CUDAAPI name params { \
    if (auto fn = ci::launch_fast<ci::Fn::name>()) [[likely]] \
      return fn args;                                    \
    return ci::launch_slow<ci::Fn::name> args;           \
  }

// graph_launch: counted as a launch, then graph_launch::name charges graph memory, passes the
// gate and calls the driver (graph_hooks.cpp).
#define COLOC_DEFINE_graph_launch(name, params, args)   \
  extern "C" COLOC_EXPORT CUresult CUDAAPI name params { \
    ci::count_launch(ci::Fn::name);                      \
    return ci::graph_launch::name args;                  \
  }

// copy: a stream-ordered copy or memset passes the copy gate, then calls the driver.
#define COLOC_DEFINE_copy(name, params, args)            \
  extern "C" COLOC_EXPORT CUresult CUDAAPI name params { \
    const ci::GateTicket t = ci::copy_pass<ci::Fn::name> args; \
    const CUresult rc = ci::call<ci::Fn::name> args;     \
    ci::copy_after<ci::Fn::name>(t, rc, COLOC_UNPACK args); \
    return rc;                                           \
  }

#define COLOC_DEFINE_HANDLED(policy, name, params, args)   \
  extern "C" COLOC_EXPORT CUresult CUDAAPI name params {    \
    ci::HookScope scope(ci::Fn::name);                      \
    if (scope.nested()) return ci::call<ci::Fn::name> args; \
    return ci::policy::name args;                           \
  }
#define COLOC_DEFINE_alloc(name, params, args) COLOC_DEFINE_HANDLED(alloc, name, params, args)
#define COLOC_DEFINE_release(name, params, args) COLOC_DEFINE_HANDLED(release, name, params, args)
#define COLOC_DEFINE_pool(name, params, args) COLOC_DEFINE_HANDLED(pool, name, params, args)
#define COLOC_DEFINE_sync(name, params, args) COLOC_DEFINE_HANDLED(sync, name, params, args)
#define COLOC_DEFINE_context(name, params, args) COLOC_DEFINE_HANDLED(context, name, params, args)
#define COLOC_DEFINE_query(name, params, args) COLOC_DEFINE_HANDLED(query, name, params, args)
#define COLOC_DEFINE_resolve(name, params, args) COLOC_DEFINE_HANDLED(resolve, name, params, args)
#define COLOC_DEFINE_init(name, params, args) COLOC_DEFINE_HANDLED(init, name, params, args)
#define COLOC_DEFINE_graph(name, params, args) COLOC_DEFINE_HANDLED(graph, name, params, args)

#define COLOC_HOOK(policy, name, params, args) COLOC_DEFINE_##policy(name, params, args)
#include "hooks.def"

namespace coloc::interpose {

__thread int tl_hook_depth = 0;

void* const g_hook_addr[kHookCount] = {
#define COLOC_HOOK(policy, name, params, args) reinterpret_cast<void*>(&::name),
#include "hooks.def"
};

}  // namespace coloc::interpose
