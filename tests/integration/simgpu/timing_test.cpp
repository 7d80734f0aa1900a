// Kernels take their time, and contexts of different processes time-share a device in
// round-robin slices, measured from the kernel-slice trace (SIMGPU_TRACE).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "probe.h"

using namespace probetest;
using coloc::test::Proc;
using coloc::test::wait_until;

namespace {

struct Slice {
  long pid;
  int device;
  unsigned context, stream;
  uint64_t launch, start, end;
  std::string kernel;
};

std::vector<Slice> read_trace(const std::string& path) {
  std::istringstream in(coloc::test::read_file(path));
  std::string line;
  std::vector<Slice> out;
  REQUIRE(std::getline(in, line));
  REQUIRE(line == "pid,device,context,stream,launch_id,kernel,start_ns,end_ns");
  while (std::getline(in, line)) {
    Slice s;
    char kernel[128];
    REQUIRE_MESSAGE(std::sscanf(line.c_str(), "%ld,%d,%u,%u,%lu,%127[^,],%lu,%lu", &s.pid, &s.device, &s.context,
                                &s.stream, &s.launch, kernel, &s.start, &s.end) == 8,
                    "bad trace line: " << line);
    s.kernel = kernel;
    REQUIRE(s.end >= s.start);
    out.push_back(s);
  }
  return out;
}

struct Usage {
  double device_s = 0;  // sum of the process's slices
  double span_s = 0;    // first slice start to last slice end
  size_t slices = 0;
  std::set<uint64_t> launches;
};

std::map<long, Usage> usage(const std::vector<Slice>& t) {
  std::map<long, Usage> u;
  std::map<long, std::pair<uint64_t, uint64_t>> range;
  for (const Slice& s : t) {
    Usage& x = u[s.pid];
    x.device_s += double(s.end - s.start) / 1e9;
    ++x.slices;
    x.launches.insert(s.launch);
    auto& r = range.try_emplace(s.pid, s.start, s.end).first->second;
    r.first = std::min(r.first, s.start);
    r.second = std::max(r.second, s.end);
  }
  for (auto& [pid, x] : u) x.span_s = double(range[pid].second - range[pid].first) / 1e9;
  return u;
}

// |x / expected - 1| <= tolerance (doctest's Approx is looser than it reads).
bool within(double x, double expected, double tolerance) { return std::abs(x / expected - 1.0) <= tolerance; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("kernels execute for their duration: coloc_spin's argument, SIMGPU_KERNEL_NS for the others") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  env.set("SIMGPU_TRACE", tmp / "trace.csv");
  env.set("SIMGPU_KERNEL_NS", "30000000");
  run_probe(env, {"init", "ctx", "launch-spin", "50000000", "4", "launch-noop", "3", "sync"}, 5);
  auto t = read_trace(tmp / "trace.csv");
  double spin = 0, noop = 0;
  std::set<uint64_t> spins, noops;
  for (const Slice& s : t) {
    (s.kernel == "coloc_spin" ? spin : noop) += double(s.end - s.start) / 1e9;
    (s.kernel == "coloc_spin" ? spins : noops).insert(s.launch);
  }
  CHECK(spins.size() == 4);
  CHECK(noops.size() == 3);
  CHECK(spin >= 0.200);  // 4 × 50 ms
  CHECK(spin < 0.200 * 1.3);
  CHECK(noop >= 0.090);  // 3 × 30 ms
  CHECK(noop < 0.090 * 1.3);
  CHECK(t.front().kernel == "coloc_spin");  // in launch order
  CHECK(t.back().kernel == "coloc_noop");
}

TEST_CASE("two processes time-share a device: each takes twice as long, in interleaved slices") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  const std::string trace = tmp / "trace.csv";
  env.set("SIMGPU_TRACE", trace);
  const std::vector<std::string> job = {"init", "ctx", "hold-file", tmp / "go", "launch-spin", "10000000", "100", "sync"};

