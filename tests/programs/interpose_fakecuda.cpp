// A fake libcuda.so.1 for the interposer's resolver test (built as build/tests/fakecuda/libcuda.so.1).
// Like a real driver may, its cuGetProcAddress answers cuMemAlloc with an internal entry point
// rather than its exported cuMemAlloc_v2: libcoloc.so must then map the answer to its hook by name,
// version and flags (the cudaTypedefs.h rule), and say so once. Everything else is minimal.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstring>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
CUresult internal_mem_alloc(CUdeviceptr* dptr, size_t) {
  *dptr = 0x1000;
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t) {
  *dptr = 0x2000;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (std::strcmp(symbol, "cuMemAlloc") == 0) *pfn = reinterpret_cast<void*>(&internal_mem_alloc);
  if (std::strcmp(symbol, "cuInit") == 0) *pfn = reinterpret_cast<void*>(&cuInit);
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
