// The job report's compute part: GPU time and launches by gate state from the stats pages'
// completion tracking (live and folded), the turns a job held each timesliced device (bounded),
// and their saved state across a daemon restart (old states without them still load).
#include <doctest/doctest.h>

#include <functional>
#include <memory>

#include "report/job_recorder.h"

using namespace coloc::report;
using coloc::broker::Uuid;
using nlohmann::json;

namespace {
Uuid gpu(uint8_t n) {
  Uuid u;
  u.bytes.fill(0x33);
  u.bytes[15] = n;
  return u;
}
constexpr uint64_t kSec = 1'000'000'000, kMs = 1'000'000;

JobRecorder recorder() { return JobRecorder(3, {1000, "ts-a"}, "alice", "spin", 0x1, "normal", 100 * kSec, 1700000000000); }

const json& dev_of(const json& rep, const Uuid& u) {
  for (const json& d : rep["devices"])
    if (d["uuid"] == u.str()) return d;
  FAIL("no device ", u.str());
  static json none;
  return none;
}
}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("report compute: counters_of reads the tracking words of a gated page only") {
  auto page = std::make_unique<coloc::pages::StatsPage>();
  page->slots[2].launches = 1000;
  page->track[2].busy_ns = 3 * kSec;
  page->track[2].launches = 700;
  page->track[2].window_waits = 9;
  Counters c = counters_of(*page, 2, true);
  CHECK(c.launches == 1000);
  CHECK(c.busy_ns == 3 * kSec);
  CHECK(c.window_launches == 700);
  CHECK(c.window_waits == 9);
  Counters old = counters_of(*page, 2, false);  // a page of layout 3 or older: not the client's words
  CHECK(old.launches == 1000);
  CHECK(old.busy_ns == 0);
  CHECK(old.window_launches == 0);
  CHECK(old.window_waits == 0);
}

TEST_CASE("report compute: launches by gate state sum live and departed processes; GPU time is the job's, which a departed process does not add to") {
  // The engine's sample holds the job's device time: the union of its processes' intervals, the
  // departed one's included (compute/device_time.h; issue 27, item 4: adding each process's made a
  // job of two ranks claim twice its device time).
  JobRecorder r = recorder();
  DeviceSample s;
  s.capacity = 16ull << 30;
  s.live.launches = 500;
  s.live.window_launches = 300;
  s.live.busy_ns = 2 * kSec + kSec / 2;
  s.live.window_waits = 4;
  r.sample(gpu(1), 101 * kSec, s);
  Counters gone;  // a process that left
  gone.launches = 200;
  gone.window_launches = 150;
  gone.busy_ns = kSec / 2;
  gone.window_waits = 1;
  r.fold(gpu(1), gone, 0);
  json d = dev_of(r.to_json(103 * kSec), gpu(1));
  CHECK(d["gpu_time_s"].get<double>() == doctest::Approx(2.5));
  CHECK(d["launches_by_gate"]["window"] == 450);
  CHECK(d["launches_by_gate"]["run"] == 250);
  CHECK(d["window_waits"] == 5);
  CHECK(d["kernel_launches"] == 700);
  CHECK(d["turns"] == json::array());
  CHECK(d["turns_count"] == 0);
  CHECK(d["drain_timeouts"] == 0);
  // The flushed launch count lags the tracked one (flushed every few thousand): never negative.
  s.live.launches = 10;
  r.sample(gpu(1), 104 * kSec, s);
  CHECK(dev_of(r.to_json(105 * kSec), gpu(1))["launches_by_gate"]["run"] == 0);
  // The job's end keeps what its processes left behind (their counters were folded).
  r.fold(gpu(1), s.live, 0);
  r.finish(106 * kSec, 1700000006000);
  CHECK(dev_of(r.to_json(107 * kSec), gpu(1))["gpu_time_s"].get<double>() == doctest::Approx(2.5));
}