  // Alone: 100 × 10 ms ≈ 1.0 s.
  auto t0 = std::chrono::steady_clock::now();
  coloc::test::write_file(tmp / "go", "");
  run_probe(env, job, 5);
  const double solo_wall = seconds_since(t0);
  auto solo = usage(read_trace(trace));
  REQUIRE(solo.size() == 1);
  const Usage alone = solo.begin()->second;
  MESSAGE("alone: device " << alone.device_s << " s, span " << alone.span_s << " s, wall " << solo_wall << " s");
  CHECK(alone.launches.size() == 100);
  CHECK(within(alone.device_s, 1.0, 0.15));
  CHECK(within(solo_wall, 1.0, 0.30));

  // Together: each ≈ 2.0 s.
  std::remove(trace.c_str());
  std::remove((tmp / "go").c_str());
  Proc a(probe_args(job), env), b(probe_args(job), env);
  wait_lines(a, 2);
  wait_lines(b, 2);
  t0 = std::chrono::steady_clock::now();
  coloc::test::write_file(tmp / "go", "");
  auto ra = a.wait(), rb = b.wait();
  const double pair_wall = seconds_since(t0);
  REQUIRE_MESSAGE(ra.exit_code == 0, coloc::test::describe(ra));
  REQUIRE_MESSAGE(rb.exit_code == 0, coloc::test::describe(rb));
  auto t = read_trace(trace);
  auto pair = usage(t);
  REQUIRE(pair.size() == 2);
  for (auto& [pid, u] : pair) {
    MESSAGE("together, pid " << pid << ": device " << u.device_s << " s, span " << u.span_s << " s, " << u.slices
                             << " slices");
    CHECK(u.launches.size() == 100);
    CHECK(within(u.device_s, alone.device_s, 0.15));  // the same work
    CHECK(within(u.span_s / alone.device_s, 2.0, 0.15));
  }
  MESSAGE("together: wall " << pair_wall << " s");
  CHECK(within(pair_wall, 2.0, 0.30));

  // The engine is exclusive (slices never overlap), and slices alternate between the processes.
  std::sort(t.begin(), t.end(), [](const Slice& x, const Slice& y) { return x.start < y.start; });
  size_t switches = 0;
  for (size_t i = 1; i < t.size(); ++i) {
    CHECK(t[i].start >= t[i - 1].end);
    if (t[i].pid != t[i - 1].pid) ++switches;
  }
  CHECK(switches > 200);  // ~2 ms slices over ~2 s
  // A 10 ms kernel is preempted: its launch_id shows in several slices with the other process's
  // slices in between.
  std::map<std::pair<long, uint64_t>, std::vector<const Slice*>> per_launch;
  for (const Slice& s : t) per_launch[{s.pid, s.launch}].push_back(&s);
  int preempted = 0;
  for (auto& [k, slices] : per_launch) {
    bool gap = false;
    for (size_t i = 1; i < slices.size(); ++i) gap = gap || slices[i]->start - slices[i - 1]->end > 500'000;
    preempted += gap;
  }
  CHECK(preempted > 150);  // of 200 launches
}

TEST_CASE("SIMGPU_FAST: launches complete at once and leave no trace; coloc_fill still fills") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  env.set("SIMGPU_FAST", "1");
  env.set("SIMGPU_TRACE", tmp / "trace.csv");
  // 1000 kernels of 1000 s each: only possible because none of them runs.
  auto v = run_probe(env,
                     {"init", "ctx", "launch-spin", "1000000000000", "1000", "sync", "alloc", "1MiB", "a", "fill", "a",
                      "2", "check", "a", "2"},
                     7, 30s);
  CHECK(v[2]["launched"] == 1000);
  CHECK(rc(v[3]) == "CUDA_SUCCESS");
  CHECK(v[6]["ok"] == true);
  auto t = read_trace(tmp / "trace.csv");
  for (const Slice& s : t) CHECK(s.kernel == "coloc_fill");
}
}
