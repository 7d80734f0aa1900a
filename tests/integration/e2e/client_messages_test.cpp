// End-to-end: what the library inside a job tells colocd and the user — a driver out-of-memory
// inside the grant (reported without the failed request, warned once), a live `coloc set --mem`
// that raises the limit past COLOC_MEM_LIMIT, the COLOC_REQUIRE_DAEMON wait announced before it
// starts, and the lost-connection warning worded by what the job holds.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: a driver OOM inside the grant reports in-use without the failed request, and warns once per process") {
  if (simulated_only()) return;
  Node n("16GiB");
  // 1000 MiB + the context = 1512 MiB in use; the grant is a whole number of 64 MiB steps (1536 MiB),
  // so a 16 MiB allocation fits the grant without asking the daemon. Two of them fail in the driver,
  // each tried again for ~2.5 s under the wait policy.
  auto inside = n.run({"--job", "inside"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "1000MiB", "a", "touch", n.file("ready"), "hold-file",
                       n.file("go"), "alloc", "16MiB", "b", "alloc", "16MiB", "c"},
                      {{"COLOC_LOG_LEVEL", "info"}});
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
  CHECK(step(r.out, "alloc", 2)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  // What went into each DriverOom message (the info line prints the message's fields): the request
  // in its own field, in-use without it.
  const std::string sent = "(request " + std::to_string(16 * MiB) + " bytes, in use " +
                           std::to_string(1000 * MiB + kContext) + " bytes without it";
  CHECK_MESSAGE(count(r.err, sent) == 2, r.err);
  // One warning line for the user, for the whole process (two failures, several retries each).
  CHECK_MESSAGE(count(r.err, "the driver ran out of memory inside coloc's grant") == 1, r.err);
  CHECK(r.err.find("memory is used outside coloc or by another process") != std::string::npos);
  CHECK(n.report("inside")["devices"][0]["driver_ooms"] == 2);
}

TEST_CASE("e2e: coloc set --mem raises a running job's limit past its COLOC_MEM_LIMIT, and the job grows past it") {
  if (simulated_only()) return;
  Node n("16GiB");
  // --mem 2GiB (COLOC_MEM_LIMIT=2GiB): the context and 1 GiB fit, another 1 GiB does not.
  auto job = n.run({"--job", "raised", "--mem", "2GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "alloc", "1GiB", "b", "touch", n.file("ready"),
                    "hold-file", n.file("go"), "alloc", "1GiB", "c", "alloc", "1GiB", "d"});
  REQUIRE(reached(*job, n.file("ready")));
  CHECK(step(job->out_so_far(), "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  std::string id = n.job("raised")["job"];
  ProcResult set = n.cli({"set", id, "--mem", "4GiB"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  CHECK(n.job("raised")["limit"] == 4 * GiB);
  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc", 2)["rc_name"] == "CUDA_SUCCESS");  // 2.5 GiB: past the old 2 GiB
  CHECK(step(r.out, "alloc", 3)["rc_name"] == "CUDA_SUCCESS");  // 3.5 GiB
  json d = n.report("raised")["devices"][0];
  CHECK(d["peak"] == 3 * GiB + kContext);
  CHECK(d["limit"] == 4 * GiB);
}

TEST_CASE("e2e: COLOC_REQUIRE_DAEMON says what it waits for (socket, how long) before it waits") {
  if (simulated_only()) return;
  TempDir dir("coloc-e2e-require-note");
  Env env;
  env.simgpu(dir, "16GiB").preload_coloc().set("COLOC_SOCKET", dir / "colocd.sock").set("COLOC_REQUIRE_DAEMON", "1");
  env.set("COLOC_WAIT_TIMEOUT", "300ms");
  ProcResult r = run({cuprobe(), "init"}, env);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(step(r.out, "init")["rc_name"] == "CUDA_ERROR_NOT_INITIALIZED");
  const std::string note = "COLOC_REQUIRE_DAEMON=1: waiting up to 0.3 s (COLOC_WAIT_TIMEOUT) for colocd at " +
                           std::string(dir / "colocd.sock");
  CHECK(count(r.err, note) == 1);
  size_t failed = r.err.find("COLOC_REQUIRE_DAEMON=1 and no coloc daemon at");
  REQUIRE(failed != std::string::npos);
  CHECK(r.err.find(note) < failed);  // said before the wait, not after
}

TEST_CASE("e2e: when colocd goes away, 'running on the current grants' is said only by jobs that hold grants") {
  if (simulated_only()) return;
  Node n("16GiB");
  // Registered (cuInit) but no context: nothing attached, no grant.
  auto bare = n.run({"--job", "bare"}, {cuprobe(), "init", "touch", n.file("bare-ready"), "hold-file", n.file("go")});
  auto busy = n.run({"--job", "busy"}, {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch",
                                         n.file("busy-ready"), "hold-file", n.file("go")});
  REQUIRE(reached(*bare, n.file("bare-ready")));
  REQUIRE(reached(*busy, n.file("busy-ready")));
  REQUIRE(n.wait_state("bare", "running"));
  n.kill_daemon();
  auto lost = [](Proc& p) {
    return wait_until([&] { return p.err_so_far().find("lost the connection to colocd") != std::string::npos; });
  };
  REQUIRE_MESSAGE(lost(*bare), bare->err_so_far());
  REQUIRE_MESSAGE(lost(*busy), busy->err_so_far());
  write_file(n.file("go"), "");
  ProcResult rb = finish(*bare);
  ProcResult ru = finish(*busy);
  CHECK(rb.err.find("current grants") == std::string::npos);
  CHECK(rb.err.find("no device is attached yet") != std::string::npos);
  CHECK(ru.err.find("running on the current grants") != std::string::npos);
}

TEST_CASE("e2e: a limit below one CUDA context: the refused admission says that a context itself costs memory") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto job = n.run({"--job", "tiny", "--mem", "100MiB"}, {cuprobe(), "init", "ctx", "0"});
  ProcResult r = finish(*job);
  CHECK(step(r.out, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK_MESSAGE(r.err.find("not admitted on device 0 (own limit): its limit 100.00 MiB is less than one CUDA context") !=
                    std::string::npos,
                r.err);
  CHECK(r.err.find("a CUDA context alone takes a few hundred MiB on real GPUs") != std::string::npos);
}

TEST_CASE("e2e: a COLOC_JOB that is not a job id as it stands is filed under a changed name, and the job says so") {
  if (simulated_only()) return;
  Node n("16GiB");
  Env env = n.base_env();
  env.preload_coloc().set("COLOC_JOB", "my job/x");
  ProcResult r = run({cuprobe(), "init", "touch", n.file("ready")}, env);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK(count(r.err, "COLOC_JOB 'my job/x' is not a job id as it stands") == 1);
  CHECK(r.err.find("colocd files this process under job 'my_job_x'") != std::string::npos);
  CHECK(n.report("my_job_x")["job"] == "my_job_x");
  env.set("COLOC_JOB", "fine-name");  // a valid one: nothing said
  ProcResult ok = run({cuprobe(), "init"}, env);
  CHECK(ok.exit_code == 0);
  CHECK(ok.err.find("COLOC_JOB") == std::string::npos);
}

}  // TEST_SUITE
