// libinterpose_early.so — calls the driver from its constructor. A program linked against it
// runs this constructor before libcoloc.so's own (the loader initialises a program's libraries
// before the preloaded ones): the interposer's hooks must work before its constructor ran.
#include <cuda.h>

namespace {
int g_results[4] = {-1, -1, -1, -1};
}

__attribute__((constructor)) static void early() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr p = 0;
  g_results[0] = cuInit(0);
  g_results[1] = cuDeviceGet(&dev, 0) == CUDA_SUCCESS ? cuDevicePrimaryCtxRetain(&ctx, dev) : -2;
  g_results[2] = ctx ? cuCtxSetCurrent(ctx) : -2;
  g_results[3] = cuMemAlloc(&p, 64 << 20);  // kept: the report must show it
}

/// The results of cuInit, cuDevicePrimaryCtxRetain, cuCtxSetCurrent and cuMemAlloc(64 MiB).
extern "C" __attribute__((visibility("default"))) const int* coloc_early_results() { return g_results; }
