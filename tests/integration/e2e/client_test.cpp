// End-to-end: the client side of the daemon contract inside real jobs — the daemon's restart,
// fork, Ctrl-C during a wait, and life without a daemon (fail-open, COLOC_REQUIRE_DAEMON).
#include <signal.h>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

uint64_t sum_in_use(const json& status) {
  uint64_t sum = 0;
  for (const json& j : status["jobs"]) sum += j["in_use"].get<uint64_t>();
  return sum;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: SIGKILL of colocd with 3 running jobs, then a restart: the books match live usage, the jobs finish") {
  if (simulated_only()) return;
  Node n("16GiB");
  struct Job {
    std::string name;
    std::vector<std::string> opts;
    uint64_t first;  // bytes held before the restart (context included)
  };
  std::vector<Job> jobs = {{"limited", {"--mem", "6GiB"}, 3 * GiB + kContext},
                           {"unlimited", {}, 2 * GiB + kContext},
                           {"small", {"--mem", "4GiB", "--priority", "high"}, 1 * GiB + kContext}};
  std::vector<std::unique_ptr<Proc>> procs;
  for (const Job& j : jobs) {
    std::vector<std::string> opts = j.opts;
    opts.insert(opts.end(), {"--job", j.name});
    procs.push_back(n.run(opts, {cuprobe(), "init", "ctx", "0", "alloc", std::to_string(j.first - kContext), "a",
                                 "touch", n.file(j.name + "-ready"), "hold-file", n.file("go"), "alloc", "1GiB", "b",
                                 "launch-noop", "100"}));
    REQUIRE(reached(*procs.back(), n.file(j.name + "-ready")));
  }
  uint64_t expected = 0;
  for (const Job& j : jobs) expected += j.first;
  REQUIRE(n.status()["devices"][0]["in_use"] == expected);

  n.kill_daemon();
  n.start_daemon();
  // The jobs notice, reconnect with back-off and re-register their exact ledgers.
  bool rebuilt = wait_until([&] {
    json s = n.status();
    return s["jobs"].size() == jobs.size() && s["devices"].size() == 1 && s["devices"][0]["in_use"] == expected &&
           !s["daemon"]["holding_for_restart"].get<bool>();
  }, 20s, 20ms);
  json s = n.status();
  REQUIRE_MESSAGE(rebuilt, s.dump(1), "\n", n.log());
  CHECK(sum_in_use(s) == expected);
  json dev = s["devices"][0];
  CHECK(dev["granted"].get<uint64_t>() >= expected);
  CHECK(dev["granted"].get<uint64_t>() <= dev["usable"].get<uint64_t>());
  for (const Job& j : jobs) {
    json jj = n.job(j.name);
    CAPTURE(j.name);
    CHECK(jj["in_use"] == j.first);
    CHECK(jj["state"] == "running");
  }
  CHECK(n.job("limited")["limit"] == 6 * GiB);
  CHECK(n.job("small")["priority"] == "high");

  write_file(n.file("go"), "");
  for (auto& p : procs) {
    ProcResult r = finish(*p);
    CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");  // growth through the new daemon
    CHECK(r.err.find("lost the connection to colocd") != std::string::npos);
  }
  for (const Job& j : jobs) {
    json d = n.report(j.name)["devices"][0];
    CAPTURE(j.name);
    CHECK(d["peak"] == j.first + GiB);  // the counters came through the restart
    CHECK(d["kernel_launches"] == 100);
  }
}

