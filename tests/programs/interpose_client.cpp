// interpose_client — a scriptable Driver API client for the interposer's tests. It runs the steps on
// its command line in order and prints one JSON line per step:
//
//   interpose_client init ctx alloc 1GiB a pitch 1000 3 4 p free a meminfo
//   {"step":"init","rc":0,"rc_name":"CUDA_SUCCESS","pid":1234}
//
// Each step takes a fixed number of arguments (see kSteps). It calls every ABI by its exact export
// name (cuMemAlloc_v2, cuMemAlloc, cuLaunchKernel_ptsz), so a test can reach each path the
// interposer hooks. For the end-to-end tests with colocd: "catch-signals" installs SIGINT/SIGTERM
// handlers that only count, "signals" prints the counts, "spin PATH NS SECONDS BATCH SLEEP_MS" is a
// training-like loop of coloc_spin kernels (spin_loop), "capture-spin SECONDS" captures graphs in
// GLOBAL mode while another thread launches (capture_spin), "burst PATH COUNT NS STREAMS GRAPH
// SYNC_EVERY" queues a training pass's launches asynchronously (burst_loop), "touch PATH" / "hold-file PATH" are
// barriers, "fork-run STEP..." forks and runs the rest of the line in the child, "pthread-exit" ends the main
// thread with pthread_exit. Exit status: 0 when every step ran (a CUDA error is a result, not a failure),
// 2 for a malformed script.
//
// Linked against libcuda.so.1 by SONAME: simgpu with LD_LIBRARY_PATH=build/sim, the real driver
// on a GPU machine.
#define __CUDA_API_VERSION_INTERNAL 1  // declare every ABI under its own export name
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/size.h"
#include "tools/workload/kernels.h"

using json = nlohmann::ordered_json;
using Args = std::vector<std::string>;

namespace {

[[noreturn]] void script_error(const std::string& what) {
  std::fprintf(stderr, "interpose_client: %s\n", what.c_str());
  std::exit(2);
}

uint64_t size_arg(const std::string& s) {
  coloc::SizeParse p = coloc::parse_size(s);
  if (!p) script_error("bad size \"" + s + "\": " + p.error);
  return *p.bytes;
}

const char* err_name(CUresult r) {
  const char* n = nullptr;
  return cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "?";
}

struct State {
  std::map<std::string, CUdeviceptr> ptrs;
  std::map<std::string, CUdeviceptr_v1> ptrs_v1;
  std::map<std::string, CUmemoryPool> pools;
  std::map<std::string, CUmemGenericAllocationHandle> vmm;
  std::map<std::string, CUarray> arrays;
  std::map<std::string, CUmipmappedArray> mipmaps;
  std::vector<CUcontext> created;
  CUfunction spin = nullptr;
  std::map<std::string, CUgraphExec> execs;
  CUstream graph_stream = nullptr;
};

template <class M>
typename M::mapped_type& named(M& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) script_error("nothing named \"" + name + "\"");
  return it->second;
}

CUdevice device_arg(const Args& a, size_t i) { return a.size() > i ? CUdevice(std::stoi(a[i])) : 0; }

CUresult spin_function(State& s, CUfunction* f) {
  if (!s.spin) {
    CUmodule m;
    if (CUresult r = cuModuleLoadData(&m, coloc_kernels_fatbin); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuModuleGetFunction(&s.spin, m, "coloc_spin"); r != CUDA_SUCCESS) return r;
  }
  *f = s.spin;
  return CUDA_SUCCESS;
}

