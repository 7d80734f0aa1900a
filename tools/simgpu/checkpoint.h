// simgpu/checkpoint.h — the driver's checkpoint API (cuda.h, CUDA_CHECKPOINT), as simgpu models it.
//
// Another process (the caller) drives a CUDA process (the target) through four states:
//
//   RUNNING --lock--> LOCKED --checkpoint--> CHECKPOINTED --restore--> LOCKED --unlock--> RUNNING
//
// - The caller posts each request in the target's checkpoint channel in the shared state
//   (shm::CheckpointChannel) and waits for its result; the target's restore thread, started with
//   its first context, with every signal blocked, carries it out. A process that never made a
//   context has none: requests to it are CUDA_ERROR_NOT_INITIALIZED. A caller that dies meanwhile changes
//   nothing: the request completes, and the channel frees itself.
// - lock: closes the target's API gate (entry.h), so its further calls block, then waits until
//   no call is inside the driver and every context's queued work has run. With a timeout
//   (CUcheckpointLockArgs::timeoutMs, 0 none) that passes first, the gate reopens and the result
//   is CUDA_ERROR_NOT_READY, the process RUNNING.
// - checkpoint: the device memory really moves. Every live allocation of every device (plain,
//   pitched, pool chunks, graph memory) is copied, page by page where a page is committed
//   (/proc/self/pagemap: present or swapped), into one host buffer, its device pages are given
//   back (MADV_DONTNEED), and everything the process had charged on any device is released:
//   cuMemGetInfo shows it free and NVML lists the process nowhere. A live managed (UVM)
//   allocation makes it CUDA_ERROR_NOT_SUPPORTED (the driver does not checkpoint UVM), the
//   process still LOCKED. VMM memory (cuMemCreate) is released from the books but its bytes stay
//   in their memfd (host memory in simgpu either way).
// - restore: charges the same bytes back on the same devices, all or nothing, and copies the
//   data back to the same addresses. No room: CUDA_ERROR_OUT_OF_MEMORY, still CHECKPOINTED; and
//   as driver 580 does (NVIDIA/cuda-checkpoint issue #44), every later restore of that process
//   fails with CUDA_ERROR_OPERATING_SYSTEM: a caller must make room before it restores.
// - unlock: the result is posted first, then the gate opens.
// - A wrong state is CUDA_ERROR_ILLEGAL_STATE; an unknown or dead pid, or a reserved field that is
//   not zero, CUDA_ERROR_INVALID_VALUE; GPU remapping on restore (gpuPairs) and a process locking
//   itself, CUDA_ERROR_NOT_SUPPORTED.
// - SIMGPU_CHECKPOINT_FAULT (config.h) stalls or fails an operation. A failed checkpoint or
//   restore leaves the process CU_PROCESS_STATE_FAILED: its device memory is gone, and its calls
//   return CUDA_ERROR_ILLEGAL_STATE from then on.
#pragma once

#include <cstdint>

namespace simgpu::checkpoint {

/// A request in the checkpoint channel.
enum class Op : uint32_t { lock = 1, checkpoint, restore, unlock };

/// Starts the restore thread of this process (once; at its first context).
void start_restore_thread();

}  // namespace simgpu::checkpoint
