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
using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t);
using nvmlDeviceGetHandleByUUID_fn = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlMemory_t* memory);

}  // namespace

struct NvmlReader::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;  // optional
  nvmlDeviceGetHandleByUUID_fn by_uuid = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory_info = nullptr;
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

std::optional<DeviceMemory> NvmlReader::memory(const broker::Uuid& uuid) {
  auto warn_once = [&](const std::string& what) {
    if (warned_.insert(uuid).second)
      log::get("device")->warn("NVML: {} for device {}; its outside-coloc estimate comes from client reports only",
                               what, uuid.str());
  };
  auto it = devices_.find(uuid);
  if (it == devices_.end()) {
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t rc = api_->by_uuid(uuid.str().c_str(), &dev);
    if (rc != NVML_SUCCESS) {
      // Retried at the next read (a lookup is cheap); logged once.
      warn_once(std::string("nvmlDeviceGetHandleByUUID: ") + error_text(rc));
      return std::nullopt;
    }
    it = devices_.emplace(uuid, static_cast<void*>(dev)).first;
  }
  nvmlMemory_t m{};
  nvmlReturn_t rc = api_->memory_info(static_cast<nvmlDevice_t>(it->second), &m);
  if (rc != NVML_SUCCESS) {
    warn_once(std::string("nvmlDeviceGetMemoryInfo: ") + error_text(rc));
    return std::nullopt;
  }
  warned_.erase(uuid);
  return DeviceMemory{broker::Bytes(m.total), broker::Bytes(m.free)};
}

}  // namespace coloc::device
