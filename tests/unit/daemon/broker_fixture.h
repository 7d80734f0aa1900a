// tests/unit/daemon/broker_fixture.h — a memory broker with a fake clock and client pages in
// ordinary memory, for the broker's unit tests (every call audits the books).
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "broker/broker.h"
#include "broker/priority_fifo_policy.h"
#include "util/log.h"

namespace coloc::broker::test {

using coloc::proto::OnFull;
using coloc::proto::Priority;
using coloc::proto::Reason;

constexpr Bytes MiB = 1ull << 20;
constexpr Bytes GiB = 1ull << 30;
constexpr Nanos kSec = 1'000'000'000;

inline Uuid gpu(uint8_t n) {
  Uuid u;
  u.bytes.fill(0xA0);
  u.bytes[15] = n;
  return u;
}

/// A resumed ledger's entry for gpu `n`: `in_use` bytes held, granted as much; the rest default.
inline ResumeEntry resumed(uint8_t n, Bytes capacity, Bytes in_use) {
  ResumeEntry e;
  e.uuid = gpu(n);
  e.capacity = capacity;
  e.in_use = in_use;
  e.grant = in_use;
  return e;
}

/// A broker with a fake clock, and clients whose pages live in ordinary memory.
struct Bench {
  PriorityFifoPolicy policy;
  Broker broker;
  Nanos now = 1000 * kSec;
  uint32_t next_seq = 1;
  struct Pages {
    std::unique_ptr<coloc::pages::ControlPage> control = std::make_unique<coloc::pages::ControlPage>();
    std::unique_ptr<coloc::pages::StatsPage> stats = std::make_unique<coloc::pages::StatsPage>();
  };
  std::map<ClientId, Pages> pages;
  std::vector<Reply> replies;
  std::vector<Event> events;

  int32_t next_pid = 4242;  ///< the pid of the next add() (add_pid sets it)

  explicit Bench(BrokerConfig cfg = no_headroom()) : broker(cfg, policy) { coloc::log::set_level("off"); }

  static BrokerConfig no_headroom() {
    BrokerConfig c;
    c.headroom_bytes = 0;
    return c;
  }

  ClientId add(const std::string& job, Bytes limit = kNoLimit, Priority prio = Priority::kNormal,
               OnFull on_full = OnFull::kWait, uint32_t uid = 1000, uint64_t age = 0, bool anchor = false) {
    ClientSpec s;
    s.anchor = anchor;
    s.uid = uid;
    s.pid = std::exchange(next_pid, 4242);
    s.job_id = job;
    s.priority = prio;
    s.on_full = on_full;
    s.limit = limit;
    s.age = age ? age : now;
    Pages p;
    ClientId id = broker.add_client(s, p.control.get(), p.stats.get(), now);
    pages.emplace(id, std::move(p));
    collect();
    return id;
  }

  /// add(), with the process id `pid` (SO_PEERCRED's), for tests of the driver's per-process list.
  ClientId add_pid(const std::string& job, int32_t pid, Bytes limit = kNoLimit, uint32_t uid = 1000) {
    next_pid = pid;
    return add(job, limit, Priority::kNormal, OnFull::kWait, uid);
  }
  /// One reading of the driver's per-process list of device 0 (pid, bytes).
  /// `ours`: the pids are colocd's (false: another PID namespace's).
  void processes(std::vector<ProcessFigure> list, uint32_t device = 0, bool ours = true) {
    broker.reconcile_device(device, &list, now, ours);
    collect();
  }

  void collect() {
    for (auto& r : broker.take_replies()) replies.push_back(std::move(r));
    for (auto& e : broker.take_events()) events.push_back(std::move(e));
    REQUIRE(broker.audit() == "");
  }

  /// Attach on devices given as (gpu number, capacity, request); returns the request's seq.
  /// An Attach; `physical_free` is the engine's own reading of the devices (NVML) unless
  /// `measured` is false (then it is the client's word).
  uint32_t attach(ClientId id, std::vector<std::tuple<uint8_t, Bytes, Bytes>> devs, Bytes physical_free = kUnknown,
                  bool measured = true) {
    std::vector<AttachRequest> reqs;
    for (auto [n, cap, req] : devs) reqs.push_back({gpu(n), cap, physical_free, req, measured});
    uint32_t seq = next_seq++;
    broker.attach(id, seq, reqs, now);
    collect();
    return seq;
  }
  /// An Attach of one device (gpu number `n`) by a process whose own cap there is `cap`
  /// (COLOC_MEM_LIMIT_<n>; kNoLimit = none).
  uint32_t attach_capped(ClientId id, uint8_t n, Bytes capacity, Bytes request, Bytes cap,
                         Bytes physical_free = kUnknown, bool measured = true) {
    AttachRequest r{gpu(n), capacity, physical_free, request, measured};
    r.cap = cap;
    uint32_t seq = next_seq++;
    broker.attach(id, seq, std::vector<AttachRequest>{r}, now);
    collect();
    return seq;
  }
  /// A ContextFootprint of client `id` on `slot`.
  void footprint(ClientId id, uint32_t slot, Bytes physical_free, Bytes in_use, bool measured = true) {
    broker.context_footprint(id, slot, physical_free, in_use, measured, now);
    collect();
  }
  uint32_t grow(ClientId id, uint32_t slot, Bytes need, Bytes physical_free = kUnknown) {
    uint32_t seq = next_seq++;
    broker.grow(id, seq, slot, need, physical_free, now);
    collect();
    return seq;
  }
  /// What the fast path does: count in_use on the stats page (the test sets it directly).
  void use(ClientId id, uint32_t slot, Bytes bytes) { pages.at(id).stats->slots[slot].in_use.store(bytes); }
  Bytes grant(ClientId id, uint32_t slot) { return pages.at(id).control->slots[slot].grant.load(); }
  Bytes limit_word(ClientId id, uint32_t slot) { return pages.at(id).control->slots[slot].limit.load(); }
  void remove(ClientId id) {
    broker.remove_client(id, now);
    collect();
  }
  void advance(Nanos dt) {
    now += dt;
    broker.tick(now);
    collect();
  }

  /// The reply to `seq`, if it has come.
  const Reply* reply(uint32_t seq) const {
    for (auto& r : replies)
      if (r.seq == seq) return &r;
    return nullptr;
  }
  bool granted(uint32_t seq) const { return reply(seq) && reply(seq)->granted; }
  bool refused(uint32_t seq, Reason why) const { return reply(seq) && !reply(seq)->granted && reply(seq)->reason == why; }
  bool pending(uint32_t seq) const { return reply(seq) == nullptr; }
  size_t count(Event::Kind k, Reason r = Reason::kNone) const {
    size_t n = 0;
    for (auto& e : events) n += e.kind == k && (r == Reason::kNone || e.reason == r);
    return n;
  }
};


}  // namespace coloc::broker::test
