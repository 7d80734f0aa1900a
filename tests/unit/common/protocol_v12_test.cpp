// include/coloc/protocol.h, version 12, and pages layout 7: StatsPage::busy_until (the end of
// each slot's last busy interval) sits after the online prediction, the page still fits, v12
// clients get layout 7 and older ones what they got before, and the messages are unchanged.
#include <doctest/doctest.h>

#include <cstddef>

#include "coloc/pages.h"
#include "coloc/protocol.h"

using namespace coloc;

TEST_SUITE("protocol") {

TEST_CASE("protocol v12: pages of layout 7 carry busy_until per slot, and nothing else moved") {
  CHECK(proto::kVersion >= 12);
  CHECK(pages::kLayoutVersion >= 7);
  CHECK(pages::layout_for_protocol(12) == 7);
  CHECK(pages::layout_for_protocol(11) == 6);
  CHECK(pages::layout_for_protocol(9) == 6);
  CHECK(pages::kBusyLayout == 7);
  CHECK(offsetof(pages::StatsPage, est) == 64 + 192 * pages::kSlots);
  CHECK(offsetof(pages::StatsPage, busy_until) == 64 + 224 * pages::kSlots);
  CHECK(sizeof(pages::StatsPage) <= pages::kPageSize);
  CHECK(offsetof(pages::ControlPage, compute) == 64 + 72 * pages::kSlots);
  // The messages did not change: the newest admin operation is the v11 one.
  CHECK(proto::last_admin_op(12) == proto::last_admin_op(11));
}

}  // TEST_SUITE
