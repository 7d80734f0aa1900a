// simgpu/nvml/nvml.cpp — a simulated libnvidia-ml.so.1: the few NVML entry points colocd (and a
// monitoring script) use, answered from simgpu's shared state file, the same file every simulated
// process's libcuda.so.1 charges its allocations to. Free memory therefore falls as *any*
// process allocates, under coloc or not, and rises when a process frees or dies (dead processes
// are reclaimed as cuMemGetInfo does, at most every 100 ms).
//
// NVML sees every configured device: CUDA_VISIBLE_DEVICES does not apply (as with the real
// library). Device UUIDs are the ones cuDeviceGetUuid reports ("GPU-…").
//
// The types and prototypes below are copied from nvml.h (the NVIDIA Management Library's header:
// nvmlReturn_t's values, nvmlDevice_t, nvmlMemory_t, the functions' signatures); simgpu builds
// without NVML headers.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../config.h"
#include "../shared_state.h"

#define SIMNVML_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// nvml.h: typedef enum nvmlReturn_enum { ... } nvmlReturn_t;
enum nvmlReturn_t : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999,
};
// nvml.h: NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidBufferSize = 96;
constexpr unsigned kNameBufferSize = 96;

}  // namespace

// nvml.h: typedef struct nvmlDevice_st* nvmlDevice_t; (opaque; here: a physical device index)
struct nvmlDevice_st {
  int index;
};
using nvmlDevice_t = nvmlDevice_st*;
// nvml.h: typedef struct nvmlMemory_st { unsigned long long total, free, used; } nvmlMemory_t;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvml.h: typedef struct nvmlProcessInfo_st { unsigned int pid; unsigned long long usedGpuMemory;
// unsigned int gpuInstanceId; unsigned int computeInstanceId; } nvmlProcessInfo_t; — the struct
// of nvmlDeviceGetComputeRunningProcesses_v3 (the unversioned export takes the older two-field
// nvmlProcessInfo_v1_t, which simgpu does not export).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  ///< bytes (simgpu always knows; NVML may say NVML_VALUE_NOT_AVAILABLE)
  unsigned int gpuInstanceId;        ///< 0xFFFFFFFF when MIG is off
  unsigned int computeInstanceId;    ///< 0xFFFFFFFF when MIG is off
};
static_assert(sizeof(nvmlProcessInfo_t) == 24);

namespace {

struct State {
  std::mutex mu;
  int refs = 0;  // nvmlInit calls not yet matched by nvmlShutdown
  simgpu::Config config;
  std::unique_ptr<simgpu::SharedState> shared;
  std::vector<std::string> uuids;  // "GPU-…", by physical index
  nvmlDevice_st devices[simgpu::kMaxDevices];
};

State& state() {
  static State* s = new State;  // never destroyed: safe to call from other libraries' exit handlers
  return *s;
}

nvmlReturn_t init_locked(State& s) {
  if (s.refs > 0) {
    ++s.refs;
    return NVML_SUCCESS;
  }
  std::string error;
  simgpu::EnvLookup env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  simgpu::Config config;
  if (!simgpu::load_config(env, getuid(), &config, &error)) {
    std::fprintf(stderr, "simgpu (NVML): %s\n", error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  simgpu::OpenFailure why;
  // Observe only: a process using libcuda.so.1 too owns its process slot there.
  auto shared = simgpu::SharedState::open(config.state_dir, config.devices, &error, &why, /*claim=*/false);
  if (!shared) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  // The UUIDs libcuda.so.1 reports: from the state directory's real path and the index.
  char* real = realpath(config.state_dir.c_str(), nullptr);
  std::string dir = real ? real : config.state_dir;
  std::free(real);
  s.uuids.clear();
  for (size_t i = 0; i < config.devices.size(); ++i) {
    s.uuids.push_back(simgpu::format_uuid(simgpu::device_uuid(dir, int(i))));
    s.devices[i].index = int(i);
  }
  s.config = std::move(config);
  s.shared = std::move(shared);
  s.refs = 1;
  return NVML_SUCCESS;
}

bool same_uuid(const std::string& a, const char* b) {
  size_t n = std::strlen(b);
  if (n != a.size()) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

/// The physical index of a handle this library gave out, or -1.
int index_of(State& s, nvmlDevice_t d) {
  for (size_t i = 0; i < s.uuids.size(); ++i)
    if (d == &s.devices[i]) return int(i);
  return -1;
}

nvmlReturn_t copy_string(const std::string& v, char* out, unsigned length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (v.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, v.c_str(), v.size() + 1);
  return NVML_SUCCESS;
}

}  // namespace

SIMNVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  return init_locked(s);
}

SIMNVML_EXPORT nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }

SIMNVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;  // NVML_INIT_FLAG_NO_GPUS / NO_ATTACH: nothing to attach here
  return nvmlInit_v2();
}

SIMNVML_EXPORT nvmlReturn_t nvmlShutdown() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (--s.refs == 0) s.shared.reset();  // unmaps and closes the state file
  return NVML_SUCCESS;
}

SIMNVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
  }
  return "Unknown Error";
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = unsigned(s.uuids.size());
  return NVML_SUCCESS;
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= s.uuids.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &s.devices[index];
  return NVML_SUCCESS;
}

// nvml.h: nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index); NVML's index
// of the device (nvidia-smi's and the DCGM exporter's `gpu`), which ignores CUDA_VISIBLE_DEVICES.
SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  int i = index_of(s, device);
  if (i < 0 || !index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = unsigned(i);
  return NVML_SUCCESS;
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < s.uuids.size(); ++i) {
    if (!same_uuid(s.uuids[i], uuid)) continue;
    *device = &s.devices[i];
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  int i = index_of(s, device);
  if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  return copy_string(s.uuids[size_t(i)], uuid, length < kUuidBufferSize ? length : kUuidBufferSize);
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  int i = index_of(s, device);
  if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
  return copy_string(s.config.devices[size_t(i)].name, name, length < kNameBufferSize ? length : kNameBufferSize);
}

SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  int i = index_of(s, device);
  if (i < 0 || !memory) return NVML_ERROR_INVALID_ARGUMENT;
  simgpu::MemInfo m = s.shared->meminfo(i);
  memory->total = m.capacity;
  memory->used = m.used;
  memory->free = m.capacity - m.used;
  return NVML_SUCCESS;
}

// nvml.h: nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
//     unsigned int* infoCount, nvmlProcessInfo_t* infos);
// Every live simulated process with a context on the device (or memory charged there), with its
// contexts' and allocations' bytes. As NVML documents: with *infoCount too small (0 with infos
// NULL to ask), NVML_ERROR_INSUFFICIENT_SIZE and *infoCount = the count needed; else the entries
// and *infoCount = how many were written.
SIMNVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                    nvmlProcessInfo_t* infos) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.refs == 0) return NVML_ERROR_UNINITIALIZED;
  int i = index_of(s, device);
  if (i < 0 || !infoCount) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<simgpu::ProcessUse> procs = s.shared->processes(i);
  if (procs.size() > *infoCount) {
    *infoCount = unsigned(procs.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (!procs.empty() && !infos) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t k = 0; k < procs.size(); ++k)
    infos[k] = {unsigned(procs[k].pid), procs[k].bytes, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *infoCount = unsigned(procs.size());
  return NVML_SUCCESS;
}