TEST_CASE("report compute: turns are relative to the job's start; an open one ends at now, or at the job's end") {
  JobRecorder r = recorder();
  r.turn_begin(gpu(1), 101 * kSec);
  r.turn_end(gpu(1), 101 * kSec + 60 * kMs, false);
  r.turn_end(gpu(1), 101 * kSec + 70 * kMs, false);  // no turn open: nothing
  r.turn_begin(gpu(1), 102 * kSec);
  r.turn_end(gpu(1), 102 * kSec + 500 * kMs, true);  // drained too late
  r.turn_begin(gpu(2), 103 * kSec);
  json rep = r.to_json(104 * kSec);
  json d1 = dev_of(rep, gpu(1)), d2 = dev_of(rep, gpu(2));
  REQUIRE(d1["turns"].size() == 2);
  CHECK(d1["turns"][0][0].get<double>() == doctest::Approx(1.0));
  CHECK(d1["turns"][0][1].get<double>() == doctest::Approx(1.06));
  CHECK(d1["turns"][1][0].get<double>() == doctest::Approx(2.0));
  CHECK(d1["turns"][1][1].get<double>() == doctest::Approx(2.5));
  CHECK(d1["turns_count"] == 2);
  CHECK(d1["drain_timeouts"] == 1);
  REQUIRE(d2["turns"].size() == 1);  // open: until now
  CHECK(d2["turns"][0][1].get<double>() == doctest::Approx(4.0));
  CHECK(d2["turns_count"] == 1);
  const uint64_t rev = r.revision();
  r.finish(105 * kSec, 1700000005000);
  CHECK(r.revision() != rev);
  d2 = dev_of(r.to_json(200 * kSec), gpu(2));
  CHECK(d2["turns"][0][1].get<double>() == doctest::Approx(5.0));  // closed at the end, not at "now"
}

TEST_CASE("report compute: turns stay bounded; the closest neighbours merge, the count and the span stay") {
  JobRecorder r = recorder();
  const uint64_t t0 = 100 * kSec;
  // 2000 turns of 20 ms every 60 ms, but one gap of 5 s after turn 1000 (it must survive).
  uint64_t t = t0 + kSec;
  for (int i = 0; i < 2000; ++i) {
    r.turn_begin(gpu(1), t);
    r.turn_end(gpu(1), t + 20 * kMs, false);
    t += i == 1000 ? 5 * kSec : 60 * kMs;
  }
  json d = dev_of(r.to_json(t + kSec), gpu(1));
  const json& turns = d["turns"];
  CHECK(turns.size() <= JobRecorder::kMaxTurns);
  CHECK(turns.size() >= JobRecorder::kMaxTurns / 2);
  CHECK(d["turns_count"] == 2000);
  CHECK(turns.front()[0].get<double>() == doctest::Approx(1.0));
  CHECK(turns.back()[1].get<double>() == doctest::Approx(double(t - t0 - 60 * kMs + 20 * kMs) / 1e9));
  bool big_gap = false;
  for (size_t i = 0; i < turns.size(); ++i) {
    CHECK(turns[i][1].get<double>() >= turns[i][0].get<double>());
    if (i) {
      CHECK(turns[i][0].get<double>() >= turns[i - 1][1].get<double>());
      big_gap |= turns[i][0].get<double>() - turns[i - 1][1].get<double>() > 4.9;
    }
  }
  CHECK(big_gap);
  // The saved state keeps the bound and restores the same report.
  auto back = JobRecorder::from_state(r.state(), 3);
  REQUIRE_MESSAGE(back.ok(), back.error().message());
  CHECK(back.value().to_json(t + kSec) == r.to_json(t + kSec));
}

