// Integration tests of libcoloc.so and CUDA graph memory: the device's graph memory pool is charged
// when an upload or launch makes it grow, refused past the limit before the driver (and the launch
// gate) sees the launch, and credited at cuDeviceGraphMemTrim. Real processes on simgpu.
#include <doctest/doctest.h>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

namespace {

// The books (the job's in-use, as cuMemGetInfo shows it under a limit) minus the context.
uint64_t graph_books(const json& meminfo, uint64_t limit) {
  return limit - meminfo["free"].get<uint64_t>() - 256 * MiB;
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("graph memory is charged when the graph pool grows, refused past the limit, credited at a trim") {
  if (real_driver()) {
    MESSAGE("skipped on a real driver: relies on simgpu's 2 MiB graph memory granularity");
    return;
  }
  Job job;
  job.limit("2GiB").env.set("SIMGPU_CONTEXT_BYTES", "256MiB").set("SIMGPU_CALLS", job.dir / "calls.json");
  ProcResult r = job.run({client(), "init", "ctx", "0", "graph-node", "1GiB", "A", "graph-capture", "512MiB", "B",
                          "meminfo", "graph-mem",                                           // 0: nothing bound yet
                          "graph-run", "A", "graph-run", "A", "sync", "meminfo", "graph-mem",  // 1: 1 GiB
                          "graph-run", "B", "sync", "meminfo", "graph-mem",                 // 2: B reuses it
                          "graph-node", "2GiB", "D", "graph-run", "D", "graph-upload", "D",  // past the limit
                          "meminfo", "graph-mem",                                           // 3: unchanged
                          "graph-trim", "meminfo", "graph-mem",                             // 4: given back
                          "graph-run", "A", "sync", "meminfo", "graph-mem"});               // 5: again
  auto ls = lines(r);
  std::vector<std::string> want(ls.size(), "CUDA_SUCCESS");
  for (size_t i = 0; i < ls.size(); ++i)  // D's launch and upload
    if (ls[i]["step"] == "graph-upload" || (i > 0 && ls[i]["step"] == "graph-run" && ls[i - 1]["step"] == "graph-node"))
      want[i] = "CUDA_ERROR_OUT_OF_MEMORY";
  CHECK(results(ls) == want);
  const uint64_t expected[] = {0, GiB, GiB, GiB, 0, GiB};
  for (int i = 0; i < 6; ++i) {
    CAPTURE(i);
    json mem = step(ls, "graph-mem", i);
    CHECK(mem["reserved"] == expected[i]);                                   // the device (simgpu's pool)
    CHECK(graph_books(step(ls, "meminfo", i), 2 * GiB) == mem["reserved"]);  // the books match it
  }
  CHECK(step(ls, "graph-mem", 1)["used"] == 0);  // the launches ran and freed; the pool kept the memory

  json d = device0(job.ledger());
  CHECK(d["in_use"]["graph"] == GiB);
  CHECK(d["peak"]["graph"] == GiB);
  CHECK(d["in_use"]["total"] == 256 * MiB + GiB);
  CHECK(d["refused"] == 2);
  CHECK(d["failed"] == 2);
  CHECK(d["in_use"]["pool"] == 0);  // the captured cuMemAllocAsync is graph memory, not a pool's
  // The refused launch and upload never reached the driver; the others did.
  json calls = json::parse(read_file(job.dir / "calls.json"));
  CHECK(calls["cuGraphLaunch"] == 4);
  CHECK(calls.value("cuGraphUpload", 0) == 0);
  CHECK(r.err.find("cuGraphLaunch requests 1.00 GiB, in use 1.25 GiB, limit 2.00 GiB") != std::string::npos);
}

TEST_CASE("graph memory: an upload charges, and the launch after it charges nothing more") {
  if (real_driver()) return;
  Job job;
  job.limit("2GiB").env.set("SIMGPU_CONTEXT_BYTES", "256MiB");
  ProcResult r = job.run({client(), "init", "ctx", "0", "graph-node", "1GiB", "A", "graph-upload", "A", "meminfo",
                          "graph-mem", "graph-run", "A", "sync", "meminfo", "graph-mem", "graph-trim", "meminfo",
                          "graph-mem"});
  auto ls = lines(r);
  CHECK(results(ls) == std::vector<std::string>(ls.size(), "CUDA_SUCCESS"));
  const uint64_t expected[] = {GiB, GiB, 0};
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(step(ls, "graph-mem", i)["reserved"] == expected[i]);
    CHECK(graph_books(step(ls, "meminfo", i), 2 * GiB) == expected[i]);
  }
  CHECK(device0(job.ledger())["peak"]["graph"] == GiB);
}

}  // TEST_SUITE
