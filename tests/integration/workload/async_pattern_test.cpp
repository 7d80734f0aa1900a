// coloc-train --pattern async as a real process on simgpu, read from the kernel trace: the host
// queues each synchronize group's kernels ahead of the device, on two streams, with mixed
// durations that sum to --step-ms per iteration; and its bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../../support/proc.h"

using namespace coloc::test;

namespace {

Env sim(const TempDir& dir) {
  Env env;
  env.simgpu(dir, "16GiB").set("SIMGPU_CONTEXT_BYTES", "64MiB");
  return env;
}

std::vector<std::string> train(std::vector<std::string> args) {
  args.insert(args.begin(), build_path("bin/coloc-train"));
  return args;
}

struct Kernel {
  unsigned stream = 0;
  uint64_t start = UINT64_MAX, end = 0, ns = 0;  // first slice's start, last slice's end, device time
};

// Kernels by launch_id (launch order) from SIMGPU_TRACE.
std::map<uint64_t, Kernel> kernels(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string line;
  std::getline(in, line);
  std::map<uint64_t, Kernel> out;
  while (std::getline(in, line)) {
    long pid;
    unsigned dev, ctx, stream;
    unsigned long launch, s, e;
    char name[128];
    REQUIRE(std::sscanf(line.c_str(), "%ld,%u,%u,%u,%lu,%127[^,],%lu,%lu", &pid, &dev, &ctx, &stream, &launch, name, &s,
                        &e) == 8);
    Kernel& k = out[launch];
    k.stream = stream;
    k.start = std::min<uint64_t>(k.start, s);
    k.end = std::max<uint64_t>(k.end, e);
    k.ns += e - s;
  }
  return out;
}

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("--pattern async: each group's kernels are queued ahead of the device on two streams, mixed, summing to --step-ms") {
  TempDir tmp("coloc-train-async");
  Env env = sim(tmp);
  const std::string trace = tmp / "trace.csv";
  env.set("SIMGPU_TRACE", trace);
  constexpr int kKernels = 120, kIters = 4, kSyncEvery = 2;
  constexpr double kStepMs = 60;
  auto r = run(train({"--pattern", "async", "--kernels", std::to_string(kKernels), "--streams", "2", "--sync-every",
                      std::to_string(kSyncEvery), "--step-ms", "60", "--iters", std::to_string(kIters)}),
               env, 60s);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = r.last_json();
  CHECK(j["status"] == "ok");
  CHECK(j["iters"] == kIters);
  CHECK(j["kernels"] == kKernels * kIters);
  CHECK(j["streams"] == 2);
  CHECK(j["sync_every"] == kSyncEvery);
  // An iteration takes its device time (the group's wall time split between its iterations).
  CHECK(double(j["iter_ms_p50"]) >= kStepMs * 0.95);
  CHECK(double(j["iter_ms_p50"]) < kStepMs * 2);
  // The result line's mix sums to the step.
  double mix_ms = 0;
  for (const char* c : {"short", "medium", "long"}) mix_ms += double(j["mix"][c]["ms"]);
  CHECK(mix_ms == doctest::Approx(kStepMs).epsilon(0.001));

  auto ks = kernels(trace);
  REQUIRE(ks.size() == size_t(kKernels * kIters));
  std::vector<Kernel> v;
  for (auto& [id, k] : ks) v.push_back(k);
  // Two streams, the second holding a third of each iteration (the weight gradients).
  std::map<unsigned, size_t> per_stream;
  for (const Kernel& k : v) ++per_stream[k.stream];
  REQUIRE(per_stream.size() == 2);
  CHECK(std::min(per_stream.begin()->second, per_stream.rbegin()->second) == size_t(kIters * (kKernels - 40) / 2));
  // The device time is the step's, iteration after iteration (loose: the lag of a loaded host).
  uint64_t total = 0;
  for (const Kernel& k : v) total += k.ns;
  MESSAGE("device time " << total / 1e6 << " ms for " << kIters << " iterations of " << kStepMs << " ms");
  CHECK(double(total) >= kIters * kStepMs * 1e6 * 0.999);
  CHECK(double(total) < kIters * kStepMs * 1e6 * 1.3);
  // Mixed durations: mostly short, a few long ones that take much of the time.
  std::vector<uint64_t> d;
  for (size_t i = 0; i < size_t(kKernels); ++i) d.push_back(v[i].ns);
  std::sort(d.begin(), d.end());
  const uint64_t median = d[d.size() / 2];
  const double mean = kStepMs * 1e6 / kKernels;
  CHECK(double(median) < mean / 2);  // skewed: most kernels are far shorter than the mean
  CHECK(double(d.back()) > 20.0 * double(median));
  uint64_t top = 0;
  for (size_t i = d.size() - d.size() / 10; i < d.size(); ++i) top += d[i];
  CHECK(double(top) > 0.4 * kStepMs * 1e6);  // the longest tenth takes over 40% of the time
  // Queued ahead: within a synchronize group, each kernel starts where the one before it ended
  // (the host had launched it long before; a kernel launched after its predecessor ended could not
  // start before it was launched). Loose: a host descheduled for over 2 ms opens a gap.
  const size_t group = size_t(kKernels * kSyncEvery);
  size_t joined = 0, boundaries = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (i % group == 0) continue;  // the first kernel after a synchronize
    ++boundaries;
    joined += v[i].start == v[i - 1].end;
  }
  MESSAGE(joined << " of " << boundaries << " kernels in a group start where the previous one ended");
  CHECK(joined >= boundaries * 8 / 10);
}

TEST_CASE("--pattern async: bad input is one line on stderr, exit 2") {
  TempDir tmp("coloc-train-async");
  Env env = sim(tmp);
  const std::vector<std::vector<std::string>> cases = {
      {"--pattern", "sync"},
      {"--pattern", "async", "--kernels", "2"},
      {"--pattern", "async", "--streams", "3"},
      {"--pattern", "async", "--sync-every", "0"},
      {"--pattern", "async", "--step-ms", "0"},
      {"--pattern", "async", "--model", "gpt2-small"},
      {"--pattern", "async", "--gpu-util", "50", "--iter-ms", "10"},
      {"--pattern", "async", "--iters", "2", "--duration", "1"},
      {"--pattern", "async", "--batch", "4"},
      {"--kernels", "100"},
      {"--model", "gpt2-small", "--sync-every", "4"},
  };
  for (const auto& args : cases) {
    auto r = run(train(args), env, 20s);
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  auto help = run(train({"--help"}), env, 20s);
  for (const char* opt : {"--pattern", "--kernels", "--streams", "--sync-every", "--step-ms"})
    CHECK(help.out.find(opt) != std::string::npos);
}
}  // TEST_SUITE