TEST_CASE("report compute: saved state round-trips; a restart ends the open turn where the daemon last saw it") {
  JobRecorder r = recorder();
  DeviceSample s;
  s.capacity = 16ull << 30;
  s.live.launches = 90;
  s.live.window_launches = 80;
  s.live.busy_ns = 8 * kSec;  // the job's device time, the departed process's second included
  s.live.window_waits = 3;
  r.sample(gpu(1), 101 * kSec, s);
  Counters gone;
  gone.busy_ns = kSec;
  gone.window_launches = 5;
  r.fold(gpu(1), gone, 0);
  r.turn_begin(gpu(1), 101 * kSec);
  r.turn_end(gpu(1), 102 * kSec, true);
  r.turn_begin(gpu(1), 103 * kSec);  // open when saved
  json st = r.state();
  auto back = JobRecorder::from_state(st, 3);
  REQUIRE_MESSAGE(back.ok(), back.error().message());
  CHECK(back.value().to_json(104 * kSec) == r.to_json(104 * kSec));
  // After a restart: the turn open then ends at the last time the daemon saw the job.
  JobRecorder& x = back.value();
  x.daemon_restarted(103 * kSec + 400 * kMs);
  x.turn_begin(gpu(1), 110 * kSec);  // the new daemon's first turn
  json d = dev_of(x.to_json(111 * kSec), gpu(1));
  REQUIRE(d["turns"].size() == 3);
  CHECK(d["turns"][1][1].get<double>() == doctest::Approx(3.4));
  CHECK(d["turns"][2][0].get<double>() == doctest::Approx(10.0));
  CHECK(d["turns_count"] == 3);
  CHECK(d["drain_timeouts"] == 1);
  CHECK(d["gpu_time_s"].get<double>() == doctest::Approx(8.0));
  CHECK(d["launches_by_gate"]["window"] == 85);
  CHECK(d["window_waits"] == 3);
  // The clients' new pages start their tracking at zero (not carried over): what they track
  // from now on adds to what was saved.
  DeviceSample fresh = s;
  fresh.live.busy_ns = kSec / 2;
  fresh.live.window_launches = 10;
  fresh.live.window_waits = 1;
  x.sample(gpu(1), 111 * kSec, fresh);
  d = dev_of(x.to_json(112 * kSec), gpu(1));
  CHECK(d["gpu_time_s"].get<double>() == doctest::Approx(8.5));
  CHECK(d["launches_by_gate"]["window"] == 95);
  CHECK(d["window_waits"] == 4);
  CHECK(d["kernel_launches"] == 90);  // carried over by the clients: the new page's figure
}

TEST_CASE("report compute: a state saved before completion tracking (14 counters, no turns) loads with zeros") {
  JobRecorder r = recorder();
  DeviceSample s;
  s.capacity = 16ull << 30;
  s.live.launches = 40;
  s.live.gate_waits[2] = 6;
  s.live.busy_ns = kSec;
  r.sample(gpu(1), 101 * kSec, s);
  r.turn_begin(gpu(1), 101 * kSec);
  json st = r.state();
  constexpr size_t kOld = 6 + 2 * coloc::pages::kGateStates;
  REQUIRE(st["devices"][0]["live"].size() == kOld + 3);
  for (json& d : st["devices"]) {
    for (const char* k : {"folded", "live"}) {
      json old = json::array();
      for (size_t i = 0; i < kOld; ++i) old.push_back(d[k][i]);
      d[k] = old;
    }
    for (const char* k : {"turns", "turn_open", "turns_count", "drain_timeouts"}) d.erase(k);
  }
  auto back = JobRecorder::from_state(st, 3);
  REQUIRE_MESSAGE(back.ok(), back.error().message());
  json d = dev_of(back.value().to_json(102 * kSec), gpu(1));
  CHECK(d["gpu_time_s"] == 0.0);
  CHECK(d["launches_by_gate"]["window"] == 0);
  CHECK(d["launches_by_gate"]["run"] == 40);
  CHECK(d["gate_waited_launches"]["quantum"] == 6);
  CHECK(d["turns"] == json::array());
  CHECK(d["turns_count"] == 0);
}

TEST_CASE("report compute: bad saved turns are an error naming the field") {
  JobRecorder r = recorder();
  r.turn_begin(gpu(1), 101 * kSec);
  r.turn_end(gpu(1), 102 * kSec, false);
  r.turn_begin(gpu(1), 103 * kSec);
  r.turn_end(gpu(1), 104 * kSec, false);
  const json good = r.state();
  auto refused = [&](const std::function<void(json&)>& spoil, const std::string& field) {
    json st = good;
    spoil(st["devices"][0]);
    auto b = JobRecorder::from_state(st, 3);
    REQUIRE_FALSE(b.ok());
    CHECK_MESSAGE(b.error().message().find(field) != std::string::npos, b.error().message());
  };
  refused([](json& d) { d["turns"][1][0] = 0; }, "turns[1]");  // before the turn before it
  refused([](json& d) { d["turns"][0] = json::array({5, 4}); }, "turns[0]");  // ends before it starts
  refused([](json& d) { d["turns"][0] = "x"; }, "turns[0]");
  refused([](json& d) { d["turns"] = json::array(); for (size_t i = 0; i <= JobRecorder::kMaxTurns; ++i) d["turns"].push_back({i, i}); }, "turns");
  refused([](json& d) { d["turn_open"] = 1; }, "turn_open");
  refused([](json& d) { d["drain_timeouts"] = -1; }, "drain_timeouts");
}

}  // TEST_SUITE
