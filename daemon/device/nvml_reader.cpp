#include "device/nvml_reader.h"

#include <dlfcn.h>

#include "util/log.h"

namespace coloc::device {

namespace {

// The few NVML declarations colocd uses, copied from nvml.h (the NVIDIA Management Library's
// header: nvmlReturn_t, nvmlDevice_t, nvmlMemory_t and the functions' prototypes). Declared here
// so that building colocd needs no NVML headers.
using nvmlReturn_t = int;  // enum nvmlReturn_enum
constexpr nvmlReturn_t NVML_SUCCESS = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;   // bytes
  unsigned long long used;   // bytes
};
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
// nvml.h: #define NVML_VALUE_NOT_AVAILABLE (-1), in unsigned long long fields.
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;
// nvml.h: nvmlProcessInfo_t (= nvmlProcessInfo_v2_t's layout), the struct of
// nvmlDeviceGetComputeRunningProcesses_v3. The unversioned export takes nvmlProcessInfo_v1_t (pid
// and usedGpuMemory only): never call it with this struct.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or NVML_VALUE_NOT_AVAILABLE
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24);
using nvmlDeviceGetComputeRunningProcesses_v3_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* infoCount,
                                                                    nvmlProcessInfo_t* infos);
using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t);
using nvmlDeviceGetHandleByUUID_fn = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t (*)(unsigned int* count);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using nvmlDeviceGetUUID_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetName_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using nvmlDeviceGetIndex_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* index);

}  // namespace

struct NvmlReader::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;  // optional
  nvmlDeviceGetHandleByUUID_fn by_uuid = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory_info = nullptr;
  nvmlDeviceGetComputeRunningProcesses_v3_fn processes = nullptr;  // optional
  nvmlDeviceGetCount_v2_fn count = nullptr;                        // optional (devices())
  nvmlDeviceGetHandleByIndex_v2_fn by_index = nullptr;             // optional
  nvmlDeviceGetUUID_fn uuid = nullptr;                             // optional
  nvmlDeviceGetName_fn name = nullptr;                             // optional (model())
  nvmlDeviceGetIndex_fn index = nullptr;                           // optional (devices())
};

NvmlReader::NvmlReader(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

NvmlReader::~NvmlReader() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) ::dlclose(handle_);
}

std::string NvmlReader::error_text(int rc) const {
  const char* s = api_->error_string ? api_->error_string(rc) : nullptr;
  return (s ? std::string(s) : std::string("error")) + " (nvmlReturn_t " + std::to_string(rc) + ")";
}

Result<std::unique_ptr<NvmlReader>> NvmlReader::open(const std::string& library) {
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    return Error{0, "cannot load " + library + ": " + (e ? e : "unknown error")};
  }
  auto api = std::make_unique<Api>();
  auto sym = [&](const char* name) { return ::dlsym(h, name); };
  api->init = reinterpret_cast<nvmlInit_v2_fn>(sym("nvmlInit_v2"));
  api->shutdown = reinterpret_cast<nvmlShutdown_fn>(sym("nvmlShutdown"));
  api->error_string = reinterpret_cast<nvmlErrorString_fn>(sym("nvmlErrorString"));
  api->by_uuid = reinterpret_cast<nvmlDeviceGetHandleByUUID_fn>(sym("nvmlDeviceGetHandleByUUID"));
  api->memory_info = reinterpret_cast<nvmlDeviceGetMemoryInfo_fn>(sym("nvmlDeviceGetMemoryInfo"));
  api->processes =
      reinterpret_cast<nvmlDeviceGetComputeRunningProcesses_v3_fn>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
  api->count = reinterpret_cast<nvmlDeviceGetCount_v2_fn>(sym("nvmlDeviceGetCount_v2"));
  api->by_index = reinterpret_cast<nvmlDeviceGetHandleByIndex_v2_fn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  api->uuid = reinterpret_cast<nvmlDeviceGetUUID_fn>(sym("nvmlDeviceGetUUID"));
  api->name = reinterpret_cast<nvmlDeviceGetName_fn>(sym("nvmlDeviceGetName"));
  api->index = reinterpret_cast<nvmlDeviceGetIndex_fn>(sym("nvmlDeviceGetIndex"));
  const char* missing = !api->init ? "nvmlInit_v2"
                        : !api->shutdown ? "nvmlShutdown"
                        : !api->by_uuid ? "nvmlDeviceGetHandleByUUID"
                        : !api->memory_info ? "nvmlDeviceGetMemoryInfo"
                                            : nullptr;
  if (missing) {
    ::dlclose(h);
    return Error{0, library + " has no " + missing};
  }
  std::unique_ptr<NvmlReader> r(new NvmlReader(h, std::move(api)));
  if (nvmlReturn_t rc = r->api_->init(); rc != NVML_SUCCESS) {
    std::string text = "nvmlInit_v2 failed: " + r->error_text(rc);
    r->api_->shutdown = nullptr;  // nothing to shut down
    return Error{0, text};
  }
  return r;
}

