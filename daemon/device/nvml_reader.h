// daemon/device/nvml_reader.h — MemoryReader over NVML (libnvidia-ml.so.1), loaded with dlopen at
// run time: colocd needs no NVML headers to build and runs on machines without the library.
//
// On simgpu machines build/sim/libnvidia-ml.so.1 (tools/simgpu/nvml/) stands in for it, reading
// the simulated devices' shared state.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "device/memory_reader.h"
#include "util/result.h"

namespace coloc::device {

class NvmlReader final : public MemoryReader {
 public:
  /// Loads `library` (dlopen, so LD_LIBRARY_PATH applies to a bare name) and calls nvmlInit_v2.
  /// Errors: the library cannot be loaded, lacks one of nvmlInit_v2, nvmlShutdown,
  /// nvmlDeviceGetHandleByUUID, nvmlDeviceGetMemoryInfo, or nvmlInit_v2 fails (the message then
  /// carries nvmlErrorString's words, e.g. "Driver Not Loaded").
  static Result<std::unique_ptr<NvmlReader>> open(const std::string& library = "libnvidia-ml.so.1");
  /// nvmlShutdown, then dlclose.
  ~NvmlReader() override;
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  const char* name() const override { return "nvml"; }
  /// nvmlDeviceGetHandleByUUID (cached per device), then nvmlDeviceGetMemoryInfo's `total` and
  /// `free` (bytes).
  std::optional<DeviceMemory> memory(const broker::Uuid& uuid) override;
  /// nvmlDeviceGetComputeRunningProcesses_v3 (optional: nullopt when the library lacks it),
  /// growing its buffer while NVML answers NVML_ERROR_INSUFFICIENT_SIZE (processes can start
  /// between two calls); usedGpuMemory == NVML_VALUE_NOT_AVAILABLE is kUnknown.
  std::optional<std::vector<ProcessMemory>> processes(const broker::Uuid& uuid) override;
  /// nvmlDeviceGetCount_v2, then nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID and
  /// nvmlDeviceGetIndex of each, each UUID at its nvmlDeviceGetIndex (where the library lacks that,
  /// at its position; optional: nullopt when the library lacks the others, a call fails, or two
  /// devices claim one index); read once, then kept (NVML numbers the devices once, at nvmlInit).
  std::optional<std::vector<broker::Uuid>> devices() override;
  /// nvmlDeviceGetName (optional: nullopt when the library lacks it or the call fails).
  std::optional<std::string> model(const broker::Uuid& uuid) override;

 private:
  struct Api;
  NvmlReader(void* handle, std::unique_ptr<Api> api);
  std::string error_text(int rc) const;
  /// The cached nvmlDevice_t of `uuid` (nullptr when NVML does not know it; logged once).
  void* handle_of(const broker::Uuid& uuid);

  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::map<broker::Uuid, void*> devices_;  ///< nvmlDevice_t by UUID
  std::set<broker::Uuid> warned_;          ///< devices whose failure was logged
  std::set<broker::Uuid> warned_processes_;  ///< devices whose process-list failure was logged
  std::optional<std::vector<broker::Uuid>> index_;  ///< devices() once read
  bool index_warned_ = false;                       ///< devices() failed once (logged once)
};

}  // namespace coloc::device
