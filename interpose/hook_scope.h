// interpose/hook_scope.h — what every non-launch hook does on entry and exit.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// On entry: count the call on this thread, bring the runtime up if needed, and note the nesting
// depth. A hook entered while this thread is already inside one is a call the driver made through
// its own exported symbols (a driver whose internal calls bind to our exports): it passes straight
// through, so nothing is charged twice and nothing recurses.
#pragma once

#include "gate.h"
#include "runtime.h"

namespace coloc::interpose {

extern __thread int tl_hook_depth __attribute__((tls_model("initial-exec")));

class HookScope {
 public:
  explicit HookScope(Fn id) : nested_(tl_hook_depth++ > 0) {
    count_call(id);
    if (!nested_ && !runtime::ready()) [[unlikely]] runtime::ensure(kFnName[index(id)]);
  }
  ~HookScope() { --tl_hook_depth; }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  /// True when this hook was entered from inside another hook on this thread.
  bool nested() const { return nested_; }

 private:
  bool nested_;
};

}  // namespace coloc::interpose
