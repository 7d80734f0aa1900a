#include "compute/gates.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>

namespace coloc::compute {

const char* paused_by_name(PausedBy p) {
  switch (p) {
    case PausedBy::kOwner: return "owner";
    case PausedBy::kAdmin: return "admin";
    case PausedBy::kNobody: break;
  }
  return "";
}

std::optional<PausedBy> parse_paused_by(const char* s) {
  if (std::strcmp(s, "owner") == 0) return PausedBy::kOwner;
  if (std::strcmp(s, "admin") == 0) return PausedBy::kAdmin;
  return std::nullopt;
}

const char* compute_state_name(ComputeState s) { return s == ComputeState::kPaused ? "paused" : "running"; }

int write_gates(pages::ControlPage& page, pages::GateState state) {
  const uint32_t want = uint32_t(state);
  bool changed[pages::kSlots] = {};
  int n = 0;
  for (uint32_t s = 0; s < pages::kSlots; ++s)
    if (page.gates[s].state.load(std::memory_order_relaxed) != want) {
      page.gates[s].state.store(want, std::memory_order_release);
      changed[s] = true;
      ++n;
    }
  if (n == 0) return 0;
  // Every slot has the same state here, so the summary is that state.
  page.gate.store(want, std::memory_order_release);
  page.gate_seq.fetch_add(1, std::memory_order_release);
  for (uint32_t s = 0; s < pages::kSlots; ++s) {
    if (!changed[s]) continue;
    page.gates[s].seq.fetch_add(1, std::memory_order_release);
    // Shared (no FUTEX_PRIVATE_FLAG): the waiters are in the client, on its read-only mapping.
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&page.gates[s].seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  return n;
}

void Gates::add_client(ClientId id, JobSerial job, pages::ControlPage* page, uint16_t layout) {
  ClientEntry& c = clients_[id];
  c = ClientEntry{job, page, layout};
  apply(c);
}

void Gates::remove_client(ClientId id) { clients_.erase(id); }

void Gates::forget_job(JobSerial job, broker::Nanos now) {
  for (auto it = jobs_.begin(); it != jobs_.end();)  // ended pauses nobody came back for
    it = it->second.ended_at && now - it->second.ended_at > kEndedPauseNs ? jobs_.erase(it) : std::next(it);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  if (it->second.paused == PausedBy::kNobody) jobs_.erase(it);
  else it->second.ended_at = now ? now : 1;
}

bool Gates::inherit(JobSerial job, const broker::JobKey& key, broker::Nanos now) {
  if (paused(job) != PausedBy::kNobody) return false;
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    const JobEntry& e = it->second;
    if (it->first == job || e.key != key || e.paused == PausedBy::kNobody) continue;
    bool ended = e.ended_at != 0;
    if (!ended) {  // its last process may have left a moment ago (the job's end is not final yet)
      ended = true;
      for (const auto& [id, c] : clients_) ended &= c.job != it->first;
    }
    if (!ended || (e.ended_at && now - e.ended_at > kEndedPauseNs)) continue;
    const PausedBy by = e.paused;
    jobs_.erase(it);
    set_paused(job, key, by);
    return true;
  }
  return false;
}

void Gates::set_paused(JobSerial job, const broker::JobKey& key, PausedBy by) {
  JobEntry& e = jobs_[job];
  e.paused = by;
  e.key = key;
  for (const auto& [id, c] : clients_)
    if (c.job == job) apply(c);
}

PausedBy Gates::paused(JobSerial job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? PausedBy::kNobody : it->second.paused;
}

ComputeState Gates::state(JobSerial job) const {
  return paused(job) == PausedBy::kNobody ? ComputeState::kRunning : ComputeState::kPaused;
}

size_t Gates::ungated(JobSerial job) const {
  size_t n = 0;
  for (const auto& [id, c] : clients_) n += c.job == job && c.layout < pages::kGatedLayout;
  return n;
}

pages::GateState Gates::wanted(JobSerial job) const {
  return paused(job) == PausedBy::kNobody ? pages::GateState::kRun : pages::GateState::kPaused;
}

void Gates::apply(const ClientEntry& c) const {
  if (!c.page || c.layout < pages::kGatedLayout) return;  // no gates on the page: never gated
  write_gates(*c.page, wanted(c.job));
}

}  // namespace coloc::compute
