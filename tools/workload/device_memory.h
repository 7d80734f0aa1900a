// tools/workload/device_memory.h — raw device memory, as the driver hands it out.
//
// The caching allocator and the trace replayer allocate through this interface: coloc-train's
// implementation calls cuMemAlloc_v2 / cuMemFree_v2 (gpu.h), unit tests use a fake device.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace coloc::workload {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// Allocates `bytes` (> 0) bytes of device memory and returns its address.
  /// Throws CudaError; its result() is CUDA_ERROR_OUT_OF_MEMORY when the device has no room.
  virtual CUdeviceptr allocate(uint64_t bytes) = 0;
  /// Frees an address allocate() returned. Throws CudaError.
  virtual void release(CUdeviceptr ptr) = 0;
};

}  // namespace coloc::workload
