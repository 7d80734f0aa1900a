// daemon/compute/device_time: a job's device time as the union of its processes' busy intervals
// (issue 27, item 4), from synthetic intervals: ranks busy together count once, ranks busy in
// turn count fully, a late reader, pages without busy_until, and lying clients.
#include "compute/device_time.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

using coloc::broker::Nanos;
using coloc::broker::Uuid;
using coloc::compute::DeviceTime;

namespace {

constexpr Nanos kMs = 1'000'000;
constexpr Nanos kStart = 1'000 * kMs;  // the job's start

Uuid dev(uint8_t n) {
  Uuid u{};
  u.bytes[0] = n;
  return u;
}

/// A process as its tracker publishes: busy intervals added one by one.
struct Proc {
  uint64_t client = 0;
  bool has_until = true;  ///< a layout-7 page
  uint64_t busy = 0, until = 0;
  std::vector<std::pair<Nanos, Nanos>> intervals;  ///< (start, end), disjoint, in order
  /// What the page shows at `t`: every interval ended by then.
  DeviceTime::Figures at(Nanos t) const {
    DeviceTime::Figures f;
    f.client = client;
    for (const auto& [s, e] : intervals)
      if (e <= t) f.busy_ns += e - s, f.busy_until = e;
    if (!f.busy_until) f.busy_until = 0;
    if (!has_until) f.busy_until.reset();
    return f;
  }
};

/// Back-to-back intervals of `len` ms from `from` to `to` (ms since kStart), every `every` ms.
std::vector<std::pair<Nanos, Nanos>> busy(Nanos from, Nanos to, Nanos len, Nanos every) {
  std::vector<std::pair<Nanos, Nanos>> out;
  for (Nanos t = from; t + len <= to; t += every) out.emplace_back(kStart + t * kMs, kStart + (t + len) * kMs);
  return out;
}

/// The true union of the processes' intervals within [kStart, to] (ns).
Nanos union_of(const std::vector<Proc>& ps, Nanos to) {
  std::vector<std::pair<Nanos, Nanos>> all;
  for (const Proc& p : ps)
    for (auto [s, e] : p.intervals)
      if (e <= to) all.emplace_back(s, e);
  std::sort(all.begin(), all.end());
  Nanos u = 0, hi = 0;
  for (auto [s, e] : all) {
    s = std::max(s, hi);
    if (e > s) u += e - s, hi = e;
  }
  return u;
}

/// Looks every `every` ms from kStart to `to` ms; returns the total.
uint64_t run(DeviceTime& dt, const std::vector<Proc>& ps, Nanos to, Nanos every = 100) {
  const DeviceTime::Key key{1, dev(1)};
  for (Nanos t = every; t <= to; t += every) {
    std::vector<DeviceTime::Figures> figs;
    for (const Proc& p : ps) figs.push_back(p.at(kStart + t * kMs));
    const uint64_t before = dt.total(key);
    dt.look(kStart + t * kMs, key, figs, kStart);
    CHECK(dt.total(key) >= before);             // never decreases
    CHECK(dt.total(key) <= uint64_t(t * kMs));  // never more than the wall time
  }
  return dt.total(key);
}

}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("device time: two ranks busy at the same time count once, not twice") {
  // The job: two processes each busy ~2 s of the same 2 s (4 ms kernels, 1 ms apart, in step).
  Proc a{1}, b{2};
  a.intervals = busy(0, 2000, 4, 5);
  b.intervals = busy(0, 2000, 4, 5);
  DeviceTime dt;
  const uint64_t t = run(dt, {a, b}, 2000);
  const Nanos u = union_of({a, b}, kStart + 2000 * kMs);
  INFO("total ", t / kMs, " ms, union ", u / kMs, " ms, sum ", 2 * u / kMs, " ms");
  CHECK(t <= uint64_t(u));
  CHECK(t >= uint64_t(u) * 95 / 100);
  // Slightly out of step (the second rank 2 ms behind, so together they keep the device busy
  // all the time): never more than the union, and at least the busier rank's own time (the rule
  // counts a rank whose work interleaves with another's within one look only beyond the other's
  // last end: device_time.h, what the rule gives up).
  Proc c{3};
  c.intervals = busy(2, 2002, 4, 5);
  DeviceTime dt2;
  const uint64_t t2 = run(dt2, {a, c}, 2100);
  const Nanos u2 = union_of({a, c}, kStart + 2100 * kMs);
  INFO("out of step: total ", t2 / kMs, " ms, union ", u2 / kMs, " ms");
  CHECK(t2 <= uint64_t(u2));
  CHECK(t2 >= uint64_t(union_of({a}, kStart + 2100 * kMs)) * 99 / 100);
}

