// Stream capture modes (cuThreadExchangeStreamCaptureMode, potentially unsafe calls, implicit
// synchronization with the legacy stream), the deprecated launches, and the stream-ordered copies
// and memsets beyond HtoD/DtoH/DtoD — against simgpu loaded into the test process.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "sim.h"

using namespace simtest;

namespace {

struct Extra {
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange;
  CUresult (*begin_legacy)(CUstream);  // "cuStreamBeginCapture", the first ABI (GLOBAL)
  PFN_cuStreamIsCapturing_v10000 is_capturing;
  PFN_cuLaunch_v2000 launch;
  PFN_cuLaunchGrid_v2000 launch_grid;
  PFN_cuLaunchGridAsync_v2000 launch_grid_async;
  PFN_cuFuncSetBlockShape_v2000 block_shape;
  PFN_cuParamSetSize_v2000 param_size;
  PFN_cuParamSeti_v2000 param_i;
  PFN_cuParamSetf_v2000 param_f;
  PFN_cuParamSetv_v2000 param_v;
  PFN_cuLaunchCooperativeKernelMultiDevice_v9000 multi;
  PFN_cuMemcpyAsync_v4000 memcpy_async;
  PFN_cuMemcpyPeerAsync_v4000 peer;
  PFN_cuMemcpy2DAsync_v3020 copy2d;
  PFN_cuMemcpy3DAsync_v3020 copy3d;
  PFN_cuMemcpy3DPeerAsync_v4000 copy3d_peer;
  PFN_cuMemcpyBatchAsync_v12080 batch_v1;
  PFN_cuMemcpyBatchAsync_v13000 batch;
  PFN_cuMemcpy3DBatchAsync_v13000 batch3d;
  PFN_cuMemsetD8Async_v3020 set8;
  PFN_cuMemsetD16Async_v3020 set16;
  PFN_cuMemsetD2D8Async_v3020 set2d8;
  PFN_cuMemsetD2D16Async_v3020 set2d16;
  PFN_cuMemsetD2D32Async_v3020 set2d32;

  explicit Extra(Api& a)
      : exchange(a.load<decltype(exchange)>("cuThreadExchangeStreamCaptureMode")),
        begin_legacy(a.load<decltype(begin_legacy)>("cuStreamBeginCapture")),
        is_capturing(a.load<decltype(is_capturing)>("cuStreamIsCapturing")),
        launch(a.load<decltype(launch)>("cuLaunch")),
        launch_grid(a.load<decltype(launch_grid)>("cuLaunchGrid")),
        launch_grid_async(a.load<decltype(launch_grid_async)>("cuLaunchGridAsync")),
        block_shape(a.load<decltype(block_shape)>("cuFuncSetBlockShape")),
        param_size(a.load<decltype(param_size)>("cuParamSetSize")),
        param_i(a.load<decltype(param_i)>("cuParamSeti")),
        param_f(a.load<decltype(param_f)>("cuParamSetf")),
        param_v(a.load<decltype(param_v)>("cuParamSetv")),
        multi(a.load<decltype(multi)>("cuLaunchCooperativeKernelMultiDevice")),
        memcpy_async(a.load<decltype(memcpy_async)>("cuMemcpyAsync")),
        peer(a.load<decltype(peer)>("cuMemcpyPeerAsync")),
        copy2d(a.load<decltype(copy2d)>("cuMemcpy2DAsync_v2")),
        copy3d(a.load<decltype(copy3d)>("cuMemcpy3DAsync_v2")),
        copy3d_peer(a.load<decltype(copy3d_peer)>("cuMemcpy3DPeerAsync")),
        batch_v1(a.load<decltype(batch_v1)>("cuMemcpyBatchAsync")),
        batch(a.load<decltype(batch)>("cuMemcpyBatchAsync_v2")),
        batch3d(a.load<decltype(batch3d)>("cuMemcpy3DBatchAsync_v2")),
        set8(a.load<decltype(set8)>("cuMemsetD8Async")),
        set16(a.load<decltype(set16)>("cuMemsetD16Async")),
        set2d8(a.load<decltype(set2d8)>("cuMemsetD2D8Async")),
        set2d16(a.load<decltype(set2d16)>("cuMemsetD2D16Async")),
        set2d32(a.load<decltype(set2d32)>("cuMemsetD2D32Async")) {}
};

CUstreamCaptureStatus status(Extra& x, CUstream s) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  REQUIRE(x.is_capturing(s, &st) == CUDA_SUCCESS);
  return st;
}

