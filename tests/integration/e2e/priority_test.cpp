// The priority policy end to end: a high-priority training job whose duty cycle is below 100%
// (coloc-train --gpu-util) beside two GPU-hungry best-effort jobs, on simgpu under colocd, first
// in `share` mode, then in `priority` mode. Its speed in each is compared with its solo speed
// measured in the same test (same node, same machine load). Orderings and bounds with margins:
// the suite runs on a loaded 2-core machine.
#include <doctest/doctest.h>

#include <grp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "e2e.h"
#include "trace.h"

using namespace coloc::test;
using namespace coloc::test::e2e;
namespace tr = coloc::test::trace;

namespace {

/// The high-priority job: 50% busy in 20 ms iterations (Lucid's ResNet-18/CIFAR-10 at batch 32
/// is 59% busy in 18 ms; a round figure keeps the test's arithmetic plain).
const std::vector<std::string> kHigh = {"--gpu-util", "50", "--iter-ms", "20"};
/// A GPU-hungry best-effort job: always busy, 50 ms iterations of 500 us kernels.
const std::vector<std::string> kHungry = {"--gpu-util", "100", "--iter-ms", "50"};

std::unique_ptr<Proc> train(const Node& n, const std::string& name, const std::string& priority,
                            const std::vector<std::string>& duty, double seconds) {
  std::vector<std::string> cmd = {coloc_train()};
  cmd.insert(cmd.end(), duty.begin(), duty.end());
  for (const std::string& a : {std::string("--duration"), std::to_string(seconds), std::string("--job"), name})
    cmd.push_back(a);
  return n.run({"--job", name, "--priority", priority}, cmd);
}

/// coloc-train's closing JSON line.
json result(Proc& p) {
  ProcResult r = finish(p, 90s);
  auto ls = lines(r.out);
  REQUIRE_MESSAGE(!ls.empty(), describe(r));
  json j = ls.back();
  REQUIRE_MESSAGE(j["status"] == "ok", describe(r));
  return j;
}

void policy(const Node& n, const std::vector<std::string>& args) {
  std::vector<std::string> a = {"policy", "all"};
  a.insert(a.end(), args.begin(), args.end());
  ProcResult r = n.cli(a);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
}

struct Mix {
  double high = 0;              ///< the high job's iterations per second
  uint64_t others = 0;          ///< the best-effort jobs' iterations, together
};

/// Two hungry best-effort jobs, then (once both run) the high job for `seconds`; `during` runs
/// while all three do.
Mix collocated(const Node& n, const std::string& tag, double seconds, const std::function<void()>& during = {}) {
  auto b1 = train(n, tag + "-be1", "best-effort", kHungry, seconds + 3);
  auto b2 = train(n, tag + "-be2", "best-effort", kHungry, seconds + 3);
  for (const std::string& b : {tag + "-be1", tag + "-be2"})
    REQUIRE(wait_until([&] {
      json j = n.job(b);
      return !j.is_null() && !j["pids"].empty() && j["devices"].size() == 1;
    }, 30s, 10ms));
  auto h = train(n, tag + "-high", "high", kHigh, seconds);
  if (during) during();
  Mix m;
  m.high = result(*h)["iters_per_s"].get<double>();
  m.others = result(*b1)["iters"].get<uint64_t>() + result(*b2)["iters"].get<uint64_t>();
  return m;
}

}  // namespace

