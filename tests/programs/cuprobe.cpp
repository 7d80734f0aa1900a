// cuprobe — a scriptable CUDA Driver API client for tests. It runs the steps given on its command
// line, in order, and prints one JSON line per step:
//
//   cuprobe init ctx alloc 1GiB a meminfo fill a 2.5 check a 2.5 free a
//   {"step":"init","rc":0,"rc_name":"CUDA_SUCCESS","pid":1234,"driver_version":13000,"devices":1}
//   {"step":"ctx","rc":0,"rc_name":"CUDA_SUCCESS","device":0}
//   ...
//
// A word that names a step starts a new step; the words after it, up to the next step name, are
// its arguments (so an allocation may not be named like a step). The whole script is checked
// before anything runs. Exit status: 0 when every step ran (a CUDA error is a result, reported in
// "rc"/"rc_name", not a failure of cuprobe), 2 for a malformed script, or the code of `exit`.
//
// It uses only the Driver API and the kernels of tools/workload/kernels.cu, so it runs unchanged
// on simgpu (LD_LIBRARY_PATH=build/sim) and on a real driver. To add a step, add a row to kSteps.
#include <cuda.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/pages.h"
#include "coloc/size.h"
#include "tools/workload/kernels.h"

using json = nlohmann::ordered_json;
using Args = std::vector<std::string>;

namespace {

// A kernel that does nothing, as PTX (JIT-compiled on a real GPU): its duration on simgpu is
// SIMGPU_KERNEL_NS.
constexpr char kNoopPtx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry coloc_noop()\n"
    "{\n"
    "  ret;\n"
    "}\n";

// CLOCK_MONOTONIC in ns (steady_clock is CLOCK_MONOTONIC on Linux): comparable with SIMGPU_TRACE.
uint64_t mono_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

struct Buffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
};

struct Probe {
  std::map<std::string, Buffer> buffers;
  std::map<CUcontext, CUmodule> kernels, noops;  // modules loaded per context
};

// ---- argument kinds: checked for the whole script before it runs ----

enum class Arg { dev, size, name, ns, count, value, path, ms, code };

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno) return false;
  *out = v;
  return true;
}

bool parse_float(const std::string& s, float* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtof(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && errno == 0;
}

bool valid(Arg kind, const std::string& s) {
  uint64_t u;
  float f;
  switch (kind) {
    case Arg::dev: return parse_u64(s, &u) && u < 1024;
    case Arg::size: return bool(coloc::parse_size(s));
    case Arg::ns:
    case Arg::count:
    case Arg::ms: return parse_u64(s, &u);
    case Arg::code: return parse_u64(s, &u) && u < 256;
    case Arg::value: return parse_float(s, &f);
    case Arg::name:
    case Arg::path: return !s.empty();
  }
  return false;
}

uint64_t u64(const std::string& s) {
  uint64_t v = 0;
  parse_u64(s, &v);
  return v;
}
float value(const std::string& s) {
  float v = 0;
  parse_float(s, &v);
  return v;
}
CUdevice device_arg(const Args& a, size_t i) { return a.size() > i ? CUdevice(u64(a[i])) : 0; }

// ---- helpers ----

[[noreturn]] void script_error(const std::string& what) {
  std::fprintf(stderr, "cuprobe: %s\n", what.c_str());
  std::exit(2);
}

Buffer& buffer(Probe& p, const std::string& name) {
  auto it = p.buffers.find(name);
  if (it == p.buffers.end()) script_error("no allocation named \"" + name + "\"");
  return it->second;
}

// The module of tools/workload/kernels.cu (or the no-op PTX) in the current context.
CUresult function(Probe& p, const char* name, CUfunction* f) {
  CUcontext ctx;
  if (CUresult rc = cuCtxGetCurrent(&ctx); rc != CUDA_SUCCESS) return rc;
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  const bool noop = std::strcmp(name, "coloc_noop") == 0;
  auto& modules = noop ? p.noops : p.kernels;
  if (!modules.count(ctx)) {
    CUmodule m;
    CUresult rc = noop ? cuModuleLoadData(&m, kNoopPtx) : cuModuleLoadData(&m, coloc_kernels_fatbin);
    if (rc != CUDA_SUCCESS) return rc;
    modules[ctx] = m;
  }
  return cuModuleGetFunction(f, modules[ctx], name);
}

CUresult launch_n(Probe& p, const char* name, void** params, uint64_t count, json& out) {
  CUfunction f;
  if (CUresult rc = function(p, name, &f); rc != CUDA_SUCCESS) return rc;
  uint64_t launched = 0;
  CUresult rc = CUDA_SUCCESS;
  for (; launched < count; ++launched)
    if ((rc = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr)) != CUDA_SUCCESS) break;
  out["launched"] = launched;
  return rc;
}

