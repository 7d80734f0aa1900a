// End-to-end: what a job prints at the default log level while it waits and when it is refused —
// a wait longer than a second announced once (what for, how long at most, `coloc status`) and its
// end; refusals with their numbers (asked, device, waited), the deadlock victim told why and what
// to do, an own-limit OOM after `coloc set --mem` lowered the limit, COLOC_REQUIRE_DAEMON echoed
// as written, and one "reconnected" line after a "lost the connection" line.
#include <cstdlib>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

bool said(Proc& p, const std::string& what, std::chrono::milliseconds timeout = 20s) {
  return wait_until([&] { return p.err_so_far().find(what) != std::string::npos || !p.running(); }, timeout) &&
         p.err_so_far().find(what) != std::string::npos;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: an admission wait longer than a second is announced once at the default level, and so is its end") {
  if (simulated_only()) return;
  Node n("16GiB");  // 15.68 GiB usable
  auto holder = n.run({"--job", "holder", "--mem", "12GiB"},
                      {cuprobe(), "init", "ctx", "0", "touch", n.file("held"), "hold-file", n.file("go")});
  REQUIRE(reached(*holder, n.file("held")));
  // 8 GiB do not fit next to the holder's 12 GiB reservation: admission waits.
  auto waiter = n.run({"--job", "waiter", "--mem", "8GiB"}, {cuprobe(), "init", "ctx", "0"});
  REQUIRE(n.wait_state("waiter", "admission-pending"));
  const std::string note = "has waited 1.";  // coloc run files the job as waiter-<hex>
  REQUIRE_MESSAGE(said(*waiter, note), waiter->err_so_far());
  std::string err = waiter->err_so_far();
  CHECK(err.find("job waiter-") != std::string::npos);
  CHECK_MESSAGE(err.find("s for admission on device 0 (GPU-") != std::string::npos, err);
  // Where it stands in the queue (colocd's queue note, v13): first in line, what is missing, what
  // it asks and why; an admission waits without a timeout unless one is set.
  CHECK_MESSAGE(err.find("#1 in line, Resources: 4.32 GiB missing, held by other jobs; it asks 8.00 GiB (its declared "
                         "footprint, COLOC_MEM_LIMIT / --mem); estimated start not known; the device has 16.00 GiB") !=
                    std::string::npos,
                err);
  CHECK_MESSAGE(err.find("it waits until it is admitted (COLOC_WAIT_TIMEOUT, or colocd's admission_timeout when set, "
                         "ends the wait with CUDA_ERROR_OUT_OF_MEMORY)") != std::string::npos,
                err);
  CHECK(err.find("`coloc status` shows who holds the device") != std::string::npos);
  CHECK(err.find("admitted on device") == std::string::npos);  // not yet
  write_file(n.file("go"), "");
  ProcResult h = finish(*holder);
  ProcResult r = finish(*waiter);
  CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
  CHECK_MESSAGE(count(r.err, "has waited") == 1, r.err);
  CHECK(count(r.err, "admitted on device 0 after waiting ") == 1);
  CHECK(r.err.find("has waited") < r.err.find("admitted on device 0 after"));
  CHECK(h.err.find("has waited") == std::string::npos);  // admitted at once: no wait announced
}

TEST_CASE("e2e: a memory wait longer than a second says what the grant must grow to, and that it got the memory") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto holder = n.run({"--job", "holder"}, {cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "a", "touch",
                                            n.file("held"), "hold-file", n.file("go")});
  REQUIRE(reached(*holder, n.file("held")));
  auto grower = n.run({"--job", "grower"}, {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "a"});
  REQUIRE_MESSAGE(said(*grower, "has waited 1."), grower->err_so_far());
  std::string err = grower->err_so_far();
  CHECK_MESSAGE(err.find("s for memory on device 0: its grant to grow to 6.50 GiB (GPU-") != std::string::npos, err);
  CHECK(err.find("colocd has no room for it yet: 512.00 MiB in use, of the device's 16.00 GiB") != std::string::npos);
  CHECK(err.find("it waits up to colocd's --wait-timeout (300 s") != std::string::npos);
  write_file(n.file("go"), "");
  finish(*holder);
  ProcResult r = finish(*grower);
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK_MESSAGE(count(r.err, "has waited") == 1, r.err);
  CHECK(count(r.err, "got the memory on device 0 after waiting ") == 1);
}

