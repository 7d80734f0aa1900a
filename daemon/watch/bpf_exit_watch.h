// daemon/watch/bpf_exit_watch.h — user-space side of exit_watch.bpf.c: loads the program (a
// generated libbpf skeleton), keeps its map of watched pids, and drains its ring buffer.
// Probed at start: any failure (no BPF privileges, no kernel BTF, an old kernel) is an Error the
// caller logs before falling back to pidfds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "util/result.h"

struct exit_watch;
struct ring_buffer;

namespace coloc::watch {

class BpfExitWatch {
 public:
  /// Called for each watched process whose last thread exited: pid, start time (ns since boot,
  /// CLOCK_BOOTTIME; 0 when the kernel has no such field) and wait(2)-style status.
  using OnExit = std::function<void(pid_t pid, uint64_t start_ns, int wait_status)>;

  /// Opens, loads and attaches the program. Errors name the step that failed.
  static Result<std::unique_ptr<BpfExitWatch>> open(OnExit on_exit);
  ~BpfExitWatch();
  BpfExitWatch(const BpfExitWatch&) = delete;
  BpfExitWatch& operator=(const BpfExitWatch&) = delete;

  /// The ring buffer's epoll-able descriptor: readable when events wait; then call drain().
  int fd() const;
  /// Handles every pending event.
  void drain();
  Result<void> watch(pid_t pid);
  void unwatch(pid_t pid);

 private:
  BpfExitWatch() = default;
  static int on_event(void* ctx, void* data, size_t size);
  exit_watch* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  OnExit on_exit_;
};

}  // namespace coloc::watch