// Copies a buffer in 4 MiB pieces through `fn(offset, chunk_bytes, host)`.
template <class F>
CUresult chunked(const Buffer& b, F fn) {
  std::vector<float> host(std::min<size_t>(b.bytes, 4u << 20) / sizeof(float));
  for (size_t off = 0; off < b.bytes; off += host.size() * sizeof(float)) {
    size_t n = std::min(b.bytes - off, host.size() * sizeof(float));
    if (CUresult rc = fn(off, n, host.data()); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

uint64_t vm_rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  return 0;
}

// ---- steps ----

CUresult step_init(Probe&, const Args&, json& out) {
  CUresult rc = cuInit(0);
  out["pid"] = getpid();
  int version = 0;
  if (cuDriverGetVersion(&version) == CUDA_SUCCESS) out["driver_version"] = version;
  int count = 0;
  if (rc == CUDA_SUCCESS && cuDeviceGetCount(&count) == CUDA_SUCCESS) out["devices"] = count;
  return rc;
}

CUresult step_ctx(Probe&, const Args& a, json& out) {
  CUdevice dev;
  if (CUresult rc = cuDeviceGet(&dev, device_arg(a, 0)); rc != CUDA_SUCCESS) return rc;
  CUcontext ctx;
  if (CUresult rc = cuDevicePrimaryCtxRetain(&ctx, dev); rc != CUDA_SUCCESS) return rc;
  out["device"] = dev;
  return cuCtxSetCurrent(ctx);
}

CUresult step_ctx_create(Probe&, const Args& a, json& out) {
  CUdevice dev;
  if (CUresult rc = cuDeviceGet(&dev, device_arg(a, 0)); rc != CUDA_SUCCESS) return rc;
  CUcontext ctx;
  out["device"] = dev;
  return cuCtxCreate(&ctx, nullptr, 0, dev);
}

CUresult step_ctx_destroy(Probe& p, const Args&, json&) {
  CUcontext ctx;
  if (CUresult rc = cuCtxGetCurrent(&ctx); rc != CUDA_SUCCESS) return rc;
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  p.kernels.erase(ctx);
  p.noops.erase(ctx);
  return cuCtxDestroy(ctx);
}

CUresult step_alloc(Probe& p, const Args& a, json& out) {
  const uint64_t bytes = *coloc::parse_size(a[0]).bytes;
  const std::string name = a.size() > 1 ? a[1] : "buf";
  CUdeviceptr ptr = 0;
  CUresult rc = cuMemAlloc(&ptr, bytes);
  out["name"] = name;
  out["bytes"] = bytes;
  if (rc == CUDA_SUCCESS) {
    p.buffers[name] = {ptr, bytes};
    out["ptr"] = uint64_t(ptr);
  }
  return rc;
}

CUresult step_alloc_managed(Probe& p, const Args& a, json& out) {
  const uint64_t bytes = *coloc::parse_size(a[0]).bytes;
  const std::string name = a.size() > 1 ? a[1] : "buf";
  CUdeviceptr ptr = 0;
  CUresult rc = cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL);
  out["name"] = name;
  if (rc == CUDA_SUCCESS) p.buffers[name] = {ptr, bytes};
  return rc;
}

// ---- the checkpoint API, called on another process (PID) ----

const char* state_name(CUprocessState s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING: return "running";
    case CU_PROCESS_STATE_LOCKED: return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    case CU_PROCESS_STATE_FAILED: return "failed";
  }
  return "unknown";
}
CUresult step_ckpt_lock(Probe&, const Args& a, json& out) {
  CUcheckpointLockArgs args{};
  args.timeoutMs = a.size() > 1 ? unsigned(u64(a[1])) : 0;
  const uint64_t t0 = mono_ns();
  CUresult rc = cuCheckpointProcessLock(int(u64(a[0])), &args);
  out["ms"] = double(mono_ns() - t0) / 1e6;
  return rc;
}
CUresult step_ckpt_checkpoint(Probe&, const Args& a, json& out) {
  const uint64_t t0 = mono_ns();
  CUresult rc = cuCheckpointProcessCheckpoint(int(u64(a[0])), nullptr);
  out["ms"] = double(mono_ns() - t0) / 1e6;
  return rc;
}
CUresult step_ckpt_restore(Probe&, const Args& a, json& out) {
  const uint64_t t0 = mono_ns();
  CUresult rc = cuCheckpointProcessRestore(int(u64(a[0])), nullptr);
  out["ms"] = double(mono_ns() - t0) / 1e6;
  return rc;
}
CUresult step_ckpt_unlock(Probe&, const Args& a, json&) { return cuCheckpointProcessUnlock(int(u64(a[0])), nullptr); }
CUresult step_ckpt_state(Probe&, const Args& a, json& out) {
  CUprocessState s = CU_PROCESS_STATE_RUNNING;
  CUresult rc = cuCheckpointProcessGetState(int(u64(a[0])), &s);
  if (rc == CUDA_SUCCESS) out["state"] = state_name(s);
  int tid = 0;
  if (cuCheckpointProcessGetRestoreThreadId(int(u64(a[0])), &tid) == CUDA_SUCCESS) out["restore_tid"] = tid;
  return rc;
}

