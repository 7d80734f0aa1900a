// Reports: the bounded timeline, the job recorder's JSON, and the never-overwriting store.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "report/job_recorder.h"
#include "report/report_store.h"
#include "report/timeline.h"
#include "../../support/proc.h"

using namespace coloc::report;
using coloc::broker::Event;
using coloc::broker::Reason;
using coloc::broker::Uuid;

namespace {
Uuid gpu(uint8_t n) {
  Uuid u;
  u.bytes.fill(0x11);
  u.bytes[15] = n;
  return u;
}
constexpr uint64_t kSec = 1'000'000'000;
}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("timeline: stays within its bound, keeps the peak, and ends at the last sample") {
  Timeline t(500);
  std::mt19937_64 rng(7);
  uint64_t peak = 0, peak_at = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    uint64_t v = rng() % (1ull << 30);
    if (i == 77777) v = 5ull << 30;
    if (v > peak) {
      peak = v;
      peak_at = i;
    }
    t.add(i * 1'000'000, v);
    CHECK(t.stored() < 1000);
  }
  auto pts = t.points();
  CHECK(pts.size() <= 500);
  CHECK(pts.size() >= 250);
  uint64_t max = 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    max = std::max(max, pts[i].bytes);
    if (i) CHECK(pts[i].t_ns >= pts[i - 1].t_ns);
  }
  CHECK(max == 5ull << 30);
  CHECK(t.peak() == 5ull << 30);
  CHECK(peak_at == 77777);
  CHECK(pts.back().t_ns == 99999ull * 1'000'000);
}

TEST_CASE("timeline: only changes are stored") {
  Timeline t(500);
  for (uint64_t i = 0; i < 10000; ++i) t.add(i, i < 5000 ? 1 : 2);
  auto pts = t.points();
  REQUIRE(pts.size() == 3);
  CHECK(pts[0].bytes == 1);
  CHECK(pts[1].t_ns == 5000);
  CHECK(pts[1].bytes == 2);
  CHECK(pts[2].t_ns == 9999);
}

TEST_CASE("job recorder: waits, OOM events, counters of departed processes, and the end") {
  JobRecorder r(1, {1000, "train-x1"}, "alice", "python train.py", 0xabc, "normal", 100 * kSec, 1700000000000);
  r.add_process(4242);
  DeviceSample s;
  s.capacity = 80ull << 30;
  s.limit = 20ull << 30;
  s.reservation = 20ull << 30;
  s.in_use = 1ull << 30;
  s.live.allocs = 10;
  r.sample(gpu(1), 101 * kSec, s);
  Event e{};
  e.device = gpu(1);
  e.kind = Event::Kind::kWaitBegin;
  e.at = 102 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kWaitEnd;
  e.at = 105 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kRefused;
  e.reason = Reason::kOwnLimit;
  e.bytes = 21ull << 30;
  e.at = 106 * kSec;
  r.on_event(e);
  e.kind = Event::Kind::kWaitBegin;  // still open at report time
  e.admission = false;
  e.at = 107 * kSec;
  r.on_event(e);
  s.in_use = 3ull << 30;
  s.peak_hint = 4ull << 30;
  r.sample(gpu(1), 108 * kSec, s);

  auto live = r.to_json(110 * kSec);
  CHECK(live["complete"] == false);
  CHECK(live["end"].is_null());
  auto d = live["devices"][0];
  CHECK(d["uuid"] == gpu(1).str());
  CHECK(d["peak"] == 4ull << 30);  // the per-process peak beats the samples
  CHECK(d["limit"] == 20ull << 30);
  CHECK(d["wait_memory_s"].get<double>() == doctest::Approx(6.0));  // 3 s closed + 3 s still open
  CHECK(d["waits"].size() == 2);
  CHECK(d["waits"][1]["outcome"] == "waiting");
  REQUIRE(d["oom_events"].size() == 1);
  CHECK(d["oom_events"][0]["reason"] == "own-limit");
  CHECK(d["oom_events"][0]["t_s"].get<double>() == doctest::Approx(6.0));

  Counters gone;
  gone.allocs = 5;
  gone.launches = 100;
  r.fold(gpu(1), gone, 2ull << 30);
  r.process_exited({4242, 0, std::nullopt, "goodbye"});
  r.finish(112 * kSec, 1700000012000);
  auto fin = r.to_json(200 * kSec);
  CHECK(fin["complete"] == true);
  CHECK(fin["exit_status"] == 0);
  CHECK(fin["duration_s"].get<double>() == doctest::Approx(12.0));
  CHECK(fin["end"] == "2023-11-14T22:13:32.000Z");
  d = fin["devices"][0];
  CHECK(d["allocations"] == 5);  // live counters are gone with the processes; folded ones stay
  CHECK(d["kernel_launches"] == 100);
  CHECK(d["timeline"]["bytes"].back() == 0);
  CHECK(d["timeline"]["t_s"].back().get<double>() == doctest::Approx(12.0));
}

TEST_CASE("job recorder: a run's time for the history counts from its first admission, not from its start") {
  JobRecorder r(1, {1000, "q"}, "alice", "python train.py", 0xabc, "normal", 100 * kSec, 1700000000000);
  CHECK(r.run_summary(110 * kSec).admitted_for == 0);  // never admitted
  Event e{};
  e.kind = Event::Kind::kAdmitted;
  e.device = gpu(2);
  e.at = 107 * kSec;
  r.on_event(e);
  e.device = gpu(1);
  e.at = 104 * kSec;  // the first admission (on another device)
  r.on_event(e);
  const auto run = r.run_summary(112 * kSec);
  CHECK(run.duration == 12 * kSec);
  CHECK(run.admitted_for == 8 * kSec);
}

