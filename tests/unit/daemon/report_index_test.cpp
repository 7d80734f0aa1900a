// The ended jobs' index (ReportWriter::ended, `coloc jobs --all`) and the report retention
// (report_retention): the index holds what is on disk when the writer starts and what it writes
// after, newest end first; retention by count keeps the newest, by age deletes those that ended
// before it; a report deleted by retention leaves the suffixes of later ones as they were. A FIFO,
// a report from the far future and waits past belief are no entries.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "report/report_store.h"
#include "report/report_writer.h"
#include "util/clock.h"
#include "../../support/proc.h"

using namespace coloc::report;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string report_text(const std::string& job, int64_t end_ms, uint32_t uid = 0) {
  return json{{"job", job},
              {"uid", uid},
              {"user", uid == 0 ? "root" : "u" + std::to_string(uid)},
              {"command", "train.py --lr 1e-4"},
              {"start_unix_ms", end_ms - 60'000},
              {"end_unix_ms", end_ms},
              {"exit_status", 0},
              {"exit_signal", nullptr},
              {"cancelled", nullptr},
              {"devices", json::array({{{"peak", 3ull << 30}, {"wait_admission_s", 2.5}, {"wait_memory_s", 0.5}},
                                       {{"peak", 5ull << 30}, {"wait_admission_s", 1.0}, {"wait_memory_s", 0.0}}})}}
      .dump();
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().extension() == ".json";
  return n;
}

/// Waits until the writer has read the directory; its index then.
std::vector<ReportWriter::Ended> indexed(const ReportWriter& w) {
  bool done = false;
  std::vector<ReportWriter::Ended> out;
  REQUIRE(coloc::test::wait_until([&] {
    out = w.ended(&done);
    return done;
  }, 10s));
  return out;
}

}  // namespace