// The name stays known after the free, so a script can show that using it again is caught.
CUresult step_free(Probe& p, const Args& a, json&) { return cuMemFree(buffer(p, a[0]).ptr); }

CUresult step_meminfo(Probe&, const Args&, json& out) {
  size_t free = 0, total = 0;
  CUresult rc = cuMemGetInfo(&free, &total);
  if (rc == CUDA_SUCCESS) {
    out["free"] = free;
    out["total"] = total;
  }
  return rc;
}

CUresult step_total_mem(Probe&, const Args& a, json& out) {
  size_t bytes = 0;
  CUresult rc = cuDeviceTotalMem(&bytes, device_arg(a, 0));
  if (rc == CUDA_SUCCESS) out["total"] = bytes;
  return rc;
}

CUresult step_uuid(Probe&, const Args& a, json& out) {
  CUuuid u;
  CUresult rc = cuDeviceGetUuid(&u, device_arg(a, 0));
  if (rc != CUDA_SUCCESS) return rc;
  char s[64];
  const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  out["uuid"] = s;
  return rc;
}

CUresult step_name(Probe&, const Args& a, json& out) {
  char name[256];
  CUresult rc = cuDeviceGetName(name, sizeof name, device_arg(a, 0));
  if (rc == CUDA_SUCCESS) out["name"] = name;
  return rc;
}

CUresult step_launch_spin(Probe& p, const Args& a, json& out) {
  unsigned long long ns = u64(a[0]);
  void* params[] = {&ns};
  return launch_n(p, "coloc_spin", params, a.size() > 1 ? u64(a[1]) : 1, out);
}

// coloc_spin(NS) through the deprecated launches: block shape and parameter buffer set with
// cuFuncSetBlockShape / cuParamSetSize / cuParamSetv, then cuLaunch, cuLaunchGrid (1 x 1) and
// cuLaunchGridAsync on the NULL stream: three kernels of NS each.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
CUresult step_launch_legacy(Probe& p, const Args& a, json& out) {
  unsigned long long ns = u64(a[0]);
  CUfunction f;
  if (CUresult rc = function(p, "coloc_spin", &f); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuFuncSetBlockShape(f, 32, 1, 1); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuParamSetSize(f, sizeof ns); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuParamSetv(f, 0, &ns, sizeof ns); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuLaunch(f); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuLaunchGrid(f, 1, 1); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuLaunchGridAsync(f, 1, 1, nullptr); rc != CUDA_SUCCESS) return rc;
  out["launched"] = 3;
  return CUDA_SUCCESS;
}
#pragma GCC diagnostic pop

