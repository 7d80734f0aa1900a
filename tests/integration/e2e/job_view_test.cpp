// End-to-end: under colocd, a process of a multi-process job sees the job's headroom in
// cuMemGetInfo, not only its own (issue 9, item 4; pages.h: ControlSlot::job_others).
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: cuMemGetInfo in one process of a job shows what the job's other processes hold") {
  if (simulated_only()) return;
  Node n("16GiB");
  const std::string ready = n.file("a-ready"), go = n.file("go");
  // Two processes of one job (both children of one coloc run): A holds 4 GiB, then B looks.
  std::string a = cuprobe() + " init ctx 0 alloc 4GiB a touch " + ready + " hold-file " + go;
  // B's first look, right after its context: colocd published the job's view at its admission.
  std::string b = cuprobe() + " init hold-file " + ready + " ctx 0 meminfo alloc 3073MiB b alloc 1GiB c";
  auto job = n.run({"--mem", "8GiB", "--job", "pair"}, {"/bin/sh", "-c", a + " & " + b + "; touch " + go + "; wait"});
  ProcResult r = finish(*job);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json view = step(r.out, "meminfo");
  REQUIRE_MESSAGE(!view.is_null(), r.out);
  // The job's 8 GiB less A's 4 GiB and two contexts.
  CHECK(view["free"] == 8 * GiB - 4 * GiB - 2 * kContext);
  CHECK(view["total"] == 8 * GiB);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // B: 3 GiB + 1 MiB, past the job's limit
  CHECK(step(r.out, "alloc", 2)["rc_name"] == "CUDA_SUCCESS");
}

}  // TEST_SUITE
