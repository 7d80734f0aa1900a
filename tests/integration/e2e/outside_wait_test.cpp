// End-to-end: a job under coloc whose growth is blocked only by memory used OUTSIDE coloc waits
// for it (it is not a deadlock among coloc jobs: failing one could not help), and is served when
// colocd's own read of the device (NVML, every --sample-interval) shows the memory freed; when it
// never frees, the wait ends with its timeout, named as such.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

namespace {

/// A process not under coloc that takes `size` (+ its context) and holds it until `release`.
std::unique_ptr<Proc> outside_holder(const Node& n, const std::string& size, const std::string& name) {
  auto p = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", size, "o", "touch", n.file(name + ".taken"),
                               "hold-file", n.file(name + ".release")},
      n.base_env());
  REQUIRE(reached(*p, n.file(name + ".taken")));
  return p;
}

}  // namespace

TEST_CASE("e2e: growth blocked only by memory used outside coloc waits and is served when it frees") {
  if (simulated_only()) return;
  // The tester's case: a 40 GiB device, two processes not under coloc hold 26 GiB (12.5 GiB + a
  // 0.5 GiB context each); a job without --mem grows to 17.6 GiB (13.2 GiB are usable).
  Node n("40GiB");
  auto o1 = outside_holder(n, "12.5GiB", "o1");
  auto o2 = outside_holder(n, "12.5GiB", "o2");
  auto job = n.run({"--job", "grows"}, {cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "a", "alloc", "7.1GiB", "b"});
  REQUIRE_MESSAGE(n.wait_state("grows", "waiting"), n.status_text(), "\n", n.log());
  // Parked, not failed: nothing inside coloc holds what it needs.
  CHECK(step(job->out_so_far(), "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(job->out_so_far(), "alloc", 1).is_null());
  CHECK(n.log().find("is waiting for memory; failing") == std::string::npos);
  // One outside process exits: colocd's next read of the device serves the job.
  write_file(n.file("o1.release"), "");
  finish(*o1);
  ProcResult r = finish(*job, 30s);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  json d = n.report("grows")["devices"][0];
  CHECK(d["oom_events"].empty());
  REQUIRE(d["waits"].size() == 1);
  CHECK(d["waits"][0]["kind"] == "memory");
  CHECK(d["waits"][0]["outcome"] == "granted");
  CHECK(n.log().find("deadlock") == std::string::npos);
  write_file(n.file("o2.release"), "");
  finish(*o2);
}

TEST_CASE("e2e: a wait for memory used outside coloc that never frees ends with its timeout, not a deadlock") {
  if (simulated_only()) return;
  Node n("40GiB");
  auto o1 = outside_holder(n, "25.5GiB", "o1");
  auto job = n.run({"--job", "grows"}, {cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "a", "alloc", "7.1GiB", "b"},
                   {{"COLOC_WAIT_TIMEOUT", "1s"}});
  ProcResult r = finish(*job, 30s);
  CHECK(step(r.out, "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  json d = n.report("grows")["devices"][0];
  REQUIRE(d["oom_events"].size() == 1);
  CHECK(d["oom_events"][0]["reason"] == "timeout");
  CHECK_MESSAGE(n.log().find("timeout waiting for memory used outside coloc") != std::string::npos, n.log());
  CHECK(n.log().find("is waiting for memory; failing") == std::string::npos);
  write_file(n.file("o1.release"), "");
  finish(*o1);
}

}  // TEST_SUITE
