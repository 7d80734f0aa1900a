// End-to-end: a per-device COLOC_MEM_LIMIT_<n> below the job's --mem. The job's limit on that
// device, and the reservation colocd holds for it there, are the smaller: another job fits next
// to it, and status and the report show the smaller as the job's limit on the device.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: COLOC_MEM_LIMIT_0 below --mem: the job reserves the smaller and shows it as its limit there") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "capped", "--mem", "10GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "3GiB", "a", "alloc", "1GiB", "b", "touch", n.file("done"),
                    "hold-file", n.file("end")},
                   {{"COLOC_MEM_LIMIT_0", "4GiB"}});
  REQUIRE_MESSAGE(reached(*job, n.file("done")), job->err_so_far(), "\n", n.log());
  // 512 MiB of context + 3 GiB fit in 4 GiB; another 1 GiB does not.
  CHECK(step(job->out_so_far(), "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(job->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  // The refusal names the cap; nobody ran `coloc set`.
  CHECK_MESSAGE(job->err_so_far().find("coloc set") == std::string::npos, job->err_so_far());
  CHECK_MESSAGE(job->err_so_far().find("the job's limit on this device is 4.00 GiB, the COLOC_MEM_LIMIT_<n> of the "
                                       "process that brought the job here (its limit elsewhere: 10.00 GiB)") !=
                    std::string::npos,
                job->err_so_far());
  json j = n.job("capped");
  REQUIRE(!j.is_null());
  CHECK(j["limit"] == 10 * GiB);  // the job's own limit, for its other devices
  REQUIRE(j["devices"].size() == 1);
  CHECK(j["devices"][0]["limit"] == 4 * GiB);
  CHECK(j["devices"][0]["reserved"] == 4 * GiB);
  json dev = n.status()["devices"][0];
  CHECK(dev["committed"] == 4 * GiB);
  CHECK(dev["jobs"][0]["limit"] == 4 * GiB);
  // The status table says it too.
  ProcResult text = n.cli({"status"});
  CHECK(text.out.find("4.00 GiB") != std::string::npos);

  // A 10 GiB job fits next to its 4 GiB (16 GiB less 2% headroom); next to a 10 GiB reservation
  // it would not, and --on-full fail would refuse it.
  auto other = n.run({"--job", "other", "--mem", "10GiB", "--on-full", "fail"}, {cuprobe(), "init", "ctx", "0"});
  ProcResult o = finish(*other);
  CHECK(step(o.out, "ctx")["rc_name"] == "CUDA_SUCCESS");

  write_file(n.file("end"), "");
  finish(*job);
  json rep = n.report("capped");
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["limit"] == 4 * GiB);
}

}  // TEST_SUITE