// Runs `body` on a new thread with the primary context current.
template <class F>
void on_thread(Sim& s, F body) {
  std::thread t([&] {
    REQUIRE(s.api.cuCtxSetCurrent(s.primary) == CUDA_SUCCESS);
    body();
  });
  t.join();
}

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("capture modes: exchange is per thread and checks its argument") {
  Sim& s = sim();
  s.use_primary();
  Extra x(s.api);
  CHECK(x.exchange(nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUstreamCaptureMode m = CUstreamCaptureMode(7);
  CHECK(x.exchange(&m) == CUDA_ERROR_INVALID_VALUE);
  m = CU_STREAM_CAPTURE_MODE_RELAXED;
  REQUIRE(x.exchange(&m) == CUDA_SUCCESS);
  CHECK(m == CU_STREAM_CAPTURE_MODE_GLOBAL);  // the default
  on_thread(s, [&] {
    CUstreamCaptureMode other = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    REQUIRE(x.exchange(&other) == CUDA_SUCCESS);
    CHECK(other == CU_STREAM_CAPTURE_MODE_GLOBAL);  // not this thread's RELAXED
  });
  REQUIRE(x.exchange(&m) == CUDA_SUCCESS);
  CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED);
}

TEST_CASE("capture modes: a query from another GLOBAL thread invalidates a GLOBAL capture, a RELAXED one does not") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  Extra x(a);
  CUstream cap, other;
  REQUIRE(a.cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUevent ev;
  REQUIRE(a.cuEventCreate(&ev, 0) == CUDA_SUCCESS);
  CUfunction f = s.kernel("coloc_spin");
  unsigned long long ns = 1000;
  void* params[] = {&ns};

  REQUIRE(a.cuStreamBeginCapture_v2(cap, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  on_thread(s, [&] {  // RELAXED: free to query and synchronize
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    REQUIRE(x.exchange(&m) == CUDA_SUCCESS);
    CHECK(a.cuStreamQuery(other) == CUDA_SUCCESS);
    CHECK(a.cuEventQuery(ev) == CUDA_SUCCESS);
    CHECK(a.cuCtxSynchronize() == CUDA_SUCCESS);
  });
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  on_thread(s, [&] {  // THREAD_LOCAL with no capture of its own: other threads' captures are ignored
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    REQUIRE(x.exchange(&m) == CUDA_SUCCESS);
    CHECK(a.cuStreamSynchronize(other) == CUDA_SUCCESS);
  });
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  REQUIRE(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, cap, params, nullptr) == CUDA_SUCCESS);
  on_thread(s, [&] { CHECK(a.cuEventSynchronize(ev) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); });  // GLOBAL
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, cap, params, nullptr) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph g = reinterpret_cast<CUgraph>(1);
  CHECK(a.cuStreamEndCapture(cap, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(g == nullptr);
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(a.cuStreamQuery(other) == CUDA_SUCCESS);  // nothing captures any more

  // The capturing thread itself, in a THREAD_LOCAL capture: its own unsafe call invalidates it.
  REQUIRE(a.cuStreamBeginCapture_v2(cap, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
  on_thread(s, [&] { CHECK(a.cuStreamQuery(other) == CUDA_SUCCESS); });  // others are not concerned
  CHECK(a.cuCtxSynchronize() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(a.cuStreamEndCapture(cap, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // A RELAXED capture forbids nothing; a non-RELAXED one must end on its own thread.
  REQUIRE(a.cuStreamBeginCapture_v2(cap, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(a.cuStreamQuery(other) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamEndCapture(cap, &g) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphDestroy(g) == CUDA_SUCCESS);
  REQUIRE(x.begin_legacy(cap) == CUDA_SUCCESS);  // the legacy call captures GLOBAL
  on_thread(s, [&] { CHECK(a.cuStreamEndCapture(cap, &g) == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); });
  CHECK(status(x, cap) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  REQUIRE(a.cuStreamEndCapture(cap, &g) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphDestroy(g) == CUDA_SUCCESS);
  REQUIRE(a.cuEventDestroy_v2(ev) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(cap) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(other) == CUDA_SUCCESS);
}

TEST_CASE("capture: the legacy stream is IMPLICIT while a blocking stream of its context captures") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  Extra x(a);
  CUstream blocking, nonblocking;
  REQUIRE(a.cuStreamCreate(&blocking, 0) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUfunction f = s.kernel("coloc_spin");
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  CUgraph g;

  REQUIRE(a.cuStreamBeginCapture_v2(nonblocking, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamEndCapture(nonblocking, &g) == CUDA_SUCCESS);
  REQUIRE(a.cuGraphDestroy(g) == CUDA_SUCCESS);

  REQUIRE(a.cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CUstreamCaptureStatus st;
  CHECK(x.is_capturing(nullptr, &st) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(status(x, blocking) == CU_STREAM_CAPTURE_STATUS_ACTIVE);  // a status query does not invalidate
  CHECK(a.cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS);  // per-thread
  CHECK(a.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_LEGACY, params, nullptr) ==
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(status(x, blocking) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(a.cuStreamEndCapture(blocking, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  REQUIRE(a.cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(a.cuStreamQuery(nullptr) == CUDA_SUCCESS);

  // Querying or synchronizing the capturing stream itself is illegal and invalidates the capture
  // (the CUDA Programming Guide, "Invalidation").
  REQUIRE(a.cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  CHECK(a.cuStreamQuery(blocking) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(status(x, blocking) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(a.cuStreamSynchronize(blocking) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(a.cuStreamEndCapture(blocking, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  REQUIRE(a.cuStreamDestroy_v2(blocking) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(nonblocking) == CUDA_SUCCESS);
}

TEST_CASE("legacy launches: block shape and parameters set by the deprecated setters, with their errors") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  Extra x(a);
  CUfunction f = s.kernel("coloc_spin");
  CHECK(x.launch(f) == CUDA_ERROR_INVALID_VALUE);  // no block shape yet
  CHECK(x.block_shape(nullptr, 1, 1, 1) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(x.block_shape(f, 0, 1, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(x.block_shape(f, 1024, 2, 1) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(x.block_shape(f, 32, 1, 1) == CUDA_SUCCESS);
  CHECK(x.launch(f) == CUDA_ERROR_INVALID_VALUE);  // coloc_spin takes a parameter
  CHECK(x.param_size(nullptr, 8) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(x.param_size(f, 8) == CUDA_SUCCESS);
  CHECK(x.param_i(f, 6, 1) == CUDA_ERROR_INVALID_VALUE);  // beyond the size
  CHECK(x.param_i(f, -1, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(x.param_f(f, 4, 1.0f) == CUDA_SUCCESS);
  unsigned long long ns = 30'000'000;
  CHECK(x.param_v(f, 0, nullptr, 8) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(x.param_v(f, 0, &ns, sizeof ns) == CUDA_SUCCESS);
  CHECK(x.launch_grid(f, 0, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(x.launch_grid_async(f, 1, 1, reinterpret_cast<CUstream>(0x10)) == CUDA_ERROR_INVALID_HANDLE);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(x.launch(f) == CUDA_SUCCESS);
  REQUIRE(x.launch_grid(f, 2, 2) == CUDA_SUCCESS);
  REQUIRE(a.cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(60));
}

TEST_CASE("cuLaunchCooperativeKernelMultiDevice: validated as documented, each entry on its stream") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  Extra x(a);
  CUfunction f = s.kernel("coloc_spin");
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, 0) == CUDA_SUCCESS);
  unsigned long long ns = 20'000'000;
  void* params[] = {&ns};
  CUDA_LAUNCH_PARAMS p{f, 1, 1, 1, 32, 1, 1, 0, st, params};
  CHECK(x.multi(nullptr, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(x.multi(&p, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(x.multi(&p, 1, 4) == CUDA_ERROR_INVALID_VALUE);
  CUDA_LAUNCH_PARAMS two[2] = {p, p};
  CHECK(x.multi(two, 2, 0) == CUDA_ERROR_INVALID_VALUE);  // two launches on one device
  CUDA_LAUNCH_PARAMS legacy = p;
  legacy.hStream = nullptr;
  CHECK(x.multi(&legacy, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  legacy.hStream = CU_STREAM_PER_THREAD;
  CHECK(x.multi(&legacy, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(x.multi(&p, 1, CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20));
  REQUIRE(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}

TEST_CASE("async copies and memsets move bytes") {
  Sim& s = sim();
  s.use_primary();
  Api& a = s.api;
  Extra x(a);
  CUstream st;
  REQUIRE(a.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  constexpr size_t N = 4096;
  CUdeviceptr d1, d2;
  REQUIRE(a.cuMemAlloc_v2(&d1, N) == CUDA_SUCCESS);
  REQUIRE(a.cuMemAlloc_v2(&d2, N) == CUDA_SUCCESS);
  std::vector<unsigned char> h(N), back(N);
  for (size_t i = 0; i < N; ++i) h[i] = static_cast<unsigned char>(i * 7);
  auto fetch = [&](CUdeviceptr d) {
    REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
    REQUIRE(a.cuMemcpyDtoH_v2(back.data(), d, N) == CUDA_SUCCESS);
  };

  // cuMemcpyAsync: host to device, device to device, device to host, by the pointers alone.
  REQUIRE(x.memcpy_async(d1, CUdeviceptr(h.data()), N, st) == CUDA_SUCCESS);
  REQUIRE(x.memcpy_async(d2, d1, N, st) == CUDA_SUCCESS);
  std::vector<unsigned char> host(N);
  REQUIRE(x.memcpy_async(CUdeviceptr(host.data()), d2, N, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(host == h);
  CHECK(x.memcpy_async(d1, d2, N + 1, st) == CUDA_ERROR_INVALID_VALUE);  // past the allocation

  // Peer copy (one device: both contexts are the primary).
  REQUIRE(a.cuMemsetD8_v2(d2, 0, N) == CUDA_SUCCESS);
  CHECK(x.peer(d2, nullptr, d1, s.primary, N, st) == CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(x.peer(d2, s.primary, d1, s.primary, N, st) == CUDA_SUCCESS);
  fetch(d2);
  CHECK(back == h);

  // 2D: 16 rows of 100 bytes from host (pitch 128) to device (pitch 256).
  CUDA_MEMCPY2D c2{};
  c2.srcMemoryType = CU_MEMORYTYPE_HOST;
  c2.srcHost = h.data();
  c2.srcPitch = 128;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.dstDevice = d2;
  c2.dstPitch = 256;
  c2.WidthInBytes = 100;
  c2.Height = 16;
  REQUIRE(a.cuMemsetD8_v2(d2, 0, N) == CUDA_SUCCESS);
  REQUIRE(x.copy2d(&c2, st) == CUDA_SUCCESS);
  fetch(d2);
  CHECK(std::memcmp(back.data() + 5 * 256, h.data() + 5 * 128, 100) == 0);
  CHECK(back[5 * 256 + 100] == 0);
  c2.dstPitch = 64;  // narrower than the row
  CHECK(x.copy2d(&c2, st) == CUDA_ERROR_INVALID_VALUE);
  c2.dstPitch = 256;
  c2.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  CHECK(x.copy2d(&c2, st) == CUDA_ERROR_NOT_SUPPORTED);

  // 3D: 2 layers of 4 rows of 32 bytes, device to device, then 3D peer back.
  CUDA_MEMCPY3D c3{};
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = d1;
  c3.srcPitch = 64;
  c3.srcHeight = 8;
  c3.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c3.dstDevice = d2;
  c3.dstPitch = 32;
  c3.dstHeight = 4;
  c3.WidthInBytes = 32;
  c3.Height = 4;
  c3.Depth = 2;
  REQUIRE(x.copy3d(&c3, st) == CUDA_SUCCESS);
  fetch(d2);
  CHECK(std::memcmp(back.data() + 4 * 32 + 32, h.data() + 64 * 8 + 64, 32) == 0);  // layer 1, row 1
  c3.reserved0 = &c3;
  CHECK(x.copy3d(&c3, st) == CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D_PEER p3{};
  p3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p3.srcDevice = d1;
  p3.srcContext = s.primary;
  p3.dstMemoryType = CU_MEMORYTYPE_HOST;
  p3.dstHost = host.data();
  p3.dstContext = s.primary;
  p3.WidthInBytes = N;
  p3.Height = 1;
  p3.Depth = 1;
  std::fill(host.begin(), host.end(), 0);
  REQUIRE(x.copy3d_peer(&p3, st) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamSynchronize(st) == CUDA_SUCCESS);
  CHECK(host == h);

  // Batches: two copies each; never on the legacy stream.
  CUdeviceptr dsts[2] = {d2, d2 + 2048}, srcs[2] = {d1 + 2048, CUdeviceptr(h.data())};
  size_t sizes[2] = {2048, 2048};
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t idx = 0, fail = 0;
  CHECK(x.batch(dsts, srcs, sizes, 2, &attr, &idx, 1, nullptr) == CUDA_ERROR_INVALID_VALUE);
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
  CHECK(x.batch_v1(dsts, srcs, sizes, 2, &attr, &idx, 1, &fail, st) == CUDA_ERROR_INVALID_VALUE);
  CHECK(fail == 0);
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  REQUIRE(x.batch(dsts, srcs, sizes, 2, &attr, &idx, 1, st) == CUDA_SUCCESS);
  fetch(d2);
  CHECK(std::memcmp(back.data(), h.data() + 2048, 2048) == 0);
  CHECK(std::memcmp(back.data() + 2048, h.data(), 2048) == 0);
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = d1;
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.dst.op.ptr.ptr = d2;
  op.extent = {64, 8, 2};
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  REQUIRE(a.cuMemsetD8_v2(d2, 0, N) == CUDA_SUCCESS);
  REQUIRE(x.batch3d(1, &op, 0, st) == CUDA_SUCCESS);
  fetch(d2);
  CHECK(std::memcmp(back.data(), h.data(), 1024) == 0);
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  CHECK(x.batch3d(1, &op, 0, st) == CUDA_ERROR_NOT_SUPPORTED);

  // Memsets: D8, D16, and the 2D ones (only the rows' first Width elements change).
  REQUIRE(x.set8(d1, 0xab, N, st) == CUDA_SUCCESS);
  fetch(d1);
  CHECK(back[N - 1] == 0xab);
  CHECK(x.set16(d1 + 1, 1, 4, st) == CUDA_ERROR_INVALID_VALUE);  // misaligned
  REQUIRE(x.set16(d1, 0x1234, N / 2, st) == CUDA_SUCCESS);
  fetch(d1);
  uint16_t v16;
  std::memcpy(&v16, back.data() + N - 2, 2);
  CHECK(v16 == 0x1234);
  REQUIRE(x.set2d8(d1, 256, 0x11, 10, 4, st) == CUDA_SUCCESS);
  REQUIRE(x.set2d16(d1 + 16, 256, 0x2222, 4, 4, st) == CUDA_SUCCESS);
  REQUIRE(x.set2d32(d1 + 32, 256, 0x33333333u, 2, 4, st) == CUDA_SUCCESS);
  CHECK(x.set2d32(d1, 254, 1, 2, 4, st) == CUDA_ERROR_INVALID_VALUE);  // pitch not a multiple of 4
  CHECK(x.set2d8(d1, 8, 1, 10, 4, st) == CUDA_ERROR_INVALID_VALUE);    // pitch under the width
  fetch(d1);
  CHECK(back[3 * 256 + 9] == 0x11);
  CHECK(back[3 * 256 + 10] == 0x34);  // untouched: the D16 fill's low byte
  CHECK(back[3 * 256 + 16] == 0x22);
  CHECK(back[3 * 256 + 32] == 0x33);
  CHECK(back[4 * 256] == 0x34);  // past the last row

  REQUIRE(a.cuMemFree_v2(d1) == CUDA_SUCCESS);
  REQUIRE(a.cuMemFree_v2(d2) == CUDA_SUCCESS);
  REQUIRE(a.cuStreamDestroy_v2(st) == CUDA_SUCCESS);
}
}  // TEST_SUITE
