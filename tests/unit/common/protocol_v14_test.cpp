// include/coloc/protocol.h, version 14, and pages layout 9 (issue 29): the stats page carries the
// preflight for suspension in bytes that were reserved (nothing else moved), v14 clients get
// layout 9, kSuspend takes a job, and the Suspended wait reason has its name.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "coloc/pages.h"
#include "coloc/protocol.h"

using namespace coloc;

TEST_SUITE("protocol") {

TEST_CASE("protocol v14: pages of layout 9 carry the preflight word where reserved bytes were") {
  CHECK(proto::kVersion == 14);
  CHECK(pages::kLayoutVersion == 9);
  CHECK(pages::layout_for_protocol(14) == 9);
  CHECK(pages::layout_for_protocol(13) == 8);
  CHECK(pages::kPreflightLayout == 9);
  CHECK(offsetof(pages::StatsPage, launching) == 8);
  CHECK(offsetof(pages::StatsPage, not_suspendable) == 16);
  CHECK(offsetof(pages::StatsPage, slots) == 64);  // the rest of the page is as it was
  CHECK(offsetof(pages::StatsPage, busy_until) == 64 + 224 * pages::kSlots);
  CHECK(std::string(pages::not_suspendable_reason(pages::kUsedManaged)).find("managed") != std::string::npos);
  CHECK(std::string(pages::not_suspendable_reason(0)).empty());
  CHECK(proto::last_admin_op(13) == uint32_t(proto::AdminOp::kEnded));
  CHECK(proto::last_admin_op(14) == uint32_t(proto::AdminOp::kSuspend));
}

TEST_CASE("protocol v14: kSuspend names a job and carries nothing else; Suspended is a wait reason") {
  proto::AdminMsg m{};
  m.op = uint32_t(proto::AdminOp::kSuspend);
  CHECK(!proto::validate(m));  // a job is required
  std::snprintf(m.job, sizeof m.job, "train");
  CHECK(proto::validate(m));
  m.mem = 1;
  CHECK(!proto::validate(m));
  m.mem = 0;
  m.mode = 9;
  CHECK(!proto::validate(m));
  CHECK(std::string(proto::wait_reason_name(proto::WaitReason::kSuspended)) == "Suspended");
  CHECK(proto::kWaitReasons == 8);
}

}  // TEST_SUITE
