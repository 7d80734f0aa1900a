// Driver API: the checkpoint API, the caller's side (checkpoint.h). Each call posts a request in the
// target's checkpoint channel and waits for its result, checking every 20 ms that the target lives.
#include <cstring>

#include "checkpoint.h"
#include "driver.h"
#include "entry.h"
#include "os.h"

using namespace simgpu;

namespace {

constexpr uint64_t kLivenessCheckNs = 20'000'000;

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i]) return false;
  return true;
}

CUresult request(int pid, checkpoint::Op op, uint32_t arg) {
  Driver& drv = Driver::get();
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (pid_t(pid) == drv.pid) return CUDA_ERROR_NOT_SUPPORTED;  // it would wait for its own call
  int slot;
  uint64_t start;
  if (!drv.shared->find_process(pid, &slot, &start)) return CUDA_ERROR_INVALID_VALUE;
  uint32_t state;
  int32_t tid;
  // A process that never made a context has no restore thread (and nothing on any device).
  if (!drv.shared->checkpoint_info(pid, &state, &tid)) return CUDA_ERROR_INVALID_VALUE;
  if (tid == 0) return CUDA_ERROR_NOT_INITIALIZED;
  shm::CheckpointChannel& ch = drv.shared->channel(slot);
  uint32_t ticket = 0;
  bool gone = false;
  for (;;) {  // one caller at a time per target
    uint32_t seen = ch.finished.load(std::memory_order_acquire);
    if (drv.shared->post_checkpoint(slot, pid, start, uint32_t(op), arg, &ticket, &gone)) break;
    if (gone) return CUDA_ERROR_INVALID_VALUE;
    futex_wait(&ch.finished, seen, kLivenessCheckNs);
    if (!process_alive(pid, start)) return CUDA_ERROR_INVALID_VALUE;
  }
  for (;;) {
    uint32_t seen = ch.finished.load(std::memory_order_acquire);
    int32_t result = 0;
    if (drv.shared->checkpoint_result(slot, pid, start, ticket, &result, &gone)) return CUresult(result);
    if (gone || !process_alive(pid, start)) return CUDA_ERROR_INVALID_VALUE;
    futex_wait(&ch.finished, seen, kLivenessCheckNs);
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuCheckpointProcessGetRestoreThreadId(int pid, int* tid) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    uint32_t state;
    int32_t t;
    if (!tid || pid <= 0 || !Driver::get().shared->checkpoint_info(pid, &state, &t)) return CUDA_ERROR_INVALID_VALUE;
    if (t == 0) return CUDA_ERROR_NOT_INITIALIZED;  // no context yet, so no restore thread
    *tid = t;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    uint32_t s;
    int32_t t;
    if (!state || pid <= 0 || !Driver::get().shared->checkpoint_info(pid, &s, &t)) return CUDA_ERROR_INVALID_VALUE;
    *state = CUprocessState(s);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (args && (args->reserved0 || !all_zero(args->reserved1, sizeof args->reserved1))) return CUDA_ERROR_INVALID_VALUE;
    return request(pid, checkpoint::Op::lock, args ? args->timeoutMs : 0);
  });
}

CUresult CUDAAPI cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (args && !all_zero(args->reserved, sizeof args->reserved)) return CUDA_ERROR_INVALID_VALUE;
    return request(pid, checkpoint::Op::checkpoint, 0);
  });
}

CUresult CUDAAPI cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (args) {
      if (!all_zero(args->reserved, sizeof args->reserved) || args->reserved1) return CUDA_ERROR_INVALID_VALUE;
      if (args->gpuPairs || args->gpuPairsCount) return CUDA_ERROR_NOT_SUPPORTED;  // no remapping in simgpu
    }
    return request(pid, checkpoint::Op::restore, 0);
  });
}

CUresult CUDAAPI cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (args && !all_zero(args->reserved, sizeof args->reserved)) return CUDA_ERROR_INVALID_VALUE;
    return request(pid, checkpoint::Op::unlock, 0);
  });
}

}  // extern "C"
