// simgpu/errors.h — every CUresult of cuda.h with its name and description, for cuGetErrorName
// and cuGetErrorString. The table is generated at build time from cuda.h (gen_errors.py): the
// description is the first sentence of the value's doc comment there.
#pragma once

#include <cstddef>

#include "cuda_api.h"

namespace simgpu {

struct ErrorInfo {
  CUresult code;
  const char* name;         ///< "CUDA_ERROR_OUT_OF_MEMORY"
  const char* description;  ///< one sentence
};

/// The entry for the CUresult value `code`, or nullptr when cuda.h defines no such value.
const ErrorInfo* find_error(long long code);

/// Number of entries (every enumerator of CUresult).
size_t error_count();

}  // namespace simgpu