void* NvmlReader::handle_of(const broker::Uuid& uuid) {
  auto it = devices_.find(uuid);
  if (it != devices_.end()) return it->second;
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t rc = api_->by_uuid(uuid.str().c_str(), &dev);
  if (rc != NVML_SUCCESS) {
    // Retried at the next read (a lookup is cheap); logged once.
    if (warned_.insert(uuid).second)
      log::get("device")->warn(
          "NVML: nvmlDeviceGetHandleByUUID: {} for device {}; its outside-coloc estimate comes from client reports only",
          error_text(rc), uuid.str());
    return nullptr;
  }
  return devices_.emplace(uuid, static_cast<void*>(dev)).first->second;
}

std::optional<DeviceMemory> NvmlReader::memory(const broker::Uuid& uuid) {
  void* dev = handle_of(uuid);
  if (!dev) return std::nullopt;
  nvmlMemory_t m{};
  nvmlReturn_t rc = api_->memory_info(static_cast<nvmlDevice_t>(dev), &m);
  if (rc != NVML_SUCCESS) {
    if (warned_.insert(uuid).second)
      log::get("device")->warn(
          "NVML: nvmlDeviceGetMemoryInfo: {} for device {}; its outside-coloc estimate comes from client reports only",
          error_text(rc), uuid.str());
    return std::nullopt;
  }
  warned_.erase(uuid);
  return DeviceMemory{broker::Bytes(m.total), broker::Bytes(m.free)};
}

std::optional<std::string> NvmlReader::model(const broker::Uuid& uuid) {
  if (!api_->name) return std::nullopt;
  void* dev = handle_of(uuid);
  if (!dev) return std::nullopt;
  char buf[96] = {};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
  if (api_->name(static_cast<nvmlDevice_t>(dev), buf, sizeof buf) != NVML_SUCCESS) return std::nullopt;
  buf[sizeof buf - 1] = '\0';
  std::string s(buf);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

std::optional<std::vector<ProcessMemory>> NvmlReader::processes(const broker::Uuid& uuid) {
  if (!api_->processes) return std::nullopt;
  void* dev = handle_of(uuid);
  if (!dev) return std::nullopt;
  // The list can grow between two calls: retry with the count NVML asks for (plus room), a few times.
  std::vector<nvmlProcessInfo_t> infos(16);
  nvmlReturn_t rc = NVML_SUCCESS;
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int n = unsigned(infos.size());
    rc = api_->processes(static_cast<nvmlDevice_t>(dev), &n, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && n <= 65536) {
      infos.resize(size_t(n) + 8);
      continue;
    }
    if (rc != NVML_SUCCESS) break;
    std::vector<ProcessMemory> out;
    for (unsigned int i = 0; i < n && i < infos.size(); ++i)
      out.push_back({int32_t(infos[i].pid), infos[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE
                                                ? broker::kUnknown
                                                : broker::Bytes(infos[i].usedGpuMemory)});
    warned_processes_.erase(uuid);
    return out;
  }
  if (warned_processes_.insert(uuid).second)
    log::get("device")->warn("NVML: nvmlDeviceGetComputeRunningProcesses_v3: {} for device {}; its driver overhead "
                             "is not reconciled until it reads again",
                             error_text(rc), uuid.str());
  return std::nullopt;
}

std::optional<std::vector<broker::Uuid>> NvmlReader::devices() {
  if (index_) return index_;
  if (!api_->count || !api_->by_index || !api_->uuid) return std::nullopt;
  unsigned int n = 0;
  if (api_->count(&n) != NVML_SUCCESS || n > 1024) return std::nullopt;
  // Each device at the index nvmlDeviceGetIndex gives it (the DCGM exporter's `gpu` label), where
  // the library has it; the enumeration's position otherwise (the same on NVIDIA's NVML).
  std::vector<std::optional<broker::Uuid>> at(n);
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    char text[96] = {};
    broker::Uuid u;
    unsigned int index = i;
    if (api_->by_index(i, &dev) != NVML_SUCCESS || api_->uuid(dev, text, sizeof text - 1) != NVML_SUCCESS ||
        !broker::Uuid::parse(text, &u) || (api_->index && api_->index(dev, &index) != NVML_SUCCESS) || index >= n ||
        at[index]) {
      if (!index_warned_)
        log::get("device")->warn("NVML: cannot read the UUID or index of device {}; devices are numbered in colocd's order", i);
      index_warned_ = true;
      return std::nullopt;
    }
    at[index] = u;
  }
  std::vector<broker::Uuid> out;
  for (auto& u : at) out.push_back(*u);
  index_ = std::move(out);
  return index_;
}

}  // namespace coloc::device
