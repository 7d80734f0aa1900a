// The EASY backfill rule as a pure function (daemon/broker/backfill.h): the head's shadow time and
// extra from the holders' expected ends, the verdict on a candidate, the overrun that stops it.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

#include "broker/backfill.h"

using namespace coloc::broker;
using namespace coloc::broker::backfill;

namespace {
constexpr Bytes GiB = 1ull << 30;
constexpr Nanos kSec = 1'000'000'000;
constexpr Nanos T0 = 1000 * kSec;  // "now" of most cases
}  // namespace

TEST_CASE("backfill: mode names parse both ways, anything else is refused") {
  Mode m = Mode::kOff;
  CHECK(parse_mode("easy", &m));
  CHECK(m == Mode::kEasy);
  CHECK(parse_mode(mode_name(Mode::kOff), &m));
  CHECK(m == Mode::kOff);
  for (const char* bad : {"maybe", "", "EASY", "easy ", "on"}) {
    m = Mode::kEasy;
    CHECK_FALSE(parse_mode(bad, &m));
    CHECK(m == Mode::kEasy);  // untouched
  }
}

TEST_CASE("backfill: a head that fits now has its shadow now, and the rest is extra") {
  const Holder h[] = {{10 * GiB, T0 + 5 * kSec}};
  Shadow s = shadow(30 * GiB, 20 * GiB, h, T0);
  CHECK(s.at == T0);
  CHECK(s.extra == 10 * GiB);
}

TEST_CASE("backfill: the shadow time is the first expected end at which the head fits; the extra is what is left then") {
  // 10 free; the head needs 50: the 20 ending at +100 s leave 30 (short), the 30 ending at +200 s 60.
  const Holder h[] = {{30 * GiB, T0 + 200 * kSec}, {20 * GiB, T0 + 100 * kSec}, {40 * GiB, T0 + 300 * kSec}};
  Shadow s = shadow(10 * GiB, 50 * GiB, h, T0);
  CHECK(s.at == T0 + 200 * kSec);
  CHECK(s.extra == 10 * GiB);
  SUBCASE("jobs that end at the same moment free their memory together") {
    const Holder tie[] = {{20 * GiB, T0 + 100 * kSec}, {30 * GiB, T0 + 100 * kSec}};
    Shadow t = shadow(10 * GiB, 40 * GiB, tie, T0);
    CHECK(t.at == T0 + 100 * kSec);
    CHECK(t.extra == 20 * GiB);
  }
  SUBCASE("a job of unknown end is taken to hold its memory for ever") {
    const Holder mixed[] = {{100 * GiB, kNever}, {20 * GiB, T0 + 100 * kSec}, {30 * GiB, T0 + 200 * kSec}};
    Shadow t = shadow(10 * GiB, 50 * GiB, mixed, T0);
    CHECK(t.at == T0 + 200 * kSec);
    CHECK(t.extra == 10 * GiB);
  }
}

TEST_CASE("backfill: the issue's three jobs: a head waiting for a job of unknown end has no shadow time and the rest of the device as extra") {
  // 80 GiB, 2% headroom: 78.4 usable; `train` holds 20 (no history); `finetune` needs 70.
  const Bytes usable = Bytes(78.4 * double(GiB));
  const Holder h[] = {{20 * GiB, kNever}};
  Shadow s = shadow(usable - 20 * GiB, 70 * GiB, h, T0);
  CHECK(s.at == kNever);
  CHECK(s.extra == usable - 70 * GiB);  // 8.4 GiB: `notebook` at 2 GiB goes ahead, one of 10 would not
  CHECK(decide(s, {2 * GiB, true, 0}, T0) == Verdict::kInExtra);
  CHECK(decide(s, {10 * GiB, true, 0}, T0) == Verdict::kWouldDelay);
  CHECK(decide(s, {10 * GiB, true, 1 * kSec}, T0) == Verdict::kWouldDelay);  // no shadow time to end before
}

TEST_CASE("backfill: with several jobs of unknown end, the extra is the least the head could find beyond its need when it first fits") {
  // 58 free, needs 60: either 10 ending first lets it in with 8 to spare; both, 18.
  const Holder two[] = {{10 * GiB, kNever}, {10 * GiB, kNever}};
  CHECK(shadow(58 * GiB, 60 * GiB, two, T0).extra == 8 * GiB);
  // A known end adds a prefix: 5 at +100 s, 30 unknown; 50 free, needs 60. The 30 alone: 80 (20
  // over); after the 5: 85 (25 over). The least: 20.
  const Holder mixed[] = {{5 * GiB, T0 + 100 * kSec}, {30 * GiB, kNever}};
  Shadow s = shadow(50 * GiB, 60 * GiB, mixed, T0);
  CHECK(s.at == kNever);
  CHECK(s.extra == 20 * GiB);
  // A small job of unknown end that cannot be what lets the head in still counts once the big one
  // has gone: 40 free, needs 60: a 30 alone suffices (10 over); the 1 and the 30 (11 over).
  const Holder small[] = {{1 * GiB, kNever}, {30 * GiB, kNever}};
  CHECK(shadow(40 * GiB, 60 * GiB, small, T0).extra == 10 * GiB);
}

