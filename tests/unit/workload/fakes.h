// Fakes of the device for the workload tests: memory with a capacity that records every call, and
// a stream that records kernel durations.
#pragma once

#include <map>
#include <stdexcept>
#include <vector>

#include "../../../tools/workload/device_memory.h"
#include "../../../tools/workload/errors.h"
#include "../../../tools/workload/trainer.h"

namespace coloc::workload::test {

class FakeDevice : public DeviceMemory {
 public:
  /// `capacity` 0 = unlimited.
  explicit FakeDevice(uint64_t capacity = 0) : capacity(capacity) {}
  CUdeviceptr allocate(uint64_t bytes) override {
    allocs.push_back(bytes);
    if (capacity && used + bytes > capacity) {
      ++ooms;
      throw CudaError(CUDA_ERROR_OUT_OF_MEMORY, "fake cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY");
    }
    if (fail_next_with != CUDA_SUCCESS) {
      CUresult r = fail_next_with;
      fail_next_with = CUDA_SUCCESS;
      throw CudaError(r, "fake cuMemAlloc: another error");
    }
    CUdeviceptr p = next;
    next += bytes + 4096;  // a gap, so neighbouring segments are never adjacent
    live[p] = bytes;
    used += bytes;
    return p;
  }
  void release(CUdeviceptr p) override {
    auto it = live.find(p);
    if (it == live.end()) throw std::logic_error("fake device: release of an unknown address");
    used -= it->second;
    frees.push_back(it->second);
    live.erase(it);
  }

  uint64_t capacity;
  uint64_t used = 0;
  CUdeviceptr next = 1ULL << 32;
  std::map<CUdeviceptr, uint64_t> live;   // address -> bytes
  std::vector<uint64_t> allocs, frees;    // sizes of every allocate (failed ones too) and release
  int ooms = 0;
  CUresult fail_next_with = CUDA_SUCCESS; // make the next allocate fail with this
};

class FakeCompute : public Compute {
 public:
  void spin(uint64_t ns) override { kernels.push_back(ns); }
  void synchronize() override { ++syncs; }
  std::vector<uint64_t> kernels;
  int syncs = 0;
};

}  // namespace coloc::workload::test
