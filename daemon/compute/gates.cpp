#include "compute/gates.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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

namespace {
void wake(std::atomic<uint32_t>& word) {
  // Shared (no FUTEX_PRIVATE_FLAG): the waiters are in the client, on its read-only mapping.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace

int write_gates(pages::ControlPage& page, const pages::GateState (&states)[pages::kSlots], bool wake_summary) {
  bool changed[pages::kSlots] = {};
  int n = 0;
  bool all_run = true;
  uint32_t first_closed = uint32_t(pages::GateState::kRun);
  for (uint32_t s = 0; s < pages::kSlots; ++s) {
    const uint32_t want = uint32_t(states[s]);
    if (want != uint32_t(pages::GateState::kRun) && all_run) first_closed = want;
    all_run &= want == uint32_t(pages::GateState::kRun);
    if (page.gates[s].state.load(std::memory_order_relaxed) != want) {
      // seq_cst: the drain rule with StatsPage::launching (pages.h) pairs this store with the
      // client's seq_cst add and re-read.
      page.gates[s].state.store(want, std::memory_order_seq_cst);
      changed[s] = true;
      ++n;
    }
  }
  if (n == 0) return 0;
  // The summary: kRun only when every slot is (the fast path's one load); else a closed state.
  page.gate.store(all_run ? uint32_t(pages::GateState::kRun) : first_closed, std::memory_order_release);
  page.gate_seq.fetch_add(1, std::memory_order_release);
  for (uint32_t s = 0; s < pages::kSlots; ++s) {
    if (!changed[s]) continue;
    page.gates[s].seq.fetch_add(1, std::memory_order_release);
    wake(page.gates[s].seq);
  }
  if (wake_summary) wake(page.gate_seq);
  return n;
}

int write_gates(pages::ControlPage& page, pages::GateState state) {
  pages::GateState states[pages::kSlots];
  for (auto& s : states) s = state;
  return write_gates(page, states, false);
}

void Gates::add_client(ClientId id, JobSerial job, pages::ControlPage* page, uint16_t layout,
                       const pages::StatsPage* stats, int pid) {
  auto [it, fresh] = clients_.try_emplace(id);
  ClientEntry& c = it->second;
  if (!fresh) uncount_ungated(c);
  c = ClientEntry{job, page, stats, layout, pid, false};
  if (c.layout < pages::kGatedLayout) ++ungated_[c.job];
  apply(c);
}

int Gates::refresh() {
  int n = 0;
  for (const auto& [id, c] : clients_) n += apply(c);
  return n;
}

namespace {
bool slot_uuid(const pages::ControlPage& page, uint32_t s, broker::Uuid* out) {
  if (!page.slots[s].attached.load(std::memory_order_acquire)) return false;
  *out = broker::Uuid::from(page.slots[s].uuid);
  return true;
}
}  // namespace

std::map<std::pair<JobSerial, Uuid>, Usage> Gates::usages() const {
  std::map<std::pair<JobSerial, Uuid>, Usage> out;
  for (const auto& [id, c] : clients_) {
    if (!c.page || !c.stats || c.layout < pages::kTrackedLayout) continue;
    // A launch between its check of an open gate and its tracking keeps every device of the
    // client undrained (pages.h: StatsPage::launching).
    const bool launching = c.stats->launching.load(std::memory_order_seq_cst) != 0;
    for (uint32_t s = 0; s < pages::kSlots; ++s) {
      Uuid d;
      if (!slot_uuid(*c.page, s, &d)) continue;
      auto [it, fresh] = out.try_emplace({c.job, d});
      Usage& u = it->second;
      if (fresh) u.drained = true;
      const pages::TrackStats& t = c.stats->track[s];
      u.present = true;
      u.wants |= t.waiting.load(std::memory_order_acquire) > 0;
      // The tail before the marks: the tracker counts a mark (release) before it takes the mark's
      // streams out of the tail (release), so a tail seen empty comes with every mark that emptied
      // it. Read after the marks, a tail emptied by a mark recorded between the two loads would
      // count that mark's work as drained while it is in flight.
      const bool no_tail = t.tail.load(std::memory_order_acquire) == 0;
      const uint64_t done = t.marks_done.load(std::memory_order_acquire);
      u.drained &= !launching && no_tail && done >= t.marks.load(std::memory_order_acquire);
      u.last_activity = std::max<Nanos>(u.last_activity, t.last_launch_ns.load(std::memory_order_relaxed));
      u.busy_ns += t.busy_ns.load(std::memory_order_relaxed);
      u.launches += t.launches.load(std::memory_order_relaxed);
      u.completed += t.marks_done.load(std::memory_order_relaxed);
      u.stopped |= c.stopped;
    }
  }
  return out;
}

std::map<std::pair<JobSerial, Uuid>, std::vector<DeviceTime::Figures>> Gates::busy_figures(
    std::optional<ClientId> only) const {
  std::map<std::pair<JobSerial, Uuid>, std::vector<DeviceTime::Figures>> out;
  for (const auto& [id, c] : clients_) {
    if (only && id != *only) continue;
    if (!c.page || !c.stats || c.layout < pages::kTrackedLayout) continue;
    for (uint32_t s = 0; s < pages::kSlots; ++s) {
      Uuid d;
      if (!slot_uuid(*c.page, s, &d)) continue;
      DeviceTime::Figures f;
      f.client = id;
      // busy_ns first (acquire), then busy_until: an end at least as new as the work counted
      // (pages.h: StatsPage::busy_until).
      f.busy_ns = c.stats->track[s].busy_ns.load(std::memory_order_acquire);
      if (c.layout >= pages::kBusyLayout) f.busy_until = c.stats->busy_until[s].load(std::memory_order_relaxed);
      out[{c.job, d}].push_back(f);
    }
  }
  return out;
}

void Gates::uncount_ungated(const ClientEntry& c) {
  if (c.layout >= pages::kGatedLayout) return;
  auto it = ungated_.find(c.job);
  if (it != ungated_.end() && --it->second == 0) ungated_.erase(it);
}

void Gates::remove_client(ClientId id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  uncount_ungated(it->second);
  clients_.erase(it);
}

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

ComputeState Gates::state(JobSerial job) const {  // (the scheduler's waits: Admin asks it)
  return paused(job) == PausedBy::kNobody ? ComputeState::kRunning : ComputeState::kPaused;
}

size_t Gates::ungated(JobSerial job) const {
  auto it = ungated_.find(job);
  return it == ungated_.end() ? 0 : it->second;
}

pages::GateState Gates::wanted(JobSerial job, const ClientEntry& c, uint32_t slot) const {
  if (paused(job) != PausedBy::kNobody) return pages::GateState::kPaused;
  Uuid d;
  if (!scheduler_ || c.layout < pages::kTrackedLayout || !slot_uuid(*c.page, slot, &d)) return pages::GateState::kRun;
  return scheduler_->state(job, d);
}

int Gates::apply(const ClientEntry& c) const {
  if (!c.page || c.layout < pages::kGatedLayout) return 0;  // no gates on the page: never gated
  pages::GateState states[pages::kSlots];
  for (uint32_t s = 0; s < pages::kSlots; ++s) states[s] = wanted(c.job, c, s);
  const bool tracked = c.layout >= pages::kTrackedLayout;
  if (tracked && scheduler_)
    for (uint32_t s = 0; s < pages::kSlots; ++s) {
      Uuid d;
      Nanos window = 0, end = 0;
      if (slot_uuid(*c.page, s, &d)) {
        window = scheduler_->window(c.job, d);
        end = scheduler_->turn_end(c.job, d);
      }
      // A closed gate keeps the window it had: 0 means "no bound", and a thread that read the
      // gate open just before it closed must not then read that (the gate is stored after this).
      if (states[s] != pages::GateState::kWindow) window = c.page->compute[s].window_ns.load(std::memory_order_relaxed);
      if (c.page->compute[s].window_ns.load(std::memory_order_relaxed) != window)
        c.page->compute[s].window_ns.store(window, std::memory_order_relaxed);
      if (c.page->compute[s].turn_end_ns.load(std::memory_order_relaxed) != end)
        c.page->compute[s].turn_end_ns.store(end, std::memory_order_relaxed);
    }
  return write_gates(*c.page, states, tracked);
}

}  // namespace coloc::compute
