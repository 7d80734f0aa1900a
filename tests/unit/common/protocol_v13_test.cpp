// include/coloc/protocol.h, version 13, and pages layout 8: ControlPage::queue (where the process's
// waiting request stands in its device's queue) sits after the compute settings, the page still
// fits, v13 clients get layout 8 and older ones what they got before, and the messages are
// unchanged. The wait reasons are defined once, with their names.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "coloc/pages.h"
#include "coloc/protocol.h"

using namespace coloc;

TEST_SUITE("protocol") {

TEST_CASE("protocol v13: pages of layout 8 carry the queue note, and nothing else moved") {
  CHECK(proto::kVersion >= 13);
  CHECK(pages::layout_for_protocol(13) == 8);
  CHECK(pages::layout_for_protocol(12) == 7);
  CHECK(pages::kQueueLayout == 8);
  CHECK(offsetof(pages::ControlPage, compute) == 64 + 72 * pages::kSlots);
  CHECK(offsetof(pages::ControlPage, queue) == 64 + 88 * pages::kSlots);
  CHECK(sizeof(pages::ControlPage) <= pages::kPageSize);
  CHECK(offsetof(pages::StatsPage, busy_until) == 64 + 224 * pages::kSlots);  // the stats page is as it was
  CHECK(proto::last_admin_op(12) == uint32_t(proto::AdminOp::kHistoryForget));
  CHECK(proto::last_admin_op(13) == uint32_t(proto::AdminOp::kEnded));
}

TEST_CASE("protocol v13: kCancel carries a signal and a grace within bounds; kEnded takes no job") {
  proto::AdminMsg m{};
  m.op = uint32_t(proto::AdminOp::kCancel);
  std::snprintf(m.job, sizeof m.job, "train");
  m.mode = 15;
  m.quantum_ms = 10000;
  CHECK(proto::validate(m));
  m.quantum_ms = proto::kMaxCancelGraceMs + 1;
  CHECK(!proto::validate(m));
  m.quantum_ms = 0;
  CHECK(proto::validate(m));
  m.mode = 0;  // a signal is required
  CHECK(!proto::validate(m));
  m.mode = uint8_t(proto::kMaxSignal + 1);
  CHECK(!proto::validate(m));
  m.mode = 9;
  m.mem = 1;  // kSet's fields are reserved here
  CHECK(!proto::validate(m));
  m.mem = 0;
  m.job[0] = '\0';  // a job is required
  CHECK(!proto::validate(m));

  proto::AdminMsg e{};
  e.op = uint32_t(proto::AdminOp::kEnded);
  CHECK(proto::validate(e));
  std::snprintf(e.job, sizeof e.job, "train");
  CHECK(!proto::validate(e));
  e.job[0] = '\0';
  e.mode = 15;  // kCancel's fields are reserved on other ops
  CHECK(!proto::validate(e));
}

TEST_CASE("protocol v13: every wait reason has its own name; a value outside the set reads '?'") {
  std::set<std::string> names;
  for (uint8_t r = 0; r < proto::kWaitReasons; ++r) {
    const std::string n = proto::wait_reason_name(proto::WaitReason(r));
    CHECK(n != "?");
    CHECK(names.insert(n).second);
  }
  CHECK(names.count("Priority") == 1);
  CHECK(names.count("Resources") == 1);
  CHECK(std::string(proto::wait_reason_name(proto::WaitReason(proto::kWaitReasons))) == "?");
}

}  // TEST_SUITE

TEST_CASE("protocol v13: the queue note round-trips through its seqlock, cuts a long job id, and refuses a read mid-write") {
  static pages::ControlPage page{};
  pages::QueueNoteValue v;
  v.reason = uint32_t(proto::WaitReason::kQueue);
  v.source = uint32_t(pages::AskSource::kHistory);
  v.position = 3;
  v.asks = 2ull << 30;
  v.missing = 0;
  v.start_ms = 1'800'000'000'000ull;
  std::snprintf(v.behind, sizeof v.behind, "finetune-a1b2c3");
  pages::write_queue_note(page.queue, v);
  pages::QueueNoteValue r;
  REQUIRE(pages::read_queue_note(page.queue, &r));
  CHECK(r == v);
  CHECK(std::string(r.behind) == "finetune-a1b2c3");
  CHECK(page.queue.seq.load() % 2 == 0);
  // 70 bytes of id: 63 kept.
  std::memset(v.behind, 'x', sizeof v.behind);
  v.behind[63] = 0;
  pages::write_queue_note(page.queue, v);
  REQUIRE(pages::read_queue_note(page.queue, &r));
  CHECK(std::string(r.behind).size() == 63);
  // A writer in the middle (odd seq): the read says so.
  page.queue.seq.fetch_add(1);
  CHECK_FALSE(pages::read_queue_note(page.queue, &r));
  page.queue.seq.fetch_add(1);
  CHECK(pages::read_queue_note(page.queue, &r));
}
