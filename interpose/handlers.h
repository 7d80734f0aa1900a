// interpose/handlers.h — declarations of the hand-written hook handlers, generated from hooks.def:
// for each hook, coloc::<policy>::<name>(params). hooks.cpp calls them; memory_hooks.cpp,
// context_hooks.cpp and resolve.cpp define them. (The `launch` policy is generic and has no
// handlers; its declarations are never defined or used.)
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#pragma once

#include "cuda_api.h"

namespace coloc::interpose {
#define COLOC_HOOK(policy, name, params, args) \
  namespace policy {                           \
  CUresult name params;                        \
  }
#include "hooks.def"
}  // namespace coloc::interpose
