// The deprecated launches (cuLaunch, cuLaunchGrid, cuLaunchGridAsync) in a real process: they run
// coloc_spin for the ns of their parameter buffer and appear in the kernel-slice trace.
#include <set>
#include <sstream>

#include "probe.h"

using namespace probetest;

TEST_SUITE("simgpu") {
TEST_CASE("legacy launches take their time and appear in the trace") {
  TempDir tmp("simgpu-legacy");
  Env env = sim_env(tmp, "8GiB");
  env.set("SIMGPU_TRACE", tmp / "trace.csv");
  auto v = run_probe(env, {"init", "ctx", "launch-legacy", "20000000", "sync"}, 4);
  CHECK(rc(v[2]) == "CUDA_SUCCESS");
  std::istringstream in(coloc::test::read_file(tmp / "trace.csv"));
  std::string line;
  REQUIRE(std::getline(in, line));
  double seconds = 0;
  std::set<std::string> launches;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 8);
    CHECK(f[5] == "coloc_spin");
    CHECK(f[3] == "0");  // the legacy default stream
    launches.insert(f[4]);
    seconds += double(std::stoull(f[7]) - std::stoull(f[6])) / 1e9;
  }
  CHECK(launches.size() == 3);
  CHECK(seconds >= 0.060);  // 3 × 20 ms
  CHECK(seconds < 0.060 * 1.5);
}
}  // TEST_SUITE
