// daemon/engine/server_outside.cpp — the driver's per-process list of each device, read on the
// sampling timer: for reconcile_overheads (the driver overhead of coloc's processes) and for the
// processes outside coloc that `coloc status` and `coloc top` list (device/outside_processes.h).
#include <set>

#include "engine/server.h"

namespace coloc::engine {

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

}  // namespace coloc::engine
