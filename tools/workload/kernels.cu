// Device code of coloc-train (and of the test probes): compiled by nvcc to a fatbin with sm_80 and
// sm_90 code plus compute_90 PTX, embedded in the binaries, loaded with cuModuleLoadData.
//
// Kernel parameter layouts are part of the contract with simgpu, which recognises these names:
//   coloc_spin(unsigned long long ns)  busy-waits on %globaltimer for `ns` nanoseconds
//   coloc_fill(float* p, unsigned long long n, float v)  sets p[0..n) = v
// `extern "C"` keeps the names unmangled, so cuModuleGetFunction finds them by these names.

extern "C" __global__ void coloc_spin(unsigned long long ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
}

extern "C" __global__ void coloc_fill(float* p, unsigned long long n, float v) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = v;
}
