// simgpu/cuda_api.h — how every simgpu source sees cuda.h.
//
// __CUDA_API_VERSION_INTERNAL makes cuda.h declare every real export name (cuMemAlloc_v2,
// cuLaunchKernel_ptsz, cuMemcpyHtoD_v2_ptds, legacy cuCtxCreate, ...) instead of mapping the
// plain names onto the newest ABI, so the compiler checks each definition against the exact
// prototype the driver exports. The declarations get default visibility (the rest of simgpu is
// hidden); tools/simgpu/exports.map then exports only `cu*`.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
