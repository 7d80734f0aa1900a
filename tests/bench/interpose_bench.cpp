// interpose_bench — what libcoloc.so adds to a launch and to an allocation/free pair, measured in
// one run side by side: the same measurement process runs alternately without and with the
// preload, on simgpu in its fast mode (SIMGPU_FAST=1: a launch is validated and returns at once),
// and on a null driver whose every call returns at once (tests/bench/interpose_nulldriver.cpp),
// which isolates the hooks' own cost from a simulated driver's cost and noise. `make bench` runs
//
//   interpose_bench run --sim build/sim --null-driver build/bench/nulldriver
//                       --lib build/lib/libcoloc.so --out build/bench/interpose.json
//
// and prints the summary. The measurement child (`interpose_bench measure LAUNCHES PAIRS`) times
// LAUNCHES cuLaunchKernel calls of coloc_spin(0) on the NULL stream, and PAIRS cuMemAlloc_v2 +
// cuMemFree_v2 pairs of 4 KiB, and prints {"launch_ns":..,"pair_ns":..} (nanoseconds per call or
// pair, best of its repetitions). Targets (docs/performance.md): <= 20 ns added per launch, <= 150
// ns added per pair. Timings are printed, never asserted.
//
// With --colocd, two more measurements with a real colocd (its own socket and state):
//   - the same launch and pair timings, preloaded both times, standalone (no daemon) against
//     registered with colocd and its device attached: what a daemon behind the fast paths adds
//     (pairs stay within the grant: no message), on simgpu and on the null driver;
//   - the client's grant round trip (`interpose_bench measure-grow COUNT BYTES`): COUNT
//     allocations of BYTES (one grant step) that each pass the grant, so each one sends a Grow and
//     waits for the reply, timed one by one, against the same allocations with no daemon (no
//     limit: no Grow). The difference is what a Grow costs an allocation, as the job sees it.
//   - the launch in a gated state that does not wait (`interpose_bench measure-launch LAUNCHES`):
//     the same launches, preloaded and registered both times, with a colocd whose device policy is
//     share (gate RUN: the fast path) against one whose policy is timeslice (`coloc policy all
//     timeslice --quantum 60s` (--window-quantum), the coloc CLI found beside --colocd; a long
//     quantum, so its window is never reached): the job is alone there, so it holds the device from its
//     first launch on (gate kWindow: every launch takes the slow path, passes the gate without
//     waiting, is counted by the completion tracker, and every so many get a mark). The
//     timesliced runs are checked from the job's report: launches that waited for the turn or
//     the in-flight window (counted, with the time waited). On the null driver, events complete
//     at once (a device that keeps up); the marks it recorded are counted.
#include <cuda.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/workload/kernels.h"

extern char** environ;

namespace {

using json = nlohmann::ordered_json;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "interpose_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(std::string(what) + " failed: " + std::to_string(int(r)));
}

// ---- the measurement child -------------------------------------------------------------------

// Small enough that simgpu gives no pages back to the kernel per free (madvise), whose cost varies
// by hundreds of nanoseconds from run to run and would drown the hook's.
constexpr size_t kPairBytes = 4096;

int measure(uint64_t launches, uint64_t pairs) {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  CUfunction spin;
  check(cuModuleLoadData(&mod, coloc_kernels_fatbin), "cuModuleLoadData");
  check(cuModuleGetFunction(&spin, mod, "coloc_spin"), "cuModuleGetFunction");
  unsigned long long ns = 0;
  void* params[] = {&ns};

  // Best of 5 repetitions: the least disturbed run is the closest to the code's own cost.
  double best_launch = 1e30, best_pair = 1e30, best_pool = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < launches; ++i) check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    uint64_t t1 = now_ns();
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    for (uint64_t i = 0; i < pairs; ++i) {
      CUdeviceptr p;
      check(cuMemAlloc(&p, kPairBytes), "cuMemAlloc");
      check(cuMemFree(p), "cuMemFree");
    }
    uint64_t t2 = now_ns();
    for (uint64_t i = 0; i < pairs; ++i) {  // from the default pool, on the NULL stream
      CUdeviceptr p;
      check(cuMemAllocAsync(&p, kPairBytes, nullptr), "cuMemAllocAsync");
      check(cuMemFreeAsync(p, nullptr), "cuMemFreeAsync");
    }
    uint64_t t3 = now_ns();
    best_launch = std::min(best_launch, double(t1 - t0) / double(launches));
    best_pair = std::min(best_pair, double(t2 - t1) / double(pairs));
    best_pool = std::min(best_pool, double(t3 - t2) / double(pairs));
  }
  std::printf("{\"launch_ns\":%.2f,\"pair_ns\":%.2f,\"pool_pair_ns\":%.2f}\n", best_launch, best_pair, best_pool);
  return 0;
}