TEST_CASE("backfill: a job past its expected end counts as of unknown end") {
  const Holder h[] = {{20 * GiB, T0 - 1}, {20 * GiB, T0}};
  Shadow s = shadow(50 * GiB, 60 * GiB, h, T0);
  CHECK(s.at == kNever);
  CHECK(s.extra == 10 * GiB);
}

TEST_CASE("backfill: a head that needs memory used outside coloc to go is promised nothing") {
  const Holder h[] = {{20 * GiB, T0 + 10 * kSec}, {10 * GiB, kNever}};
  Shadow s = shadow(5 * GiB, 40 * GiB, h, T0);  // everything ended: 35 < 40
  CHECK(s.at == kNever);
  CHECK(s.extra == 0);
  CHECK(decide(s, {1, true, 1}, T0) == Verdict::kWouldDelay);
}

TEST_CASE("backfill: more jobs of unknown end than are enumerated: nothing is counted as extra") {
  std::vector<Holder> h(kMaxUnknownHolders + 1, Holder{1 * GiB, kNever});
  CHECK(shadow(0, 2 * GiB, h, T0).extra == 0);
  h.pop_back();
  CHECK(shadow(0, 2 * GiB, h, T0).extra == 0);  // two of them exactly: nothing over
  CHECK(shadow(GiB / 2, 2 * GiB, h, T0).extra == GiB / 2);
}

TEST_CASE("backfill: the verdict on a candidate") {
  const Shadow s{T0 + 100 * kSec, 4 * GiB};
  SUBCASE("a job without a known footprint never goes ahead, however small or short") {
    CHECK(decide(s, {1, false, 1}, T0) == Verdict::kNoFootprint);
  }
  SUBCASE("expected to end by the shadow time: goes ahead whatever its size") {
    CHECK(decide(s, {40 * GiB, true, 100 * kSec}, T0) == Verdict::kBeforeShadow);
    CHECK(decide(s, {40 * GiB, true, 100 * kSec + 1}, T0) == Verdict::kWouldDelay);
    CHECK(decide(s, {40 * GiB, true, 50 * kSec}, T0 + 50 * kSec) == Verdict::kBeforeShadow);  // later, less time left
    CHECK(decide(s, {40 * GiB, true, 51 * kSec}, T0 + 50 * kSec) == Verdict::kWouldDelay);
  }
  SUBCASE("ending after it, or not known to end: only within the extra") {
    CHECK(decide(s, {4 * GiB, true, 0}, T0) == Verdict::kInExtra);
    CHECK(decide(s, {4 * GiB + 1, true, 0}, T0) == Verdict::kWouldDelay);
    CHECK(decide(s, {4 * GiB, true, 1000 * kSec}, T0) == Verdict::kInExtra);
  }
  CHECK(goes_ahead(Verdict::kBeforeShadow));
  CHECK(goes_ahead(Verdict::kInExtra));
  CHECK_FALSE(goes_ahead(Verdict::kNoFootprint));
  CHECK_FALSE(goes_ahead(Verdict::kWouldDelay));
  CHECK(std::string(verdict_name(Verdict::kInExtra)) == "in-extra");
}

TEST_CASE("backfill: a head still waiting past the shadow time it was promised stops all backfill") {
  const Promise p{7, T0 + 100 * kSec};
  CHECK_FALSE(overrun(p, 7, T0 + 100 * kSec));
  CHECK(overrun(p, 7, T0 + 100 * kSec + 1));
  CHECK_FALSE(overrun(p, 8, T0 + 200 * kSec));  // a new head: a new promise
  CHECK_FALSE(overrun(Promise{7, kNever}, 7, T0 + 200 * kSec));  // backfilled into the extra only
  CHECK_FALSE(overrun(Promise{}, 0, T0));
}