// Calls each deprecated launch, the multi-device launch and every async copy and memset ABI
// simgpu implements once (o["calls"][name] = its CUresult); the first failure is the step's result.
CUresult timeslice_entries(State& s, json& o) {
  CUfunction f;
  if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
  CUstream st;
  if (CUresult r = cuStreamCreate(&st, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  CUcontext ctx;
  cuCtxGetCurrent(&ctx);
  constexpr size_t N = 4096;
  CUdeviceptr d1, d2;
  if (CUresult r = cuMemAlloc_v2(&d1, N); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuMemAlloc_v2(&d2, N); r != CUDA_SUCCESS) return r;
  std::vector<unsigned char> h(N, 1);
  unsigned long long ns = 0;
  void* params[] = {&ns};
  CUDA_LAUNCH_PARAMS lp{f, 1, 1, 1, 1, 1, 1, 0, st, params};
  CUDA_MEMCPY2D c2{};
  c2.srcMemoryType = c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.srcDevice = d1, c2.dstDevice = d2, c2.WidthInBytes = 64, c2.Height = 1;
  CUDA_MEMCPY3D c3{};
  c3.srcMemoryType = c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = d1, c3.dstDevice = d2, c3.WidthInBytes = 64, c3.Height = 1, c3.Depth = 1;
  CUDA_MEMCPY3D_PEER p3{};
  p3.srcMemoryType = p3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p3.srcDevice = d1, p3.dstDevice = d2, p3.srcContext = p3.dstContext = ctx;
  p3.WidthInBytes = 64, p3.Height = 1, p3.Depth = 1;
  CUdeviceptr dsts[1] = {d2}, srcs[1] = {d1};
  size_t sizes[1] = {64}, idx = 0, fail = 0;
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src.type = op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = d1, op.dst.op.ptr.ptr = d2, op.extent = {64, 1, 1};
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  const std::vector<std::pair<const char*, std::function<CUresult()>>> calls = {
      {"cuFuncSetBlockShape", [&] { return cuFuncSetBlockShape(f, 1, 1, 1); }},
      {"cuParamSetSize", [&] { return cuParamSetSize(f, 8); }},
      {"cuParamSeti", [&] { return cuParamSeti(f, 4, 0); }},
      {"cuParamSetf", [&] { return cuParamSetf(f, 0, 0.0f); }},
      {"cuParamSetv", [&] { return cuParamSetv(f, 0, &ns, sizeof ns); }},
      {"cuLaunch", [&] { return cuLaunch(f); }},
      {"cuLaunchGrid", [&] { return cuLaunchGrid(f, 1, 1); }},
      {"cuLaunchGridAsync", [&] { return cuLaunchGridAsync(f, 1, 1, st); }},
      {"cuLaunchCooperativeKernelMultiDevice", [&] { return cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0); }},
      {"cuMemcpyAsync", [&] { return cuMemcpyAsync(d2, d1, N, st); }},
      {"cuMemcpyAsync_ptsz", [&] { return cuMemcpyAsync_ptsz(d2, d1, N, st); }},
      {"cuMemcpyHtoDAsync_v2", [&] { return cuMemcpyHtoDAsync_v2(d1, h.data(), N, st); }},
      {"cuMemcpyDtoHAsync_v2_ptsz", [&] { return cuMemcpyDtoHAsync_v2_ptsz(h.data(), d1, N, st); }},
      {"cuMemcpyDtoDAsync_v2", [&] { return cuMemcpyDtoDAsync_v2(d2, d1, N, st); }},
      {"cuMemcpyDtoDAsync_v2_ptsz", [&] { return cuMemcpyDtoDAsync_v2_ptsz(d2, d1, N, st); }},
      {"cuMemcpyPeerAsync", [&] { return cuMemcpyPeerAsync(d2, ctx, d1, ctx, N, st); }},
      {"cuMemcpyPeerAsync_ptsz", [&] { return cuMemcpyPeerAsync_ptsz(d2, ctx, d1, ctx, N, st); }},
      {"cuMemcpy2DAsync_v2", [&] { return cuMemcpy2DAsync_v2(&c2, st); }},
      {"cuMemcpy2DAsync_v2_ptsz", [&] { return cuMemcpy2DAsync_v2_ptsz(&c2, st); }},
      {"cuMemcpy3DAsync_v2", [&] { return cuMemcpy3DAsync_v2(&c3, st); }},
      {"cuMemcpy3DAsync_v2_ptsz", [&] { return cuMemcpy3DAsync_v2_ptsz(&c3, st); }},
      {"cuMemcpy3DPeerAsync", [&] { return cuMemcpy3DPeerAsync(&p3, st); }},
      {"cuMemcpy3DPeerAsync_ptsz", [&] { return cuMemcpy3DPeerAsync_ptsz(&p3, st); }},
      {"cuMemcpyBatchAsync", [&] { return cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &idx, 1, &fail, st); }},
      {"cuMemcpyBatchAsync_ptsz",
       [&] { return cuMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 1, &attr, &idx, 1, &fail, st); }},
      {"cuMemcpyBatchAsync_v2", [&] { return cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 1, &attr, &idx, 1, st); }},
      {"cuMemcpyBatchAsync_v2_ptsz",
       [&] { return cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, 1, &attr, &idx, 1, st); }},
      {"cuMemcpy3DBatchAsync", [&] { return cuMemcpy3DBatchAsync(1, &op, &fail, 0, st); }},
      {"cuMemcpy3DBatchAsync_ptsz", [&] { return cuMemcpy3DBatchAsync_ptsz(1, &op, &fail, 0, st); }},
      {"cuMemcpy3DBatchAsync_v2", [&] { return cuMemcpy3DBatchAsync_v2(1, &op, 0, st); }},
      {"cuMemcpy3DBatchAsync_v2_ptsz", [&] { return cuMemcpy3DBatchAsync_v2_ptsz(1, &op, 0, st); }},
      {"cuMemsetD8Async", [&] { return cuMemsetD8Async(d1, 1, N, st); }},
      {"cuMemsetD8Async_ptsz", [&] { return cuMemsetD8Async_ptsz(d1, 1, N, st); }},
      {"cuMemsetD16Async", [&] { return cuMemsetD16Async(d1, 1, N / 2, st); }},
      {"cuMemsetD16Async_ptsz", [&] { return cuMemsetD16Async_ptsz(d1, 1, N / 2, st); }},
      {"cuMemsetD32Async", [&] { return cuMemsetD32Async(d1, 1, N / 4, st); }},
      {"cuMemsetD32Async_ptsz", [&] { return cuMemsetD32Async_ptsz(d1, 1, N / 4, st); }},
      {"cuMemsetD2D8Async", [&] { return cuMemsetD2D8Async(d1, 64, 1, 64, 2, st); }},
      {"cuMemsetD2D8Async_ptsz", [&] { return cuMemsetD2D8Async_ptsz(d1, 64, 1, 64, 2, st); }},
      {"cuMemsetD2D16Async", [&] { return cuMemsetD2D16Async(d1, 64, 1, 32, 2, st); }},
      {"cuMemsetD2D16Async_ptsz", [&] { return cuMemsetD2D16Async_ptsz(d1, 64, 1, 32, 2, st); }},
      {"cuMemsetD2D32Async", [&] { return cuMemsetD2D32Async(d1, 64, 1, 16, 2, st); }},
      {"cuMemsetD2D32Async_ptsz", [&] { return cuMemsetD2D32Async_ptsz(d1, 64, 1, 16, 2, st); }},
  };
  CUresult first = CUDA_SUCCESS;
  for (const auto& [name, call] : calls) {
    CUresult r = call();
    o["calls"][name] = int(r);
    if (first == CUDA_SUCCESS) first = r;
  }
  if (CUresult r = cuCtxSynchronize(); first == CUDA_SUCCESS) first = r;
  cuStreamDestroy_v2(st);
  cuMemFree_v2(d1);
  cuMemFree_v2(d2);
  return first;
}

