// End-to-end: driver overhead. A CUDA context costs what the driver decides (here simgpu's
// SIMGPU_CONTEXT_BYTES=2GiB), while libcoloc.so books COLOC_CONTEXT_BYTES (512 MiB). colocd
// reconciles the process's books with the driver's per-process figure (NVML's
// nvmlDeviceGetComputeRunningProcesses_v3; simgpu's libnvidia-ml.so.1 answers it) or, without
// NVML, estimates it from the device's free memory around the process's first context (its
// ContextFootprint), charges the difference to the job inside its limit, and shows it as "driver
// overhead", not "outside coloc".
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

namespace {

void overhead_case(bool nvml) {
  CAPTURE(nvml);
  Node n("16GiB", {}, false);
  if (!nvml) n.set_daemon_prefix({"env", "-u", "LD_LIBRARY_PATH"});  // colocd finds no NVML
  n.start_daemon();
  REQUIRE_MESSAGE((n.log().find("NVML is not available") == std::string::npos) == nvml, n.log());
  std::unique_ptr<Proc> first;
  if (!nvml) {
    // Without NVML colocd knows a device's use only from its clients: a job already there (its
    // context as the ledger counts it) gives the device its first figure, the baseline of the
    // next process's footprint.
    first = n.run({"--job", "first"}, {cuprobe(), "init", "ctx", "0", "touch", n.file("first"), "hold-file", n.file("end")});
    REQUIRE_MESSAGE(reached(*first, n.file("first")), first->err_so_far());
    REQUIRE(wait_until([&] { return n.status()["devices"].size() == 1; }, 20s, 10ms));
  }
  // The job: a context, then (once told to) 512 MiB allocations until one is refused.
  std::vector<std::string> cmd = {cuprobe(), "init", "ctx", "0", "touch", n.file("ctx"), "hold-file", n.file("go")};
  for (int i = 0; i < 8; ++i) {
    cmd.push_back("alloc");
    cmd.push_back("512MiB");
    cmd.push_back("a" + std::to_string(i));
  }
  for (const std::string& s : {std::string("touch"), n.file("full"), std::string("hold-file"), n.file("end")})
    cmd.push_back(s);
  auto job = n.run({"--job", "big", "--mem", "4GiB"}, cmd, {{"SIMGPU_CONTEXT_BYTES", "2GiB"}});
  REQUIRE_MESSAGE(reached(*job, n.file("ctx")), job->err_so_far(), "\n", n.log());

  // colocd's sampling timer finds the driver holding 1.5 GiB more than the ledger's 512 MiB context.
  const uint64_t overhead = 2 * GiB - kContext;
  bool seen = wait_until([&] {
    json j = n.job("big");
    return !j.is_null() && j.value("driver_overhead", uint64_t(0)) == overhead;
  }, 20s, 10ms);
  REQUIRE_MESSAGE(seen, n.status_text(), "\n", n.log());
  json dev = n.status()["devices"][0];
  const uint64_t others = nvml ? 0 : kContext;  // the first job's context
  CHECK(dev["driver_overhead"] == overhead);
  CHECK(dev["outside"] == 0);  // no longer "outside coloc"
  CHECK(dev["in_use"] == kContext + others);
  json big = n.job("big");
  CHECK(big["driver_overhead"] == overhead);

  // colocd restarts: the job's ledger brings back the overhead it had booked (without NVML
  // nothing else could tell the new daemon), and none of it is taken for memory outside coloc.
  n.kill_daemon();
  n.start_daemon();
  bool back = wait_until([&] {
    json s = n.status();
    json j = n.job("big");
    return !s["daemon"]["holding_for_restart"].get<bool>() && !j.is_null() &&
           j.value("driver_overhead", uint64_t(0)) == overhead;
  }, 20s, 20ms);
  REQUIRE_MESSAGE(back, n.status_text(), "\n", n.log());
  CHECK(n.status()["devices"][0]["outside"] == 0);

  // Its next allocations see it: 4 GiB - 2 GiB (the context as the driver counts it) leaves four
  // 512 MiB allocations, and the fifth is refused at the job's own limit.
  write_file(n.file("go"), "");
  REQUIRE_MESSAGE(reached(*job, n.file("full")), job->err_so_far());
  int granted = 0;
  for (int i = 0; i < 8; ++i) granted += step(job->out_so_far(), "alloc", i)["rc_name"] == "CUDA_SUCCESS";
  CHECK(granted == 4);
  CHECK(step(job->out_so_far(), "alloc", 4)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  // The refusal's warning adds up: 512 MiB asked with 2.5 GiB in use is refused at 4 GiB because
  // the driver's overhead holds 1.5 GiB of the limit, and it says so (not only "in use 2.50 GiB").
  const std::string err = job->err_so_far();
  CHECK_MESSAGE(err.find("requests 512.00 MiB, in use 2.50 GiB, the job's driver overhead and other processes "
                         "1.50 GiB, limit 4.00 GiB") != std::string::npos,
                err);

  // The device itself (an observer without coloc, whose own context costs 512 MiB): the job holds
  // no more than its limit.
  ProcResult obs = run({cuprobe(), "init", "ctx", "0", "meminfo"}, n.base_env(), 30s);
  REQUIRE_MESSAGE(obs.exit_code == 0, describe(obs));
  json mi = step(obs.out, "meminfo");
  const uint64_t used_by_job = mi["total"].get<uint64_t>() - mi["free"].get<uint64_t>() - kContext - others;
  CHECK(used_by_job <= 4 * GiB);
  CHECK(used_by_job == 2 * GiB + 4 * 512 * MiB);

  write_file(n.file("end"), "");
  finish(*job);
  json rep = n.report("big");
  json d = rep["devices"][0];
  CHECK(d["driver_overhead"] == overhead);
  REQUIRE(d["oom_events"].size() >= 1);
  CHECK(d["oom_events"][0]["reason"] == "own-limit");
  // The report's table says it too.
  ProcResult text = n.cli({"report", rep["job"].get<std::string>()});
  REQUIRE_MESSAGE(text.exit_code == 0, describe(text));
  CHECK_MESSAGE(text.out.find("DRIVER OVERHEAD") != std::string::npos, text.out);
  CHECK_MESSAGE(text.out.find("1.50 GiB") != std::string::npos, text.out);
  if (first) finish(*first);
}

}  // namespace

TEST_CASE("e2e: a 2 GiB driver context under --mem 4GiB: the overhead is charged inside the limit and reported") {
  if (simulated_only()) return;
  overhead_case(true);
}

TEST_CASE("e2e: without NVML, a 2 GiB driver context is found from the free memory around it, and charged the same") {
  if (simulated_only()) return;
  overhead_case(false);
}

}  // TEST_SUITE