CUresult step_launch_noop(Probe& p, const Args& a, json& out) {
  return launch_n(p, "coloc_noop", nullptr, a.size() > 0 ? u64(a[0]) : 1, out);
}

CUresult step_sync(Probe&, const Args&, json&) { return cuCtxSynchronize(); }

CUresult step_stream_sync(Probe&, const Args&, json&) { return cuStreamSynchronize(nullptr); }

// ---- stream-ordered allocation, from the current pool of the current context's device ----

CUresult current_pool(CUmemoryPool* pool) {
  CUdevice dev;
  if (CUresult rc = cuCtxGetDevice(&dev); rc != CUDA_SUCCESS) return rc;
  return cuDeviceGetMemPool(pool, dev);
}

// The pool's own numbers (cuMemPoolGetAttribute): what the driver holds, whatever coloc charged.
CUresult pool_numbers(CUmemoryPool pool, json& out) {
  cuuint64_t reserved = 0, high = 0, used = 0;
  if (CUresult rc = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved); rc != CUDA_SUCCESS)
    return rc;
  if (CUresult rc = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used); rc != CUDA_SUCCESS) return rc;
  out["reserved"] = reserved;
  out["reserved_high"] = high;
  out["used"] = used;
  return CUDA_SUCCESS;
}

CUresult step_async(Probe& p, const Args& a, json& out) {
  const uint64_t bytes = *coloc::parse_size(a[0]).bytes;
  const std::string name = a.size() > 1 ? a[1] : "buf";
  CUdeviceptr ptr = 0;
  CUresult rc = cuMemAllocAsync(&ptr, bytes, nullptr);
  out["name"] = name;
  out["bytes"] = bytes;
  if (rc == CUDA_SUCCESS) p.buffers[name] = {ptr, bytes};
  return rc;
}

CUresult step_free_async(Probe& p, const Args& a, json&) { return cuMemFreeAsync(buffer(p, a[0]).ptr, nullptr); }

CUresult step_pool_threshold(Probe&, const Args& a, json&) {
  CUmemoryPool pool;
  if (CUresult rc = current_pool(&pool); rc != CUDA_SUCCESS) return rc;
  cuuint64_t threshold = *coloc::parse_size(a[0]).bytes;
  return cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
}

CUresult step_pool_info(Probe&, const Args&, json& out) {
  CUmemoryPool pool;
  if (CUresult rc = current_pool(&pool); rc != CUDA_SUCCESS) return rc;
  return pool_numbers(pool, out);
}

// COUNT cycles of cuMemAllocAsync + cuMemFreeAsync on the NULL stream, of SIZE x (1 + i mod 8)
// bytes: sizes that the blocks freed before cannot all hold, so the pool keeps growing.
CUresult step_pool_cycles(Probe&, const Args& a, json& out) {
  const uint64_t count = std::stoull(a[0]);
  const uint64_t size = *coloc::parse_size(a[1]).bytes;
  uint64_t ok = 0, oom = 0;
  for (uint64_t i = 0; i < count; ++i) {
    CUdeviceptr ptr = 0;
    CUresult rc = cuMemAllocAsync(&ptr, size * (1 + i % 8), nullptr);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      ++oom;
      continue;
    }
    if (rc != CUDA_SUCCESS) return rc;
    ++ok;
    if (CUresult f = cuMemFreeAsync(ptr, nullptr); f != CUDA_SUCCESS) return f;
  }
  out["ok"] = ok;
  out["oom"] = oom;
  CUmemoryPool pool;
  if (CUresult rc = current_pool(&pool); rc != CUDA_SUCCESS) return rc;
  return pool_numbers(pool, out);
}

