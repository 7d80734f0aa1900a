// simgpu/launch.h — a kernel launch as every launch entry point describes it (api_launch.cpp,
// api_legacy_launch.cpp): validated into the work a stream runs.
#pragma once

#include "context.h"
#include "cuda_api.h"

namespace simgpu {

/// The arguments of one launch, as cuLaunchKernel takes them.
struct Launch {
  CUfunction f;
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  CUstream stream;
  void** params;  ///< kernelParams
  void** extra;   ///< CU_LAUNCH_PARAM_* list
};

/// A validated launch: the stream it goes to and the work it submits.
struct PreparedLaunch {
  Stream* stream = nullptr;
  KernelWork work;
  bool skip = false;  ///< SIMGPU_FAST: validated, nothing to submit
};

/// Validates `l` as a launch in context `ctx` (null: CUDA_ERROR_INVALID_CONTEXT): the function and
/// stream must belong to it, dimensions and parameters must be valid. Submits nothing.
CUresult prepare_launch(const Launch& l, bool per_thread, Context* ctx, PreparedLaunch* out);
/// prepare_launch in the current context, then submits the kernel to its stream.
CUresult launch(const Launch& l, bool per_thread);

}  // namespace simgpu