TEST_CASE("job recorder: a wait lists the queue's reasons in the order seen; a cancel names who; both survive a restart") {
  JobRecorder r(1, {1000, "q"}, "alice", "python train.py", 0xabc, "normal", 100 * kSec, 1700000000000);
  Event e{};
  e.device = gpu(1);
  e.kind = Event::Kind::kWaitBegin;
  e.admission = true;
  e.at = 101 * kSec;
  r.on_event(e);
  r.note_wait_reason(gpu(1), true, coloc::proto::WaitReason::kQueue);
  r.note_wait_reason(gpu(1), true, coloc::proto::WaitReason::kQueue);  // a repeat: not again
  r.note_wait_reason(gpu(1), true, coloc::proto::WaitReason::kResources);
  r.note_wait_reason(gpu(1), false, coloc::proto::WaitReason::kPriority);  // no memory wait open: nothing
  r.note_wait_reason(gpu(2), true, coloc::proto::WaitReason::kPriority);   // not a device of the job: nothing
  for (int i = 0; i < 20; ++i)  // bounded
    r.note_wait_reason(gpu(1), true, i % 2 ? coloc::proto::WaitReason::kOutside : coloc::proto::WaitReason::kUserCap);
  CHECK_FALSE(r.was_cancelled());
  r.cancelled(0, "root", 15, 1700000005000);
  r.cancelled(1000, "alice", 9, 1700000006000);  // the first cancel counts
  CHECK(r.was_cancelled());
  auto check = [](const nlohmann::json& j) {
    const auto& reasons = j["devices"][0]["waits"][0]["reasons"];
    REQUIRE(reasons.size() == JobRecorder::kMaxReasons);
    CHECK(reasons[0] == "Queue");
    CHECK(reasons[1] == "Resources");
    CHECK(reasons[2] == "UserCap");
    CHECK(j["cancelled"]["by"] == "root");
    CHECK(j["cancelled"]["signal"] == 15);
    CHECK(j["cancelled"]["at"] == "2023-11-14T22:13:25.000Z");
  };
  check(r.to_json(110 * kSec));
  auto back = JobRecorder::from_state(r.state(), 1);
  REQUIRE(back.ok());
  check(back.value().to_json(110 * kSec));
  CHECK(back.value().run_summary(110 * kSec).cancelled);
}

TEST_CASE("job recorder: an out-of-memory error at the job's own limit is told from one on a full device") {
  auto with = [](Reason reason, uint64_t failures) {
    JobRecorder r(1, {1000, "q"}, "alice", "python train.py", 0xabc, "normal", 100 * kSec, 1700000000000);
    DeviceSample s;
    s.capacity = 80ull << 30;
    s.live.failures = failures;
    r.sample(gpu(1), 101 * kSec, s);
    if (reason != Reason::kNone) {
      Event e{};
      e.device = gpu(1);
      e.kind = Event::Kind::kRefused;
      e.reason = reason;
      e.at = 102 * kSec;
      r.on_event(e);
    }
    return r.run_summary(103 * kSec);
  };
  CHECK(with(Reason::kOwnLimit, 0).oom_limit);
  CHECK(with(Reason::kUserCap, 0).oom_limit);
  CHECK_FALSE(with(Reason::kDeviceFull, 0).oom_limit);
  CHECK(with(Reason::kDeviceFull, 0).oom);
  CHECK(with(Reason::kNone, 3).oom_limit);  // failed in its library, no refusal: its limit
  CHECK_FALSE(with(Reason::kNone, 0).oom);
}

TEST_CASE("report store: sanitized names, never overwritten") {
  coloc::test::TempDir tmp("coloc-reports");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  struct stat st;
  REQUIRE(::stat((tmp / "reports").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0750);
  CHECK(ReportStore::sanitize("../etc/passwd") == "_._etc_passwd");
  CHECK(ReportStore::sanitize(".hidden") == "_hidden");
  CHECK(ReportStore::sanitize("") == "job");
  CHECK(ReportStore::sanitize("a:b c") == "a_b_c");
  auto p1 = store.write("../evil", "{\"n\":1}");
  REQUIRE(p1.ok());
  CHECK(p1.value() == tmp / "reports/_._evil.json");
  auto p2 = store.write("../evil", "{\"n\":2}");
  REQUIRE(p2.ok());
  CHECK(p2.value() == tmp / "reports/_._evil.2.json");
  CHECK(coloc::test::read_file(p1.value()) == "{\"n\":1}");
  REQUIRE(::stat(p2.value().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  auto found = store.find("../evil");
  REQUIRE(found.size() == 2);
  CHECK(found[0] == p2.value());
  CHECK(store.find("nothing").empty());
}

TEST_CASE("report store: run_ids_of lists reports written back to back newest first (no mtime ties within a clock tick)") {
  coloc::test::TempDir tmp("coloc-reports");
  ReportStore store(tmp / "reports");
  REQUIRE(store.prepare().ok());
  // Forty reports within a few milliseconds: the kernel's coarse file clock would give many of
  // them the same mtime, and the order among those would be the directory's.
  std::vector<std::string> written;
  char id[32];
  for (unsigned i = 0; i < 40; ++i) {
    std::snprintf(id, sizeof id, "nightly-%06x", (i * 0x9e3779u) & 0xffffffu);
    written.push_back(id);
    REQUIRE(store.write(id, "{}").ok());
  }
  REQUIRE(store.write("nightly-xyz", "{}").ok());  // not coloc run's suffix: not listed
  std::vector<std::string> ids = store.run_ids_of("nightly");
  std::reverse(written.begin(), written.end());
  CHECK(ids == written);
}

}  // TEST_SUITE
