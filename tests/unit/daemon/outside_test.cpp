// The rule for memory used outside coloc from clients' figures (daemon/broker/outside.h): a
// user's figure never lowers the estimate and raises it by at most that user's allowance.
#include <doctest/doctest.h>

#include <random>

#include "broker/outside.h"

using coloc::broker::Bytes;
using coloc::broker::OutsideFigures;

namespace {
constexpr Bytes GiB = 1ull << 30;
}

TEST_CASE("outside figures: one user alone counts at most its allowance") {
  OutsideFigures f;
  CHECK(f.estimate() == 0);
  f.report(1000, 14 * GiB, 2 * GiB, 1);  // "14 GiB used outside", holding 2 GiB unused
  CHECK(f.estimate() == 2 * GiB);
  f.report(1000, 1 * GiB, 2 * GiB, 2);   // its latest figure replaces the earlier one
  CHECK(f.estimate() == 1 * GiB);
  f.forget(1000);
  CHECK(f.estimate() == 0);
}

TEST_CASE("outside figures: a liar's 'all free' does not lower what an honest user shows; its 'all used' adds at most its allowance") {
  OutsideFigures f;
  f.report(0, 4 * GiB, 3 * GiB, 1);  // honest: 4 GiB outside, holds 3 GiB unused
  CHECK(f.estimate() == 3 * GiB);
  f.report(65534, 0, 2 * GiB, 2);    // liar: nothing outside
  CHECK(f.estimate() == 3 * GiB);
  f.report(65534, 14 * GiB, 2 * GiB, 3);  // liar: everything outside
  CHECK(f.estimate() == 5 * GiB);          // 3 + its 2 GiB allowance, not 14
  // Two honest users who see the same outside use between them show it in full.
  OutsideFigures g;
  g.report(1, 4 * GiB, 3 * GiB, 1);
  g.report(2, 4 * GiB, 3 * GiB, 2);
  CHECK(g.estimate() == 4 * GiB);
}

TEST_CASE("outside figures: over random figures, adding a user's figure never lowers the estimate nor raises it past its allowance") {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<Bytes> size(0, 20 * GiB);
  for (int trial = 0; trial < 2000; ++trial) {
    OutsideFigures f;
    const int users = 1 + int(rng() % (OutsideFigures::kMaxUsers - 1));
    for (int u = 0; u < users; ++u) f.report(uint32_t(u), size(rng), size(rng), u + 1);
    const Bytes before = f.estimate();
    OutsideFigures g = f;
    const Bytes allowance = size(rng);
    g.report(999, size(rng), allowance, 100);
    const Bytes after = g.estimate();
    CHECK(after >= before);
    CHECK(after <= before + allowance);
  }
}

TEST_CASE("outside figures: at most kMaxUsers figures count; the oldest goes first") {
  OutsideFigures f;
  for (uint32_t u = 0; u < OutsideFigures::kMaxUsers + 3; ++u) f.report(u, GiB, GiB, u + 1);
  CHECK(f.size() == OutsideFigures::kMaxUsers);
}
