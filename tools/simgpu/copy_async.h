// simgpu/copy_async.h — what the stream-ordered copies of api_copy_async.cpp and api_copy_batch.cpp
// share: telling device from host pointers, and validating and submitting a (strided) copy.
#pragma once

#include <cstdint>

#include "context.h"
#include "cuda_api.h"

namespace simgpu {

/// True when `p` lies in simgpu's device address space (device arenas, managed memory, VMM),
/// whether or not it is allocated now.
bool device_space(uintptr_t p);

/// Where a pointer of unified addressing points, for [p, p+span): device memory (which must be
/// addressable: CUDA_ERROR_INVALID_VALUE otherwise, e.g. freed memory) or host memory (anything
/// outside the device address space; not null).
CUresult classify_pointer(uintptr_t p, size_t span, bool* device);

/// Validates `w` (its device sides addressable over their whole strided span, no null side) and
/// submits it to `s`; a copy of no bytes submits nothing.
CUresult submit_copy(Stream& s, CopyWork w);

}  // namespace simgpu
