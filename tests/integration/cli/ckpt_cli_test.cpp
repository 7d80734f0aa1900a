// coloc-ckpt against simgpu's checkpoint API: a two-process job suspended and resumed with its data
// intact, roll-back when one process cannot be checkpointed or locked, and its errors.
#include <csignal>

#include "tests/integration/simgpu/probe.h"

using namespace probetest;
using coloc::test::Proc;
using coloc::test::wait_until;

namespace {

std::string ckpt() { return coloc::test::build_path("bin/coloc-ckpt"); }

// A cuprobe that sets up, says it is ready (a file), waits for `go`, then runs `after`.
struct Member {
  Member(const TempDir& tmp, const std::string& tag, const Env& env, const std::vector<std::string>& setup,
         const std::vector<std::string>& after)
      : ready(tmp / (tag + "-ready")), go(tmp / (tag + "-go")) {
    std::vector<std::string> steps{"init", "ctx"};
    steps.insert(steps.end(), setup.begin(), setup.end());
    steps.insert(steps.end(), {"touch", ready, "hold-file", go});
    steps.insert(steps.end(), after.begin(), after.end());
    proc = std::make_unique<Proc>(probe_args(steps), env);
    REQUIRE_MESSAGE(wait_until([&] { return coloc::test::file_exists(ready) || !proc->running(); }, 30s),
                    proc->err_so_far());
    REQUIRE_MESSAGE(proc->running(), proc->err_so_far());
    pid = std::to_string(proc->pid());
  }
  std::vector<json> finish() {
    coloc::test::write_file(go, "");
    auto r = proc->wait();
    REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
    return lines(r.out);
  }
  std::string ready, go, pid;
  std::unique_ptr<Proc> proc;
};

json run_ckpt(const Env& env, std::vector<std::string> args, int expected_exit) {
  args.insert(args.begin(), {ckpt(), "--json"});
  auto r = coloc::test::run(args, env, 60s);
  REQUIRE_MESSAGE(r.exit_code == expected_exit, coloc::test::describe(r));
  json j = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(j.is_object(), coloc::test::describe(r));
  return j;
}

uint64_t free_bytes(const Env& env) { return run_probe(env, {"init", "ctx", "meminfo"}, 3)[2]["free"]; }

}  // namespace