// LAUNCHES launches, best of 5 repetitions, after 1,000 untimed launches and a synchronize (so a
// job of a timesliced device holds its turn and its tracker knows its completions first).
int measure_launch(uint64_t launches) {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  CUfunction spin;
  check(cuModuleLoadData(&mod, coloc_kernels_fatbin), "cuModuleLoadData");
  check(cuModuleGetFunction(&spin, mod, "coloc_spin"), "cuModuleGetFunction");
  unsigned long long ns = 0;
  void* params[] = {&ns};
  // Untimed: the turn, the tracker thread's start, the first completions (the window's slow start:
  // one launch in flight until the first completes, then doubling per round trip, so some of these
  // wait for the window in every round: the report's window waits count them).
  for (int i = 0; i < 1000; ++i) check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < launches; ++i) check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
    uint64_t t1 = now_ns();
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    best = std::min(best, double(t1 - t0) / double(launches));
  }
  std::printf("{\"launch_ns\":%.2f}\n", best);
  return 0;
}

// COUNT allocations of BYTES, each timed; prints percentiles of the per-allocation time.
int measure_grow(uint64_t count, uint64_t bytes) {
  check(cuInit(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  std::vector<CUdeviceptr> ptrs(count);
  std::vector<double> ns(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t t0 = now_ns();
    check(cuMemAlloc(&ptrs[i], bytes), "cuMemAlloc");
    ns[i] = double(now_ns() - t0);
  }
  for (CUdeviceptr p : ptrs) check(cuMemFree(p), "cuMemFree");
  std::sort(ns.begin(), ns.end());
  auto pct = [&](double q) { return ns[std::min<size_t>(ns.size() - 1, size_t(q * double(ns.size())))]; };
  std::printf("{\"p50_ns\":%.0f,\"p90_ns\":%.0f,\"p99_ns\":%.0f}\n", pct(0.5), pct(0.9), pct(0.99));
  return 0;
}

// ---- the driver --------------------------------------------------------------------------------

struct Options {
  std::string sim, null_driver, lib, out, colocd;
  uint64_t grows = 500;
  // The timeslice quantum of the kWindow measurement: long, so that the window (a quarter of it) is
  // never reached: at 100 ms the host-stamped estimate of a launch's device time (the tracker
  // thread's wake-up lag, when work completes at once) makes a few launches wait (docs/performance.md).
  std::string window_quantum = "60s";
  uint64_t launches = 2000000, pairs = 200000;
  int rounds = 7;
};

// Runs `argv` with `env`, returns its stdout.
std::string spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (!env.count(key) && key != "LD_PRELOAD" && key.rfind("COLOC_", 0) != 0) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : envs) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  char tmpl[] = "/tmp/interpose-bench.XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) die("mkstemp");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  pid_t pid;
  if (posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data()) != 0) die("spawn " + argv[0]);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  std::ifstream in(tmpl);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(tmpl);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("measurement failed: " + out);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Alternates measurements under `a` (the baseline) and `b`; returns the summary of both quantities
// ("without" = a, "with" = b) and appends every round to `rounds`.
json compare_envs(const Options& o, const char* self, const std::map<std::string, std::string>& a,
                  const std::map<std::string, std::string>& b, uint64_t launches, uint64_t pairs,
                  const std::string& driver, json& rounds) {
  namespace fs = std::filesystem;
  std::vector<std::string> argv = {fs::absolute(self).string(), "measure", std::to_string(launches),
                                   std::to_string(pairs)};
  std::vector<double> launch[2], pair[2], pool[2];
  for (int r = 0; r < o.rounds; ++r)
    for (int second = 0; second < 2; ++second) {  // alternate, so drift hits both alike
      json m = json::parse(spawn(argv, second ? b : a));
      launch[second].push_back(m["launch_ns"]);
      pair[second].push_back(m["pair_ns"]);
      pool[second].push_back(m["pool_pair_ns"]);
      rounds.push_back({{"driver", driver}, {"round", r}, {"second", bool(second)}, {"launch_ns", m["launch_ns"]},
                        {"pair_ns", m["pair_ns"]}, {"pool_pair_ns", m["pool_pair_ns"]}});
    }
  auto summary = [](const std::vector<double>* v, double target) {
    double without = median(v[0]), with_ = median(v[1]);
    return json{{"without_ns", without},
                {"with_ns", with_},
                {"added_ns", with_ - without},
                {"ratio", with_ / without},
                {"target_added_ns", target},
                {"within_target", with_ - without <= target}};
  };
  return json{{"launch", summary(launch, 20)},
              {"alloc_free_pair", summary(pair, 150)},
              {"async_alloc_free_pair", summary(pool, 150)}};
}

