// Which jobs a high job's wait suspends (daemon/broker/preempt.h), as a pure function of the
// candidates and a fake clock; and the host memory a suspension may use (daemon/device/host_memory.h)
// from fake /proc and /sys/fs/cgroup trees.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "broker/preempt.h"
#include "device/host_memory.h"
#include "../../support/proc.h"

using namespace coloc::broker;

namespace {
constexpr Bytes GiB = 1ull << 30;
constexpr Nanos kSec = 1'000'000'000;
constexpr Nanos kMinRun = 60 * kSec;
constexpr Nanos T0 = 10'000 * kSec;

SuspendCandidate be(JobSerial job, Bytes gib, Nanos started_s_ago, Bytes host_gib = 0) {
  return {.job = job, .priority = Priority::kBestEffort, .device_bytes = gib * GiB,
          .host_bytes = (host_gib ? host_gib : gib) * GiB, .started = T0 - started_s_ago * kSec};
}
}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("preempt: the fewest jobs, then the least memory that suffices, then the youngest") {
  // Two best-effort jobs of 36 GiB fill a device; a high job needs 40 GiB: both must go.
  auto c = choose_victims({be(1, 36, 600), be(2, 36, 300)}, 40 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{1, 2});
  CHECK(c.device_bytes == 72 * GiB);
  // One job suffices: the smallest that does (30), not the largest (50).
  c = choose_victims({be(1, 50, 600), be(2, 30, 600), be(3, 20, 600)}, 25 * GiB, PreemptMode::kBestEffort, T0, kMinRun,
                     1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{2});
  // Equal sizes: the youngest (started last) goes.
  c = choose_victims({be(1, 30, 900), be(2, 30, 100), be(3, 30, 500)}, 25 * GiB, PreemptMode::kBestEffort, T0, kMinRun,
                     1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{2});
  // Two needed: of the pairs that suffice, the one with the least memory.
  c = choose_victims({be(1, 10, 600), be(2, 12, 600), be(3, 25, 600), be(4, 9, 600)}, 30 * GiB, PreemptMode::kBestEffort,
                     T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs.size() == 2);
  CHECK(c.device_bytes == 34 * GiB);  // 25 + 9; 25 + 10 and 25 + 12 also suffice, with more
}

TEST_CASE("preempt: who may be suspended: priority under the policy, the preflight, min_run") {
  std::vector<SuspendCandidate> cs = {be(1, 40, 600)};
  cs.push_back({.job = 2, .priority = Priority::kNormal, .device_bytes = 40 * GiB, .host_bytes = 40 * GiB, .started = T0 - 600 * kSec});
  cs.push_back({.job = 3, .priority = Priority::kHigh, .device_bytes = 40 * GiB, .host_bytes = 40 * GiB, .started = T0 - 600 * kSec});
  auto c = choose_victims(cs, 60 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs.empty());
  CHECK(c.why == NoVictims::kNotEnough);  // only job 1 may go, and it is not enough
  c = choose_victims(cs, 60 * GiB, PreemptMode::kNormal, T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{1, 2});  // never the high one
  c = choose_victims(cs, 10 * GiB, PreemptMode::kOff, T0, kMinRun, 1000 * GiB);
  CHECK(c.why == NoVictims::kPolicyOff);
  // Not suspendable (managed memory, IPC): another is chosen; none left: kNoCandidate.
  cs = {be(1, 40, 600), be(2, 40, 600)};
  cs[0].suspendable = false;
  c = choose_victims(cs, 30 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{2});
  cs[1].suspendable = false;
  CHECK(choose_victims(cs, 30 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB).why == NoVictims::kNoCandidate);
  // A job resumed 30 s ago is not suspended again before it ran min_run (60 s).
  cs = {be(1, 40, 30), be(2, 40, 61)};
  c = choose_victims(cs, 30 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{2});
  CHECK(choose_victims({be(1, 40, 30)}, 30 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 1000 * GiB).why ==
        NoVictims::kNoCandidate);
}

TEST_CASE("preempt: the host must hold what the checkpoint moves") {
  // Job 1 also holds 40 GiB on another device: suspending it moves 60 GiB to the host.
  std::vector<SuspendCandidate> cs = {be(1, 20, 600, 60), be(2, 22, 600)};
  auto c = choose_victims(cs, 20 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 50 * GiB);
  CHECK(c.jobs == std::vector<JobSerial>{2});  // the larger on the device, but it fits the host
  CHECK(c.host_bytes == 22 * GiB);
  c = choose_victims(cs, 20 * GiB, PreemptMode::kBestEffort, T0, kMinRun, 10 * GiB);
  CHECK(c.jobs.empty());
  CHECK(c.why == NoVictims::kHostMemory);
}

