// daemon/device/memory_reader.h — how colocd reads a device's free memory itself, without waiting
// for a client to report it: the ground truth behind the broker's estimate of memory used outside
// coloc (Broker::refresh_outside).
//
// The engine holds one reader (NvmlReader in colocd, a fake in tests) and asks it on its sampling
// timer and whenever a request finds too little room. Readers are called on the daemon's loop
// thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "broker/types.h"

namespace coloc::device {

/// One reading of a device's memory (bytes).
struct DeviceMemory {
  broker::Bytes total = 0;
  broker::Bytes free = 0;
};

/// One process's memory on a device, as the driver counts it (bytes; broker::kUnknown when the
/// driver does not say: NVML_VALUE_NOT_AVAILABLE).
struct ProcessMemory {
  int32_t pid = 0;
  broker::Bytes used = broker::kUnknown;
};

class MemoryReader {
 public:
  virtual ~MemoryReader() = default;

  /// A short name for logs and status ("nvml").
  virtual const char* name() const = 0;

  /// The memory of the device `uuid` (as cuDeviceGetUuid gives it), in bytes, as the driver sees
  /// it: `total` its capacity, `free` what no process holds (every process's allocations count,
  /// under coloc or not). nullopt when the reader does not know the device or the read failed (the
  /// caller then keeps its estimate); the reader logs such a failure itself, once until the device
  /// reads again.
  virtual std::optional<DeviceMemory> memory(const broker::Uuid& uuid) = 0;

  /// The processes holding memory on the device `uuid`, each with what the driver counts for it
  /// (its contexts, module images and allocations: more than any ledger sees). nullopt when the
  /// reader cannot tell (not supported, the read failed): the caller then keeps what it had.
  /// Called on the sampling timer only, never per request.
  virtual std::optional<std::vector<ProcessMemory>> processes(const broker::Uuid& uuid) {
    (void)uuid;
    return std::nullopt;
  }

  /// Every device the reader knows, in its index order (NVML's: nvidia-smi's numbering, which
  /// `coloc policy` and `coloc status` use). nullopt when the reader cannot tell.
  virtual std::optional<std::vector<broker::Uuid>> devices() { return std::nullopt; }

  /// The device's model name ("NVIDIA H200"), part of a job's history fingerprint. nullopt when
  /// the reader cannot tell.
  virtual std::optional<std::string> model(const broker::Uuid& uuid) {
    (void)uuid;
    return std::nullopt;
  }
};

}  // namespace coloc::device