CUresult step_fill(Probe& p, const Args& a, json&) {
  Buffer& b = buffer(p, a[0]);
  CUfunction f;
  if (CUresult rc = function(p, "coloc_fill", &f); rc != CUDA_SUCCESS) return rc;
  CUdeviceptr ptr = b.ptr;
  unsigned long long n = b.bytes / sizeof(float);
  float v = value(a[1]);
  void* params[] = {&ptr, &n, &v};
  return cuLaunchKernel(f, 1024, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
}

CUresult step_check(Probe& p, const Args& a, json& out) {
  const Buffer& b = buffer(p, a[0]);
  const float want = value(a[1]);
  uint64_t mismatches = 0;
  int64_t first_bad = -1;
  CUresult rc = chunked(b, [&](size_t off, size_t n, float* host) {
    if (CUresult r = cuMemcpyDtoH(host, b.ptr + off, n); r != CUDA_SUCCESS) return r;
    for (size_t i = 0; i < n / sizeof(float); ++i)
      if (host[i] != want && mismatches++ == 0) first_bad = int64_t(off / sizeof(float) + i);
    return CUDA_SUCCESS;
  });
  if (rc == CUDA_SUCCESS) {
    out["ok"] = mismatches == 0;
    out["mismatches"] = mismatches;
    out["first_bad"] = first_bad;
  }
  return rc;
}

CUresult step_upload(Probe& p, const Args& a, json&) {
  const Buffer& b = buffer(p, a[0]);
  const float v = value(a[1]);
  return chunked(b, [&](size_t off, size_t n, float* host) {
    std::fill(host, host + n / sizeof(float), v);
    return cuMemcpyHtoD(b.ptr + off, host, n);
  });
}

CUresult step_copy(Probe& p, const Args& a, json& out) {
  const Buffer& dst = buffer(p, a[0]);
  const Buffer& src = buffer(p, a[1]);
  const size_t n = std::min(dst.bytes, src.bytes);
  out["bytes"] = n;
  return cuMemcpyDtoD(dst.ptr, src.ptr, n);
}

CUresult step_memset32(Probe& p, const Args& a, json&) {
  const Buffer& b = buffer(p, a[0]);
  float v = value(a[1]);
  unsigned bits;
  std::memcpy(&bits, &v, sizeof bits);
  return cuMemsetD32(b.ptr, bits, b.bytes / 4);
}

CUresult step_rss(Probe&, const Args&, json& out) {
  out["vm_rss_kb"] = vm_rss_kb();
  return CUDA_SUCCESS;
}

// A lying client, as a second preloaded library could be: overwrites the in-use word of slot 0
// of this process's coloc stats page (libcoloc.so maps it from colocd's memfd "coloc-stats",
// which /proc/self/maps names) with SIZE bytes. CUDA_ERROR_NOT_FOUND when there is no such page
// (no colocd, or no libcoloc.so).
CUresult step_forge_in_use(Probe&, const Args& a, json& out) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:coloc-stats") == std::string::npos) continue;
    auto* page = reinterpret_cast<coloc::pages::StatsPage*>(std::strtoull(line.c_str(), nullptr, 16));
    const uint64_t bytes = coloc::parse_size(a[0]).bytes.value_or(0);
    out["was"] = page->slots[0].in_use.load();
    page->slots[0].in_use.store(bytes);
    out["now"] = bytes;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

// Forks; the child calls the driver (it must get an initialization error, as on a real driver) and
// reports what it got through a pipe.
CUresult step_fork(Probe&, const Args&, json& out) {
  int fds[2];
  if (pipe(fds) != 0) script_error("pipe failed");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) script_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    int count = 0;
    CUdeviceptr ptr;
    size_t free = 0, total = 0;
    int rcs[] = {cuInit(0), cuDeviceGetCount(&count), cuMemAlloc(&ptr, 1 << 20), cuMemGetInfo(&free, &total),
                 cuCtxSynchronize()};
    ssize_t w = write(fds[1], rcs, sizeof rcs);
    _exit(w == ssize_t(sizeof rcs) ? 0 : 1);
  }
  close(fds[1]);
  int rcs[5] = {};
  ssize_t n = read(fds[0], rcs, sizeof rcs);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  auto name = [](int rc) {
    const char* s = nullptr;
    return cuGetErrorName(CUresult(rc), &s) == CUDA_SUCCESS && s ? std::string(s) : std::to_string(rc);
  };
  if (n == ssize_t(sizeof rcs))
    out["child"] = {{"cuInit", name(rcs[0])},
                    {"cuDeviceGetCount", name(rcs[1])},
                    {"cuMemAlloc", name(rcs[2])},
                    {"cuMemGetInfo", name(rcs[3])},
                    {"cuCtxSynchronize", name(rcs[4])}};
  out["child_exit"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return CUDA_SUCCESS;
}

