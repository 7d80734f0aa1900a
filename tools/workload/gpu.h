// tools/workload/gpu.h — coloc-train's driver glue: one device, its primary context, the embedded
// kernels, one stream. Driver API only (no cudart), so it runs unchanged on a real driver and on
// simgpu, and goes through coloc's interposer exactly as a PyTorch job's driver calls do.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "device_memory.h"
#include "pattern.h"
#include "trainer.h"

namespace coloc::workload {

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the error's name and description from
/// cuGetErrorName / cuGetErrorString, or its number when the driver does not know it.
std::string cuda_error_text(CUresult result);

class Gpu final : public DeviceMemory, public Compute, public StreamCompute {
 public:
  /// cuInit, cuDeviceGet(ordinal), retains the device's primary context and makes it current (as
  /// cudart does: cuDevicePrimaryCtxRetain + cuCtxSetCurrent), loads the embedded fatbin
  /// (cuModuleLoadData), finds coloc_spin, creates one stream. Throws CudaError.
  explicit Gpu(int ordinal);
  /// Destroys the stream, unloads the module, releases the primary context (errors ignored).
  ~Gpu() override;
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  /// cuMemAlloc. Throws CudaError (CUDA_ERROR_OUT_OF_MEMORY when the device is full).
  CUdeviceptr allocate(uint64_t bytes) override;
  /// cuMemFree. Throws CudaError.
  void release(CUdeviceptr ptr) override;
  /// Launches coloc_spin(ns) on the stream: one thread that busy-waits on %globaltimer for `ns`
  /// nanoseconds. Throws CudaError.
  void spin(uint64_t ns) override;
  /// cuStreamSynchronize. Throws CudaError.
  void synchronize() override;
  /// cuMemcpyHtoD / cuMemcpyDtoH of `bytes` (synchronous). Throws CudaError.
  void upload(CUdeviceptr dst, const void* src, uint64_t bytes);
  void download(void* dst, CUdeviceptr src, uint64_t bytes);
  /// cuMemsetD32Async of `words` 32-bit words on the stream. Throws CudaError.
  void memset32(CUdeviceptr dst, uint32_t value, uint64_t words);
  /// coloc_spin(ns) on stream 0 (the one above) or 1 (a second stream, created on first use).
  /// Throws CudaError.
  void spin_on(unsigned stream, uint64_t ns) override;
  /// cuStreamSynchronize of each stream. Throws CudaError.
  void synchronize_all() override;

  int ordinal() const { return ordinal_; }
  /// cuDeviceGetName.
  const std::string& name() const { return name_; }
  /// cuDeviceTotalMem, in bytes.
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream second_ = nullptr;  ///< created by the first spin_on(1, ...)
  std::string name_;
  uint64_t total_bytes_ = 0;
};

}  // namespace coloc::workload
