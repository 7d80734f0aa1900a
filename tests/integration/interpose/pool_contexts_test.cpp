// Stream-ordered pools across contexts and many pools (issue 9, item 1; found by a hostile
// review): a free still queued in one context is not reusable by another context's default
// stream, and every tracked pool is read and trimmed, not only the first few.
#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

namespace {
std::string cuprobe() { return build_path("tests/bin/cuprobe"); }

// simgpu's chunk sizes and kernel timing are the driver's choice on a real GPU.
bool simgpu_only() {
  if (real_driver()) MESSAGE("skipped on a real driver: relies on simgpu's pool chunks and timing");
  return real_driver();
}
}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("pools: a free queued in one context does not count as reusable in another context") {
  if (simgpu_only()) return;  // simgpu's 2 MiB chunks and its kernel timing
  Job job;
  job.limit("1012MiB");  // two contexts (512 MiB) and one 400 MiB block, not two
  auto ls = lines(job.run({cuprobe(), "init", "ctx", "0", "launch-spin", "2000000000", "async", "400MiB", "a",
                           "free-async", "a", "ctx-create", "0", "async", "400MiB", "b", "pool-info"}));
  CHECK(step(ls, "async", 0)["rc_name"] == "CUDA_SUCCESS");
  // The first block's free waits behind the kernel in the first context: the second context's
  // pool allocation needs a new chunk, which passes the limit.
  CHECK(step(ls, "async", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(ls, "pool-info")["reserved_high"].get<uint64_t>() + 512 * MiB <= 1012 * MiB);
}

TEST_CASE("pools: more than 16 pools on a device are all read after a synchronize") {
  if (simgpu_only()) return;
  Job job;
  job.limit("2816MiB");
  std::vector<std::string> script = {client(), "init", "ctx", "0"};
  for (int i = 0; i < 20; ++i) script.insert(script.end(), {"pool-create", "P" + std::to_string(i)});
  script.insert(script.end(), {"pool-alloc", "P19", "1GiB", "x", "free-async", "x", "sync", "pool-reserved", "P19",
                               "meminfo", "pool-alloc", "P0", "2GiB", "y"});
  auto ls = lines(job.run(script));
  CHECK(step(ls, "pool-reserved")["reserved"] == 0);  // the synchronize trimmed P19 (threshold 0)
  CHECK(step(ls, "meminfo")["free"] == 2816 * MiB - 256 * MiB);
  CHECK(step(ls, "pool-alloc", 1)["rc_name"] == "CUDA_SUCCESS");
}

}  // TEST_SUITE
