// The checkpoint API (tools/simgpu/checkpoint.h): one cuprobe holds device memory, another locks,
// checkpoints, restores and unlocks it by pid, as coloc's checkpoint helper does.
#include <csignal>

#include "probe.h"

using namespace probetest;
using coloc::test::Proc;
using coloc::test::wait_until;

namespace {

// A target that allocates, writes its buffers, says it is ready (a file), waits for `go` (a file:
// no CUDA call meanwhile), then runs `after`.
struct Target {
  Target(const TempDir& tmp, const Env& env, const std::vector<std::string>& setup, const std::vector<std::string>& after,
         const std::string& tag = "target")
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
  void release() { coloc::test::write_file(go, ""); }
  std::string ready, go, pid;
  std::unique_ptr<Proc> proc;
};

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("checkpoint moves a process's device memory to the host; restore brings it back at the same addresses") {
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  Target t(tmp, env, {"alloc", "256MiB", "a", "upload", "a", "2.5", "alloc", "3MiB", "b", "fill", "b", "1.5", "sync"},
           {"check", "a", "2.5", "check", "b", "1.5", "meminfo"});
  const uint64_t held = 256 * MiB + 256 * MiB + 3 * MiB;
  auto v = run_probe(env, {"init", "ctx", "ckpt-state", t.pid, "meminfo", "ckpt-lock", t.pid, "5000", "ckpt-state", t.pid,
                           "ckpt-checkpoint", t.pid, "ckpt-state", t.pid, "meminfo", "ckpt-restore", t.pid, "ckpt-state",
                           t.pid, "meminfo", "ckpt-unlock", t.pid, "ckpt-state", t.pid},
                     14);
  CHECK(v[2]["state"] == "running");
  CHECK(v[2]["restore_tid"].get<int>() > 0);
  CHECK(v[3]["free"] == 8 * GiB - 256 * MiB - held);
  CHECK(rc(v[4]) == "CUDA_SUCCESS");
  CHECK(v[5]["state"] == "locked");
  CHECK(rc(v[6]) == "CUDA_SUCCESS");
  CHECK(v[7]["state"] == "checkpointed");
  CHECK(v[8]["free"] == 8 * GiB - 256 * MiB);  // everything it held, its context included, is free
  CHECK(rc(v[9]) == "CUDA_SUCCESS");
  CHECK(v[10]["state"] == "locked");
  CHECK(v[11]["free"] == 8 * GiB - 256 * MiB - held);
  CHECK(rc(v[12]) == "CUDA_SUCCESS");
  CHECK(v[13]["state"] == "running");
  t.release();
  auto r = t.proc->wait();
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  auto out = lines(r.out);
  REQUIRE(out.size() == 12);
  CHECK(out[9]["ok"] == true);  // the bytes came back where they were
  CHECK(out[10]["ok"] == true);
  CHECK(out[11]["free"] == 8 * GiB - held);
}

TEST_CASE("a locked process's calls wait until it is unlocked; a lock that cannot drain its work times out") {
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  {
    Target t(tmp, env, {}, {"meminfo"});
    auto v = run_probe(env, {"init", "ckpt-lock", t.pid, "5000"}, 2);
    REQUIRE(rc(v[1]) == "CUDA_SUCCESS");
    t.release();
    // Its cuMemGetInfo waits at the gate: the file is seen, the call does not return.
    REQUIRE(wait_until([&] { return lines(t.proc->out_so_far()).size() >= 4; }, 10s));
    CHECK_FALSE(wait_until([&] { return lines(t.proc->out_so_far()).size() > 4; }, 300ms));
    v = run_probe(env, {"init", "ckpt-unlock", t.pid}, 2);
    CHECK(rc(v[1]) == "CUDA_SUCCESS");
    auto r = t.proc->wait();
    auto out = lines(r.out);
    REQUIRE(out.size() == 5);
    CHECK(rc(out[4]) == "CUDA_SUCCESS");
    CHECK(out[4]["mono_ns"].get<uint64_t>() > v[0]["mono_ns"].get<uint64_t>());  // after the unlock was asked
  }
  {
    // A kernel of 30 s is in flight: a lock with a 200 ms timeout gives up, the process runs on.
    Target t(tmp, env, {"launch-spin", "30000000000"}, {"meminfo"}, "spinner");
    auto v = run_probe(env, {"init", "ckpt-lock", t.pid, "200", "ckpt-state", t.pid}, 3);
    CHECK(rc(v[1]) == "CUDA_ERROR_NOT_READY");
    CHECK(v[1]["ms"].get<double>() >= 200);
    CHECK(v[2]["state"] == "running");
    t.release();
    REQUIRE(wait_until([&] { return lines(t.proc->out_so_far()).size() >= 6; }, 10s));
    CHECK(rc(lines(t.proc->out_so_far())[5]) == "CUDA_SUCCESS");
    t.proc->kill(SIGKILL);
    t.proc->wait();
  }
}

TEST_CASE("checkpoint API errors: wrong states, unknown pids, the caller itself, managed memory") {
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  Target t(tmp, env, {"alloc-managed", "4MiB", "m"}, {"meminfo"});
  auto v = run_probe(env, {"init", "ckpt-checkpoint", t.pid, "ckpt-restore", t.pid, "ckpt-unlock", t.pid,
                           "ckpt-lock", "999999999", "ckpt-state", "0", "ckpt-lock", t.pid, "ckpt-lock", t.pid,
                           "ckpt-checkpoint", t.pid, "ckpt-state", t.pid, "ckpt-unlock", t.pid},
                     11);
  CHECK(rc(v[1]) == "CUDA_ERROR_ILLEGAL_STATE");  // checkpoint needs LOCKED
  CHECK(rc(v[2]) == "CUDA_ERROR_ILLEGAL_STATE");  // restore needs CHECKPOINTED
  CHECK(rc(v[3]) == "CUDA_ERROR_ILLEGAL_STATE");  // unlock needs LOCKED
  CHECK(rc(v[4]) == "CUDA_ERROR_INVALID_VALUE");  // no such process
  CHECK(rc(v[5]) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(rc(v[6]) == "CUDA_SUCCESS");
  CHECK(rc(v[7]) == "CUDA_ERROR_ILLEGAL_STATE");  // already locked
  CHECK(rc(v[8]) == "CUDA_ERROR_NOT_SUPPORTED");  // it holds managed memory
  CHECK(v[9]["state"] == "locked");               // and stays locked, nothing released
  CHECK(rc(v[10]) == "CUDA_SUCCESS");
  // The test process itself holds no CUDA slot: it is no CUDA process.
  v = run_probe(env, {"init", "ckpt-lock", std::to_string(getpid())}, 2);
  CHECK(rc(v[1]) == "CUDA_ERROR_INVALID_VALUE");
  t.release();
  CHECK(t.proc->wait().exit_code == 0);
}

TEST_CASE("a restore without room fails with CUDA_ERROR_OUT_OF_MEMORY, and later restores fail as on driver 580") {
  if (coloc::test::real_driver()) return;  // the poisoning is a driver defect; do not depend on it there
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  Target t(tmp, env, {"alloc", "4GiB", "a"}, {"meminfo"});
  auto v = run_probe(env, {"init", "ckpt-lock", t.pid, "ckpt-checkpoint", t.pid}, 3);
  REQUIRE(rc(v[2]) == "CUDA_SUCCESS");
  // Another process takes the room, then the restore is tried.
  Target filler(tmp, env, {"alloc", "6GiB", "f"}, {}, "filler");
  v = run_probe(env, {"init", "ckpt-restore", t.pid, "ckpt-state", t.pid}, 3);
  CHECK(rc(v[1]) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(v[2]["state"] == "checkpointed");
  filler.release();
  CHECK(filler.proc->wait().exit_code == 0);
  v = run_probe(env, {"init", "ckpt-restore", t.pid, "ckpt-state", t.pid}, 3);
  CHECK(rc(v[1]) == "CUDA_ERROR_OPERATING_SYSTEM");  // NVIDIA/cuda-checkpoint issue #44
  CHECK(v[2]["state"] == "checkpointed");
  t.proc->kill(SIGKILL);
  t.proc->wait();
}

TEST_CASE("SIMGPU_CHECKPOINT_FAULT: a failed checkpoint leaves FAILED; a caller killed mid-checkpoint changes nothing") {
  if (coloc::test::real_driver()) return;
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  {
    Env faulty = env;
    faulty.set("SIMGPU_CHECKPOINT_FAULT", "checkpoint:fail");
    Target t(tmp, faulty, {"alloc", "1GiB", "a"}, {"meminfo", "alloc", "1MiB"});
    auto v = run_probe(env, {"init", "ctx", "ckpt-lock", t.pid, "ckpt-checkpoint", t.pid, "ckpt-state", t.pid, "meminfo",
                             "ckpt-unlock", t.pid},
                       7);
    CHECK(rc(v[3]) == "CUDA_ERROR_UNKNOWN");
    CHECK(v[4]["state"] == "failed");
    CHECK(v[5]["free"] == 8 * GiB - 256 * MiB);  // its memory is gone with it
    CHECK(rc(v[6]) == "CUDA_ERROR_ILLEGAL_STATE");
    t.release();
    auto r = t.proc->wait();
    auto out = lines(r.out);
    REQUIRE(out.size() == 7);
    CHECK(rc(out[5]) == "CUDA_ERROR_ILLEGAL_STATE");  // its own calls fail from now on
    CHECK(rc(out[6]) == "CUDA_ERROR_ILLEGAL_STATE");
  }
  {
    TempDir tmp2("simgpu-ckpt");
    Env faulty = sim_env(tmp2, "8GiB");
    Env plain = faulty;
    faulty.set("SIMGPU_CHECKPOINT_FAULT", "checkpoint:stall:1500");
    Target t(tmp2, faulty, {"alloc", "64MiB", "a", "upload", "a", "7"}, {"check", "a", "7"});
    auto v = run_probe(plain, {"init", "ckpt-lock", t.pid}, 2);
    REQUIRE(rc(v[1]) == "CUDA_SUCCESS");
    Proc caller(probe_args({"init", "ckpt-checkpoint", t.pid}), plain);
    REQUIRE(wait_lines(caller, 1).size() >= 1);
    // Once it has posted the request its main thread sleeps (a futex wait for the result), while
    // the target stalls 1.5 s in its checkpoint: kill it then.
    auto state_of = [](pid_t pid) {
      std::string stat = coloc::test::read_file("/proc/" + std::to_string(pid) + "/stat");
      size_t paren = stat.rfind(')');
      return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
    };
    REQUIRE(wait_until([&] { return state_of(caller.pid()) == 'S'; }, 10s));
    caller.kill(SIGKILL);
    caller.wait();
    // The checkpoint completes anyway, and the next caller finds it done.
    REQUIRE(wait_until(
        [&] { return run_probe(plain, {"init", "ckpt-state", t.pid}, 2)[1]["state"] == "checkpointed"; }, 10s));
    v = run_probe(plain, {"init", "ckpt-restore", t.pid, "ckpt-unlock", t.pid}, 3);
    CHECK(rc(v[1]) == "CUDA_SUCCESS");
    CHECK(rc(v[2]) == "CUDA_SUCCESS");
    t.release();
    auto r = t.proc->wait();
    REQUIRE(r.exit_code == 0);
    CHECK(lines(r.out).back()["ok"] == true);
  }
}

TEST_CASE("SIMGPU_CHECKPOINT_FAULT is checked at cuInit") {
  TempDir tmp("simgpu-ckpt");
  Env env = sim_env(tmp, "8GiB");
  for (const char* bad : {"lock", "park:fail", "checkpoint:stall:x", "restore:stall:99999999", "unlock:explode"}) {
    CAPTURE(bad);
    env.set("SIMGPU_CHECKPOINT_FAULT", bad);
    auto r = coloc::test::run(probe_args({"init"}), env);
    CHECK(r.exit_code == 0);
    CHECK(rc(lines(r.out).at(0)) == "CUDA_ERROR_INVALID_VALUE");
    CHECK(r.err.find("SIMGPU_CHECKPOINT_FAULT") != std::string::npos);
  }
}
}