// Without and with LD_PRELOAD=libcoloc.so under `env` (driver on LD_LIBRARY_PATH).
json compare(const Options& o, const char* self, const std::map<std::string, std::string>& env, uint64_t launches,
             uint64_t pairs, const std::string& driver, json& rounds) {
  std::map<std::string, std::string> with = env;
  with["LD_PRELOAD"] = std::filesystem::absolute(o.lib).string();
  return compare_envs(o, self, env, with, launches, pairs, driver, rounds);
}

// Preloaded both times: standalone (no daemon), then registered with colocd at `socket`.
json compare_daemon(const Options& o, const char* self, const std::map<std::string, std::string>& env,
                    const std::string& socket, uint64_t launches, uint64_t pairs, const std::string& driver,
                    json& rounds) {
  std::map<std::string, std::string> alone = env;
  alone["LD_PRELOAD"] = std::filesystem::absolute(o.lib).string();
  std::map<std::string, std::string> daemon = alone;
  daemon["COLOC_SOCKET"] = socket;
  return compare_envs(o, self, alone, daemon, launches, pairs, driver, rounds);
}

void print(const char* driver, const json& s) {
  std::printf("interpose (%s): launch %.1f -> %.1f ns (%+.1f ns, x%.3f; target +20 ns); alloc+free %.1f -> %.1f ns "
              "(%+.1f ns, x%.3f; target +150 ns); async alloc+free %.1f -> %.1f ns (%+.1f ns, x%.3f; target +150 ns)\n",
              driver, double(s["launch"]["without_ns"]), double(s["launch"]["with_ns"]),
              double(s["launch"]["added_ns"]), double(s["launch"]["ratio"]), double(s["alloc_free_pair"]["without_ns"]),
              double(s["alloc_free_pair"]["with_ns"]), double(s["alloc_free_pair"]["added_ns"]),
              double(s["alloc_free_pair"]["ratio"]), double(s["async_alloc_free_pair"]["without_ns"]),
              double(s["async_alloc_free_pair"]["with_ns"]), double(s["async_alloc_free_pair"]["added_ns"]),
              double(s["async_alloc_free_pair"]["ratio"]));
}

// A colocd of our own for the --colocd measurements; killed by the destructor.
struct Daemon {
  pid_t pid = -1;
  std::string socket;
  Daemon(const std::string& binary, const std::filesystem::path& dir) {
    socket = (dir / "colocd.sock").string();
    std::vector<std::string> argv = {binary, "--socket", socket, "--state-dir", (dir / "colocd").string(),
                                     "--log-level", "warn"};
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    if (posix_spawn(&pid, a[0], nullptr, nullptr, a.data(), environ) != 0) die("spawn " + binary);
    for (int i = 0; i < 1000 && !std::filesystem::exists(socket); ++i) usleep(10000);
    if (!std::filesystem::exists(socket)) die("colocd did not create " + socket);
  }
  ~Daemon() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Per-allocation time of one-step allocations that each need a Grow, with and without a daemon.
json compare_grow(const Options& o, const char* self, const std::map<std::string, std::string>& env,
                  const std::string& socket, json& rounds) {
  namespace fs = std::filesystem;
  constexpr uint64_t kStep = 64ull << 20;  // colocd's default grant step
  std::vector<std::string> argv = {fs::absolute(self).string(), "measure-grow", std::to_string(o.grows),
                                   std::to_string(kStep)};
  std::vector<double> p50[2], p99[2];
  for (int r = 0; r < o.rounds; ++r)
    for (int daemon = 0; daemon < 2; ++daemon) {
      std::map<std::string, std::string> e = env;
      e["LD_PRELOAD"] = fs::absolute(o.lib).string();
      if (daemon) e["COLOC_SOCKET"] = socket;
      json m = json::parse(spawn(argv, e));
      p50[daemon].push_back(m["p50_ns"]);
      p99[daemon].push_back(m["p99_ns"]);
      rounds.push_back({{"driver", "simgpu"}, {"round", r}, {"grow", bool(daemon)}, {"p50_ns", m["p50_ns"]},
                        {"p90_ns", m["p90_ns"]}, {"p99_ns", m["p99_ns"]}});
    }
  return json{{"allocations_per_round", o.grows},
              {"bytes_each", kStep},
              {"standalone_p50_ns", median(p50[0])},
              {"standalone_p99_ns", median(p99[0])},
              {"with_grow_p50_ns", median(p50[1])},
              {"with_grow_p99_ns", median(p99[1])},
              {"grow_round_trip_p50_ns", median(p50[1]) - median(p50[0])},
              {"grow_round_trip_p99_ns", median(p99[1]) - median(p99[0])}};
}

// The job report colocd wrote for job `job` under `state` (waits up to 10 s); null when none.
json job_report(const std::filesystem::path& state, const std::string& job) {
  namespace fs = std::filesystem;
  for (int i = 0; i < 1000; ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state / "reports", ec)) {
      const std::string f = e.path().filename().string();
      if ((f == job + ".json" || f.rfind(job + "-", 0) == 0) && f.size() > 5 && f.ends_with(".json")) {
        std::ifstream in(e.path());
        json r = json::parse(in, nullptr, false);
        if (!r.is_discarded()) return r;
      }
    }
    usleep(10000);
  }
  return nullptr;
}

