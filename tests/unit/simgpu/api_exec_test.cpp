// Modules, launches, streams, events and graphs: kernels take their time, streams run in order,
// synchronize calls wait for real completion, coloc_fill really fills.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "sim.h"

using namespace simtest;

namespace {
constexpr unsigned long long kMs = 1'000'000;

CUresult spin(Api& a, CUfunction f, unsigned long long ns, CUstream st = nullptr) {
  void* params[] = {&ns};
  return a.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, params, nullptr);
}

float elapsed_ms(Api& a, CUevent start, CUevent end) {
  float ms = -1;
  REQUIRE(a.cuEventElapsedTime_v2(&ms, start, end) == CUDA_SUCCESS);
  return ms;
}
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("modules: images, names, and garbage") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUmodule m;
  const char garbage[] = "this is not a module";
  CHECK(a.cuModuleLoadData(&m, garbage) == CUDA_ERROR_INVALID_IMAGE);
  CUjit_option opts[] = {CU_JIT_OPTIMIZATION_LEVEL};
  void* values[] = {reinterpret_cast<void*>(uintptr_t(3))};
  REQUIRE(a.cuModuleLoadDataEx(&m, s.fatbin.data(), 1, opts, values) == CUDA_SUCCESS);
  CUfunction f1, f2;
  REQUIRE(a.cuModuleGetFunction(&f1, m, "coloc_spin") == CUDA_SUCCESS);
  REQUIRE(a.cuModuleGetFunction(&f2, m, "coloc_spin") == CUDA_SUCCESS);
  CHECK(f1 == f2);
  CHECK(a.cuModuleGetFunction(&f2, m, "coloc_spi") == CUDA_ERROR_NOT_FOUND);
  CHECK(a.cuModuleGetFunction(&f2, m, "nope") == CUDA_ERROR_NOT_FOUND);
  const char ptx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry other_kernel()\n{\n ret;\n}\n";
  CUmodule pm;
  REQUIRE(a.cuModuleLoadData(&pm, ptx) == CUDA_SUCCESS);
  REQUIRE(a.cuModuleGetFunction(&f2, pm, "other_kernel") == CUDA_SUCCESS);
  REQUIRE(a.cuModuleUnload(m) == CUDA_SUCCESS);
  CHECK(a.cuLaunchKernel(f1, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(a.cuModuleUnload(pm) == CUDA_SUCCESS);
}

TEST_CASE("launch: parameters and dimensions are checked") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUfunction f = s.kernel("coloc_spin");
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 1, 70000, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 1 << 20, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, CUstream(uintptr_t(0xbad0)), params, nullptr) ==
        CUDA_ERROR_INVALID_HANDLE);
  // The `extra` form: a parameter buffer.
  unsigned char buf[8];
  std::memcpy(buf, &ns, 8);
  size_t size = sizeof buf;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra) == CUDA_SUCCESS);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra) == CUDA_ERROR_INVALID_VALUE);
  size = 4;
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra) == CUDA_ERROR_INVALID_VALUE);
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
  CHECK(a.cuLaunchKernelEx(&cfg, f, params, nullptr) == CUDA_SUCCESS);
  cfg.numAttrs = 1;
  CHECK(a.cuLaunchKernelEx(&cfg, f, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params) == CUDA_SUCCESS);
  // A function of another context's module.
  CUcontext other;
  REQUIRE(a.cuCtxCreate_v2(&other, 0, 1) == CUDA_SUCCESS);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(a.cuCtxDestroy_v2(other) == CUDA_SUCCESS);
  s.use_primary();
  CHECK(a.cuCtxSynchronize() == CUDA_SUCCESS);
}

