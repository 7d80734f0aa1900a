// simgpu/config.h — simgpu's configuration, read from the environment at cuInit.
//
//   SIMGPU_DEVICES        comma-separated devices, each `[NAME:]SIZE` ("H100:80GiB,40GiB");
//                         default one 80 GiB device named "SimGPU". At most kMaxDevices.
//   SIMGPU_STATE_DIR      directory of the cross-process state; default /dev/shm/simgpu-$UID
//   SIMGPU_CONTEXT_BYTES  device memory one context costs (a size); default 512 MiB
//   SIMGPU_TIMESLICE_US   longest time slice of a context on a device, µs, 1..10^7; default 2000
//   SIMGPU_KERNEL_NS      duration of kernels other than coloc_spin, ns, 0..10^12; default 10000
//   SIMGPU_QUEUE_DEPTH    pending operations one stream holds before a launch blocks, 1..10^6;
//                         default 1024 (an assumption, see README "Configuration")
//   SIMGPU_TRACE          path of the kernel-slice CSV trace; unset or empty: no trace
//   SIMGPU_FAST           1: launches complete at once (see README); 0 or unset: off
//   SIMGPU_CHECKPOINT_FAULT  faults of this process's checkpoint operations, for tests: a
//                         comma-separated list of OP:stall:MS (the restore thread sleeps MS before
//                         carrying OP out) or OP:fail (OP fails; checkpoint and restore leave the
//                         process CU_PROCESS_STATE_FAILED); OP is lock, checkpoint, restore or unlock
//   CUDA_VISIBLE_DEVICES  indices or UUIDs ("GPU-…", unique prefixes allowed), as the driver reads it
//
// Sizes use the project's grammar (include/coloc/size.h). Everything here is pure: the
// environment comes in through a lookup function, so tests need not touch the real one.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace simgpu {

/// Most devices one SIMGPU_DEVICES may describe (the shared state file has room for this many).
inline constexpr int kMaxDevices = 16;
/// Longest device name kept (cuDeviceGetName callers commonly pass 256-byte buffers).
inline constexpr size_t kMaxDeviceName = 63;

/// One simulated device as configured.
struct DeviceSpec {
  std::string name;   ///< reported by cuDeviceGetName
  uint64_t bytes = 0; ///< capacity in bytes, > 0
  bool operator==(const DeviceSpec&) const = default;
};

/// A checkpoint operation the fault knob can name (SIMGPU_CHECKPOINT_FAULT).
enum class CheckpointOp : uint8_t { lock, checkpoint, restore, unlock };
inline constexpr int kCheckpointOps = 4;
struct CheckpointFault {
  uint32_t stall_ms = 0;  ///< sleep this long before carrying the operation out
  bool fail = false;      ///< then fail it
};

/// Everything simgpu reads from the environment.
struct Config {
  std::vector<DeviceSpec> devices;        ///< physical devices, index = position
  std::string state_dir;                  ///< directory of the shared state
  uint64_t context_bytes = 512ull << 20;  ///< device memory charged per context
  uint64_t timeslice_ns = 2'000'000;      ///< longest slice of a context on a device
  uint64_t kernel_ns = 10'000;            ///< duration of kernels other than coloc_spin
  /// Operations (kernels, graph launches, copies, memsets, event records) one stream holds
  /// queued or running; submitting one more blocks the host thread until one completes. 1..10^6.
  /// The default is an assumption: no public figure exists; users report that launches into one
  /// stream start blocking after about 1,000 pending kernels (NVIDIA developer forums,
  /// "CUDA stream are blocked when launch lots of kernels (>1000)", 2018), so 1024.
  uint32_t queue_depth = 1024;
  std::string trace_path;                 ///< empty: no trace
  bool fast = false;                      ///< SIMGPU_FAST
  std::array<CheckpointFault, kCheckpointOps> checkpoint_faults{};  ///< by CheckpointOp
  std::optional<std::string> visible;     ///< CUDA_VISIBLE_DEVICES when set
};

/// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;

/// Parses SIMGPU_DEVICES. On error returns false and sets *error to a one-line message that
/// names the variable and the offending entry (e.g. `SIMGPU_DEVICES entry 2 "H100:80XB": unknown
/// unit ...`). Errors: empty spec or entry, empty name, name longer than kMaxDeviceName or
/// containing a control character, malformed or zero size, more than kMaxDevices entries.
bool parse_devices(std::string_view spec, std::vector<DeviceSpec>* out, std::string* error);

/// Reads the whole configuration through `env`. `uid` names the default state directory.
/// On error returns false with a one-line message naming the variable.
bool load_config(const EnvLookup& env, unsigned uid, Config* out, std::string* error);

/// A device UUID: 16 bytes, stable for a given state directory and physical index (xxHash3-128 of
/// the directory path and the index).
using Uuid = std::array<unsigned char, 16>;
Uuid device_uuid(std::string_view state_dir, int physical_index);

/// Formats a UUID the way nvidia-smi prints it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string format_uuid(const Uuid& uuid);

/// Applies CUDA_VISIBLE_DEVICES to `uuids` (one per physical device, in order) and returns the
/// physical indices the process sees, in its ordinal order. Entries are trimmed of spaces; an
/// entry is a decimal index or "GPU-" followed by a case-insensitive, unique prefix of a UUID's
/// hex digits (dashes optional). As the real driver does, the first invalid entry (unknown,
/// out of range, ambiguous, duplicate, negative, empty, "MIG-…") hides itself and every entry
/// after it. An empty value hides every device.
std::vector<int> apply_visible_devices(std::string_view spec, const std::vector<Uuid>& uuids);

}  // namespace simgpu