TEST_SUITE("report") {

TEST_CASE("report index: a report's entry holds its times, exit, largest peak and summed waits; a torn report has none") {
  auto e = ReportWriter::summarize(report_text("train-1a2b3c", 1'800'000'000'000), "train-1a2b3c");
  REQUIRE(e);
  CHECK(e->job == "train-1a2b3c");
  CHECK(e->user == "root");
  CHECK(e->end_ms == 1'800'000'000'000);
  CHECK(e->start_ms == 1'800'000'000'000 - 60'000);
  CHECK(e->exit_status == 0);
  CHECK(!e->exit_signal);
  CHECK(e->peak == 5ull << 30);
  CHECK(e->waited_s == doctest::Approx(4.0));
  CHECK(e->cancelled_by.empty());
  json cancelled = json::parse(report_text("x", 1'800'000'000'000));
  cancelled["cancelled"] = {{"by", "alice"}, {"uid", 1000}, {"signal", 15}};
  auto c = ReportWriter::summarize(cancelled.dump(), "x");
  REQUIRE(c);
  CHECK(c->cancelled_by == "alice");
  // Numbers out of range, or not whole, make no entry (a cast would be undefined).
  json bad = json::parse(report_text("x", 1'800'000'000'000));
  bad["uid"] = -1;
  CHECK(!ReportWriter::summarize(bad.dump(), "x"));
  bad["uid"] = 0;
  bad["end_unix_ms"] = 1e300;
  CHECK(!ReportWriter::summarize(bad.dump(), "x"));
  bad["end_unix_ms"] = 1.5;
  CHECK(!ReportWriter::summarize(bad.dump(), "x"));
  CHECK(!ReportWriter::summarize("{\"job\": \"x\", \"start", "x"));
  CHECK(!ReportWriter::summarize("[1, 2]", "x"));
  CHECK(!ReportWriter::summarize(json{{"job", "x"}, {"uid", 0}}.dump(), "x"));  // no end: not a complete report
  // A wait past a year, or below zero, is not believed (summed, 1e308 would make the total inf).
  json huge = json::parse(report_text("x", 1'800'000'000'000));
  huge["devices"][0]["wait_memory_s"] = 1e308;
  huge["devices"][1]["wait_admission_s"] = -5.0;
  auto h = ReportWriter::summarize(huge.dump(), "x");
  REQUIRE(h);
  CHECK(h->waited_s == doctest::Approx(2.5));
}

TEST_CASE("report index: the reports on disk at start and those written after, newest end first") {
  coloc::test::TempDir tmp("coloc-index");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  const int64_t now = coloc::wall_ms();
  REQUIRE(store.write("old", report_text("old", now - 3000)).ok());
  REQUIRE(store.write("older", report_text("older", now - 9000)).ok());
  coloc::test::write_file(tmp / "reports/torn.json", "{\"job\": ");  // skipped, not fatal
  // Neither a FIFO (no writer: a blocking open would never return) nor a report that ends a year
  // from now (it would head the list for ever) is taken.
  REQUIRE(::mkfifo((tmp / "reports/fifo.json").c_str(), 0600) == 0);
  REQUIRE(store.write("future", report_text("future", now + 365LL * 86'400'000)).ok());
  ReportWriter w(store);
  w.set_retention({0, 0});
  auto list = indexed(w);
  REQUIRE(list.size() == 2);
  CHECK(list[0].job == "old");
  CHECK(list[1].job == "older");
  w.submit("new", "0:new", report_text("new", now));
  REQUIRE(w.flush(5000ms));
  list = w.ended();
  REQUIRE(list.size() == 3);
  CHECK(list[0].job == "new");
  CHECK(list[0].name == "new");
  w.submit("new", "0:new", report_text("new", now + 1));  // the same id again: its second report
  REQUIRE(w.flush(5000ms));
  list = w.ended();
  REQUIRE(list.size() == 4);
  CHECK(list[0].name == "new.2");
  // kEnded's filters apply before the cap, and `total` counts what they keep.
  size_t total = 0;
  auto some = w.newest(1, {}, &total);
  REQUIRE(some.size() == 1);
  CHECK(some[0].name == "new.2");
  CHECK(total == 4);
  some = w.newest(10, {now - 5000, std::nullopt}, &total);
  CHECK(total == 3);  // "older" ended 9 s ago
  CHECK(some.back().job == "old");
  w.submit("theirs", "1000:theirs", report_text("theirs", now - 20'000, 1000));
  REQUIRE(w.flush(5000ms));
  some = w.newest(10, {0, 1000u}, &total);
  REQUIRE(some.size() == 1);
  CHECK(some[0].job == "theirs");
  CHECK(total == 1);
  CHECK(w.newest(10, {now - 5000, 1000u}, &total).empty());
  CHECK(total == 0);
}

TEST_CASE("report retention: by count the newest are kept; by age those that ended before it go; both apply together") {
  coloc::test::TempDir tmp("coloc-retention");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  const int64_t now = coloc::wall_ms(), day = 86'400'000;
  for (int i = 0; i < 5; ++i) REQUIRE(store.write("job" + std::to_string(i), report_text("job" + std::to_string(i), now - i * 1000)).ok());
  REQUIRE(store.write("ancient", report_text("ancient", now - 40 * day)).ok());
  {
    ReportWriter w(store);
    w.set_retention({0, 4});  // the newest four
    auto list = indexed(w);
    REQUIRE(coloc::test::wait_until([&] { return files_in(tmp / "reports") == 4; }, 10s));
    list = w.ended();
    REQUIRE(list.size() == 4);
    CHECK(list[0].job == "job0");
    CHECK(list[3].job == "job3");
    CHECK(!std::filesystem::exists(tmp / "reports/ancient.json"));
    CHECK(!std::filesystem::exists(tmp / "reports/job4.json"));
    // A new report: still four, the oldest of them goes.
    w.submit("job5", "0:job5", report_text("job5", now + 1000));
    REQUIRE(w.flush(5000ms));
    REQUIRE(coloc::test::wait_until([&] { return !std::filesystem::exists(tmp / "reports/job3.json"); }, 10s));
    CHECK(files_in(tmp / "reports") == 4);
  }
  REQUIRE(store.write("month-old", report_text("month-old", now - 31 * day)).ok());
  REQUIRE(store.write("week-old", report_text("week-old", now - 7 * day)).ok());
  ReportWriter w(store);
  w.set_retention({30 * day, 0});  // 30 days, any number
  (void)indexed(w);
  REQUIRE(coloc::test::wait_until([&] { return !std::filesystem::exists(tmp / "reports/month-old.json"); }, 10s));
  CHECK(std::filesystem::exists(tmp / "reports/week-old.json"));
  CHECK(w.ended().size() == 5);
}

TEST_CASE("report store: a reused id's reports are all found after retention deleted more than 64 of its oldest") {
  coloc::test::TempDir tmp("coloc-gaps");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  for (int i = 1; i <= 70; ++i) REQUIRE(store.write("nightly", "{}").ok());
  REQUIRE(store.write("nightly-other", "{}").ok());  // another id with the same start: not listed
  for (int i = 1; i <= 66; ++i)
    std::filesystem::remove(tmp / (i == 1 ? std::string("reports/nightly.json") : "reports/nightly." + std::to_string(i) + ".json"));
  auto p = store.write("nightly", "{}");
  REQUIRE(p.ok());
  CHECK(p.value() == tmp / "reports/nightly.71.json");
  auto found = store.find("nightly");
  REQUIRE(found.size() == 5);
  CHECK(found[0] == tmp / "reports/nightly.71.json");
  CHECK(found[4] == tmp / "reports/nightly.67.json");
}

TEST_CASE("report store: after retention deleted a job's older reports, a new one takes the next suffix and lists first") {
  coloc::test::TempDir tmp("coloc-suffix");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  REQUIRE(store.write("nightly", "{}").ok());
  REQUIRE(store.write("nightly", "{}").ok());
  REQUIRE(store.write("nightly", "{}").ok());
  std::filesystem::remove(tmp / "reports/nightly.json");
  std::filesystem::remove(tmp / "reports/nightly.2.json");
  auto p = store.write("nightly", "{\"n\": 4}");
  REQUIRE(p.ok());
  CHECK(p.value() == tmp / "reports/nightly.4.json");
  auto found = store.find("nightly");
  REQUIRE(found.size() == 2);
  CHECK(found[0] == p.value());
}

}  // TEST_SUITE