// The launch in RUN (registered with `run_socket`'s colocd: policy share) against the launch in
// kWindow (registered with `window`'s colocd: policy timeslice, the job alone on the device),
// preloaded both times, rounds alternating. Each timesliced round is checked from its report.
json compare_window(const Options& o, const char* self, const std::map<std::string, std::string>& env,
                    const std::string& run_socket, const std::string& window_socket,
                    const std::filesystem::path& window_state, uint64_t launches, const std::string& driver,
                    bool count_marks, json& rounds) {
  namespace fs = std::filesystem;
  std::vector<std::string> argv = {fs::absolute(self).string(), "measure-launch", std::to_string(launches)};
  std::vector<double> ns[2];
  int checked = 0, waited_quantum = 0, waited_window = 0, missing = 0;
  double window_wait_s = 0;
  uint64_t marks = 0;
  for (int r = 0; r < o.rounds; ++r)
    for (int window = 0; window < 2; ++window) {
      std::map<std::string, std::string> e = env;
      e["LD_PRELOAD"] = fs::absolute(o.lib).string();
      e["COLOC_SOCKET"] = window ? window_socket : run_socket;
      const std::string job = "bench-" + std::string(count_marks ? "null" : "sim") + "-" + std::to_string(r) + "-" +
                              (window ? "window" : "run");
      e["COLOC_JOB"] = job;
      const fs::path calls = fs::temp_directory_path() / ("interpose-bench-calls-" + std::to_string(getpid()));
      if (count_marks) e["NULLDRIVER_CALLS"] = calls.string();
      json m = json::parse(spawn(argv, e));
      ns[window].push_back(m["launch_ns"]);
      json round = {{"driver", driver}, {"round", r}, {"gate", window ? "kWindow" : "RUN"}, {"launch_ns", m["launch_ns"]}};
      if (count_marks) {
        std::ifstream in(calls);
        json c = json::parse(in, nullptr, false);
        fs::remove(calls);
        if (!c.is_discarded() && window) {
          marks += c.value("cuEventRecord", 0ull);
          round["marks"] = c.value("cuEventRecord", 0ull);
        }
      }
      if (window) {
        json rep = job_report(window_state, job);
        if (rep.is_null() || rep["devices"].empty()) {
          ++missing;
        } else {
          const json& d = rep["devices"][0];
          const uint64_t q = d["gate_waited_launches"].value("quantum", 0ull), w = d["gate_waited_launches"].value("window", 0ull);
          waited_quantum += int(q);
          waited_window += int(w);
          window_wait_s += d["gate_wait_s"].value("window", 0.0);
          checked += q <= 1 && w == 0;
          round["gate_waited_launches"] = d["gate_waited_launches"];
          round["gate_wait_s"] = d["gate_wait_s"];
        }
      }
      rounds.push_back(round);
    }
  const double run_ns = median(ns[0]), window_ns = median(ns[1]);
  json out = {{"launches_per_repetition", launches},
              {"run_ns", run_ns},
              {"window_ns", window_ns},
              {"added_ns", window_ns - run_ns},
              {"run_ns_min", *std::min_element(ns[0].begin(), ns[0].end())},
              {"window_ns_min", *std::min_element(ns[1].begin(), ns[1].end())},
              {"window_rounds_checked", checked},
              {"window_rounds", o.rounds},
              {"window_rounds_without_report", missing},
              {"launches_waited_for_turn", waited_quantum},
              {"launches_waited_for_window", waited_window},
              {"window_wait_s", window_wait_s}};
  if (count_marks) {
    const double total = double(o.rounds) * double(launches * 5 + 1);
    out["marks_per_1000_launches"] = total > 0 ? double(marks) * 1000.0 / total : 0;
  }
  return out;
}

