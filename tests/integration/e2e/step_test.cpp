// End-to-end: a process's step within its job (COLOC_STEP, Register v11), as the Slurm plugin
// sets it for every task of a Slurm job's steps (one coloc job `slurm-<jobid>`). Processes of one
// COLOC_JOB in two steps are one job whose report lists each process with its step, and `coloc
// report` shows them by step; a COLOC_STEP that is no step label is said once and ignored: the
// process still registers and runs, without a step. The steps outlive a colocd restart: the one of
// a process that comes back (it registers again, with its step), and the one of a process that
// died while colocd was down (from the job's saved state).
#include <filesystem>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The environment of a task of Slurm job `job` in step `step` on node `n`: libcoloc.so
/// preloaded, the node's socket, no `coloc run`.
Env task_env(const Node& n, const std::string& job, const std::string& step) {
  Env e = n.base_env();
  e.preload_coloc();
  e.set("COLOC_JOB", job);
  e.set("COLOC_STEP", step);
  return e;
}

/// The saved state of job `id` on node `n` (null when none yet).
json saved_state(const Node& n, const std::string& id) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(n.state() + "/jobs", ec)) {
    std::string f = e.path().filename();
    if (f.size() < 5 || f.compare(f.size() - 5, 5, ".json") != 0) continue;
    json j = json::parse(read_file(e.path()), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("job", "") == id) return j;
  }
  return nullptr;
}

size_t count(const std::string& s, const std::string& what) {
  size_t k = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size()) ++k;
  return k;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: two processes of one job in steps 0 and 1: the report lists each with its step") {
  if (simulated_only()) return;
  Node n("16GiB");
  const std::string job = "slurm-4242";
  // Both hold their memory until told to go on, so the job lives until both have registered.
  auto task = [&](const std::string& step) {
    return std::make_unique<Proc>(std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "256MiB", "a", "touch",
                                                           n.file("ready-" + step), "hold-file", n.file("go")},
                                  task_env(n, job, step));
  };
  auto step0 = task("0");
  REQUIRE(reached(*step0, n.file("ready-0")));
  auto step1 = task("1");
  REQUIRE(reached(*step1, n.file("ready-1")));
  json running = n.job(job);
  REQUIRE_MESSAGE(!running.is_null(), n.status_text());
  CHECK(running["pids"].size() == 2);
  // A running job's report (coloc report asks colocd) has the steps already.
  ProcResult live = n.cli({"report", job, "--json"});
  REQUIRE_MESSAGE(live.exit_code == 0, describe(live));
  json lr = json::parse(live.out);
  REQUIRE(lr["processes"].size() == 2);
  CHECK(lr["processes"][0]["step"] == "0");
  CHECK(lr["processes"][1]["step"] == "1");

  write_file(n.file("go"), "");
  ProcResult r0 = finish(*step0), r1 = finish(*step1);
  CHECK(r0.err.find("COLOC_STEP") == std::string::npos);  // a good label is not remarked on
  CHECK(r1.err.find("COLOC_STEP") == std::string::npos);

  json rep = n.report(job);
  CHECK(rep["job"] == job);
  REQUIRE(rep["processes"].size() == 2);
  CHECK(rep["processes"][0]["pid"] == step0->pid());
  CHECK(rep["processes"][0]["step"] == "0");
  CHECK(rep["processes"][1]["pid"] == step1->pid());
  CHECK(rep["processes"][1]["step"] == "1");
  for (const json& p : rep["processes"]) CHECK(p["exit_code"] == 0);

  ProcResult shown = n.cli({"report", job});
  INFO(shown.out);
  CHECK(shown.exit_code == 0);
  CHECK(shown.out.find("Processes by step:") != std::string::npos);
  CHECK(shown.out.find("\n  0     1          " + std::to_string(step0->pid())) != std::string::npos);
  CHECK(shown.out.find("\n  1     1          " + std::to_string(step1->pid())) != std::string::npos);
}

TEST_CASE("e2e: a COLOC_STEP that is no step label is said once and ignored; the process registers and runs") {
  if (simulated_only()) return;
  Node n("16GiB");
  int i = 0;
  for (const std::string& bad : {std::string("a b"), std::string(40, 'x'), std::string("0/1")}) {
    CAPTURE(bad);
    const std::string job = "slurm-bad" + std::to_string(i++);
    ProcResult r = run({cuprobe(), "init", "ctx", "0", "alloc", "256MiB", "a"}, task_env(n, job, bad));
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
    CHECK(count(r.err, "COLOC_STEP=\"") == 1);
    CHECK(r.err.find("not a step label") != std::string::npos);
    json rep = n.report(job);
    CHECK(rep["job"] == job);  // registered under its job, as any process
    REQUIRE(rep["processes"].size() == 1);
    CHECK(rep["processes"][0]["step"].is_null());
    CHECK(rep["processes"][0]["exit_code"] == 0);
    CHECK(n.cli({"report", job}).out.find("Processes by step") == std::string::npos);
  }
  // Without COLOC_STEP the report says null too.
  Env plain = n.base_env();
  plain.preload_coloc();
  plain.set("COLOC_JOB", "no-step");
  ProcResult r = run({cuprobe(), "init", "ctx", "0", "alloc", "256MiB", "a"}, plain);
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  json rep = n.report("no-step");
  REQUIRE(rep["processes"].size() == 1);
  CHECK(rep["processes"][0].contains("step"));
  CHECK(rep["processes"][0]["step"].is_null());
}

TEST_CASE("e2e: the steps outlive a colocd restart: a process that comes back, and one that died while colocd was down") {
  if (simulated_only()) return;
  Node n("16GiB", {"--resume-grace", "1s"});
  const std::string job = "slurm-77";
  auto task = [&](const std::string& step, const std::string& go) {
    return std::make_unique<Proc>(std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "256MiB", "a", "touch",
                                                           n.file("ready-" + step), "hold-file", n.file(go)},
                                  task_env(n, job, step));
  };
  auto stays = task("0", "go");  // registers first
  REQUIRE(reached(*stays, n.file("ready-0")));
  auto dies = task("batch", "never");
  REQUIRE(reached(*dies, n.file("ready-batch")));
  // colocd saves a running job's report state (once a second when it changed): both processes.
  bool saved = wait_until([&] {
    json s = saved_state(n, job);
    return !s.is_null() && s["recorder"]["processes"].size() == 2;
  }, 20s, 20ms);
  REQUIRE_MESSAGE(saved, n.log());

  n.kill_daemon();
  dies->kill(SIGKILL);
  dies->wait(10s);
  n.start_daemon();
  // The process that stayed registers again (with its step); then it ends.
  REQUIRE_MESSAGE(wait_until([&] {
    json j = n.job(job);
    return !j.is_null() && j["pids"].size() == 1;
  }, 20s, 20ms), n.status_text());
  write_file(n.file("go"), "");
  finish(*stays);

  json rep = n.report(job);
  INFO(rep.dump(1));
  REQUIRE(rep["processes"].size() == 2);
  CHECK(rep["processes"][0]["pid"] == stays->pid());
  CHECK(rep["processes"][0]["step"] == "0");
  CHECK(rep["processes"][0]["exit_code"] == 0);
  CHECK(rep["processes"][1]["pid"] == dies->pid());
  CHECK(rep["processes"][1]["step"] == "batch");
}

}  // TEST_SUITE
