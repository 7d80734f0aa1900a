// daemon/engine/server_queue.cpp — the queue as each waiting process learns it: its control page's
// queue note (pages.h, layout 8), from Broker::queue, on the sampling timer.
#include <time.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "engine/server.h"

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

int64_t unix_ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

void Server::publish_queue_notes(Nanos t) {
  // Each waiting client's first request (the earliest parked), on its first device.
  std::map<broker::ClientId, const broker::Waiter*> first;
  for (const broker::Waiter& w : broker_.waiters()) {
    auto [it, fresh] = first.emplace(w.client, &w);
    if (!fresh && w.order < it->second->order) it->second = &w;
  }
  std::map<uint32_t, std::vector<broker::Broker::QueueEntry>> queues;  // by device, as needed
  // Every waiting request's reason goes into its job's report (the wait's "reasons").
  for (const broker::Waiter& w : broker_.waiters()) {
    const auto c = broker_.clients().find(w.client);
    if (c == broker_.clients().end()) continue;
    const uint32_t dev = w.admission ? w.devices.front().device : c->second.slots[w.slot].device;
    auto q = queues.find(dev);
    if (q == queues.end()) q = queues.emplace(dev, broker_.queue(dev, t)).first;
    auto rec = recorders_.find(c->second.job);
    if (rec == recorders_.end()) continue;
    for (const broker::Broker::QueueEntry& e : q->second)
      if (e.waiter == &w) {
        rec->second.note_wait_reason(broker_.devices()[dev].uuid, w.admission, e.reason);
        break;
      }
  }
  const int64_t wall = unix_ms_now();
  for (const auto& [id, client] : broker_.clients()) {
    auto conn = by_client_.find(id);
    if (conn == by_client_.end() || !client.control) continue;
    if (pages::layout_for_protocol(conn->second->version) < pages::kQueueLayout) continue;
    pages::QueueNoteValue v;
    if (auto f = first.find(id); f != first.end()) {
      const broker::Waiter& w = *f->second;
      const uint32_t dev = w.admission ? w.devices.front().device : client.slots[w.slot].device;
      auto q = queues.find(dev);
      if (q == queues.end()) q = queues.emplace(dev, broker_.queue(dev, t)).first;
      for (const broker::Broker::QueueEntry& e : q->second) {
        if (e.waiter != &w) continue;
        v.reason = uint32_t(e.reason);
        v.source = uint32_t(ask_source(broker_, w, dev));
        v.position = e.position;
        v.asks = e.need;
        v.missing = e.missing;
        if (e.start != broker::kNever) v.start_ms = uint64_t(wall + int64_t((e.start > t ? e.start - t : 0) / 1'000'000));
        if (e.blocker)
          if (auto j = broker_.jobs().find(e.blocker); j != broker_.jobs().end())
            std::strncpy(v.behind, j->second.key.id.c_str(), sizeof v.behind - 1);
        break;
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