template <class Launch>
CUresult launch_n(State& s, uint64_t n, json& out, Launch&& launch) {
  CUfunction f;
  if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
  unsigned long long ns = 0;
  void* params[] = {&ns};
  uint64_t done = 0;
  CUresult r = CUDA_SUCCESS;
  for (; done < n; ++done)
    if ((r = launch(f, params)) != CUDA_SUCCESS) break;
  out["launched"] = done;
  if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
  return r;
}

/// "spin PATH NS SECONDS BATCH SLEEP_MS": for SECONDS of wall time, launches BATCH coloc_spin(NS)
/// kernels through PATH (kernel, ptsz, ex, coop, graph: a graph of one spin, captured in GLOBAL
/// mode on a new stream), synchronizes, and sleeps SLEEP_MS on the host: a training loop whose
/// iterations keep the device busy for BATCH x NS. Prints the launches and iterations made.
CUresult spin_loop(const Args& a, State& s, json& out) {
  const std::string path = a[0];
  unsigned long long ns = std::stoull(a[1]);
  const double seconds = std::stod(a[2]);
  const uint64_t batch = std::stoull(a[3]);
  const uint64_t sleep_ms = std::stoull(a[4]);
  if (path != "kernel" && path != "ptsz" && path != "ex" && path != "coop" && path != "graph")
    script_error("spin: PATH is kernel, ptsz, ex, coop or graph");
  CUfunction f;
  if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
  void* params[] = {&ns};
  CUstream st = nullptr;
  CUgraphExec ge = nullptr;
  if (path == "graph" || path == "ex") {
    if (CUresult r = cuStreamCreate(&st, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  }
  if (path == "graph") {
    CUgraph g;
    if (CUresult r = cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, params, nullptr); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuStreamEndCapture(st, &g); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuGraphInstantiateWithFlags(&ge, g, 0); r != CUDA_SUCCESS) return r;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t launched = 0, iterations = 0;
  CUresult r = CUDA_SUCCESS;
  while (r == CUDA_SUCCESS && std::chrono::steady_clock::now() < end) {
    for (uint64_t i = 0; i < batch && r == CUDA_SUCCESS; ++i, ++launched) {
      if (path == "kernel") r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      else if (path == "ptsz") r = cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      else if (path == "coop") r = cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params);
      else if (path == "graph") r = cuGraphLaunch(ge, st);
      else {
        CUlaunchConfig cfg{};
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = st;
        r = cuLaunchKernelEx(&cfg, f, params, nullptr);
      }
    }
    if (r != CUDA_SUCCESS) break;
    r = path == "ptsz" ? cuStreamSynchronize_ptsz(nullptr) : st ? cuStreamSynchronize(st) : cuCtxSynchronize();
    ++iterations;
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  out["launched"] = launched;
  out["iterations"] = iterations;
  if (ge) cuGraphExecDestroy(ge);
  if (st) cuStreamDestroy_v2(st);
  return r;
}

/// "burst PATH COUNT NS STREAMS GRAPH SYNC_EVERY": the launch pattern of a training pass, queued
/// without waiting: COUNT launches through PATH (kernel: cuLaunchKernel of one coloc_spin; graph:
/// cuGraphLaunch of a graph of GRAPH coloc_spin nodes in a chain, captured in GLOBAL mode), launch i
/// lasting NS[i % n] ns (NS: a comma-separated list, so "20000,20000,20000000" mixes short and long
/// kernels; a graph's nodes take NS[0]), onto the NULL stream (STREAMS 0) or round robin onto
/// STREAMS streams of its own (CU_STREAM_NON_BLOCKING); a host synchronize (cuCtxSynchronize)
/// after every SYNC_EVERY launches (0: only at the end). Prints the launches made and the seconds
/// the whole took.
CUresult burst_loop(const Args& a, State& s, json& out) {
  const std::string path = a[0];
  const uint64_t count = std::stoull(a[1]);
  std::vector<unsigned long long> ns;
  for (size_t at = 0; at <= a[2].size();) {
    size_t comma = a[2].find(',', at);
    if (comma == std::string::npos) comma = a[2].size();
    ns.push_back(std::stoull(a[2].substr(at, comma - at)));
    at = comma + 1;
  }
  const int streams = std::stoi(a[3]);
  const int graph_size = std::stoi(a[4]);
  const uint64_t sync_every = std::stoull(a[5]);
  if (path != "kernel" && path != "graph") script_error("burst: PATH is kernel or graph");
  if (streams < 0 || streams > 16) script_error("burst: STREAMS is 0 to 16");
  if (path == "graph" && graph_size < 1) script_error("burst: GRAPH is at least 1 for PATH graph");
  CUfunction f;
  if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
  std::vector<CUstream> st(size_t(streams), nullptr);
  for (CUstream& x : st)
    if (CUresult r = cuStreamCreate(&x, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  CUgraphExec ge = nullptr;
  if (path == "graph") {
    CUstream cs;
    if (CUresult r = cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
    CUgraph g;
    unsigned long long node_ns = ns[0];
    void* params[] = {&node_ns};
    if (CUresult r = cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) return r;
    for (int k = 0; k < graph_size; ++k)
      if (CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, cs, params, nullptr); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuStreamEndCapture(cs, &g); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuGraphInstantiateWithFlags(&ge, g, 0); r != CUDA_SUCCESS) return r;
    cuStreamDestroy_v2(cs);
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t launched = 0;
  CUresult r = CUDA_SUCCESS;
  for (; launched < count && r == CUDA_SUCCESS; ++launched) {
    CUstream on = streams ? st[launched % size_t(streams)] : nullptr;
    if (path == "graph") {
      r = cuGraphLaunch(ge, on);
    } else {
      unsigned long long d = ns[launched % ns.size()];
      void* params[] = {&d};
      r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, on, params, nullptr);
    }
    if (r == CUDA_SUCCESS && sync_every && (launched + 1) % sync_every == 0) r = cuCtxSynchronize();
  }
  if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
  out["launched"] = launched;
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ge) cuGraphExecDestroy(ge);
  for (CUstream x : st) cuStreamDestroy_v2(x);
  return r;
}

/// "capture-spin SECONDS": for SECONDS, one thread (in RELAXED capture mode, so its own
/// synchronizations are allowed) runs coloc_spin(2 ms) kernels in batches of 10 on the legacy
/// stream, while this thread captures a graph of one coloc_spin(1 ms) on a non-blocking stream in
/// GLOBAL mode (holding the capture open 5 ms), replays it and synchronizes its stream, over and
/// over. Prints how many captures succeeded, how many failed (and the first error), and how many
/// replays ran: a capture is never to be disturbed by what the interposer does meanwhile.
CUresult capture_spin(const Args& a, State& s, json& out) {
  const double seconds = std::stod(a[0]);
  CUfunction f;
  if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
  CUcontext ctx;
  if (CUresult r = cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<uint64_t> spun{0};
  std::atomic<int> spin_error{0};
  std::thread spinner([&] {
    cuCtxSetCurrent(ctx);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cuThreadExchangeStreamCaptureMode(&mode);
    unsigned long long ns = 2000000;
    void* params[] = {&ns};
    while (std::chrono::steady_clock::now() < end) {
      for (int i = 0; i < 10; ++i) {
        CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
        if (r != CUDA_SUCCESS && !spin_error) spin_error = int(r);
        spun++;
      }
      cuCtxSynchronize();
    }
  });
  CUstream st;
  if (CUresult r = cuStreamCreate(&st, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    spinner.join();
    return r;
  }
  unsigned long long ns = 1000000;
  void* params[] = {&ns};
  uint64_t captured = 0, failed = 0, replays = 0;
  CUresult first_error = CUDA_SUCCESS;
  auto fail = [&](CUresult r) {
    failed++;
    if (first_error == CUDA_SUCCESS) first_error = r;
  };
  while (std::chrono::steady_clock::now() < end) {
    CUgraph g = nullptr;
    CUgraphExec ge = nullptr;
    if (CUresult r = cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) {
      fail(r);
      continue;
    }
    CUresult lr = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, params, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the capture stays open a while
    CUresult er = cuStreamEndCapture(st, &g);
    if (lr != CUDA_SUCCESS || er != CUDA_SUCCESS) {
      fail(lr != CUDA_SUCCESS ? lr : er);
      if (g) cuGraphDestroy(g);
      continue;
    }
    captured++;
    CUresult r = cuGraphInstantiateWithFlags(&ge, g, 0);
    if (r == CUDA_SUCCESS) {
      r = cuGraphLaunch(ge, st);
      if (r == CUDA_SUCCESS) r = cuStreamSynchronize(st);
      if (r == CUDA_SUCCESS) replays++;
      cuGraphExecDestroy(ge);
    }
    if (r != CUDA_SUCCESS) fail(r);
    cuGraphDestroy(g);
  }
  spinner.join();
  cuStreamDestroy_v2(st);
  out["captured"] = captured;
  out["failed"] = failed;
  out["first_error"] = err_name(first_error);
  out["replays"] = replays;
  out["spun"] = spun.load();
  return spin_error ? CUresult(spin_error.load()) : CUDA_SUCCESS;
}

CUresult vmm_create(const Args& a, State& s, json& out, CUmemLocationType where) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = where;
  prop.location.id = where == CU_MEM_LOCATION_TYPE_DEVICE ? 0 : 0;
  size_t gran = 0;
  if (CUresult r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != CUDA_SUCCESS)
    return r;
  uint64_t size = size_arg(a[0]);
  size = (size + gran - 1) / gran * gran;
  out["bytes"] = size;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cuMemCreate(&h, size, &prop, 0);
  if (r == CUDA_SUCCESS) s.vmm[a[1]] = h;
  return r;
}

CUresult array_create(const Args& a, State& s, unsigned w, unsigned h, unsigned d, json&) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = w;
  desc.Height = h;
  desc.Depth = d;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray arr = nullptr;
  CUresult r;
  if (d == 0) {
    CUDA_ARRAY_DESCRIPTOR d2{};
    d2.Width = w;
    d2.Height = h;
    d2.Format = CU_AD_FORMAT_FLOAT;
    d2.NumChannels = 1;
    r = cuArrayCreate_v2(&arr, &d2);
  } else {
    r = cuArray3DCreate_v2(&arr, &desc);
  }
  if (r == CUDA_SUCCESS) s.arrays[a.back()] = arr;
  return r;
}

// T threads x N random allocations and frees (each thread keeps at most 8 live, frees all at the
// end). Sizes are uniform in [1, MAX] bytes. Reports the successes and out-of-memory failures.
CUresult threads_step(const Args& a, State&, json& out) {
  unsigned threads = unsigned(std::stoul(a[0]));
  uint64_t per_thread = std::stoull(a[1]);
  unsigned seed = unsigned(std::stoul(a[2]));
  uint64_t max_size = size_arg(a[3]);
  CUcontext ctx;
  if (CUresult r = cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  std::atomic<uint64_t> ok{0}, oom{0}, other{0}, frees{0}, free_errors{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      cuCtxSetCurrent(ctx);
      std::mt19937_64 rng(seed * 1000003ull + t);
      std::uniform_int_distribution<uint64_t> size(1, max_size);
      std::vector<CUdeviceptr> live;
      auto free_one = [&](size_t i) {
        if (cuMemFree_v2(live[i]) == CUDA_SUCCESS) frees++;
        else free_errors++;
        live[i] = live.back();
        live.pop_back();
      };
      for (uint64_t i = 0; i < per_thread; ++i) {
        if (live.size() == 8 || (!live.empty() && rng() % 2)) free_one(rng() % live.size());
        CUdeviceptr p = 0;
        CUresult r = cuMemAlloc_v2(&p, size(rng));
        if (r == CUDA_SUCCESS) {
          ok++;
          live.push_back(p);
        } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
          oom++;
        } else {
          other++;
        }
      }
      while (!live.empty()) free_one(live.size() - 1);
    });
  for (auto& th : pool) th.join();
  out["allocs"] = ok.load();
  out["oom"] = oom.load();
  out["other_errors"] = other.load();
  out["frees"] = frees.load();
  out["free_errors"] = free_errors.load();
  return CUDA_SUCCESS;
}

// Forks from a new thread that holds an allocation of SIZE bytes. The child exits 0 ("quiet": it
// touches no CUDA call) or with the result of cuMemAlloc_v2(1 MiB) ("touch": what a driver gives a
// forked child); the parent waits, then frees.
CUresult fork_thread_step(const Args& a, State&, json& out) {
  CUcontext ctx;
  if (CUresult r = cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  bool touch = a[1] == "touch";
  if (!touch && a[1] != "quiet") script_error("fork-thread SIZE quiet|touch");
  CUresult result = CUDA_SUCCESS;
  std::thread th([&] {
    cuCtxSetCurrent(ctx);
    CUdeviceptr p = 0;
    if ((result = cuMemAlloc_v2(&p, size_arg(a[0]))) != CUDA_SUCCESS) return;
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      CUdeviceptr q = 0;
      std::exit(touch ? int(cuMemAlloc_v2(&q, 1 << 20)) : 0);  // atexit handlers run, ours too
    }
    int status = 0;
    waitpid(pid, &status, 0);
    out["child_exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    out["child_signal"] = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    result = cuMemFree_v2(p);
  });
  th.join();
  return result;
}

// Signal handlers that only count (as Python's do: the application decides later what a signal
// means), so a test can see that a wait ended by SIGINT/SIGTERM left the application its signal.
std::atomic<int> g_sigint{0}, g_sigterm{0};

void count_signal(int sig) {
  if (sig == SIGINT) g_sigint.fetch_add(1);
  else g_sigterm.fetch_add(1);
}

CUresult catch_signals_step(const Args&, State&, json&) {
  struct sigaction sa{};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return CUDA_SUCCESS;
}

// Blocks until PATH exists (polling: a test's barrier).
CUresult hold_file_step(const Args& a, State&, json&) {
  struct stat st;
  while (stat(a[0].c_str(), &st) != 0) usleep(2000);
  return CUDA_SUCCESS;
}

CUresult touch_step(const Args& a, State&, json&) {
  FILE* f = std::fopen(a[0].c_str(), "w");
  if (f) std::fclose(f);
  return CUDA_SUCCESS;
}

int run_script(int argc, char** argv, int first);

// fork; the child runs the rest of the command line as its own script and exits 0; the parent
// waits for it and reports how it ended.
CUresult fork_run_step(const Args&, State&, json&) { return CUDA_SUCCESS; }  // see run_script

// fork + exec of the rest of the command line; waits for it.
CUresult fork_exec_step(const Args& a, State&, json& out) {
  std::vector<char*> argv;
  for (const auto& s : a) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  out["child_exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out["child_signal"] = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return CUDA_SUCCESS;
}

// The stream graph steps use (created on first use, non-blocking).
CUresult graph_stream(State& s, CUstream* out) {
  if (!s.graph_stream)
    if (CUresult r = cuStreamCreate(&s.graph_stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
  *out = s.graph_stream;
  return CUDA_SUCCESS;
}

// graph-node SIZE NAME: a graph of an allocation node of SIZE on device 0 and its free node,
// instantiated as NAME. graph-capture SIZE NAME: the same from stream capture of
// cuMemAllocAsync + cuMemFreeAsync.
CUresult graph_mem_step(const Args& a, State& s, json& out, bool capture) {
  CUstream st;
  if (CUresult r = graph_stream(s, &st); r != CUDA_SUCCESS) return r;
  CUgraph g;
  CUdeviceptr p = 0;
  if (capture) {
    if (CUresult r = cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) return r;
    CUresult r = cuMemAllocAsync(&p, size_arg(a[0]), st);
    if (r == CUDA_SUCCESS) r = cuMemFreeAsync(p, st);
    CUresult e = cuStreamEndCapture(st, &g);
    if (r != CUDA_SUCCESS) return r;
    if (e != CUDA_SUCCESS) return e;
  } else {
    if (CUresult r = cuGraphCreate(&g, 0); r != CUDA_SUCCESS) return r;
    CUDA_MEM_ALLOC_NODE_PARAMS prm{};
    prm.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    prm.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prm.poolProps.location.id = 0;
    prm.bytesize = size_arg(a[0]);
    CUgraphNode alloc, freed;
    if (CUresult r = cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &prm); r != CUDA_SUCCESS) return r;
    if (CUresult r = cuGraphAddMemFreeNode(&freed, g, &alloc, 1, prm.dptr); r != CUDA_SUCCESS) return r;
    p = prm.dptr;
  }
  out["ptr"] = p;
  CUgraphExec x;
  if (CUresult r = cuGraphInstantiateWithFlags(&x, g, 0); r != CUDA_SUCCESS) return r;
  s.execs[a[1]] = x;
  return CUDA_SUCCESS;
}

struct Step {
  const char* name;
  int args;  // -1: all remaining words
  std::function<CUresult(const Args&, State&, json&)> run;
};

const std::vector<Step>& steps() {
  static const std::vector<Step> kSteps = {
      {"init", 0, [](const Args&, State&, json& o) { o["pid"] = getpid(); return cuInit(0); }},
      {"ctx", 1,
       [](const Args& a, State&, json&) {
         CUcontext c;
         CUresult r = cuDevicePrimaryCtxRetain(&c, device_arg(a, 0));
         return r == CUDA_SUCCESS ? cuCtxSetCurrent(c) : r;
       }},
      {"ctx-release", 1, [](const Args& a, State&, json&) { return cuDevicePrimaryCtxRelease_v2(device_arg(a, 0)); }},
      {"ctx-reset", 1, [](const Args& a, State&, json&) { return cuDevicePrimaryCtxReset_v2(device_arg(a, 0)); }},
      {"ctx-create", 1,
       [](const Args& a, State& s, json&) {
         CUcontext c;
         CUresult r = cuCtxCreate_v4(&c, nullptr, 0, device_arg(a, 0));
         if (r == CUDA_SUCCESS) s.created.push_back(c);
         return r;
       }},
      {"ctx-create-v2", 1,
       [](const Args& a, State& s, json&) {
         CUcontext c;
         CUresult r = cuCtxCreate_v2(&c, 0, device_arg(a, 0));
         if (r == CUDA_SUCCESS) s.created.push_back(c);
         return r;
       }},
      {"ctx-destroy", 0,
       [](const Args&, State& s, json&) {
         if (s.created.empty()) script_error("ctx-destroy without ctx-create");
         CUcontext c = s.created.back();
         s.created.pop_back();
         return cuCtxDestroy_v2(c);
       }},
      {"alloc", 2,
       [](const Args& a, State& s, json& o) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAlloc_v2(&p, size_arg(a[0]));
         if (r == CUDA_SUCCESS) s.ptrs[a[1]] = p;
         o["ptr"] = p;
         return r;
       }},
      {"alloc-v1", 2,
       [](const Args& a, State& s, json&) {
         CUdeviceptr_v1 p = 0;
         CUresult r = cuMemAlloc(&p, unsigned(size_arg(a[0])));
         if (r == CUDA_SUCCESS) s.ptrs_v1[a[1]] = p;
         return r;
       }},
      {"free-v1", 1, [](const Args& a, State& s, json&) { return cuMemFree(named(s.ptrs_v1, a[0])); }},
      {"managed", 2,
       [](const Args& a, State& s, json&) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAllocManaged(&p, size_arg(a[0]), CU_MEM_ATTACH_GLOBAL);
         if (r == CUDA_SUCCESS) s.ptrs[a[1]] = p;
         return r;
       }},
      {"pitch", 4,
       [](const Args& a, State& s, json& o) {
         CUdeviceptr p = 0;
         size_t pitch = 0;
         CUresult r = cuMemAllocPitch_v2(&p, &pitch, size_arg(a[0]), size_arg(a[1]), unsigned(std::stoul(a[2])));
         if (r == CUDA_SUCCESS) s.ptrs[a[3]] = p;
         o["pitch"] = pitch;
         return r;
       }},
      {"free", 1, [](const Args& a, State& s, json&) { return cuMemFree_v2(named(s.ptrs, a[0])); }},
      {"free-ptr", 1, [](const Args& a, State&, json&) { return cuMemFree_v2(CUdeviceptr(std::stoull(a[0]))); }},
      {"async", 2,
       [](const Args& a, State& s, json&) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAllocAsync(&p, size_arg(a[0]), nullptr);
         if (r == CUDA_SUCCESS) s.ptrs[a[1]] = p;
         return r;
       }},
      {"async-ptsz", 2,
       [](const Args& a, State& s, json&) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAllocAsync_ptsz(&p, size_arg(a[0]), nullptr);
         if (r == CUDA_SUCCESS) s.ptrs[a[1]] = p;
         return r;
       }},
      {"pool-create", 1,
       [](const Args& a, State& s, json&) {
         CUmemPoolProps props{};
         props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
         props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
         props.location.id = 0;
         CUmemoryPool pool = nullptr;
         CUresult r = cuMemPoolCreate(&pool, &props);
         if (r == CUDA_SUCCESS) s.pools[a[0]] = pool;
         return r;
       }},
      {"pool-keep", 2,
       [](const Args& a, State& s, json&) {
         cuuint64_t threshold = size_arg(a[1]);
         return cuMemPoolSetAttribute(named(s.pools, a[0]), CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
       }},
      {"pool-reserved", 1,
       [](const Args& a, State& s, json& o) {
         cuuint64_t v = 0;
         CUresult r = cuMemPoolGetAttribute(named(s.pools, a[0]), CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
         o["reserved"] = v;
         return r;
       }},
      {"pool-alloc", 3,
       [](const Args& a, State& s, json&) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAllocFromPoolAsync(&p, size_arg(a[1]), named(s.pools, a[0]), nullptr);
         if (r == CUDA_SUCCESS) s.ptrs[a[2]] = p;
         return r;
       }},
      {"pool-alloc-ptsz", 3,
       [](const Args& a, State& s, json&) {
         CUdeviceptr p = 0;
         CUresult r = cuMemAllocFromPoolAsync_ptsz(&p, size_arg(a[1]), named(s.pools, a[0]), nullptr);
         if (r == CUDA_SUCCESS) s.ptrs[a[2]] = p;
         return r;
       }},
      {"free-async", 1, [](const Args& a, State& s, json&) { return cuMemFreeAsync(named(s.ptrs, a[0]), nullptr); }},
      {"free-async-ptsz", 1,
       [](const Args& a, State& s, json&) { return cuMemFreeAsync_ptsz(named(s.ptrs, a[0]), nullptr); }},
      {"pool-trim", 2,
       [](const Args& a, State& s, json&) { return cuMemPoolTrimTo(named(s.pools, a[0]), size_arg(a[1])); }},
      {"pool-destroy", 1, [](const Args& a, State& s, json&) { return cuMemPoolDestroy(named(s.pools, a[0])); }},
      {"sync", 0, [](const Args&, State&, json&) { return cuCtxSynchronize(); }},
      {"vmm", 2, [](const Args& a, State& s, json& o) { return vmm_create(a, s, o, CU_MEM_LOCATION_TYPE_DEVICE); }},
      {"vmm-host", 2, [](const Args& a, State& s, json& o) { return vmm_create(a, s, o, CU_MEM_LOCATION_TYPE_HOST); }},
      {"release", 1, [](const Args& a, State& s, json&) { return cuMemRelease(named(s.vmm, a[0])); }},
      {"array", 3,
       [](const Args& a, State& s, json& o) {
         return array_create(a, s, unsigned(std::stoul(a[0])), unsigned(std::stoul(a[1])), 0, o);
       }},
      {"array3d", 4,
       [](const Args& a, State& s, json& o) {
         return array_create(a, s, unsigned(std::stoul(a[0])), unsigned(std::stoul(a[1])),
                             unsigned(std::stoul(a[2])), o);
       }},
      {"mipmap", 4,
       [](const Args& a, State& s, json&) {
         CUDA_ARRAY3D_DESCRIPTOR d{};
         d.Width = std::stoul(a[0]);
         d.Height = std::stoul(a[1]);
         d.Format = CU_AD_FORMAT_FLOAT;
         d.NumChannels = 1;
         CUmipmappedArray m = nullptr;
         CUresult r = cuMipmappedArrayCreate(&m, &d, unsigned(std::stoul(a[2])));
         if (r == CUDA_SUCCESS) s.mipmaps[a[3]] = m;
         return r;
       }},
      {"array-destroy", 1, [](const Args& a, State& s, json&) { return cuArrayDestroy(named(s.arrays, a[0])); }},
      {"mipmap-destroy", 1,
       [](const Args& a, State& s, json&) { return cuMipmappedArrayDestroy(named(s.mipmaps, a[0])); }},
      {"meminfo", 0,
       [](const Args&, State&, json& o) {
         size_t f = 0, t = 0;
         CUresult r = cuMemGetInfo_v2(&f, &t);
         o["free"] = f;
         o["total"] = t;
         return r;
       }},
      {"meminfo-v1", 0,
       [](const Args&, State&, json& o) {
         unsigned f = 0, t = 0;
         CUresult r = cuMemGetInfo(&f, &t);
         o["free"] = f;
         o["total"] = t;
         return r;
       }},
      {"total-mem", 1,
       [](const Args& a, State&, json& o) {
         size_t t = 0;
         CUresult r = cuDeviceTotalMem_v2(&t, device_arg(a, 0));
         o["total"] = t;
         return r;
       }},
      {"launch", 1,
       [](const Args& a, State& s, json& o) {
         return launch_n(s, std::stoull(a[0]), o, [](CUfunction f, void** p) {
           return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, p, nullptr);
         });
       }},
      {"timeslice-entries", 0, [](const Args&, State& s, json& o) { return timeslice_entries(s, o); }},
      {"launch-ptsz", 1,
       [](const Args& a, State& s, json& o) {
         return launch_n(s, std::stoull(a[0]), o, [](CUfunction f, void** p) {
           return cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, p, nullptr);
         });
       }},
      {"launch-ex", 1,
       [](const Args& a, State& s, json& o) {
         return launch_n(s, std::stoull(a[0]), o, [](CUfunction f, void** p) {
           CUlaunchConfig cfg{};
           cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
           cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
           return cuLaunchKernelEx(&cfg, f, p, nullptr);
         });
       }},
      {"launch-coop", 1,
       [](const Args& a, State& s, json& o) {
         return launch_n(s, std::stoull(a[0]), o, [](CUfunction f, void** p) {
           return cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, p);
         });
       }},
      {"graph-launch", 1,
       [](const Args& a, State& s, json& o) {
         // Capture one spin launch on a new stream into a graph, then launch the graph N times.
         CUfunction f;
         if (CUresult r = spin_function(s, &f); r != CUDA_SUCCESS) return r;
         CUstream st;
         if (CUresult r = cuStreamCreate(&st, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) return r;
         unsigned long long ns = 0;
         void* params[] = {&ns};
         CUgraph g;
         CUgraphExec ge;
         if (CUresult r = cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL); r != CUDA_SUCCESS) return r;
         if (CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, params, nullptr); r != CUDA_SUCCESS) return r;
         if (CUresult r = cuStreamEndCapture(st, &g); r != CUDA_SUCCESS) return r;
         if (CUresult r = cuGraphInstantiateWithFlags(&ge, g, 0); r != CUDA_SUCCESS) return r;
         uint64_t n = std::stoull(a[0]), done = 0;
         CUresult r = CUDA_SUCCESS;
         for (; done < n; ++done)
           if ((r = cuGraphLaunch(ge, st)) != CUDA_SUCCESS) break;
         o["launched"] = done;
         if (r == CUDA_SUCCESS) r = cuStreamSynchronize(st);
         cuGraphExecDestroy(ge);
         cuGraphDestroy(g);
         cuStreamDestroy_v2(st);
         return r;
       }},
      {"graph-node", 2, [](const Args& a, State& s, json& o) { return graph_mem_step(a, s, o, false); }},
      {"graph-capture", 2, [](const Args& a, State& s, json& o) { return graph_mem_step(a, s, o, true); }},
      {"graph-run", 1,
       [](const Args& a, State& s, json&) {
         CUstream st;
         if (CUresult r = graph_stream(s, &st); r != CUDA_SUCCESS) return r;
         return cuGraphLaunch(named(s.execs, a[0]), st);
       }},
      {"graph-upload", 1,
       [](const Args& a, State& s, json&) {
         CUstream st;
         if (CUresult r = graph_stream(s, &st); r != CUDA_SUCCESS) return r;
         return cuGraphUpload(named(s.execs, a[0]), st);
       }},
      {"graph-trim", 0, [](const Args&, State&, json&) { return cuDeviceGraphMemTrim(0); }},
      {"graph-mem", 0,
       [](const Args&, State&, json& o) {
         cuuint64_t reserved = 0, used = 0;
         CUresult r = cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
         if (r == CUDA_SUCCESS) r = cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
         o["reserved"] = reserved;
         o["used"] = used;
         return r;
       }},
      {"null-alloc", 0, [](const Args&, State&, json&) { return cuMemAlloc_v2(nullptr, 1 << 20); }},
      {"null-meminfo", 0,
       [](const Args&, State&, json& o) {
         size_t v = 0;
         o["both_null"] = err_name(cuMemGetInfo_v2(nullptr, nullptr));
         o["free_null"] = err_name(cuMemGetInfo_v2(nullptr, &v));
         o["total_null"] = err_name(cuMemGetInfo_v2(&v, nullptr));
         o["total_mem_null"] = err_name(cuDeviceTotalMem_v2(nullptr, 0));
         return CUDA_SUCCESS;
       }},
      {"null-pool", 0,
       [](const Args&, State&, json& o) {
         CUdeviceptr p = 0;
         o["from_null_pool"] = err_name(cuMemAllocFromPoolAsync(&p, 1024, nullptr, nullptr));
         o["pool_create_null"] = err_name(cuMemPoolCreate(nullptr, nullptr));
         o["vmm_null_prop"] = err_name(cuMemCreate(nullptr, 1 << 21, nullptr, 0));
         o["array_null_desc"] = err_name(cuArrayCreate_v2(nullptr, nullptr));
         return CUDA_SUCCESS;
       }},
      {"threads", 4, threads_step},
      {"fork-thread", 2, fork_thread_step},
      {"fork-exec", -1, fork_exec_step},
      {"fork-run", -1, fork_run_step},
      {"catch-signals", 0, catch_signals_step},
      {"signals", 0,
       [](const Args&, State&, json& o) {
         o["sigint"] = g_sigint.load();
         o["sigterm"] = g_sigterm.load();
         return CUDA_SUCCESS;
       }},
      {"hold-file", 1, hold_file_step},
      {"pthread-exit", 0,
       [](const Args&, State&, json&) {
         std::fflush(stdout);
         pthread_exit(nullptr);  // the process ends when its last thread does
         return CUDA_SUCCESS;
       }},
      {"touch", 1, touch_step},
      {"spin", 5, spin_loop},
      {"capture-spin", 1, capture_spin},
      {"burst", 6, burst_loop},
  };
  return kSteps;
}

int run_script(int argc, char** argv, int first) {
  State state;
  for (int i = first; i < argc;) {
    std::string name = argv[i++];
    const Step* step = nullptr;
    for (const Step& s : steps())
      if (name == s.name) step = &s;
    if (!step) script_error("unknown step \"" + name + "\"");
    if (name == "fork-run") {  // the rest of the line is the child's script
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) std::exit(run_script(argc, argv, i));
      int status = 0;
      waitpid(pid, &status, 0);
      json out;
      out["step"] = name;
      out["child_exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      out["child_signal"] = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      out["rc"] = 0;
      out["rc_name"] = "CUDA_SUCCESS";
      std::printf("%s\n", out.dump().c_str());
      std::fflush(stdout);
      return 0;
    }
    Args args;
    int n = step->args < 0 ? argc - i : step->args;
    if (i + n > argc) script_error("step \"" + name + "\" takes " + std::to_string(n) + " arguments");
    for (int k = 0; k < n; ++k) args.push_back(argv[i++]);
    json out;
    out["step"] = name;
    CUresult r = step->run(args, state, out);
    out["rc"] = int(r);
    out["rc_name"] = err_name(r);
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_script(argc, argv, 1); }
