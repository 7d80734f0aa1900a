// End-to-end: stream-ordered pools under a limit, as a job sees them through `coloc run`: a pool
// never takes the job past its limit on the device, and a trim at a synchronize brings the books
// and the grant down at once (issue 9, item 1).
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: a 6 GiB job cycling stream-ordered allocations never holds more than 6 GiB, and a trim shows at once") {
  if (simulated_only()) return;
  Node n("16GiB");
  // 200 cycles of 256 MiB .. 2 GiB from the default pool, which keeps up to 4 GiB between them: the
  // blocks freed before cannot hold the next, larger ones, so the pool must grow, past the limit
  // unless coloc charges the growth first.
  auto job = n.run({"--mem", "6GiB", "--job", "cycler"},
                   {cuprobe(), "init", "ctx", "0", "pool-threshold", "4GiB", "pool-cycles", "200", "256MiB", "touch",
                    n.file("cycled"), "hold-file", n.file("trim"), "pool-threshold", "0", "stream-sync", "pool-info",
                    "touch", n.file("trimmed"), "hold-file", n.file("go")});
  REQUIRE_MESSAGE(reached(*job, n.file("cycled")), job->out_so_far(), n.log());
  json cycles = step(job->out_so_far(), "pool-cycles");
  REQUIRE_MESSAGE(cycles["rc_name"] == "CUDA_SUCCESS", cycles.dump());
  CHECK(cycles["ok"] == 200);  // nothing refused: each size fits the limit alone
  CHECK(cycles["oom"] == 0);
  // The driver's own high-water mark of the pool, plus the context: within the limit.
  CHECK(cycles["reserved_high"].get<uint64_t>() + kContext <= 6 * GiB);
  CHECK(cycles["reserved_high"].get<uint64_t>() >= 4 * GiB);  // it did keep memory between cycles
  json j = n.job("cycler");
  REQUIRE_MESSAGE(!j.is_null(), n.status_text());
  // The books: the context and the pool's reserve, exactly (frees on the NULL stream are reused
  // by the next allocation on it, no synchronize needed).
  CHECK(j["in_use"] == kContext + cycles["reserved"].get<uint64_t>());
  CHECK(j["granted"].get<uint64_t>() <= 6 * GiB);

  write_file(n.file("trim"), "");
  REQUIRE_MESSAGE(reached(*job, n.file("trimmed")), job->out_so_far(), n.log());
  json info = step(job->out_so_far(), "pool-info");
  CHECK(info["reserved"] == 0);  // threshold 0: the synchronize gave everything back
  j = n.job("cycler");
  CHECK(j["in_use"] == kContext);
  CHECK(n.status()["devices"][0]["in_use"] == kContext);
  CHECK(j["granted"].get<uint64_t>() < 6 * GiB);
  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(r.exit_code == 0);
  json d = n.report("cycler")["devices"][0];
  CHECK(d["peak"].get<uint64_t>() <= 6 * GiB);
  CHECK(d["limit"] == 6 * GiB);
}

}  // TEST_SUITE