// Every order in which the jobs could end (the known ones in their order, the unknown ones
// anywhere among them): the memory available beyond the head's need at the moment it first fits.
// Returns the least over all orders, or nothing when it never fits.
static std::optional<Bytes> least_overshoot(Bytes available, Bytes need, std::vector<Holder> h, Nanos now) {
  std::vector<Holder> known, unknown;
  for (const Holder& x : h) (x.end == kNever || x.end <= now ? unknown : known).push_back(x);
  std::sort(known.begin(), known.end(), [](const Holder& a, const Holder& b) { return a.end < b.end; });
  std::optional<Bytes> least;
  // An order: a permutation of all, kept when the known ones appear in end order.
  std::vector<size_t> idx(known.size() + unknown.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  do {
    size_t next_known = 0;
    bool ok = true;
    for (size_t i : idx)
      if (i < known.size()) ok &= i == next_known++;
    if (!ok) continue;
    Bytes free = available;
    for (size_t i : idx) {
      free += i < known.size() ? known[i].commitment : unknown[i - known.size()].commitment;
      if (free >= need) {
        least = least ? std::min(*least, free - need) : free - need;
        break;
      }
    }
  } while (std::next_permutation(idx.begin(), idx.end()));
  return least;
}

TEST_CASE("backfill: the extra never exceeds what the head finds beyond its need, whatever order the jobs end in (random devices)") {
  std::mt19937_64 rng(28);
  int promised = 0, unknown_waits = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<Holder> h;
    const int n = 1 + int(rng() % 5);
    for (int i = 0; i < n; ++i) {
      Holder x;
      x.commitment = (1 + rng() % 20) * GiB;
      const int kind = int(rng() % 3);
      x.end = kind == 0 ? kNever : kind == 1 ? T0 - rng() % (10 * kSec) : T0 + (1 + rng() % 100) * kSec;
      h.push_back(x);
    }
    const Bytes available = (rng() % 10) * GiB;
    const Bytes need = available + (1 + rng() % 40) * GiB;
    const Shadow s = shadow(available, need, h, T0);
    CAPTURE(round);
    if (s.at != kNever) {
      // Rule 1, checked by walking the known ends: the first at which the head fits, and its overshoot.
      ++promised;
      std::vector<Holder> k;
      for (const Holder& x : h)
        if (x.end != kNever && x.end > T0) k.push_back(x);
      Bytes free = available;
      for (const Holder& x : k)
        if (x.end <= s.at) free += x.commitment;
      CHECK(free >= need);
      CHECK(free - need == s.extra);
      Bytes before = available;
      for (const Holder& x : k)
        if (x.end < s.at) before += x.commitment;
      CHECK(before < need);  // the ends before it together are short of it
    } else {
      ++unknown_waits;
      const auto least = least_overshoot(available, need, h, T0);
      if (!least) CHECK(s.extra == 0);
      else CHECK(s.extra == *least);  // the least over orders: never more, and no less than it could be
    }
  }
  MESSAGE(promised, " heads with a shadow time, ", unknown_waits, " waiting on jobs of unknown end");
  CHECK(promised > 50);
  CHECK(unknown_waits > 50);
}

TEST_CASE("backfill: estimated starts in strict order from the expected ends") {
  // 10 free; holders: 30 ending at +100 s, 20 at +200 s, 40 of unknown end.
  const Holder h[] = {{30 * GiB, T0 + 100 * kSec}, {20 * GiB, T0 + 200 * kSec}, {40 * GiB, kNever}};
  SUBCASE("each starts when it is first in line and fits; a started one ends its run later") {
    const Queued q[] = {{35 * GiB, 50 * kSec}, {5 * GiB, 10 * kSec}, {40 * GiB, 0}};
    const auto s = project(10 * GiB, h, q, T0);
    REQUIRE(s.size() == 3);
    CHECK(s[0] == T0 + 100 * kSec);  // 40 free then: 5 left
    CHECK(s[1] == T0 + 100 * kSec);  // behind it, fits in the 5 at once
    CHECK(s[2] == T0 + 150 * kSec);  // the 5 ends at +110 s (5 free), the 35 at +150 s (40 free)
  }
  SUBCASE("behind one that waits for an end that is not known, nothing is known") {
    const Queued q[] = {{100 * GiB, 10 * kSec}, {1 * GiB, 10 * kSec}};
    const auto s = project(10 * GiB, h, q, T0);
    CHECK(s[0] == kNever);
    CHECK(s[1] == kNever);  // strict order: a backfill may let it in sooner
  }
  SUBCASE("one that fits now starts now; the past-due end counts as not known") {
    const Holder late[] = {{30 * GiB, T0 - 1}};
    const Queued q[] = {{10 * GiB, 0}, {1 * GiB, 0}};
    const auto s = project(10 * GiB, late, q, T0);
    CHECK(s[0] == T0);
    CHECK(s[1] == kNever);
  }
}
