// End-to-end: settings of a job's environment that cannot mean what they say are said at cuInit:
// a per-device limit for a device the process does not have, a job name too long for a job id.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: COLOC_MEM_LIMIT_<n> for a device the process does not have, and a COLOC_JOB over 63 characters, warn at cuInit") {
  if (simulated_only()) return;
  Node n("16GiB");
  Env e = n.base_env();
  e.preload_coloc();
  e.set("COLOC_MEM_LIMIT_3", "1GiB");  // one device here: ordinal 0
  e.set("COLOC_MEM_LIMIT_0", "2GiB");
  const std::string long_name(70, 'x');
  e.set("COLOC_JOB", long_name);
  ProcResult r = run({cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a"}, e);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("COLOC_MEM_LIMIT_3 is set, but this process sees 1 device(s)") != std::string::npos);
  CHECK(r.err.find("COLOC_MEM_LIMIT_0 is set") == std::string::npos);
  CHECK(r.err.find("COLOC_JOB is 70 characters") != std::string::npos);
  // colocd files the job under the shortened id the warning names.
  const size_t at = r.err.find("this process's job is '");
  REQUIRE(at != std::string::npos);
  const std::string id = r.err.substr(at + 23, 63);
  CHECK(id.substr(0, 54) == long_name.substr(0, 54));
  json rep = n.report(id);
  CHECK(rep["job"] == id);
}

}  // TEST_SUITE
