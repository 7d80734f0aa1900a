// tools/workload/errors.h — the two kinds of failure coloc-train tells apart.
//
//   InputError  bad input from the user (unknown model, malformed trace or spec, negative size):
//               one line on stderr, exit 2, nothing was run.
//   CudaError   a CUDA driver call failed: exit 3 for CUDA_ERROR_OUT_OF_MEMORY, else exit 1.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

#include "../../estimator/input_error.h"

namespace coloc::workload {

/// Bad input from the user (estimator/input_error.h): models and specs are the estimator's.
using est::InputError;

/// A CUDA driver call failed. what() names the call and the error in CUDA's words
/// ("cuMemAlloc_v2(2097152 bytes): CUDA_ERROR_OUT_OF_MEMORY (out of memory)").
class CudaError : public std::runtime_error {
 public:
  CudaError(CUresult result, const std::string& message) : std::runtime_error(message), result_(result) {}
  /// The CUresult the driver returned (never CUDA_SUCCESS).
  CUresult result() const { return result_; }
  /// True for CUDA_ERROR_OUT_OF_MEMORY, the failure coloc exists to prevent.
  bool out_of_memory() const { return result_ == CUDA_ERROR_OUT_OF_MEMORY; }

 private:
  CUresult result_;
};

}  // namespace coloc::workload