TEST_SUITE("e2e") {
TEST_CASE("priority: a high-priority job keeps at least 0.85 of its solo speed beside two GPU-hungry jobs, faster than in share mode") {
  if (simulated_only()) return;
  // high is granted to root and the high-priority group: this user's own group, so the test runs
  // as anyone.
  const group* g = ::getgrgid(::getegid());
  REQUIRE(g != nullptr);
  Node n("16GiB", {"--high-priority-group", g->gr_name, "--admin-group", g->gr_name});
  policy(n, {"priority", "--target-slowdown", "5%"});
  auto solo_p = train(n, "solo-high", "high", kHigh, 4);
  const double solo = result(*solo_p)["iters_per_s"].get<double>();
  REQUIRE(solo > 10);  // 20 ms iterations: about 50 per second alone

  policy(n, {"share"});
  const Mix share = collocated(n, "share", 4);
  policy(n, {"priority", "--target-slowdown", "5%"});
  const Mix prio = collocated(n, "prio", 6, [&] {
    // What people see meanwhile: the controller running (after its probe), the others throttled.
    json control;
    CHECK(wait_until([&] {
      ProcResult r = n.cli({"policy", "--json"});
      if (r.exit_code != 0) return false;
      control = json::parse(r.out)["devices"][0]["control"];
      return control.is_object() && control["active"] == true && control["probes"].get<uint64_t>() >= 1 &&
             control["probing"] == false;
    }, 10s, 20ms));
    CHECK(control["target"].get<double>() == doctest::Approx(0.05));
    CHECK(control["allow"].get<double>() > 0);
    json be = n.job("prio-be1");
    REQUIRE(!be.is_null());
    CHECK(be["compute_state"] == "throttled");
    CHECK(n.job("prio-high")["compute_state"] == "running");
  });

  MESSAGE("high job alone ", solo, " it/s; share ", share.high, " it/s (", share.high / solo, "); priority ",
       prio.high, " it/s (", prio.high / solo, "); best-effort iterations: share ", share.others, ", priority ",
       prio.others);
  CHECK(prio.high > share.high);
  // Under a sanitizer every hooked launch costs several times more and the machine is busier:
  // the ordering must hold there too, the bound only in the plain build.
  if (sanitizer().empty()) CHECK(prio.high / solo >= 0.85);
  CHECK(prio.others > 0);  // the best-effort jobs still progress

  // The high job's report shows it tracked; a best-effort job's shows it held at the gate.
  json hr = n.report("prio-high");
  CHECK(hr["priority"] == "high");
  json be = n.report("prio-be1");
  CHECK(be["devices"][0]["gate_waited_launches"]["quantum"].get<uint64_t>() >= 1);
}

TEST_CASE("priority: beside a best-effort job with real training's launch pattern (coloc-train --pattern async), the high job keeps its speed") {
  // Issue 27: the best-effort job queues a forward and backward pass of mixed kernels on two
  // streams and synchronizes every 4 iterations: each of its bursts in the high job's idle gaps
  // is bounded from its first launch, so it does not push the high job's next iterations out.
  if (simulated_only()) return;
  const group* g = ::getgrgid(::getegid());
  REQUIRE(g != nullptr);
  Node n("16GiB", {"--high-priority-group", g->gr_name, "--admin-group", g->gr_name});
  policy(n, {"priority", "--target-slowdown", "5%"});
  auto solo_p = train(n, "asolo-high", "high", kHigh, 3);
  const double solo = result(*solo_p)["iters_per_s"].get<double>();
  REQUIRE(solo > 10);
  const std::vector<std::string> async = {"--pattern", "async", "--kernels", "60", "--streams", "2", "--sync-every", "4"};
  auto be = train(n, "async-be", "best-effort", async, 8);
  REQUIRE(wait_until([&] {
    json j = n.job("async-be");
    return !j.is_null() && !j["pids"].empty() && j["devices"].size() == 1;
  }, 30s, 10ms));
  auto h = train(n, "async-high", "high", kHigh, 5);
  const double high = result(*h)["iters_per_s"].get<double>();
  const json ber = result(*be);
  MESSAGE("high job alone ", solo, " it/s; beside the async best-effort job ", high, " it/s (", high / solo,
          "); best-effort iterations ", ber["iters"].get<uint64_t>());
  if (sanitizer().empty()) CHECK(high / solo >= 0.85);
  CHECK(high / solo >= 0.6);  // under a sanitizer too: the best-effort job never takes the device over
  CHECK(ber["iters"].get<uint64_t>() > 0);
}

TEST_CASE("priority: a stopped high-priority job throttles nobody; after SIGCONT the best-effort job yields again") {
  // Issue 27, item 3: a SIGSTOPped high job (Ctrl-Z, a debugger, Slurm's suspend) never reports a
  // drain, and the best-effort job stayed throttled for as long as it was stopped.
  if (simulated_only()) return;
  const group* g = ::getgrgid(::getegid());
  REQUIRE(g != nullptr);
  Node n("16GiB", {"--high-priority-group", g->gr_name, "--admin-group", g->gr_name});
  policy(n, {"priority", "--target-slowdown", "5%"});
  const std::pair<std::string, std::string> trace_env = {"SIMGPU_TRACE", n.file("trace.csv")};
  auto job = [&](const std::string& name, const std::string& prio, const std::vector<std::string>& duty, double s) {
    std::vector<std::string> cmd = {coloc_train()};
    cmd.insert(cmd.end(), duty.begin(), duty.end());
    for (const std::string& a : {std::string("--duration"), std::to_string(s), std::string("--job"), name}) cmd.push_back(a);
    return n.run({"--job", name, "--priority", prio}, cmd, {trace_env});
  };
  auto pid_of = [&](const std::string& name) {
    long pid = 0;
    REQUIRE(wait_until([&] {
      json j = n.job(name);
      if (j.is_null() || j["pids"].empty() || j["devices"].size() != 1) return false;
      pid = j["pids"][0].get<long>();
      return true;
    }, 30s, 10ms));
    return pid;
  };
  auto mono = [] {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
  };
  auto be = job("stop-be", "best-effort", kHungry, 11);
  const long be_pid = pid_of("stop-be");
  // Always busy (no idle gaps): it is stopped with work outstanding, never between iterations (a
  // high job stopped while idle was already away for the others' gates).
  auto high = job("stop-high", "high", {"--gpu-util", "100", "--iter-ms", "20"}, 8);
  const long high_pid = pid_of("stop-high");
  // The controller runs (its probe is over): the best-effort job is held to the high job's gaps.
  CHECK(wait_until([&] {
    ProcResult r = n.cli({"policy", "--json"});
    if (r.exit_code != 0) return false;
    json c = json::parse(r.out)["devices"][0]["control"];
    return c.is_object() && c["active"] == true && c["probes"].get<uint64_t>() >= 1 && c["probing"] == false;
  }, 10s, 20ms));
  auto stalled = [&] {
    ProcResult r = n.cli({"policy", "--json"});
    if (r.exit_code != 0) return -1;
    json c = json::parse(r.out)["devices"][0]["control"];
    return c.is_object() && c.contains("stalled") ? c["stalled"].get<int>() : -1;
  };
  CHECK(stalled() == 0);
  const uint64_t stop = mono();
  REQUIRE(::kill(pid_t(high_pid), SIGSTOP) == 0);
  // colocd sees it stopped (its sampling timer reads /proc/PID/stat): the others' gates open.
  CHECK(wait_until([&] { return stalled() == 1; }, 2s, 20ms));
  // The scenario, not a synchronization: the high job stays stopped for 2.5 s in all.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500) - std::chrono::nanoseconds(mono() - stop));
  const uint64_t cont = mono();
  REQUIRE(::kill(pid_t(high_pid), SIGCONT) == 0);
  // Continued, it completes work again: no longer stalled.
  CHECK(wait_until([&] { return stalled() == 0; }, 2s, 20ms));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // (the scenario: both run again)
  const uint64_t after = mono();
  finish(*high, 60s);
  finish(*be, 60s);
  auto ks = tr::kernels(n.file("trace.csv"));
  constexpr uint64_t kS = 1'000'000'000;
  // While stopped (from a second after the stop: the daemon's look at the process state and the
  // stopped job's queued work), the best-effort job has the device most of the time...
  auto stopped = tr::busy(ks, 0, stop + kS, cont);
  const double be_stopped = double(stopped[be_pid]) / double(cont - stop - kS);
  // ...and after SIGCONT it yields to the high job again (which leaves it no gaps).
  auto resumed = tr::busy(ks, 0, cont + kS, after);
  const double be_resumed = double(resumed[be_pid]) / double(after - cont - kS);
  const double high_resumed = double(resumed[high_pid]) / double(after - cont - kS);
  MESSAGE("best-effort's device share while the high job was stopped ", be_stopped, ", after SIGCONT ", be_resumed,
          " (the high job's ", high_resumed, ")");
  // Before the fix nothing ran (0). Beside a high job that is away (stopped here, or idle), the
  // best-effort job runs in kWindow: its in-flight work stays within the window a returning high
  // job would wait behind, which costs it about 30% of the device on simgpu. Seen: 0.63-0.72, in
  // the plain build and under TSan alike, against 0.995-0.998 for the same job with no high job
  // on the device. A bound of 0.6 failed in two TSan batch runs here.
  CHECK(be_stopped >= 0.5);
  CHECK(high_resumed >= 0.7);
  CHECK(be_resumed <= 0.3);
}
}
