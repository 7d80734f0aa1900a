// coloc-ckpt — suspends and resumes CUDA processes through the driver's checkpoint API
// (suspend.h), in a process of its own: colocd runs it and never waits on it, since a thread stuck
// in the driver cannot be cancelled but a process can be killed. Admins may run it by hand to
// restore a job that colocd could not (colocd's log names the command).
//
//   coloc-ckpt suspend [--lock-timeout MS] PID...   lock every process, then checkpoint each
//   coloc-ckpt resume PID...                        restore each checkpointed one, unlock each
//   coloc-ckpt state PID...                         each process's CUprocessState
//   coloc-ckpt check                                does the driver have the checkpoint API?
//
// Exit status: 0 done; 1 the action failed for some process (rolled back as suspend.h says;
// every state is reported); 2 bad arguments; 3 no usable driver (libcuda.so.1 missing, cuInit
// failing, or no checkpoint API in it).
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "suspend.h"

namespace {

using json = nlohmann::ordered_json;

// The few driver types used here, by value (the binary is built without cuda.h's link stub).
struct LockArgs {
  unsigned timeout_ms;
  unsigned reserved0;
  unsigned long long reserved1[7];
};
using InitFn = int (*)(unsigned);
using VersionFn = int (*)(int*);
using PidFn = int (*)(int, void*);
using LockFn = int (*)(int, LockArgs*);
using StateFn = int (*)(int, int*);
using NameFn = int (*)(int, const char**);

struct Driver {
  std::string error;  ///< why it cannot be used; empty when it can
  int version = 0;
  LockFn lock = nullptr;
  PidFn checkpoint = nullptr, restore = nullptr, unlock = nullptr;
  StateFn state = nullptr;
  NameFn name = nullptr;
};

Driver load_driver() {
  Driver d;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    d.error = std::string("cannot load libcuda.so.1: ") + (e ? e : "unknown error");
    return d;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
  auto version = reinterpret_cast<VersionFn>(dlsym(h, "cuDriverGetVersion"));
  d.name = reinterpret_cast<NameFn>(dlsym(h, "cuGetErrorName"));
  d.lock = reinterpret_cast<LockFn>(dlsym(h, "cuCheckpointProcessLock"));
  d.checkpoint = reinterpret_cast<PidFn>(dlsym(h, "cuCheckpointProcessCheckpoint"));
  d.restore = reinterpret_cast<PidFn>(dlsym(h, "cuCheckpointProcessRestore"));
  d.unlock = reinterpret_cast<PidFn>(dlsym(h, "cuCheckpointProcessUnlock"));
  d.state = reinterpret_cast<StateFn>(dlsym(h, "cuCheckpointProcessGetState"));
  if (!init || !version) {
    d.error = "libcuda.so.1 has no cuInit or cuDriverGetVersion";
    return d;
  }
  if (version(&d.version) != 0) d.version = 0;
  if (!d.lock || !d.checkpoint || !d.restore || !d.unlock || !d.state) {
    d.error = "the driver (CUDA " + std::to_string(d.version / 1000) + "." + std::to_string(d.version % 1000 / 10) +
              ") has no checkpoint API (it needs driver 570 or newer)";
    return d;
  }
  // Restore needs cuInit in the calling process (or persistence mode): always initialize.
  if (int rc = init(0); rc != 0) d.error = "cuInit failed (CUresult " + std::to_string(rc) + ")";
  return d;
}

coloc::ckpt::Api api_of(const Driver& d) {
  coloc::ckpt::Api a;
  a.lock = [&d](int pid, unsigned ms) {
    LockArgs args{};
    args.timeout_ms = ms;
    return d.lock(pid, &args);
  };
  a.checkpoint = [&d](int pid) { return d.checkpoint(pid, nullptr); };
  a.restore = [&d](int pid) { return d.restore(pid, nullptr); };
  a.unlock = [&d](int pid) { return d.unlock(pid, nullptr); };
  a.state = [&d](int pid, int* s) { return d.state(pid, s); };
  a.error_name = [&d](int rc) {
    const char* n = nullptr;
    return d.name && d.name(rc, &n) == 0 && n ? std::string(n) : "CUresult " + std::to_string(rc);
  };
  a.now_ns = [] {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count());
  };
  return a;
}

