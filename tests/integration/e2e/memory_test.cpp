// End-to-end: colocd's memory decisions as real jobs see them, through libcoloc.so preloaded by
// `coloc run --sim` into cuprobe on simgpu: admission, waiting, the own limit, deadlock breaking,
// deaths, live limit changes, and the reports that record all of it.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: admission holds a job that does not fit, then releases it when another exits") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto first = n.run({"--mem", "10GiB", "--job", "first"},
                     {cuprobe(), "init", "ctx", "0", "alloc", "8GiB", "a", "touch", n.file("a-ready"), "hold-file",
                      n.file("a-go")});
  REQUIRE(reached(*first, n.file("a-ready")));
  auto second = n.run({"--mem", "8GiB", "--job", "second"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "b", "launch-noop", "5000"});
  REQUIRE_MESSAGE(n.wait_state("second", "admission-pending"), n.status_text(), n.log());
  // Held at its first context, before it allocates anything.
  CHECK(!step(second->out_so_far(), "init").is_null());
  CHECK(step(second->out_so_far(), "ctx").is_null());
  json dev = n.status()["devices"][0];
  CHECK(dev["committed"] == 10 * GiB);  // only the first job's reservation
  CHECK(n.job("second")["in_use"] == 0);

  write_file(n.file("a-go"), "");
  finish(*first);
  ProcResult r = finish(*second);
  CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");

  json rep = n.report("second");
  CHECK(rep["exit_status"] == 0);
  REQUIRE(rep["devices"].size() == 1);
  json d = rep["devices"][0];
  CHECK(d["wait_admission_s"].get<double>() > 0);
  REQUIRE(d["waits"].size() >= 1);
  CHECK(d["waits"][0]["kind"] == "admission");
  CHECK(d["waits"][0]["outcome"] == "granted");
  CHECK(d["peak"] == 6 * GiB + kContext);
  CHECK(d["limit"] == 8 * GiB);
  CHECK(d["kernel_launches"] == 5000);  // flushed from the launch counters at exit
  CHECK(d["timeline"]["bytes"].size() >= 1);
  json a = n.report("first")["devices"][0];
  CHECK(a["peak"] == 8 * GiB + kContext);
  CHECK(a["wait_admission_s"] == 0);
}

