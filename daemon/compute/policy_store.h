// daemon/compute/policy_store.h — the devices' compute policies as `coloc policy` set them, kept in
// <state-dir>/policies.json so that they survive colocd restarts.
//
// Two kinds of entry: one per device, keyed by UUID, and the default that `coloc policy all ...`
// sets (for every device colocd knows then and every device it learns of later). A device's own
// entry wins over the default; setting the default drops every device's own entry (`all` means
// all). The file is replaced whole (a temporary file, fsync, rename, fsync of the directory), so a
// colocd killed at any moment leaves the previous or the new version. A file that cannot be read as
// one is kept aside as policies.json.bad and the defaults are used (load() says so).
//
// The file:
//   {"format": 1, "default": {"mode": "timeslice", "quantum_ms": 100} | null,
//    "devices": {"GPU-...": {"mode": "share", "quantum_ms": 100},
//                "GPU-...": {"mode": "priority", "quantum_ms": 100, "target_pct": 5}, ...}}
// `target_pct` (the priority policy's target slowdown, percent) is written for priority only; a
// file without it (written before it existed) loads with the default, proto::kDefaultTargetPct.
//
// Under both, the configuration file's layer (set_configured: colocd.toml's `[devices."UUID"]`
// tables and its default `policy`), never saved: a device's policy is its stored entry, else the
// stored default, else its configured entry, else the configured default (config/config.h).
//
// Single-threaded (the event loop). The scheduler is told of every change by the caller (apply(),
// apply_new_device(), or Scheduler::set_policy with what set() stored).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/compute_policy.h"
#include "compute/scheduler.h"
#include "util/result.h"

namespace coloc::compute {

class PolicyStore {
 public:
  /// `path`: the file (normally <state-dir>/policies.json). Nothing is read until load().
  explicit PolicyStore(std::string path) : path_(std::move(path)) {}

  /// Reads the file. A missing file is no policy at all (every device shares). A file that is
  /// not a policy file (not JSON, a field of the wrong type, an unknown mode, a bad UUID) is
  /// renamed to <path>.bad and nothing of it is used: the returned sentences say so (for the log).
  std::vector<std::string> load();
  /// Writes the file (replacing it whole). Errors name the file.
  Result<void> save() const;

  /// The device's own settings.
  void set(const Uuid& dev, const PolicySettings& s) { devices_[dev] = s; }
  /// The default for every device (`coloc policy all`): drops every device's own entry.
  void set_default(const PolicySettings& s) {
    default_ = s;
    devices_.clear();
  }
  /// The configuration file's layer, under the stored entries (never saved). `dflt`: for devices
  /// that have nothing else (nullopt: none).
  void set_configured(std::optional<PolicySettings> dflt, std::map<Uuid, PolicySettings> devices) {
    configured_default_ = std::move(dflt);
    configured_ = std::move(devices);
  }
  /// Forgets the device's own stored entry (the file's replaces it on SIGHUP). True when it had one.
  bool erase(const Uuid& dev) { return devices_.erase(dev) > 0; }
  /// Forgets the stored default (`coloc policy all`). True when there was one.
  bool clear_default() {
    const bool had = default_.has_value();
    default_.reset();
    return had;
  }
  /// What the store says for `dev`: its own entry, else the default, else the configured entry,
  /// else the configured default; nullopt when none.
  std::optional<PolicySettings> for_device(const Uuid& dev) const;
  const std::optional<PolicySettings>& default_settings() const { return default_; }
  const std::map<Uuid, PolicySettings>& devices() const { return devices_; }

  /// Gives the scheduler every device's own settings, stored or configured (at start).
  void apply(Scheduler& scheduler) const;
  /// Gives the scheduler for_device() (share where none) of each of `devs` and of every device
  /// either layer names (after a reload).
  void apply_all(Scheduler& scheduler, const std::vector<Uuid>& devs) const;
  /// colocd learned of device `dev` (a client attached it, or NVML lists it): gives the scheduler
  /// for_device() unless the scheduler has it already. True when it set one.
  bool apply_new_device(const Uuid& dev, Scheduler& scheduler) const;

  /// {mode, quantum_ms[, target_pct]} of `s` (the file's and the admin answers' shape; the target
  /// for priority only).
  static nlohmann::json to_json(const PolicySettings& s);
  /// The inverse; nullopt (and *why) when `j` is not one (an unknown mode, a quantum or target out
  /// of range or not an integer).
  static std::optional<PolicySettings> from_json(const nlohmann::json& j, std::string* why);
  /// "share", "timeslice", "priority" to the mode; false for anything else.
  static bool parse_mode(const std::string& name, proto::PolicyMode* out);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<PolicySettings> default_;
  std::map<Uuid, PolicySettings> devices_;
  std::optional<PolicySettings> configured_default_;
  std::map<Uuid, PolicySettings> configured_;
};

}  // namespace coloc::compute
