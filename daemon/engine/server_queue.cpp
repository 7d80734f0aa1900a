// daemon/engine/server_queue.cpp — the queue as each waiting process learns it: its control page's
// queue note (pages.h, layout 8), from Broker::queue, on the sampling timer.
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "engine/server.h"
#include "util/clock.h"

namespace coloc::engine {

namespace {

pages::AskSource ask_source(const broker::Broker& b, const broker::Waiter& w, uint32_t dev) {
  if (!w.admission) return pages::AskSource::kGrowth;
  switch (b.waiting_footprint(w, dev).second) {
    case broker::Footprint::kMem: return pages::AskSource::kMem;
    case broker::Footprint::kHistory: return pages::AskSource::kHistory;
    case broker::Footprint::kEstimate: return pages::AskSource::kEstimate;
    case broker::Footprint::kOnline:
    case broker::Footprint::kNone: break;
  }
  return pages::AskSource::kContext;
}

}  // namespace

void Server::publish_queue_notes(Nanos t) {
  // Each waiting client's first request (the earliest parked), on its first device.
  std::map<broker::ClientId, const broker::Waiter*> first;
  for (const broker::Waiter& w : broker_.waiters()) {
    auto [it, fresh] = first.emplace(w.client, &w);
    if (!fresh && w.order < it->second->order) it->second = &w;
  }
  // Each device's queue, computed once when first needed, and every entry by its request.
  std::map<uint32_t, std::vector<broker::Broker::QueueEntry>> queues;
  std::unordered_map<const broker::Waiter*, const broker::Broker::QueueEntry*> entry_of;
  auto entry_for = [&](const broker::Waiter& w, uint32_t dev) -> const broker::Broker::QueueEntry* {
    if (!queues.count(dev))
      for (const broker::Broker::QueueEntry& e : queues.emplace(dev, broker_.queue(dev, t)).first->second)
        entry_of.emplace(e.waiter, &e);
    auto e = entry_of.find(&w);
    return e == entry_of.end() ? nullptr : e->second;
  };
  // Every waiting request's reason goes into its job's report (the wait's "reasons").
  for (const broker::Waiter& w : broker_.waiters()) {
    const auto c = broker_.clients().find(w.client);
    if (c == broker_.clients().end()) continue;
    const uint32_t dev = w.admission ? w.devices.front().device : c->second.slots[w.slot].device;
    auto rec = recorders_.find(c->second.job);
    if (rec == recorders_.end()) continue;
    if (const broker::Broker::QueueEntry* e = entry_for(w, dev))
      rec->second.note_wait_reason(broker_.devices()[dev].uuid, w.admission, e->reason);
  }
  const int64_t wall = wall_ms();
  for (const auto& [id, client] : broker_.clients()) {
    auto conn = by_client_.find(id);
    if (conn == by_client_.end() || !client.control) continue;
    if (pages::layout_for_protocol(conn->second->version) < pages::kQueueLayout) continue;
    pages::QueueNoteValue v;
    if (auto f = first.find(id); f != first.end()) {
      const broker::Waiter& w = *f->second;
      const uint32_t dev = w.admission ? w.devices.front().device : client.slots[w.slot].device;
      if (const broker::Broker::QueueEntry* e = entry_for(w, dev)) {
        v.reason = uint32_t(e->reason);
        v.source = uint32_t(ask_source(broker_, w, dev));
        v.position = e->position;
        v.asks = e->need;
        v.missing = e->missing;
        if (e->start != broker::kNever) v.start_ms = uint64_t(wall + int64_t((e->start > t ? e->start - t : 0) / 1'000'000));
        if (e->blocker)
          if (auto j = broker_.jobs().find(e->blocker); j != broker_.jobs().end())
            std::strncpy(v.behind, j->second.key.id.c_str(), sizeof v.behind - 1);
      }
    }
    // A start estimate moves with every look: only a change of a minute or more is news.
    auto last = queue_notes_.find(id);
    if (last != queue_notes_.end()) {
      pages::QueueNoteValue a = last->second, b = v;
      const uint64_t moved = a.start_ms > b.start_ms ? a.start_ms - b.start_ms : b.start_ms - a.start_ms;
      if (a.start_ms && b.start_ms && moved < 60'000) a.start_ms = b.start_ms;
      if (a == b) continue;
    } else if (v.reason == 0) {
      continue;  // never written, nothing to say
    }
    pages::write_queue_note(client.control->queue, v);
    queue_notes_[id] = v;
  }
  // Clients that are gone.
  for (auto it = queue_notes_.begin(); it != queue_notes_.end();)
    it = broker_.clients().count(it->first) ? std::next(it) : queue_notes_.erase(it);
}

}  // namespace coloc::engine