int run(const Options& o, const char* self) {
  namespace fs = std::filesystem;
  fs::path state = fs::temp_directory_path() / ("interpose-bench-" + std::to_string(getpid()));
  json rounds = json::array();
  json out;
  out["benchmark"] = "interpose";
  out["what"] = "ns per cuLaunchKernel, per cuMemAlloc_v2+cuMemFree_v2 pair and per cuMemAllocAsync+cuMemFreeAsync pair (4 KiB), median over rounds of "
                "the best of 5 repetitions, without and with LD_PRELOAD=libcoloc.so, on simgpu (SIMGPU_FAST=1: "
                "a launch returns at once) and on a null driver (every call returns at once: the hooks' own cost); "
                "daemon_*: preloaded both times, standalone vs registered with colocd; grow: per-allocation time "
                "of allocations that each need a Grow round trip, vs the same without a daemon";
  out["simgpu"] = compare(o, self,
                          {{"LD_LIBRARY_PATH", fs::absolute(o.sim).string()},
                           {"SIMGPU_STATE_DIR", state.string()},
                           {"SIMGPU_FAST", "1"},
                           {"SIMGPU_DEVICES", "80GiB"}},
                          o.launches, o.pairs, "simgpu", rounds);
  if (!o.colocd.empty()) {
    fs::create_directories(state);
    Daemon d(o.colocd, state);
    std::map<std::string, std::string> env = {{"LD_LIBRARY_PATH", fs::absolute(o.sim).string()},
                                              {"SIMGPU_STATE_DIR", (state / "simgpu").string()},
                                              {"SIMGPU_FAST", "1"},
                                              {"SIMGPU_DEVICES", "80GiB"}};
    out["daemon_simgpu"] = compare_daemon(o, self, env, d.socket, o.launches, o.pairs, "simgpu, colocd", rounds);
    if (!o.null_driver.empty())
      out["daemon_null_driver"] =
          compare_daemon(o, self, {{"LD_LIBRARY_PATH", fs::absolute(o.null_driver).string()}}, d.socket,
                         o.launches * 5, o.pairs * 10, "null, colocd", rounds);
    out["grow"] = compare_grow(o, self, env, d.socket, rounds);
    // The launch in kWindow: a second colocd whose devices are all timesliced.
    const fs::path coloc_cli = fs::path(o.colocd).parent_path() / "coloc";
    if (!fs::exists(coloc_cli)) {
      out["window"] = {{"skipped", "no coloc CLI beside " + o.colocd + " to set the policy"}};
    } else {
      fs::create_directories(state / "window");
      Daemon w(o.colocd, state / "window");
      spawn({coloc_cli.string(), "policy", "all", "timeslice", "--quantum", o.window_quantum}, {{"COLOC_SOCKET", w.socket}});
      json win;
      win["what"] = "ns per cuLaunchKernel, preloaded and registered both times: gate RUN (device policy share) vs "
                    "kWindow (policy timeslice, the job alone: it holds the device; each launch passes the gate "
                    "without waiting and is tracked); median over rounds of the best of 5 repetitions";
      win["quantum"] = o.window_quantum;
      win["simgpu"] = compare_window(o, self, env, d.socket, w.socket, state / "window" / "colocd", o.launches / 4,
                                     "simgpu, RUN vs kWindow", false, rounds);
      if (!o.null_driver.empty())
        win["null_driver"] = compare_window(o, self, {{"LD_LIBRARY_PATH", fs::absolute(o.null_driver).string()}},
                                            d.socket, w.socket, state / "window" / "colocd", o.launches / 4,
                                            "null, RUN vs kWindow", true, rounds);
      out["window"] = win;
    }
  }
  fs::remove_all(state);
  if (!o.null_driver.empty())
    out["null_driver"] = compare(o, self, {{"LD_LIBRARY_PATH", fs::absolute(o.null_driver).string()}},
                                 o.launches * 5, o.pairs * 10, "null", rounds);
  out["config"] = {{"launches_per_repetition", o.launches}, {"pairs_per_repetition", o.pairs}, {"rounds", o.rounds},
                   {"grows_per_round", o.grows},
                   {"null_driver_scale", "5x launches, 10x pairs"}};
  out["machine"] = {{"cpu", cpu_model()}, {"cores", sysconf(_SC_NPROCESSORS_ONLN)}};
  out["rounds"] = rounds;
  std::ofstream(o.out) << out.dump(2) << "\n";
  print("simgpu", out["simgpu"]);
  if (out.contains("null_driver")) print("null driver", out["null_driver"]);
  if (out.contains("daemon_simgpu")) print("simgpu; standalone -> registered with colocd", out["daemon_simgpu"]);
  if (out.contains("daemon_null_driver"))
    print("null driver; standalone -> registered with colocd", out["daemon_null_driver"]);
  if (out.contains("grow"))
    std::printf("interpose (simgpu, colocd): allocation needing a Grow p50 %.1f us / p99 %.1f us, the same without "
                "a daemon p50 %.1f us / p99 %.1f us: a grant round trip adds %.1f us (p50), %.1f us (p99)\n",
                double(out["grow"]["with_grow_p50_ns"]) / 1e3, double(out["grow"]["with_grow_p99_ns"]) / 1e3,
                double(out["grow"]["standalone_p50_ns"]) / 1e3, double(out["grow"]["standalone_p99_ns"]) / 1e3,
                double(out["grow"]["grow_round_trip_p50_ns"]) / 1e3, double(out["grow"]["grow_round_trip_p99_ns"]) / 1e3);
  if (out.contains("window") && out["window"].contains("simgpu"))
    for (const char* drv : {"null_driver", "simgpu"}) {
      if (!out["window"].contains(drv)) continue;
      const json& w = out["window"][drv];
      std::printf("interpose (%s, registered with colocd): launch in RUN %.1f ns, in kWindow (holding a timeslice, "
                  "not waiting) %.1f ns: %+.1f ns (rounds with no launch waiting for the window: %d of %d; launches "
                  "that waited, untimed warm-up included: %d, %.1f ms in all)%s\n",
                  std::strcmp(drv, "simgpu") == 0 ? "simgpu" : "null driver", double(w["run_ns"]),
                  double(w["window_ns"]), double(w["added_ns"]), int(w["window_rounds_checked"]),
                  int(w["window_rounds"]), int(w["launches_waited_for_window"]), double(w["window_wait_s"]) * 1e3,
                  w.contains("marks_per_1000_launches")
                      ? (", " + std::to_string(double(w["marks_per_1000_launches"])) + " marks per 1000 launches").c_str()
                      : "");
    }
  else if (out.contains("window"))
    std::printf("interpose: launch in kWindow not measured: %s\n", out["window"].value("skipped", "?").c_str());
  std::printf("interpose: written to %s\n", o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "measure") == 0)
    return measure(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
  if (argc == 3 && std::strcmp(argv[1], "measure-launch") == 0) return measure_launch(std::strtoull(argv[2], nullptr, 10));
  if (argc == 4 && std::strcmp(argv[1], "measure-grow") == 0)
    return measure_grow(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
  if (argc >= 2 && std::strcmp(argv[1], "run") == 0) {
    Options o;
    for (int i = 2; i + 1 < argc; i += 2) {
      std::string k = argv[i], v = argv[i + 1];
      if (k == "--sim") o.sim = v;
      else if (k == "--null-driver") o.null_driver = v;
      else if (k == "--lib") o.lib = v;
      else if (k == "--out") o.out = v;
      else if (k == "--launches") o.launches = std::stoull(v);
      else if (k == "--pairs") o.pairs = std::stoull(v);
      else if (k == "--rounds") o.rounds = std::stoi(v);
      else if (k == "--colocd") o.colocd = v;
      else if (k == "--grows") o.grows = std::stoull(v);
      else if (k == "--window-quantum") o.window_quantum = v;
      else die("unknown option " + k);
    }
    if (o.sim.empty() || o.lib.empty() || o.out.empty()) die("run needs --sim, --lib and --out");
    return run(o, argv[0]);
  }
  die("usage: interpose_bench run --sim DIR [--null-driver DIR] --lib LIBCOLOC --out FILE [--launches N --pairs N "
      "--rounds N] [--colocd COLOCD --grows N] | "
      "measure LAUNCHES PAIRS");
}
