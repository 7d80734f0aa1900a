// A stream holds SIMGPU_QUEUE_DEPTH pending submissions; a launch into a full stream blocks the
// host thread until the oldest completes. Host times come from cuprobe's `mono_ns` (when each
// step returned), device times from the trace; both are CLOCK_MONOTONIC.
#include <cstdio>
#include <string>

#include "probe.h"

using namespace probetest;

namespace {

// The trace's end_ns of the first kernel (launch order = file order for one process and stream).
uint64_t first_kernel_end(const std::string& trace) {
  std::istringstream in(coloc::test::read_file(trace));
  std::string line;
  REQUIRE(std::getline(in, line));  // header
  uint64_t first_launch = UINT64_MAX, end = 0;
  while (std::getline(in, line)) {
    long pid;
    unsigned dev, ctx, stream;
    unsigned long launch, s, e;
    char kernel[128];
    REQUIRE(std::sscanf(line.c_str(), "%ld,%u,%u,%u,%lu,%127[^,],%lu,%lu", &pid, &dev, &ctx, &stream, &launch, kernel,
                        &s, &e) == 8);
    if (launch < first_launch) first_launch = launch, end = 0;
    if (launch == first_launch) end = std::max<uint64_t>(end, e);
  }
  REQUIRE(first_launch != UINT64_MAX);
  return end;
}

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("SIMGPU_QUEUE_DEPTH: with depth 8, the 9th launch of long kernels blocks until the first completes") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  const std::string trace = tmp / "trace.csv";
  env.set("SIMGPU_TRACE", trace);
  env.set("SIMGPU_QUEUE_DEPTH", "8");
  constexpr uint64_t kKernelNs = 300'000'000;
  const std::string ns = std::to_string(kKernelNs);
  auto v = run_probe(env, {"init", "ctx", "launch-spin", ns, "8", "launch-spin", ns, "1", "sync"}, 5);
  for (const json& step : v) REQUIRE(rc(step) == "CUDA_SUCCESS");
  const uint64_t before = v[1]["mono_ns"], eight = v[2]["mono_ns"], ninth = v[3]["mono_ns"];
  const uint64_t first_end = first_kernel_end(trace);
  MESSAGE("8 launches took " << (eight - before) / 1e6 << " ms; the 9th returned " << (ninth - eight) / 1e6
                             << " ms later, " << (double(ninth) - double(first_end)) / 1e6
                             << " ms after the first kernel ended");
  // The first eight fit: they return long before one kernel could complete.
  CHECK(eight - before < kKernelNs / 2);
  // The ninth waited for the first kernel to complete on the device (and not much longer).
  CHECK(ninth >= first_end);
  CHECK(ninth - eight >= kKernelNs / 2);
  CHECK(ninth < first_end + kKernelNs);  // not until the second completed
}

TEST_CASE("SIMGPU_QUEUE_DEPTH: by default 1024 pending launches return before the first completes") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  // 1024 kernels of 2 ms: 2 s of device time; queuing them all takes the host far less.
  auto v = run_probe(env, {"init", "ctx", "launch-spin", "2000000", "1024", "launch-spin", "2000000", "1", "sync"}, 5);
  CHECK(v[2]["launched"] == 1024);
  const uint64_t before = v[1]["mono_ns"], queued = v[2]["mono_ns"], more = v[3]["mono_ns"];
  MESSAGE("1024 launches took " << (queued - before) / 1e6 << " ms, the 1025th " << (more - queued) / 1e6 << " ms");
  CHECK(queued - before < 1'000'000'000ull);
  CHECK(more - before >= 2'000'000ull);  // the 1025th waited for the first kernel (2 ms) to complete
  CHECK(rc(v[4]) == "CUDA_SUCCESS");
}
}  // TEST_SUITE