TEST_SUITE("cli") {
TEST_CASE("coloc-ckpt suspends a two-process job to host memory and resumes it with its data intact") {
  TempDir tmp("ckpt-cli");
  Env env = sim_env(tmp, "8GiB");
  Member a(tmp, "a", env, {"alloc", "128MiB", "x", "upload", "x", "3.5"}, {"check", "x", "3.5"});
  Member b(tmp, "b", env, {"alloc", "64MiB", "y", "fill", "y", "-2", "sync"}, {"check", "y", "-2"});
  const uint64_t before = free_bytes(env);
  json j = run_ckpt(env, {"suspend", "--lock-timeout", "5000", a.pid, b.pid}, 0);
  CHECK(j["ok"] == true);
  REQUIRE(j["processes"].size() == 2);
  for (const json& p : j["processes"]) {
    CHECK(p["state"] == "checkpointed");
    CHECK(p.contains("checkpoint_ms"));
  }
  CHECK(free_bytes(env) == before + 2 * 256 * MiB + 128 * MiB + 64 * MiB);  // both contexts and buffers left
  j = run_ckpt(env, {"state", a.pid, b.pid}, 0);
  CHECK(j["processes"][0]["state"] == "checkpointed");
  j = run_ckpt(env, {"resume", a.pid, b.pid}, 0);
  CHECK(j["ok"] == true);
  CHECK(j["processes"][1]["state"] == "running");
  CHECK(free_bytes(env) == before);
  CHECK(a.finish().back()["ok"] == true);
  CHECK(b.finish().back()["ok"] == true);
}

TEST_CASE("coloc-ckpt rolls a job back when one process cannot be checkpointed, or cannot be locked in time") {
  TempDir tmp("ckpt-cli");
  Env env = sim_env(tmp, "8GiB");
  {
    Member a(tmp, "a", env, {"alloc", "256MiB", "x", "upload", "x", "1"}, {"check", "x", "1"});
    Member m(tmp, "m", env, {"alloc-managed", "8MiB"}, {"meminfo"});
    const uint64_t before = free_bytes(env);
    json j = run_ckpt(env, {"suspend", a.pid, m.pid}, 1);
    CHECK(j["ok"] == false);
    CHECK(j["processes"][0]["state"] == "running");  // a was checkpointed, then restored and unlocked
    CHECK(j["processes"][1]["state"] == "running");
    CHECK(j["processes"][1]["failed_step"] == "checkpoint");
    CHECK(j["processes"][1]["error"] == "CUDA_ERROR_NOT_SUPPORTED");
    CHECK(free_bytes(env) == before);
    CHECK(a.finish().back()["ok"] == true);
    CHECK(rc(m.finish().back()) == "CUDA_SUCCESS");
  }
  {
    Member s(tmp, "s", env, {"launch-spin", "30000000000"}, {});
    json j = run_ckpt(env, {"suspend", "--lock-timeout", "200", s.pid}, 1);
    CHECK(j["processes"][0]["state"] == "running");
    CHECK(j["processes"][0]["error"] == "CUDA_ERROR_NOT_READY");
    CHECK(j["processes"][0]["lock_ms"].get<double>() >= 200);
    s.proc->kill(SIGKILL);
    s.proc->wait();
  }
}

TEST_CASE("coloc-ckpt: bad arguments exit 2, unknown processes 1, check reports the driver") {
  TempDir tmp("ckpt-cli");
  Env env = sim_env(tmp, "8GiB");
  for (std::vector<std::string> bad : {std::vector<std::string>{}, {"suspend"}, {"suspend", "abc"}, {"resume", "-5"},
                                       {"suspend", "--lock-timeout", "-1", "7"}, {"explode", "7"}}) {
    bad.insert(bad.begin(), ckpt());
    auto r = coloc::test::run(bad, env, 20s);
    CHECK_MESSAGE(r.exit_code == 2, coloc::test::describe(r));
  }
  json j = run_ckpt(env, {"state", "999999999"}, 1);
  CHECK(j["processes"][0]["state"] == "unknown");
  j = run_ckpt(env, {"suspend", "999999999"}, 1);
  CHECK(j["summary"].get<std::string>().find("nothing was locked") != std::string::npos);
  j = run_ckpt(env, {"check"}, 0);
  CHECK(j["driver_version"] == 13000);
  if (coloc::test::real_driver()) return;
  Env none = env;
  none.set("LD_LIBRARY_PATH", tmp.path());  // no libcuda.so.1 anywhere here
  auto r = coloc::test::run({ckpt(), "--json", "check"}, none, 20s);
  CHECK(r.exit_code == 3);
  CHECK(r.out.find("libcuda.so.1") != std::string::npos);
}
}

TEST_SUITE("cli") {
TEST_CASE("coloc-train --check-data: a job suspended mid-run finishes intact, with the digest of a run never suspended") {
  TempDir tmp("ckpt-cli");
  Env env = sim_env(tmp, "8GiB");
  const std::vector<std::string> train = {coloc::test::build_path("bin/coloc-train"), "--gpu-util", "50", "--iter-ms", "20",
                                          "--iters", "60", "--check-data", "16", "--progress"};
  auto plain = coloc::test::run(train, env, 60s);
  REQUIRE_MESSAGE(plain.exit_code == 0, coloc::test::describe(plain));
  const json alone = json::parse(plain.out);
  REQUIRE(alone["data_check"]["checks"] == 60);
  REQUIRE(alone["data_check"]["mismatches"] == 0);

  Proc job(train, env);
  // Suspend it once it has run a few iterations (its --progress lines), then resume it.
  REQUIRE(wait_until([&] { return job.err_so_far().find("iter 5/") != std::string::npos || !job.running(); }, 30s));
  REQUIRE_MESSAGE(job.running(), job.err_so_far());
  json j = run_ckpt(env, {"suspend", std::to_string(job.pid())}, 0);
  REQUIRE(j["processes"][0]["state"] == "checkpointed");
  const uint64_t suspended_free = free_bytes(env);
  j = run_ckpt(env, {"resume", std::to_string(job.pid())}, 0);
  REQUIRE(j["processes"][0]["state"] == "running");
  auto r = job.wait(60s);
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  const json resumed = json::parse(r.out);
  CHECK(suspended_free == 8 * GiB - 256 * MiB);  // all of the job's memory was off the device
  CHECK(resumed["data_check"]["checks"] == 60);
  CHECK(resumed["data_check"]["mismatches"] == 0);
  CHECK(resumed["data_check"]["digest"] == alone["data_check"]["digest"]);
}
}
