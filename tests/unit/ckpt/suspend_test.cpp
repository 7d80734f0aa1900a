// coloc-ckpt's suspend and resume of a whole job, with roll-back (tools/ckpt/suspend.h), against a
// fake driver that keeps each process's CUprocessState and fails the steps it is told to.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <utility>

#include "tools/ckpt/suspend.h"

namespace {

using coloc::ckpt::Api;
using coloc::ckpt::Outcome;

constexpr int kRunning = 0, kLocked = 1, kCheckpointed = 2, kFailed = 3;
constexpr int kSuccess = 0, kNotReady = 600, kIllegalState = 401, kOutOfMemory = 2, kNotSupported = 801,
              kInvalidValue = 1, kUnknown = 999;

// A driver with the state machine of cuda.h's CUDA_CHECKPOINT section.
struct FakeDriver {
  std::map<int, int> state;                     // pid -> CUprocessState
  std::map<std::pair<std::string, int>, int> fail;  // (step, pid) -> CUresult to return instead
  std::set<std::pair<std::string, int>> to_failed;  // (step, pid): the step leaves the process FAILED
  std::vector<std::string> calls;               // "lock 7", in order

  int step(const std::string& name, int pid, int from, int to) {
    calls.push_back(name + " " + std::to_string(pid));
    auto it = state.find(pid);
    if (it == state.end()) return kInvalidValue;
    if (to_failed.count({name, pid})) {
      it->second = kFailed;
      return kUnknown;
    }
    if (auto f = fail.find({name, pid}); f != fail.end()) return f->second;
    if (it->second != from) return kIllegalState;
    it->second = to;
    return kSuccess;
  }
  Api api() {
    Api a;
    a.lock = [this](int pid, unsigned) { return step("lock", pid, kRunning, kLocked); };
    a.checkpoint = [this](int pid) { return step("checkpoint", pid, kLocked, kCheckpointed); };
    a.restore = [this](int pid) { return step("restore", pid, kCheckpointed, kLocked); };
    a.unlock = [this](int pid) { return step("unlock", pid, kLocked, kRunning); };
    a.state = [this](int pid, int* s) {
      auto it = state.find(pid);
      if (it == state.end()) return kInvalidValue;
      *s = it->second;
      return kSuccess;
    };
    a.error_name = [](int rc) { return "E" + std::to_string(rc); };
    a.now_ns = [] { return uint64_t(0); };
    return a;
  }
};

std::vector<std::string> states(const Outcome& o) {
  std::vector<std::string> v;
  for (const auto& p : o.processes) v.push_back(p.state);
  return v;
}

}  // namespace

TEST_SUITE("ckpt") {
TEST_CASE("suspend locks every process before it checkpoints any; resume restores all before it unlocks any") {
  FakeDriver d;
  d.state = {{10, kRunning}, {11, kRunning}};
  Outcome o = coloc::ckpt::suspend(d.api(), {10, 11}, 500);
  CHECK(o.ok);
  CHECK(d.calls == std::vector<std::string>{"lock 10", "lock 11", "checkpoint 10", "checkpoint 11"});
  CHECK(states(o) == std::vector<std::string>{"checkpointed", "checkpointed"});
  d.calls.clear();
  o = coloc::ckpt::resume(d.api(), {10, 11});
  CHECK(o.ok);
  CHECK(d.calls == std::vector<std::string>{"restore 10", "restore 11", "unlock 10", "unlock 11"});
  CHECK(states(o) == std::vector<std::string>{"running", "running"});
}

TEST_CASE("suspend touches nothing when a process is not running or unknown") {
  FakeDriver d;
  d.state = {{10, kRunning}, {11, kLocked}};
  Outcome o = coloc::ckpt::suspend(d.api(), {10, 11}, 500);
  CHECK_FALSE(o.ok);
  CHECK(d.calls.empty());
  CHECK(o.summary.find("process 11 is locked") != std::string::npos);
  o = coloc::ckpt::suspend(d.api(), {10, 12}, 500);
  CHECK_FALSE(o.ok);
  CHECK(d.calls.empty());
  CHECK(o.processes[1].failed_step == "state");
}

TEST_CASE("a lock that times out unlocks the processes locked before it") {
  FakeDriver d;
  d.state = {{10, kRunning}, {11, kRunning}, {12, kRunning}};
  d.fail[{"lock", 11}] = kNotReady;
  Outcome o = coloc::ckpt::suspend(d.api(), {10, 11, 12}, 500);
  CHECK_FALSE(o.ok);
  CHECK(d.calls == std::vector<std::string>{"lock 10", "lock 11", "unlock 10"});
  CHECK(states(o) == std::vector<std::string>{"running", "running", "running"});
  CHECK(o.processes[1].failed_step == "lock");
  CHECK(o.processes[1].error == "E600");
}

TEST_CASE("a checkpoint that fails restores and unlocks the others; a FAILED process is reported, not hidden") {
  FakeDriver d;
  d.state = {{10, kRunning}, {11, kRunning}, {12, kRunning}};
  d.fail[{"checkpoint", 12}] = kNotSupported;  // say, it holds managed memory
  Outcome o = coloc::ckpt::suspend(d.api(), {10, 11, 12}, 0);
  CHECK_FALSE(o.ok);
  CHECK(states(o) == std::vector<std::string>{"running", "running", "running"});
  CHECK(o.processes[2].error == "E801");

  FakeDriver f;
  f.state = {{10, kRunning}, {11, kRunning}};
  f.to_failed.insert({"checkpoint", 11});
  o = coloc::ckpt::suspend(f.api(), {10, 11}, 0);
  CHECK_FALSE(o.ok);
  CHECK(states(o) == std::vector<std::string>{"running", "failed"});
  CHECK(o.summary.find("process 11 is failed") != std::string::npos);
}

TEST_CASE("a restore that fails checkpoints again what it restored: the job stays wholly suspended") {
  FakeDriver d;
  d.state = {{10, kCheckpointed}, {11, kCheckpointed}};
  d.fail[{"restore", 11}] = kOutOfMemory;
  Outcome o = coloc::ckpt::resume(d.api(), {10, 11});
  CHECK_FALSE(o.ok);
  CHECK(d.calls == std::vector<std::string>{"restore 10", "restore 11", "checkpoint 10"});
  CHECK(states(o) == std::vector<std::string>{"checkpointed", "checkpointed"});
  CHECK(o.summary.find("stays suspended") != std::string::npos);
}

TEST_CASE("resume finishes what a half-done suspend or resume left: LOCKED processes are unlocked") {
  FakeDriver d;
  d.state = {{10, kLocked}, {11, kCheckpointed}, {12, kRunning}};
  Outcome o = coloc::ckpt::resume(d.api(), {10, 11, 12});
  CHECK(o.ok);
  CHECK(states(o) == std::vector<std::string>{"running", "running", "running"});
  d.state[13] = kFailed;
  d.calls.clear();
  o = coloc::ckpt::resume(d.api(), {12, 13});
  CHECK_FALSE(o.ok);
  CHECK(d.calls.empty());
  CHECK(o.summary.find("process 13 is failed") != std::string::npos);
}
}