TEST_CASE("e2e: while colocd is away, jobs run on their grants; growth waits for it, or fails under --on-full fail") {
  if (simulated_only()) return;
  Node n("16GiB");
  // 1000 MiB + the context leave 24 MiB of the 1536 MiB grant (whole 64 MiB steps): the 64 KiB
  // allocations fit the grant, the 2 GiB ones need the daemon.
  auto waits = n.run({"--job", "waits"}, {cuprobe(), "init", "ctx", "0", "alloc", "1000MiB", "a", "touch", n.file("w-ready"),
                                           "hold-file", n.file("go"), "alloc", "64KiB", "small", "touch",
                                           n.file("w-growing"), "alloc", "2GiB", "b"});
  auto fails = n.run({"--job", "fails", "--on-full", "fail"},
                     {cuprobe(), "init", "ctx", "0", "alloc", "1000MiB", "a", "touch", n.file("f-ready"), "hold-file",
                      n.file("go"), "alloc", "64KiB", "small", "alloc", "2GiB", "b"});
  REQUIRE(reached(*waits, n.file("w-ready")));
  REQUIRE(reached(*fails, n.file("f-ready")));
  n.kill_daemon();
  write_file(n.file("go"), "");
  ProcResult rf = finish(*fails);
  CHECK(step(rf.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");  // within its grant: no daemon needed
  CHECK(step(rf.out, "alloc", 2)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(rf.err.find("no daemon") != std::string::npos);
  REQUIRE(reached(*waits, n.file("w-growing")));
  CHECK(step(waits->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  n.start_daemon();
  ProcResult rw = finish(*waits);
  CHECK(step(rw.out, "alloc", 2)["rc_name"] == "CUDA_SUCCESS");  // granted by the restarted daemon
  CHECK(n.report("waits")["devices"][0]["peak"] == 1000 * MiB + 2 * GiB + 64 * 1024 + kContext);
}

TEST_CASE("e2e: many threads growing and giving back at once: every reply reaches its thread, the books end exact") {
  if (simulated_only()) return;
  Node n("80GiB");
  const std::string per_thread = sanitizer() == "tsan" ? "100" : "1000";
  // 8 threads, each with up to 8 live allocations of up to 256 MiB: grants grow and shrink all the
  // time, with several Grows in flight at once from one process.
  auto p = n.run({"--job", "threads"}, {client(), "init", "ctx", "0", "threads", "8", per_thread, "7", "256MiB"});
  ProcResult r = finish(*p, 120s);
  json t = step(r.out, "threads");
  REQUIRE(!t.is_null());
  CHECK(t["oom"] == 0);
  CHECK(t["other_errors"] == 0);
  CHECK(t["free_errors"] == 0);
  CHECK(t["allocs"] == t["frees"]);
  CHECK(t["allocs"] == 8 * std::stoull(per_thread));
  json d = n.report("threads")["devices"][0];
  CHECK(d["allocations"] == t["allocs"]);
  CHECK(d["frees"] == t["frees"]);
  CHECK(d["failures"] == 0);
  CHECK(d["peak"].get<uint64_t>() <= 16 * GiB + kContext);
  CHECK(n.status()["devices"][0]["in_use"] == 0);  // all given back with the job
}

TEST_CASE("e2e: a forked child never touches its parent's connection or books; an unregistered parent's child registers") {
  if (simulated_only()) return;
  Node n("16GiB");
  // A child of a registered process: CUDA refuses it (simgpu like the driver); the parent's books
  // and connection are unchanged.
  auto parent = n.run({"--job", "forker", "--mem", "8GiB"},
                      {client(), "init", "ctx", "0", "alloc", "1GiB", "a", "fork-thread", "64MiB", "touch", "touch",
                       n.file("forked"), "hold-file", n.file("go"), "alloc", "2GiB", "b"});
  REQUIRE(reached(*parent, n.file("forked")));
  CHECK(step(parent->out_so_far(), "fork-thread")["child_exit"] == 3 /* CUDA_ERROR_NOT_INITIALIZED */);
  json j = n.job("forker");
  CHECK(j["in_use"] == GiB + kContext);
  CHECK(j["pids"].size() == 1);
  write_file(n.file("go"), "");
  ProcResult r = finish(*parent);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");  // its connection still works
  CHECK(n.report("forker")["processes"].size() == 1);

  // A child of a process that never called cuInit registers on its own when it uses CUDA.
  auto launcher = n.run({"--job", "launcher"}, {client(), "fork-run", "init", "ctx", "0", "alloc", "1GiB", "a"});
  ProcResult rl = finish(*launcher);
  json child_init = step(rl.out, "init");
  REQUIRE(!child_init.is_null());
  CHECK(step(rl.out, "fork-run")["child_exit"] == 0);
  json rep = n.report("launcher");
  REQUIRE(rep["processes"].size() == 1);
  CHECK(rep["processes"][0]["pid"] == child_init["pid"]);
  CHECK(rep["devices"][0]["peak"] == GiB + kContext);
}

TEST_CASE("e2e: SIGINT or SIGTERM ends a wait with CUDA_ERROR_OUT_OF_MEMORY, and the application still gets its signal") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto hog = n.run({"--job", "hog", "--mem", "14GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "12GiB", "a", "touch",
                                                         n.file("ready"), "hold-file", n.file("never")});
  REQUIRE(reached(*hog, n.file("ready")));

  SUBCASE("SIGINT during admission") {
    auto p = n.run({"--job", "admit", "--mem", "4GiB"}, {client(), "init", "catch-signals", "ctx", "0", "signals"});
    REQUIRE(n.wait_state("admit", "admission-pending"));
    p->kill(SIGINT);
    ProcResult r = finish(*p, 20s);  // generous: it ends within a wait slice (100 ms); a loaded sanitizer run is slower
    CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(step(r.out, "signals")["sigint"] == 1);  // the application's handler ran, once
    CHECK(r.err.find("interrupted by a signal") != std::string::npos);
  }
  SUBCASE("SIGTERM during a parked growth") {
    auto p = n.run({"--job", "grow"}, {client(), "init", "catch-signals", "ctx", "0", "alloc", "4GiB", "x", "signals"});
    REQUIRE(n.wait_state("grow", "waiting"));
    p->kill(SIGTERM);
    ProcResult r = finish(*p, 20s);  // generous: it ends within a wait slice (100 ms); a loaded sanitizer run is slower
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(step(r.out, "signals")["sigterm"] == 1);
    json d = n.report("grow")["devices"][0];
    REQUIRE(d["waits"].size() >= 1);
    CHECK(d["waits"].back()["outcome"] == "cancelled");
  }
  SUBCASE("a default disposition still ends the process at once") {
    auto p = n.run({"--job", "plain", "--mem", "4GiB"}, {client(), "init", "ctx", "0"});
    REQUIRE(n.wait_state("plain", "admission-pending"));
    p->kill(SIGINT);
    ProcResult r = p->wait(20s);
    CHECK(r.signal == SIGINT);
    CHECK_FALSE(r.timed_out);
  }
  CHECK(n.job("hog")["in_use"] == 12 * GiB + kContext);
}

TEST_CASE("e2e: a job whose main thread ends with pthread_exit is not kept alive by coloc's thread") {
  if (simulated_only()) return;
  if (sanitizer() == "tsan") {  // TSan's own background thread keeps such a process alive, coloc or not
    MESSAGE("skipped under ThreadSanitizer");
    return;
  }
  Node n("16GiB");
  // Registered at cuInit (so coloc's thread runs); no context, so no thread of the driver's.
  auto p = n.run({"--job", "leaver"}, {client(), "init", "pthread-exit"});
  REQUIRE(n.wait_state("leaver", "running"));
  ProcResult r = p->wait(20s);  // the link thread looks every second whether it is the last one
  INFO(describe(r));
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(n.report("leaver")["exit_status"] == 0);
}

TEST_CASE("e2e: without a daemon a job fails open: one warning, then the limits of its environment") {
  if (simulated_only()) return;
  TempDir dir("coloc-e2e-nodaemon");
  Env env;
  env.simgpu(dir, "16GiB").preload_coloc().set("COLOC_SOCKET", dir / "nobody.sock").set("COLOC_MEM_LIMIT", "2GiB");
  ProcResult r = run({cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "alloc", "1GiB", "b", "meminfo"}, env);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(step(r.out, "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // 1.5 GiB + 1 GiB > 2 GiB
  CHECK(step(r.out, "meminfo")["total"] == 2 * GiB);
  size_t warnings = 0;
  for (size_t at = 0; (at = r.err.find("no coloc daemon at", at)) != std::string::npos; ++at) ++warnings;
  CHECK(warnings == 1);
  CHECK(r.err.find("standalone limits") != std::string::npos);
}

TEST_CASE("e2e: COLOC_REQUIRE_DAEMON waits for the daemon, then fails cuInit with a clear message") {
  if (simulated_only()) return;
  TempDir dir("coloc-e2e-require");
  Env env;
  env.simgpu(dir, "16GiB").preload_coloc().set("COLOC_SOCKET", dir / "colocd.sock").set("COLOC_REQUIRE_DAEMON", "1");

  SUBCASE("no daemon: cuInit fails after COLOC_WAIT_TIMEOUT") {
    env.set("COLOC_WAIT_TIMEOUT", "300ms");
    auto t0 = std::chrono::steady_clock::now();
    ProcResult r = run({cuprobe(), "init", "ctx", "0"}, env);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK(step(r.out, "init")["rc_name"] == "CUDA_ERROR_NOT_INITIALIZED");
    CHECK(step(r.out, "ctx")["rc_name"] != "CUDA_SUCCESS");  // the driver was never initialised
    CHECK(s >= 0.3);
    CHECK(r.err.find("COLOC_REQUIRE_DAEMON=1 and no coloc daemon at " + (dir / "colocd.sock")) != std::string::npos);
    CHECK(r.err.find("cuInit returns CUDA_ERROR_NOT_INITIALIZED") != std::string::npos);
  }
  SUBCASE("a daemon that comes up during the wait is used") {
    env.set("COLOC_WAIT_TIMEOUT", "60s").set("COLOC_JOB", "patient");
    Proc p({cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a"}, env);
    Proc d({build_path("bin/colocd"), "--socket", dir / "colocd.sock", "--state-dir", dir / "state"}, Env());
    ProcResult r = p.wait(60s);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK(step(r.out, "init")["rc_name"] == "CUDA_SUCCESS");
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
    CHECK(wait_until([&] { return file_exists(dir / "state/reports/patient.json"); }));
    d.kill(SIGTERM);
    d.wait(10s);
  }
}

}  // TEST_SUITE

TEST_SUITE("e2e") {

TEST_CASE("e2e: after a colocd restart, a two-process job keeps its reservation and nothing is called over-committed") {
  if (simulated_only()) return;
  Node n("16GiB", {"--resume-grace", "60s"});  // the processes below take their time to come back
  // Job "pair": two processes (5 GiB and 3 GiB with their contexts) under a 10 GiB reservation;
  // job "solo": 4 GiB under 5 GiB. 15 GiB of reservations on a 16 GiB device (2% headroom).
  const std::string go = n.file("go");
  std::string a = cuprobe() + " init ctx 0 alloc 4608MiB a touch " + n.file("a-ready") + " hold-file " + go;
  std::string b = cuprobe() + " init ctx 0 alloc 2560MiB b touch " + n.file("b-ready") + " hold-file " + go;
  auto pair = n.run({"--mem", "10GiB", "--job", "pair"}, {"/bin/sh", "-c", a + " & " + b + " & wait"});
  auto solo = n.run({"--mem", "5GiB", "--job", "solo"},
                    {cuprobe(), "init", "ctx", "0", "alloc", "3584MiB", "s", "touch", n.file("s-ready"), "hold-file", go});
  for (const char* f : {"a-ready", "b-ready"}) REQUIRE_MESSAGE(reached(*pair, n.file(f)), pair->out_so_far(), n.log());
  REQUIRE(reached(*solo, n.file("s-ready")));
  const uint64_t expected = 12 * GiB;
  REQUIRE(n.status()["devices"][0]["in_use"] == expected);
  REQUIRE(n.job("pair")["reserved"] == 10 * GiB);

  // Both of the pair's processes are stopped across the restart and come back one at a time,
  // after colocd has read the device: the first one back finds the other's memory counted as
  // used outside coloc, and the pair's reservation covering it as well.
  const int p1 = step(pair->out_so_far(), "init", 0)["pid"], p2 = step(pair->out_so_far(), "init", 1)["pid"];
  REQUIRE(p1 > 0);
  REQUIRE(p2 > 0);
  // colocd has saved them as running (its restart then holds new requests until they are back).
  REQUIRE(wait_until([&] {
    std::string saved = read_file(n.state() + "/clients");
    return saved.find(std::to_string(p1) + " ") != std::string::npos &&
           saved.find(std::to_string(p2) + " ") != std::string::npos;
  }, 20s, 10ms));
  REQUIRE(::kill(p1, SIGSTOP) == 0);
  REQUIRE(::kill(p2, SIGSTOP) == 0);
  n.kill_daemon();
  n.start_daemon();
  // Which of the two is p1 (5 or 3 GiB) depends on the order of their output lines.
  auto books = [&](uint64_t in_use_min, uint64_t outside_min, uint64_t outside_max) {
    return wait_until([&] {
      json s = n.status();
      if (s["devices"].size() != 1) return false;
      uint64_t outside = s["devices"][0].value("outside", uint64_t(0));
      return s["devices"][0]["in_use"].get<uint64_t>() >= in_use_min && outside >= outside_min && outside <= outside_max;
    }, 20s, 20ms);
  };
  bool solo_back = books(4 * GiB, 8 * GiB, 9 * GiB);  // solo re-registered; both pair processes look outside
  ::kill(p1, SIGCONT);
  bool first_back = solo_back && books(7 * GiB, 3 * GiB, 6 * GiB);  // p1 back, the other still outside
  ::kill(p2, SIGCONT);
  REQUIRE_MESSAGE(solo_back, n.status_text(), "\n", n.log());
  REQUIRE_MESSAGE(first_back, n.status_text(), "\n", n.log());
  bool rebuilt = wait_until([&] {
    json s = n.status();
    return s["jobs"].size() == 2 && s["devices"].size() == 1 && s["devices"][0]["in_use"] == expected &&
           !s["daemon"]["holding_for_restart"].get<bool>();
  }, 20s, 20ms);
  REQUIRE_MESSAGE(rebuilt, n.status_text(), "\n", n.log());
  // While the pair's second process had not re-registered, its memory looked used outside coloc
  // and inside the pair's reservation at once: that is not an over-commit, nor a reason to cut it.
  INFO(n.log());
  CHECK(n.job("pair")["reserved"] == 10 * GiB);
  CHECK(n.job("solo")["reserved"] == 5 * GiB);
  CHECK(n.status()["devices"][0]["committed"] == 15 * GiB);
  CHECK(n.log().find("over-committed") == std::string::npos);
  CHECK(n.log().find("reservation cut") == std::string::npos);
  write_file(go, "");
  finish(*pair);
  finish(*solo);
}

}  // TEST_SUITE