TEST_CASE("e2e: growth waits, then succeeds when memory frees; the own limit fails at once, others untouched") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto hog = n.run({"--job", "hog"}, {cuprobe(), "init", "ctx", "0", "alloc", "12GiB", "a", "touch", n.file("hog-ready"),
                                       "hold-file", n.file("hog-go")});
  REQUIRE(reached(*hog, n.file("hog-ready")));
  // No limit, so no reservation: its growth competes for what is free, and waits.
  auto grower = n.run({"--job", "grower"}, {cuprobe(), "init", "ctx", "0", "alloc", "4GiB", "g"});
  REQUIRE_MESSAGE(n.wait_state("grower", "waiting"), n.status_text());

  // Past its own limit a job fails at once, device full or not (high priority: its admission is not
  // queued behind the waiting growth).
  auto limited = n.run({"--job", "limited", "--mem", "2GiB", "--priority", "high"},
                       {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "x", "alloc", "1GiB", "y"});
  ProcResult rl = finish(*limited, 20s);
  CHECK(step(rl.out, "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(rl.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(rl.err.find("own limit") != std::string::npos);
  json lr = n.report("limited")["devices"][0];
  REQUIRE(lr["oom_events"].size() == 1);
  CHECK(lr["oom_events"][0]["reason"] == "own-limit");
  CHECK(lr["wait_memory_s"] == 0);
  CHECK(lr["failures"] == 1);

  // The others are untouched: the hog holds what it held, the grower still waits.
  CHECK(step(grower->out_so_far(), "alloc").is_null());
  CHECK(n.job("grower")["state"] == "waiting");
  CHECK(n.job("hog")["in_use"] == 12 * GiB + kContext);

  write_file(n.file("hog-go"), "");
  finish(*hog);
  ProcResult rg = finish(*grower);
  CHECK(step(rg.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  json gr = n.report("grower")["devices"][0];
  CHECK(gr["wait_memory_s"].get<double>() > 0);
  bool memory_wait = false;
  for (const json& w : gr["waits"]) memory_wait |= w["kind"] == "memory" && w["outcome"] == "granted";
  CHECK(memory_wait);
  CHECK(gr["peak"] == 4 * GiB + kContext);
}

TEST_CASE("e2e: deadlock breaking fails the lowest-priority, youngest job, and its report says so") {
  if (simulated_only()) return;
  Node n("16GiB");  // 15.68 GiB usable (2% headroom)
  struct Job {
    const char* name;
    const char* priority;
    const char* first;
  };
  const Job jobs[] = {{"old-normal", "normal", "5GiB"}, {"old-best", "best-effort", "4GiB"}, {"young-best", "best-effort", "4GiB"}};
  std::vector<std::unique_ptr<Proc>> procs;
  for (const Job& j : jobs) {  // started in order: the last one is the youngest
    std::string ready = n.file(std::string(j.name) + "-ready");
    procs.push_back(n.run({"--job", j.name, "--priority", j.priority},
                          {cuprobe(), "init", "ctx", "0", "alloc", j.first, "a", "touch", ready, "hold-file", n.file("go"),
                           "alloc", "5GiB", "b"}));
    REQUIRE(reached(*procs.back(), ready));
  }
  // 14.5 GiB held, 1.18 GiB free: every job's growth of 5 GiB parks, and nobody can give way.
  write_file(n.file("go"), "");
  for (auto& p : procs) finish(*p);
  CHECK(step(procs[2]->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(procs[0]->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(procs[1]->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_SUCCESS");

  json victim = n.report("young-best")["devices"][0];
  REQUIRE(victim["oom_events"].size() == 1);
  CHECK(victim["oom_events"][0]["reason"] == "deadlock-broken");
  bool broken = false;
  for (const json& w : victim["waits"]) broken |= w["outcome"] == "deadlock-broken";
  CHECK(broken);
  for (const char* other : {"old-normal", "old-best"}) {
    json d = n.report(other)["devices"][0];
    CAPTURE(other);
    CHECK(d["oom_events"].empty());
    CHECK(d["wait_memory_s"].get<double>() > 0);
  }
}

TEST_CASE("e2e: SIGKILL of a job releases its grants within a second") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto victim = n.run({"--job", "victim"}, {cuprobe(), "init", "ctx", "0", "alloc", "12GiB", "a", "touch",
                                             n.file("ready"), "hold-file", n.file("never")});
  REQUIRE(reached(*victim, n.file("ready")));
  auto waiter = n.run({"--job", "waiter"}, {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "w"});
  REQUIRE(n.wait_state("waiter", "waiting"));
  auto t0 = std::chrono::steady_clock::now();
  victim->kill(SIGKILL);
  bool granted = wait_until([&] { return !step(waiter->out_so_far(), "alloc").is_null(); }, 1s, 1ms);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("SIGKILL to the waiter's grant: ", ms, " ms");
  REQUIRE_MESSAGE(granted, n.log());
  CHECK(step(waiter->out_so_far(), "alloc")["rc_name"] == "CUDA_SUCCESS");
  finish(*waiter);
  json rep = n.report("victim");
  CHECK(rep["exit_signal"] == SIGKILL);
  CHECK(rep["devices"][0]["peak"] == 12 * GiB + kContext);
}

TEST_CASE("e2e: a driver out-of-memory inside the grant (memory used outside coloc) is reported and counted") {
  if (simulated_only()) return;
  Node n("16GiB");
  // 1000 MiB + the context = 1512 MiB in use; the grant is a whole number of 64 MiB steps (1536 MiB),
  // so a 16 MiB allocation fits the grant without asking the daemon.
  auto inside = n.run({"--job", "inside", "--on-full", "fail"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "1000MiB", "a", "touch", n.file("ready"), "hold-file",
                       n.file("go"), "alloc", "16MiB", "b"});
  REQUIRE(reached(*inside, n.file("ready")));
  // A process without coloc takes all but 8 MiB of what is left.
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", std::to_string(16 * GiB - 2024 * MiB - 8 * MiB),
                               "o", "touch", n.file("taken"), "hold-file", n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  write_file(n.file("go"), "");
  ProcResult r = finish(*inside);
  write_file(n.file("release"), "");
  finish(*outside);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  json d = n.report("inside")["devices"][0];
  CHECK(d["driver_ooms"] == 1);
  CHECK(d["failures"] == 1);
  // The daemon samples the stats page when the DriverOom arrives, while the failed 16 MiB are still
  // charged (reserve, call the driver, then commit or give back): the peak may include them.
  CHECK(d["peak"].get<uint64_t>() >= 1000 * MiB + kContext);
  CHECK(d["peak"].get<uint64_t>() <= 1016 * MiB + kContext);
}

TEST_CASE("e2e: coloc set --mem below what a job uses refuses its new allocations and kills nothing") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "lowered", "--mem", "10GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "a", "alloc", "1MiB", "s", "fill", "s", "3", "touch",
                    n.file("ready"), "hold-file", n.file("go"), "alloc", "1GiB", "b", "check", "s", "3"});
  REQUIRE(reached(*job, n.file("ready")));
  std::string id = n.job("lowered")["job"];
  ProcResult set = n.cli({"set", id, "--mem", "4GiB"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  json j = n.job("lowered");
  CHECK(j["limit"] == 4 * GiB);
  CHECK(j["in_use"] == 6 * GiB + MiB + kContext);  // nothing taken away
  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc", 2)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(r.out, "check")["rc_name"] == "CUDA_SUCCESS");  // its memory is intact
  json d = n.report("lowered")["devices"][0];
  CHECK(d["limit"] == 4 * GiB);
  REQUIRE(d["oom_events"].size() == 1);
  CHECK(d["oom_events"][0]["reason"] == "own-limit");
  CHECK(d["peak"] == 6 * GiB + MiB + kContext);
}

}  // TEST_SUITE
