// daemon/engine/server_outside.cpp — the driver's per-process list of each device, read on the
// sampling timer: for reconcile_overheads (the driver overhead of coloc's processes) and for the
// processes outside coloc that `coloc status` and `coloc top` list (device/outside_processes.h).
#include <signal.h>

#include <cerrno>
#include <set>

#include "engine/server.h"

namespace coloc::engine {

bool Server::pids_are_ours(const std::vector<device::ProcessMemory>& procs) {
  size_t visible = 0;
  for (const device::ProcessMemory& p : procs)
    if (p.pid > 0 && (::kill(p.pid, 0) == 0 || errno == EPERM)) ++visible;
  return 2 * visible > procs.size() || procs.empty();
}

void Server::read_processes(uint32_t device, Nanos t) {
  if (!memory_reader_ || device >= broker_.devices().size()) return;
  if (processes_.size() <= device) {
    processes_.resize(device + 1);
    processes_read_.resize(device + 1, 0);
  }
  const broker::Device& d = broker_.devices()[device];
  // With no coloc process attached only the outside list needs it: once a second is enough for a
  // person reading `coloc status`, and costs the driver little.
  constexpr Nanos kIdleInterval = 1'000'000'000;
  if (d.attachments.empty() && processes_read_[device] != 0 && t - processes_read_[device] < kIdleInterval) return;
  processes_read_[device] = t;
  processes_[device] = memory_reader_->processes(d.uuid);
  if (!processes_[device]) {
    outside_.forget(d.uuid);
    return;
  }
  // Only the processes attached to the device are in its books: one registered without attaching
  // it (an anchor, a job process on another device) that uses it is outside coloc there.
  outside_.update(d.uuid, *processes_[device], broker_.attached_pids(device));
}

void Server::read_unmet_devices(Nanos t) {
  // While colocd holds for its clients to re-register after a restart, their devices are not met
  // yet, and their processes would show as outside coloc.
  if (!memory_reader_ || broker_.holding()) return;
  constexpr Nanos kInterval = 1'000'000'000;  // a person reading status; NVML is not asked more
  if (unmet_read_ != 0 && t - unmet_read_ < kInterval) return;
  unmet_read_ = t;
  std::map<broker::Uuid, device::DeviceMemory> now;
  if (auto listed = memory_reader_->devices())
    for (const broker::Uuid& u : *listed) {
      if (broker_.find_device(u) || now.count(u)) continue;  // met: read_processes covers it
      auto mem = memory_reader_->memory(u);
      if (!mem) continue;
      now[u] = *mem;
      if (auto procs = memory_reader_->processes(u)) outside_.update(u, *procs, {});
      else outside_.forget(u);
    }
  // A device that left NVML's list has no list of its own any more; one the broker met since is
  // read_processes's.
  for (const auto& [u, mem] : unmet_)
    if (!now.count(u) && !broker_.find_device(u)) outside_.forget(u);
  unmet_ = std::move(now);
}

}  // namespace coloc::engine