TEST_CASE("launch: kernels run for their duration; events and synchronize wait for real completion") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUfunction f = s.kernel("coloc_spin");
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUevent start, end;
  REQUIRE(a.cuEventCreate(&start, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventCreate(&end, 0) == CUDA_SUCCESS);
  CHECK(a.cuEventQuery(end) == CUDA_SUCCESS);  // never recorded: complete
  float ms;
  CHECK(a.cuEventElapsedTime_v2(&ms, start, end) == CUDA_ERROR_INVALID_HANDLE);  // never recorded
  REQUIRE(a.cuEventRecord(start, st) == CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) REQUIRE(spin(a, f, 20 * kMs, st) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(end, st) == CUDA_SUCCESS);
  // Launches are asynchronous: 60 ms of work is still queued right after.
  CHECK(a.cuStreamQuery(st) == CUDA_ERROR_NOT_READY);
  CHECK(a.cuEventQuery(end) == CUDA_ERROR_NOT_READY);
  CHECK(a.cuEventElapsedTime_v2(&ms, start, end) == CUDA_ERROR_NOT_READY);
  REQUIRE(a.cuEventSynchronize(end) == CUDA_SUCCESS);
  CHECK(a.cuStreamQuery(st) == CUDA_SUCCESS);
  CHECK(a.cuEventQuery(end) == CUDA_SUCCESS);
  ms = elapsed_ms(a, start, end);
  CHECK(ms >= 60.0f);
  CHECK(ms < 60.0f * 1.5f);  // a loose bound: nothing else runs on this simulated device

  // A kernel other than coloc_spin takes SIMGPU_KERNEL_NS.
  const char ptx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry other_kernel()\n{\n ret;\n}\n";
  CUmodule pm;
  REQUIRE(a.cuModuleLoadData(&pm, ptx) == CUDA_SUCCESS);
  CUfunction other;
  REQUIRE(a.cuModuleGetFunction(&other, pm, "other_kernel") == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(start, st) == CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) REQUIRE(a.cuLaunchKernel(other, 1, 1, 1, 1, 1, 1, 0, st, nullptr, nullptr) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(end, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(elapsed_ms(a, start, end) >= 10 * kKernelNs / 1e6f);

  // Timing disabled.
  CUevent untimed;
  REQUIRE(a.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(untimed, st) == CUDA_SUCCESS);
  REQUIRE(a.cuEventSynchronize(untimed) == CUDA_SUCCESS);
  CHECK(a.cuEventElapsedTime_v2(&ms, start, untimed) == CUDA_ERROR_INVALID_HANDLE);
  for (CUevent e : {start, end, untimed}) CHECK(a.cuEventDestroy_v2(e) == CUDA_SUCCESS);
  CHECK(a.cuModuleUnload(pm) == CUDA_SUCCESS);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

TEST_CASE("streams: in order, the default streams, and their context") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUfunction fill = s.kernel("coloc_fill");
  CUdeviceptr p;
  const unsigned long long n = 1 << 16;
  REQUIRE(a.cuMemAlloc_v2(&p, n * 4) == CUDA_SUCCESS);
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  // memset, then fill, then copy back, all queued on one stream: the copy sees the fill.
  std::vector<float> host(n, -1.0f);
  REQUIRE(a.cuMemsetD32Async(p, 0, n, st) == CUDA_SUCCESS);
  float v = 7.5f;
  CUdeviceptr dp = p;
  unsigned long long count = n;
  void* params[] = {&dp, &count, &v};
  REQUIRE(a.cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, st, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(a.cuMemcpyDtoHAsync_v2(host.data(), p, n * 4, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(host.front() == 7.5f);
  CHECK(host.back() == 7.5f);
  // coloc_fill outside its buffer is refused at launch.
  count = n + 1;
  CHECK(a.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, st, params, nullptr) == CUDA_ERROR_INVALID_VALUE);

  CUcontext c = nullptr;
  REQUIRE(a.cuStreamGetCtx(st, &c) == CUDA_SUCCESS);
  CHECK(c == s.primary);
  REQUIRE(a.cuStreamGetCtx(CU_STREAM_LEGACY, &c) == CUDA_SUCCESS);
  CHECK(c == s.primary);
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  REQUIRE(a.cuStreamGetCtx_v2(CU_STREAM_PER_THREAD, &c, &green) == CUDA_SUCCESS);
  CHECK(c == s.primary);
  CHECK(green == nullptr);
  CUfunction f = s.kernel("coloc_spin");
  REQUIRE(spin(a, f, 5 * kMs, CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  auto spin_ptsz = [&](CUstream stream) {
    unsigned long long ns = 5 * kMs;
    void* ps[] = {&ns};
    return a.cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, stream, ps, nullptr);
  };
  REQUIRE(spin_ptsz(nullptr) == CUDA_SUCCESS);  // NULL is the per-thread stream here
  CHECK(a.cuStreamSynchronize_ptsz(nullptr) == CUDA_SUCCESS);
  CHECK(a.cuStreamQuery(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  CUevent ev;
  REQUIRE(a.cuEventCreate(&ev, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(ev, st) == CUDA_SUCCESS);
  CHECK(a.cuStreamWaitEvent(nullptr, ev, 0) == CUDA_SUCCESS);
  CHECK(a.cuStreamWaitEvent(nullptr, ev, 0x10) == CUDA_ERROR_INVALID_VALUE);
  CHECK(a.cuEventDestroy_v2(ev) == CUDA_SUCCESS);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
  CHECK(a.cuMemFree_v2(p) == CUDA_SUCCESS);
}

TEST_CASE("graphs: stream capture records kernels and memsets, instantiated graphs replay them") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUfunction f = s.kernel("coloc_spin");
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  CUdeviceptr p;
  REQUIRE(a.cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
  CHECK(a.cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(a.cuStreamBeginCapture_v2(st, CUstreamCaptureMode(9)) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CHECK(a.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_ILLEGAL_STATE);
  CUstreamCaptureStatus status;
  REQUIRE(a.cuStreamIsCapturing(st, &status) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 2; ++i) REQUIRE(spin(a, f, 10 * kMs, st) == CUDA_SUCCESS);
  REQUIRE(a.cuMemsetD32Async(p, 0x01020304, 1024, st) == CUDA_SUCCESS);
  CHECK(reinterpret_cast<uint32_t*>(p)[0] != 0x01020304u);  // captured, not run
  CUgraph g;
  REQUIRE(a.cuStreamEndCapture(st, &g) == CUDA_SUCCESS);
  CHECK(a.cuStreamEndCapture(st, &g) == CUDA_ERROR_ILLEGAL_STATE);
  REQUIRE(a.cuStreamIsCapturing(st, &status) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_NONE);
  CUgraphExec exec;
  CHECK(a.cuGraphInstantiateWithFlags(&exec, g, 1ull << 40) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(a.cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphDestroy(g) == CUDA_SUCCESS);  // the executable graph keeps its own copy

  CUevent start, end;
  REQUIRE(a.cuEventCreate(&start, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventCreate(&end, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(start, st) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphLaunch(exec, st) == CUDA_SUCCESS);
  REQUIRE(a.cuEventRecord(end, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(elapsed_ms(a, start, end) >= 40.0f);  // two replays of two 10 ms kernels
  CHECK(reinterpret_cast<uint32_t*>(p)[1023] == 0x01020304u);
  CHECK(a.cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  CHECK(a.cuGraphLaunch(exec, st) == CUDA_ERROR_INVALID_VALUE);
  for (CUevent e : {start, end}) CHECK(a.cuEventDestroy_v2(e) == CUDA_SUCCESS);
  CHECK(a.cuMemFree_v2(p) == CUDA_SUCCESS);
  CHECK(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

TEST_CASE("launch: a buffer freed while a fill is queued is an illegal address, not a crash") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  CUcontext c;
  REQUIRE(a.cuCtxCreate_v2(&c, 0, 1) == CUDA_SUCCESS);  // a context of its own: the error sticks to it
  CUfunction f = s.kernel("coloc_spin");
  CUfunction fill = s.kernel("coloc_fill");
  CUdeviceptr p;
  REQUIRE(a.cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS);
  REQUIRE(spin(a, f, 20 * kMs) == CUDA_SUCCESS);  // keeps the fill queued
  float v = 1;
  unsigned long long n = 1024;
  void* params[] = {&p, &n, &v};
  REQUIRE(a.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFree_v2(p) == CUDA_SUCCESS);
  CHECK(a.cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(a.cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS);  // sticky, as on a GPU
  REQUIRE(a.cuCtxDestroy_v2(c) == CUDA_SUCCESS);
}
}

TEST_SUITE("simgpu") {
TEST_CASE("launch: two contexts on one device take turns on its engine") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  auto t0 = std::chrono::steady_clock::now();
  std::atomic<int> failures{0};
  auto worker = [&] {
    CUcontext c;
    if (a.cuCtxCreate_v2(&c, 0, 1) != CUDA_SUCCESS) {
      ++failures;
      return;
    }
    CUfunction f = s.kernel("coloc_spin");
    for (int i = 0; i < 10; ++i)
      if (spin(a, f, 3 * kMs) != CUDA_SUCCESS) ++failures;
    if (a.cuCtxSynchronize() != CUDA_SUCCESS) ++failures;
    if (a.cuCtxDestroy_v2(c) != CUDA_SUCCESS) ++failures;
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  CHECK(failures.load() == 0);
  // The engine is exclusive: 2 × 10 × 3 ms cannot finish in less than 60 ms.
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(60));
}
}