TEST_CASE("preempt: with many candidates the choice still frees enough and respects the host") {
  std::mt19937_64 rng(29);
  for (int round = 0; round < 200; ++round) {
    std::vector<SuspendCandidate> cs;
    const size_t n = 1 + rng() % 24;  // past kMaxExactCandidates too (the greedy path)
    for (size_t i = 0; i < n; ++i) cs.push_back(be(i + 1, 1 + rng() % 30, 61 + rng() % 1000));
    const Bytes need = (1 + rng() % 80) * GiB, host = (rng() % 200) * GiB;
    auto c = choose_victims(cs, need, PreemptMode::kBestEffort, T0, kMinRun, host);
    CAPTURE(round);
    if (c.why == NoVictims::kNone) {
      CHECK(c.device_bytes >= need);
      CHECK(c.host_bytes <= host);
      Bytes sum = 0;
      for (JobSerial j : c.jobs) sum += cs[j - 1].device_bytes;
      CHECK(sum == c.device_bytes);
    } else {
      CHECK(c.jobs.empty());
    }
  }
  PreemptMode m;
  CHECK(parse_preempt_mode("best-effort", &m));
  CHECK(m == PreemptMode::kBestEffort);
  CHECK_FALSE(parse_preempt_mode("everything", &m));
}

TEST_CASE("host memory: MemAvailable less the reserve, and the tightest cgroup up the tree") {
  using namespace coloc::device;
  auto mi = parse_meminfo("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n");
  REQUIRE(mi);
  CHECK(mi->total == 24000000ull * 1024);
  CHECK(mi->available == 20000000ull * 1024);
  CHECK_FALSE(parse_meminfo("MemTotal: 5 kB\n"));
  CHECK_FALSE(parse_meminfo("MemTotal: x kB\nMemAvailable: 5 kB\n"));
  CHECK_FALSE(parse_meminfo("MemTotal: 5 MB\nMemAvailable: 5 kB\n"));
  CHECK(parse_cgroup_path("12:memory:/old\n0::/system.slice/job.scope\n") == std::string("/system.slice/job.scope"));
  CHECK_FALSE(parse_cgroup_path("12:memory:/old\n"));
  CHECK_FALSE(parse_cgroup_path("0::/../etc\n"));
  std::optional<uint64_t> lim;
  CHECK(parse_memory_max("max\n", &lim));
  CHECK_FALSE(lim);
  CHECK(parse_memory_max("1073741824\n", &lim));
  CHECK(lim == 1073741824ull);
  CHECK_FALSE(parse_memory_max("1G", &lim));

  coloc::test::TempDir tmp("host-memory");
  namespace fs = std::filesystem;
  auto put = [&](const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(tmp / rel).parent_path());
    std::ofstream(tmp / rel) << text;
  };
  put("proc/meminfo", "MemTotal: 10000000 kB\nMemAvailable: 6000000 kB\n");
  put("proc/42/cgroup", "0::/slurm/job_7/step_0\n");
  put("cg/slurm/job_7/memory.max", std::to_string(8ull << 30) + "\n");
  put("cg/slurm/job_7/memory.current", std::to_string(5ull << 30) + "\n");
  put("cg/slurm/job_7/step_0/memory.max", "max\n");
  put("cg/slurm/job_7/step_0/memory.current", std::to_string(5ull << 30) + "\n");
  auto r = host_room(42, 0.10, tmp / "proc", tmp / "cg");
  REQUIRE(r);
  CHECK(r->host == (6000000ull - 1000000ull) * 1024);  // MemAvailable less 10% of MemTotal
  REQUIRE(r->cgroup);
  CHECK(*r->cgroup == 3ull << 30);  // the job's limit binds, not the step's "max"
  CHECK(r->cgroup_path == "/slurm/job_7");
  CHECK(r->room() == 3ull << 30);
  // No cgroup file: only the host counts; no meminfo: unknown.
  r = host_room(43, 0.10, tmp / "proc", tmp / "cg");
  REQUIRE(r);
  CHECK_FALSE(r->cgroup);
  CHECK(r->room() == r->host);
  CHECK_FALSE(host_room(42, 0.10, tmp / "nothing", tmp / "cg"));
}
}