TEST_CASE("e2e: refusals carry their numbers: --on-full fail says what was asked, a timeout how long it waited") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto holder = n.run({"--job", "holder", "--mem", "12GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "a",
                                                             "touch", n.file("held"), "hold-file", n.file("go")});
  REQUIRE(reached(*holder, n.file("held")));

  SUBCASE("admission, --on-full fail") {
    auto job = n.run({"--job", "failfast", "--mem", "8GiB", "--on-full", "fail"}, {cuprobe(), "init", "ctx", "0"});
    ProcResult r = finish(*job);
    CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_MESSAGE(r.err.find("not admitted on device 0 (device full); it asked 8.00 GiB of the "
                             "device's 16.00 GiB, and colocd had no room for it") != std::string::npos,
                  r.err);
    CHECK(r.err.find("`coloc status` shows what is free") != std::string::npos);
    CHECK(r.err.find("has waited") == std::string::npos);  // no wait
  }
  SUBCASE("growth, --on-full fail") {
    auto job = n.run({"--job", "failgrow", "--on-full", "fail"}, {cuprobe(), "init", "ctx", "0", "alloc", "4GiB", "a"});
    ProcResult r = finish(*job);
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_MESSAGE(r.err.find("out of memory (device full): job failgrow-") != std::string::npos, r.err);
    CHECK(r.err.find("; it asked for a grant of 4.50 GiB with 512.00 MiB in use, of the device's 16.00 GiB, ") !=
          std::string::npos);
    CHECK(r.err.find("free on the device, and colocd had no room for it") != std::string::npos);
  }
  SUBCASE("growth, timeout") {
    // The notice comes after 1 s of waiting, the timeout 1.5 s later: a stall on a loaded machine
    // cannot put the timeout first.
    auto job = n.run({"--job", "patient"}, {cuprobe(), "init", "ctx", "0", "alloc", "4GiB", "a"},
                     {{"COLOC_WAIT_TIMEOUT", "2500ms"}});
    ProcResult r = finish(*job);
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK_MESSAGE(r.err.find("out of memory (timeout): job patient") != std::string::npos, r.err);
    const size_t waited = r.err.find("; waited ");
    REQUIRE(waited != std::string::npos);
    const double waited_s = std::atof(r.err.c_str() + waited + 9);
    CHECK(waited_s >= 2.5);  // its whole timeout (more only if the machine stalled it)
    CHECK(waited_s < 20.0);
    CHECK(r.err.find(" s (at most 2.5 s (COLOC_WAIT_TIMEOUT)); it asked for a grant of 4.50 GiB") != std::string::npos);
    CHECK(count(r.err, "has waited 1.") == 1);  // announced first
    CHECK(r.err.find("it waits up to 2.5 s (COLOC_WAIT_TIMEOUT)") != std::string::npos);
    CHECK(r.err.find("got the memory") == std::string::npos);
  }
  write_file(n.file("go"), "");
  finish(*holder);
}