TEST_CASE("device time: ranks busy one after the other (a timeslice's turns) count fully") {
  Proc a{1}, b{2};
  for (Nanos t = 0; t < 2000; t += 100) {  // 50 ms turns each
    auto x = busy(t, t + 50, 2, 2);
    auto y = busy(t + 50, t + 100, 2, 2);
    a.intervals.insert(a.intervals.end(), x.begin(), x.end());
    b.intervals.insert(b.intervals.end(), y.begin(), y.end());
  }
  DeviceTime dt;
  const uint64_t t = run(dt, {a, b}, 2000, 100);
  const Nanos u = union_of({a, b}, kStart + 2000 * kMs);
  INFO("total ", t / kMs, " ms, union ", u / kMs, " ms");
  CHECK(t <= uint64_t(u));
  CHECK(t >= uint64_t(u) * 95 / 100);
  CHECK(u >= 1990 * kMs);
}

TEST_CASE("device time: a late reader (one look after the whole run) counts the union too") {
  Proc a{1}, b{2};
  a.intervals = busy(0, 1000, 10, 10);
  b.intervals = busy(0, 1000, 10, 10);
  DeviceTime dt;
  const DeviceTime::Key key{1, dev(1)};
  dt.look(kStart + 1000 * kMs, key, {a.at(kStart + 1000 * kMs), b.at(kStart + 1000 * kMs)}, kStart);
  CHECK(dt.total(key) == 1000 * kMs);  // not 2000
  // Disjoint halves read late: the first rank's work ends before the second's, both count.
  Proc c{3}, d{4};
  c.intervals = busy(0, 500, 10, 10);
  d.intervals = busy(500, 1000, 10, 10);
  const DeviceTime::Key key2{2, dev(1)};
  dt.look(kStart + 1000 * kMs, key2, {c.at(kStart + 1000 * kMs), d.at(kStart + 1000 * kMs)}, kStart);
  CHECK(dt.total(key2) == 1000 * kMs);
  // A departing client's last figures, then it is forgotten: what it added stays.
  dt.forget_client(3);
  CHECK(dt.total(key2) == 1000 * kMs);
  dt.forget_job(2);
  CHECK(dt.total(key2) == 0);
  CHECK(dt.total(key) == 1000 * kMs);
}

TEST_CASE("device time: pages without busy_until add their work capped by the wall time since the last look") {
  Proc a{1}, b{2};
  a.has_until = b.has_until = false;
  a.intervals = busy(0, 2000, 4, 5);
  b.intervals = busy(0, 2000, 4, 5);
  DeviceTime dt;
  const uint64_t t = run(dt, {a, b}, 2000);
  INFO("total ", t / kMs, " ms");
  CHECK(t <= 2000 * kMs);  // the sum (3.2 s) capped at each look
  CHECK(t >= 1500 * kMs);  // (one busy rank alone would have 1.6 s)
}

TEST_CASE("device time: a lying client (huge busy_ns, a busy_until in the future) inflates only its own job, at most to its wall time") {
  DeviceTime dt;
  const DeviceTime::Key liar{1, dev(1)}, honest{2, dev(1)};
  Proc h{2};
  h.intervals = busy(0, 1000, 5, 10);
  for (Nanos t = 100; t <= 1000; t += 100) {
    const Nanos now = kStart + t * kMs;
    DeviceTime::Figures f{1, uint64_t(t) * 1'000'000'000'000ull, uint64_t(now) + 3'600'000'000'000ull};
    DeviceTime::Figures g{3, ~0ull - 5, ~0ull};
    dt.look(now, liar, {f, g}, kStart);
    dt.look(now, honest, {h.at(now)}, kStart);
    CHECK(dt.total(liar) <= uint64_t(t * kMs));
  }
  CHECK(dt.total(honest) == uint64_t(union_of({h}, kStart + 1000 * kMs)));
  // busy_ns going back (not what a page does): nothing is taken away, nothing added.
  const uint64_t before = dt.total(liar);
  dt.look(kStart + 1100 * kMs, liar, {{1, 5, uint64_t(kStart + 1100 * kMs)}}, kStart);
  CHECK(dt.total(liar) == before);
  // A job's first look bounds it by its start: a page's whole past before it cannot count.
  const DeviceTime::Key late{3, dev(2)};
  dt.look(kStart + 200 * kMs, late, {{9, 1'000'000 * kMs, uint64_t(kStart + 200 * kMs)}}, kStart + 100 * kMs);
  CHECK(dt.total(late) == 100 * kMs);
}
}