json to_json(const std::string& action, const coloc::ckpt::Outcome& o) {
  json j = {{"action", action}, {"ok", o.ok}, {"summary", o.summary}, {"processes", json::array()}};
  for (const auto& p : o.processes) {
    json q = {{"pid", p.pid}, {"state", p.state}};
    if (!p.failed_step.empty()) q["failed_step"] = p.failed_step, q["error"] = p.error;
    for (auto [k, v] : {std::pair{"lock_ms", p.lock_ms}, {"checkpoint_ms", p.checkpoint_ms},
                        {"restore_ms", p.restore_ms}, {"unlock_ms", p.unlock_ms}})
      if (v > 0) q[k] = v;
    j["processes"].push_back(q);
  }
  return j;
}

void print(bool as_json, const json& j) {
  if (as_json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s\n", j.value("summary", "").c_str());
  for (const auto& p : j.value("processes", json::array())) {
    std::printf("  %-8d %-13s", p["pid"].get<int>(), p["state"].get<std::string>().c_str());
    if (p.contains("failed_step"))
      std::printf(" %s failed: %s", p["failed_step"].get<std::string>().c_str(), p["error"].get<std::string>().c_str());
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coloc-ckpt: suspend CUDA processes to host memory and resume them (the driver's checkpoint API)"};
  app.require_subcommand(1);
  bool as_json = false;
  app.add_flag("--json", as_json, "print one JSON object");
  std::vector<int> pids;
  unsigned lock_timeout_ms = 10'000;
  auto* suspend = app.add_subcommand("suspend", "lock every process of a job, then checkpoint each (all or none)");
  suspend->add_option("--lock-timeout", lock_timeout_ms, "ms to wait for a process's work in flight (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 3'600'000u));
  suspend->add_option("pids", pids, "the job's processes")->required()->check(CLI::PositiveNumber);
  auto* resume = app.add_subcommand("resume", "restore every checkpointed process of a job, then unlock each");
  resume->add_option("pids", pids, "the job's processes")->required()->check(CLI::PositiveNumber);
  auto* state = app.add_subcommand("state", "the checkpoint state of each process");
  state->add_option("pids", pids, "processes")->required()->check(CLI::PositiveNumber);
  auto* check = app.add_subcommand("check", "whether the driver offers the checkpoint API");
  for (CLI::App* sub : {suspend, resume, state, check}) sub->add_flag("--json", as_json, "print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  Driver d = load_driver();
  if (check->parsed()) {
    json j = {{"action", "check"}, {"ok", d.error.empty()}, {"driver_version", d.version}};
    if (!d.error.empty()) j["error"] = d.error;
    if (as_json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s\n", d.error.empty() ? "the driver offers the checkpoint API" : d.error.c_str());
    }
    return d.error.empty() ? 0 : 3;
  }
  if (!d.error.empty()) {
    std::fprintf(stderr, "coloc-ckpt: %s\n", d.error.c_str());
    if (as_json) std::printf("%s\n", json({{"ok", false}, {"error", d.error}}).dump().c_str());
    return 3;
  }
  coloc::ckpt::Api api = api_of(d);
  coloc::ckpt::Outcome o;
  std::string action;
  if (suspend->parsed()) {
    action = "suspend";
    o = coloc::ckpt::suspend(api, pids, lock_timeout_ms);
  } else if (resume->parsed()) {
    action = "resume";
    o = coloc::ckpt::resume(api, pids);
  } else {
    action = "state";
    o = coloc::ckpt::states(api, pids);
  }
  print(as_json, to_json(action, o));
  return o.ok ? 0 : 1;
}
