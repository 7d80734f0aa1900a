// End-to-end: memory used outside coloc, as colocd reads it from the device itself (NVML; on
// simgpu build/sim/libnvidia-ml.so.1, which sees every simulated process): a process not under
// coloc takes memory, jobs under coloc are held or refused for it, and when it goes away — even
// with no coloc client left to report it — the next job is admitted.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: outside memory freed while no coloc job runs no longer blocks admission (NVML refresh)") {
  if (simulated_only()) return;
  Node n("16GiB");
  REQUIRE_MESSAGE(n.log().find("NVML is not available") == std::string::npos, n.log());
  // A process without coloc takes 10 GiB (+ its context).
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "o", "touch", n.file("taken"),
                               "hold-file", n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  // A job under coloc asks for 6 GiB: only about 5 GiB are left, so it is refused (--on-full fail).
  auto first = n.run({"--job", "first", "--on-full", "fail"}, {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "a"});
  ProcResult r1 = finish(*first);
  CHECK(step(r1.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(r1.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  json oom = n.report("first")["devices"][0]["oom_events"];
  REQUIRE(oom.size() == 1);
  CHECK(oom[0]["reason"] == "device-full");
  // The outside process goes away while no coloc job runs: no client is there to report it.
  write_file(n.file("release"), "");
  finish(*outside);
  // A job declaring 8 GiB (more than the stale estimate leaves) is admitted and runs.
  auto second = n.run({"--job", "second", "--mem", "8GiB"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "7GiB", "b", "touch", n.file("admitted"), "hold-file",
                       n.file("go")});
  REQUIRE_MESSAGE(reached(*second, n.file("admitted"), 20s), n.status_text(), "\n", n.log());
  json dev = n.status()["devices"][0];
  CHECK_MESSAGE(dev["outside"] == 0, n.status_text(), "\n", n.log());
  write_file(n.file("go"), "");
  ProcResult r2 = finish(*second);
  CHECK(step(r2.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
}

TEST_CASE("e2e: a job is held at admission by memory used outside coloc, read from the device, until it frees") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "o", "touch", n.file("taken"),
                               "hold-file", n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  // The very first job on the device: no client has reported the device yet, and a client has no
  // context to ask before admission; colocd reads the device itself and holds the job.
  auto job = n.run({"--job", "held", "--mem", "8GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "7GiB", "b", "touch", n.file("admitted")});
  REQUIRE_MESSAGE(n.wait_state("held", "admission-pending"), n.status_text(), "\n", n.log());
  json dev = n.status()["devices"][0];
  CHECK(dev["outside"] == 10 * GiB + kContext);
  CHECK(step(job->out_so_far(), "ctx").is_null());
  write_file(n.file("release"), "");
  finish(*outside);
  ProcResult r = finish(*job, 20s);
  CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  json d = n.report("held")["devices"][0];
  REQUIRE(d["waits"].size() >= 1);
  CHECK(d["waits"][0]["kind"] == "admission");
  CHECK(d["waits"][0]["outcome"] == "granted");
}

}  // TEST_SUITE
