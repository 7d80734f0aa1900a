// The target's side of the checkpoint API: the restore thread and what it does (checkpoint.h).
#include "checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "driver.h"
#include "entry.h"
#include "os.h"

namespace simgpu {

void gate_wait() {
  while (g_gate_closed.load(std::memory_order_seq_cst)) futex_wait(&g_gate_closed, 1, 100'000'000);
}

namespace checkpoint {

namespace {

constexpr uint64_t kPage = 4096;

// A run of committed pages saved at `offset` in the host buffer.
struct Run {
  uintptr_t addr;
  uint64_t len;
  uint64_t offset;
};

// Everything below is touched only by the restore thread.
uint32_t g_state = CU_PROCESS_STATE_RUNNING;
bool g_poisoned = false;          // a restore ran out of memory: later restores fail (issue #44)
std::vector<Run> g_runs;          // what the checkpoint saved
void* g_buffer = nullptr;         // ... and where
uint64_t g_buffer_bytes = 0;
std::vector<uint64_t> g_charged;  // bytes released per physical device

uint32_t gate_inside() {
  uint32_t sum = 0;
  for (const GateStripe& s : g_gate) sum += s.inside.load(std::memory_order_seq_cst);
  return sum;
}

void open_gate() {
  g_gate_closed.store(0, std::memory_order_seq_cst);
  futex_wake_all(&g_gate_closed);
}

bool contexts_idle() {
  bool idle = true;
  g_contexts.for_each([&](Context* c) { idle = idle && c->idle(); });
  return idle;
}

// The device memory of every device, as page-aligned, merged ranges.
std::vector<std::pair<uintptr_t, uint64_t>> device_ranges() {
  std::vector<std::pair<uintptr_t, uint64_t>> all;
  for (const auto& dev : Driver::get().devices)
    for (auto [p, n] : dev->memory.live_ranges()) {
      uintptr_t start = p & ~(kPage - 1), end = (p + n + kPage - 1) & ~(kPage - 1);
      all.emplace_back(start, end - start);
    }
  std::sort(all.begin(), all.end());
  std::vector<std::pair<uintptr_t, uint64_t>> merged;
  for (auto [p, n] : all) {
    if (!merged.empty() && p <= merged.back().first + merged.back().second) {
      uint64_t end = std::max(merged.back().first + merged.back().second, p + n);
      merged.back().second = end - merged.back().first;
    } else {
      merged.emplace_back(p, n);
    }
  }
  return merged;
}

// Appends to *runs the committed pages of [p, p+n) (page-aligned): present or swapped in
// /proc/self/pagemap (bits 63 and 62). Without pagemap every page counts.
void committed_runs(int pagemap, uintptr_t p, uint64_t n, std::vector<Run>* runs) {
  auto add = [&](uintptr_t a, uint64_t len) {
    if (!runs->empty() && runs->back().addr + runs->back().len == a) {
      runs->back().len += len;
    } else {
      runs->push_back({a, len, 0});
    }
  };
  if (pagemap < 0) {
    add(p, n);
    return;
  }
  constexpr size_t kBatch = 8192;
  std::vector<uint64_t> entries(kBatch);
  for (uint64_t page = 0, pages = n / kPage; page < pages;) {
    size_t count = size_t(std::min<uint64_t>(kBatch, pages - page));
    off_t at = off_t((p / kPage + page) * sizeof(uint64_t));
    ssize_t got = pread(pagemap, entries.data(), count * sizeof(uint64_t), at);
    if (got != ssize_t(count * sizeof(uint64_t))) {  // unreadable: keep the rest whole
      add(p + page * kPage, (pages - page) * kPage);
      return;
    }
    for (size_t i = 0; i < count; ++i)
      if (entries[i] & (3ull << 62)) add(p + (page + i) * kPage, kPage);
    page += count;
  }
}

void discard(const std::vector<std::pair<uintptr_t, uint64_t>>& ranges) {
  for (auto [p, n] : ranges) madvise(reinterpret_cast<void*>(p), n, MADV_DONTNEED);
}

void drop_saved() {
  if (g_buffer) munmap(g_buffer, g_buffer_bytes);
  g_buffer = nullptr;
  g_buffer_bytes = 0;
  g_runs.clear();
}

// An uncorrectable failure: the device memory is gone, and the process's calls fail from now on.
CUresult fail_process() {
  discard(device_ranges());
  drop_saved();
  if (g_state != CU_PROCESS_STATE_CHECKPOINTED) Driver::get().shared->release_devices();
  g_state = CU_PROCESS_STATE_FAILED;
  g_phase.store(Phase::lost, std::memory_order_release);
  return CUDA_ERROR_UNKNOWN;
}

CUresult do_lock(uint64_t deadline_ns) {
  if (g_state != CU_PROCESS_STATE_RUNNING) return CUDA_ERROR_ILLEGAL_STATE;
  g_gate_closed.store(1, std::memory_order_seq_cst);
  while (gate_inside() != 0 || !contexts_idle()) {
    if (now_ns() >= deadline_ns) {
      open_gate();
      return CUDA_ERROR_NOT_READY;
    }
    sleep_until_ns(now_ns() + 1'000'000);
  }
  g_state = CU_PROCESS_STATE_LOCKED;
  return CUDA_SUCCESS;
}

CUresult do_checkpoint() {
  if (g_state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
  Driver& drv = Driver::get();
  if (!drv.managed->live_ranges().empty()) return CUDA_ERROR_NOT_SUPPORTED;
  auto ranges = device_ranges();
  int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  std::vector<Run> runs;
  for (auto [p, n] : ranges) committed_runs(pagemap, p, n, &runs);
  if (pagemap >= 0) close(pagemap);
  uint64_t total = 0;
  for (Run& r : runs) {
    r.offset = total;
    total += r.len;
  }
  void* buffer = nullptr;
  if (total) {
    buffer = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;  // host memory: still LOCKED
    madvise(buffer, total, MADV_HUGEPAGE);
  }
  for (const Run& r : runs)
    std::memcpy(static_cast<char*>(buffer) + r.offset, reinterpret_cast<const void*>(r.addr), r.len);
  discard(ranges);
  g_runs = std::move(runs);
  g_buffer = buffer;
  g_buffer_bytes = total;
  g_charged = drv.shared->release_devices();
  g_state = CU_PROCESS_STATE_CHECKPOINTED;
  return CUDA_SUCCESS;
}

CUresult do_restore() {
  if (g_state != CU_PROCESS_STATE_CHECKPOINTED) return CUDA_ERROR_ILLEGAL_STATE;
  if (g_poisoned) return CUDA_ERROR_OPERATING_SYSTEM;
  if (!Driver::get().shared->recharge_devices(g_charged)) {
    g_poisoned = true;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (const Run& r : g_runs) {
    // A run of 2 MiB or more was dense before: let it come back in huge pages where it spans
    // aligned 2 MiB blocks (one fault each instead of 512), then fault it in at once.
    const uintptr_t lo = (r.addr + kLargePage - 1) & ~(kLargePage - 1), hi = (r.addr + r.len) & ~(kLargePage - 1);
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    madvise(reinterpret_cast<void*>(r.addr), r.len, MADV_POPULATE_WRITE);
#endif
    std::memcpy(reinterpret_cast<void*>(r.addr), static_cast<const char*>(g_buffer) + r.offset, r.len);
  }
  drop_saved();
  g_state = CU_PROCESS_STATE_LOCKED;
  return CUDA_SUCCESS;
}

CUresult do_unlock() {
  if (g_state != CU_PROCESS_STATE_LOCKED) return CUDA_ERROR_ILLEGAL_STATE;
  g_state = CU_PROCESS_STATE_RUNNING;
  return CUDA_SUCCESS;
}

void restore_thread() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  Driver& drv = Driver::get();
  drv.shared->set_checkpoint_identity(int32_t(syscall(SYS_gettid)), g_state);
  uint32_t seen = 0;
  for (;;) {
    uint32_t op = 0, arg = 0;
    uint32_t ticket = drv.shared->next_checkpoint_request(seen, &op, &arg);
    if (ticket == seen) return;  // the process is exiting: its slot is gone
    seen = ticket;
    const uint64_t start = now_ns();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    int index = int(op) - int(Op::lock);
    if (index >= 0 && index < kCheckpointOps) {
      const CheckpointFault& fault = drv.config.checkpoint_faults[size_t(index)];
      if (fault.stall_ms) sleep_until_ns(now_ns() + uint64_t(fault.stall_ms) * 1'000'000);
      const bool can_fail = Op(op) == Op::checkpoint || Op(op) == Op::restore;
      if (fault.fail && can_fail && g_state != CU_PROCESS_STATE_FAILED) {
        const bool legal = g_state == (Op(op) == Op::checkpoint ? CU_PROCESS_STATE_LOCKED : CU_PROCESS_STATE_CHECKPOINTED);
        rc = legal ? fail_process() : CUDA_ERROR_ILLEGAL_STATE;
      } else if (fault.fail) {
        rc = CUDA_ERROR_UNKNOWN;  // lock and unlock fail without changing the state
      } else {
        switch (Op(op)) {
          case Op::lock: rc = do_lock(arg ? start + uint64_t(arg) * 1'000'000 : UINT64_MAX); break;
          case Op::checkpoint: rc = do_checkpoint(); break;
          case Op::restore: rc = do_restore(); break;
          case Op::unlock: rc = do_unlock(); break;
        }
      }
    }
    drv.shared->finish_checkpoint_request(ticket, int32_t(rc), g_state);
    // Only now may the process run again (and exit): its caller has the result.
    if (g_state == CU_PROCESS_STATE_RUNNING || g_state == CU_PROCESS_STATE_FAILED) open_gate();
  }
}

}  // namespace

void start_restore_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      std::thread(restore_thread).detach();
    } catch (...) {
      // No thread: the process cannot be checkpointed (requests wait, and callers see it alive).
    }
  });
}

}  // namespace checkpoint
}  // namespace simgpu