TEST_CASE("e2e: the deadlock victim is told why it was chosen and what to do") {
  if (simulated_only()) return;
  Node n("16GiB");
  struct Job {
    const char* name;
    const char* priority;
    const char* first;
  };
  const Job jobs[] = {{"old-normal", "normal", "5GiB"}, {"young-best", "best-effort", "8GiB"}};
  std::vector<std::unique_ptr<Proc>> procs;
  for (const Job& j : jobs) {
    std::string ready = n.file(std::string(j.name) + "-ready");
    procs.push_back(n.run({"--job", j.name, "--priority", j.priority},
                          {cuprobe(), "init", "ctx", "0", "alloc", j.first, "a", "touch", ready, "hold-file", n.file("go"),
                           "alloc", "3GiB", "b"}));
    REQUIRE(reached(*procs.back(), ready));
  }
  write_file(n.file("go"), "");  // 14 GiB held, 1.68 GiB free: both growths park
  ProcResult old = finish(*procs[0]);
  ProcResult victim = finish(*procs[1]);
  CHECK(step(old.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  INFO(victim.err);
  CHECK(step(victim.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_MESSAGE(victim.err.find("out of memory (deadlock broken): job young-best") != std::string::npos, victim.err);
  CHECK(victim.err.find("every job on device 0 was waiting for memory, so colocd refused one to break the deadlock: "
                        "the lowest priority (this job's: best-effort), then a job without progress since its "
                        "admission, then the newest") != std::string::npos);
  CHECK(victim.err.find("give it a declared footprint (coloc run --mem SIZE, or COLOC_MEM_LIMIT) so it is admitted "
                        "with a reservation") != std::string::npos);
  CHECK(victim.err.find("or run it later") != std::string::npos);
}

TEST_CASE("e2e: an own-limit OOM after coloc set --mem lowered the limit says the limit was changed") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "lowered", "--mem", "10GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "a", "touch", n.file("ready"), "hold-file",
                    n.file("go"), "alloc", "1GiB", "b"});
  REQUIRE(reached(*job, n.file("ready")));
  std::string id = n.job("lowered")["job"];
  ProcResult set = n.cli({"set", id, "--mem", "4GiB"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_MESSAGE(r.err.find("out of memory (own limit): job lowered") != std::string::npos, r.err);
  CHECK(r.err.find("limit 4.00 GiB; the job's limit was changed from 10.00 GiB to 4.00 GiB by `coloc set --mem` "
                   "while it ran") != std::string::npos);

  // Without a change, an own-limit OOM says nothing of `coloc set`.
  auto plain = n.run({"--job", "plain", "--mem", "2GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "2GiB", "a"});
  ProcResult p = finish(*plain);
  CHECK(step(p.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_MESSAGE(p.err.find("out of memory (own limit): job plain") != std::string::npos, p.err);
  CHECK(p.err.find("coloc set") == std::string::npos);
}

TEST_CASE("e2e: COLOC_REQUIRE_DAEMON is echoed as the user wrote it") {
  if (simulated_only()) return;
  TempDir dir("coloc-e2e-require-yes");
  Env env;
  env.simgpu(dir, "16GiB").preload_coloc().set("COLOC_SOCKET", dir / "colocd.sock").set("COLOC_REQUIRE_DAEMON", "yes");
  env.set("COLOC_WAIT_TIMEOUT", "200ms");
  ProcResult r = run({cuprobe(), "init"}, env);
  INFO(describe(r));
  CHECK(step(r.out, "init")["rc_name"] == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(count(r.err, "COLOC_REQUIRE_DAEMON=yes: waiting up to 0.2 s") == 1);
  CHECK(count(r.err, "COLOC_REQUIRE_DAEMON=yes and no coloc daemon at") == 1);
  CHECK(r.err.find("COLOC_REQUIRE_DAEMON=1") == std::string::npos);
}

TEST_CASE("e2e: after 'lost the connection', one 'reconnected' line at the default level per reconnect") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "steady"}, {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("ready"),
                                          "hold-file", n.file("go"), "alloc", "1GiB", "b"});
  REQUIRE(reached(*job, n.file("ready")));
  for (int round = 1; round <= 2; ++round) {
    CAPTURE(round);
    n.kill_daemon();
    REQUIRE(wait_until([&] { return count(job->err_so_far(), "lost the connection to colocd") == size_t(round); }));
    n.start_daemon();
    REQUIRE_MESSAGE(wait_until([&] { return count(job->err_so_far(), "reconnected to colocd after ") == size_t(round); }),
                    job->err_so_far());
  }
  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK_MESSAGE(count(r.err, "reconnected to colocd after ") == 2, r.err);
  size_t lost = r.err.find("lost the connection");
  CHECK(lost < r.err.find("reconnected to colocd"));
}

TEST_CASE("e2e: a growth waiting over a second for colocd to come back says so, and that colocd is back") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "away"}, {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("ready"),
                                        "hold-file", n.file("go"), "alloc", "2GiB", "b"});
  REQUIRE(reached(*job, n.file("ready")));
  n.kill_daemon();
  REQUIRE(said(*job, "lost the connection to colocd"));
  write_file(n.file("go"), "");  // 2 GiB is past the grant: the growth waits for colocd
  REQUIRE_MESSAGE(said(*job, "colocd is away (restarting), and the growth waits for it to come back"),
                  job->err_so_far());
  CHECK(job->err_so_far().find("s for memory on device 0: its grant to grow to 3.50 GiB") != std::string::npos);
  n.start_daemon();
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK_MESSAGE(count(r.err, "colocd is back after ") == 1, r.err);
  CHECK(count(r.err, "has waited") == 1);
  CHECK(count(r.err, "reconnected to colocd after ") == 1);
}

}  // TEST_SUITE