CUresult step_hold_file(Probe&, const Args& a, json&) {
  while (access(a[0].c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return CUDA_SUCCESS;
}

CUresult step_touch(Probe&, const Args& a, json&) {
  int fd = open(a[0].c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) script_error("cannot create " + a[0]);
  close(fd);
  return CUDA_SUCCESS;
}

CUresult step_sleep(Probe&, const Args& a, json&) {
  std::this_thread::sleep_for(std::chrono::milliseconds(u64(a[0])));
  return CUDA_SUCCESS;
}

CUresult step_exit(Probe&, const Args& a, json&) {
  std::fflush(stdout);
  std::exit(int(u64(a[0])));
}

struct StepDef {
  const char* name;
  std::vector<Arg> required;
  std::vector<Arg> optional;
  CUresult (*run)(Probe&, const Args&, json&);
  const char* help;
};

const StepDef kSteps[] = {
    {"init", {}, {}, step_init, "cuInit(0); reports pid, driver version, device count"},
    {"ctx", {}, {Arg::dev}, step_ctx, "retain DEV's primary context and make it current"},
    {"ctx-create", {}, {Arg::dev}, step_ctx_create, "cuCtxCreate on DEV (pushed current)"},
    {"ctx-destroy", {}, {}, step_ctx_destroy, "cuCtxDestroy of the current context"},
    {"alloc", {Arg::size}, {Arg::name}, step_alloc, "cuMemAlloc SIZE bytes as NAME (default \"buf\")"},
    {"alloc-managed", {Arg::size}, {Arg::name}, step_alloc_managed, "cuMemAllocManaged SIZE bytes as NAME"},
    {"free", {Arg::name}, {}, step_free, "cuMemFree NAME"},
    {"ckpt-lock", {Arg::count}, {Arg::ms}, step_ckpt_lock, "cuCheckpointProcessLock(PID, timeout MS; 0 none)"},
    {"ckpt-checkpoint", {Arg::count}, {}, step_ckpt_checkpoint, "cuCheckpointProcessCheckpoint(PID)"},
    {"ckpt-restore", {Arg::count}, {}, step_ckpt_restore, "cuCheckpointProcessRestore(PID)"},
    {"ckpt-unlock", {Arg::count}, {}, step_ckpt_unlock, "cuCheckpointProcessUnlock(PID)"},
    {"ckpt-state", {Arg::count}, {}, step_ckpt_state, "cuCheckpointProcessGetState and ...GetRestoreThreadId of PID"},
    {"meminfo", {}, {}, step_meminfo, "cuMemGetInfo: free, total"},
    {"total-mem", {}, {Arg::dev}, step_total_mem, "cuDeviceTotalMem of DEV"},
    {"uuid", {}, {Arg::dev}, step_uuid, "cuDeviceGetUuid of DEV, as GPU-..."},
    {"name", {}, {Arg::dev}, step_name, "cuDeviceGetName of DEV"},
    {"launch-spin", {Arg::ns}, {Arg::count}, step_launch_spin, "launch coloc_spin(NS) COUNT times on the NULL stream"},
    {"launch-legacy", {Arg::ns}, {}, step_launch_legacy,
     "coloc_spin(NS) by cuLaunch, cuLaunchGrid and cuLaunchGridAsync (cuFuncSetBlockShape, cuParamSet*)"},
    {"launch-noop", {}, {Arg::count}, step_launch_noop, "launch an empty PTX kernel COUNT times"},
    {"sync", {}, {}, step_sync, "cuCtxSynchronize"},
    {"stream-sync", {}, {}, step_stream_sync, "cuStreamSynchronize of the NULL stream"},
    {"async", {Arg::size}, {Arg::name}, step_async, "cuMemAllocAsync SIZE bytes on the NULL stream as NAME"},
    {"free-async", {Arg::name}, {}, step_free_async, "cuMemFreeAsync NAME on the NULL stream"},
    {"pool-threshold", {Arg::size}, {}, step_pool_threshold, "set the current pool's release threshold"},
    {"pool-info", {}, {}, step_pool_info, "the current pool's reserved (current, high) and used bytes"},
    {"pool-cycles", {Arg::count, Arg::size}, {}, step_pool_cycles,
     "COUNT cuMemAllocAsync+cuMemFreeAsync cycles of SIZE x (1 + i mod 8); ok, oom, the pool's numbers"},
    {"fill", {Arg::name, Arg::value}, {}, step_fill, "launch coloc_fill over NAME with VALUE"},
    {"check", {Arg::name, Arg::value}, {}, step_check, "copy NAME back; ok when every float is VALUE"},
    {"upload", {Arg::name, Arg::value}, {}, step_upload, "cuMemcpyHtoD floats of VALUE into NAME"},
    {"copy", {Arg::name, Arg::name}, {}, step_copy, "cuMemcpyDtoD DST SRC"},
    {"memset32", {Arg::name, Arg::value}, {}, step_memset32, "cuMemsetD32 NAME with the float VALUE's bits"},
    {"rss", {}, {}, step_rss, "this process's VmRSS in KiB"},
    {"forge-in-use", {Arg::size}, {}, step_forge_in_use,
     "write SIZE into the in-use word of this process's coloc stats page (slot 0): a lying client"},
    {"fork", {}, {}, step_fork, "fork; the child calls the driver and reports the results"},
    {"hold-file", {Arg::path}, {}, step_hold_file, "block until PATH exists"},
    {"touch", {Arg::path}, {}, step_touch, "create PATH"},
    {"sleep", {Arg::ms}, {}, step_sleep, "sleep MS milliseconds (never use it to synchronize)"},
    {"exit", {Arg::code}, {}, step_exit, "exit with CODE now"},
};

const StepDef* find_step(const std::string& word) {
  for (const StepDef& s : kSteps)
    if (word == s.name) return &s;
  return nullptr;
}

void usage() {
  std::fprintf(stderr, "usage: cuprobe STEP [ARGS...] [STEP [ARGS...]]...\nsteps:\n");
  for (const StepDef& s : kSteps) std::fprintf(stderr, "  %-16s %s\n", s.name, s.help);
}

}  // namespace

int main(int argc, char** argv) {
  struct Planned {
    const StepDef* def;
    Args args;
  };
  std::vector<Planned> plan;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (const StepDef* def = find_step(word)) {
      plan.push_back({def, {}});
    } else if (plan.empty()) {
      usage();
      script_error("\"" + word + "\" is not a step");
    } else {
      plan.back().args.push_back(word);
    }
  }
  if (plan.empty()) {
    usage();
    script_error("no steps");
  }
  for (const Planned& p : plan) {
    const auto& req = p.def->required;
    const auto& opt = p.def->optional;
    if (p.args.size() < req.size() || p.args.size() > req.size() + opt.size())
      script_error(std::string("step ") + p.def->name + ": expected " + std::to_string(req.size()) + " to " +
                   std::to_string(req.size() + opt.size()) + " arguments, got " + std::to_string(p.args.size()));
    for (size_t i = 0; i < p.args.size(); ++i) {
      Arg kind = i < req.size() ? req[i] : opt[i - req.size()];
      if (!valid(kind, p.args[i])) script_error(std::string("step ") + p.def->name + ": bad argument \"" + p.args[i] + "\"");
    }
  }

  Probe probe;
  for (const Planned& p : plan) {
    json out = {{"step", p.def->name}};
    CUresult rc = p.def->run(probe, p.args, out);
    const char* name = nullptr;
    out["mono_ns"] = mono_ns();  // when the step returned, on the trace's clock (CLOCK_MONOTONIC)
    out["rc"] = int(rc);
    out["rc_name"] = cuGetErrorName(rc, &name) == CUDA_SUCCESS && name ? name : "UNKNOWN";
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
