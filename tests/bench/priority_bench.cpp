// priority_bench — how well the `priority` compute policy isolates a high-priority training job,
// against `share` and `timeslice`, on Lucid-calibrated mixes (issue 11). Everything runs on simgpu
// (one 16 GiB device) under a colocd of the bench's own, a fresh one (and a fresh simulated device)
// per scenario; every job is `coloc run --sim --priority high|best-effort -- coloc-train --lucid
// MODEL/DATASET/BATCH --duration S` (tools/workload/README.md, "Duty cycles").
//
//   solo        each configuration alone (policy share), --solo-seconds: its iterations per second
//               (coloc-train's iters_per_s) and its kernels per second (SIMGPU_TRACE)
//   mixes       per mix and per mode (share; timeslice --quantum 100ms, equal weights; priority
//               --target-slowdown 5%): the best-effort jobs start first; once colocd shows each
//               with its process, and --lead seconds later, the high job runs for --seconds. From
//               its JSON line and the trace:
//                 high/solo  the high job's iters_per_s / its solo iters_per_s (its whole run:
//                            under priority, the controller's probe and first windows included)
//                 speeds     each job's kernels per second over the interval when all jobs ran
//                            (from the latest first kernel to the earliest last kernel), over its
//                            solo kernels per second (a job's kernels are all alike, so this is its
//                            iteration rate's ratio without cutting iterations)
//                 total      the sum of those speeds (normalized throughput)
//                 WC         work conservation over the same interval: idle_by_high = interval −
//                            the high job's device time; used = the other jobs' device time
//                            (device time = the sum of the job's slices clipped to the interval;
//                            slices never overlap on a device); WC = used / idle_by_high
//                 WC unheld  the same leaving out the spells of >= 250 ms in which no other job ran
//                            (the priority controller's probes hold them 0.5-2 s): the loop's
//                            steady state; in parentheses the seconds left out
//   convergence mix A's high job alone, a best-effort job joins (join 1), --join-before seconds
//               later a second one joins (join 2), observed for --join-after seconds; `coloc
//               policy --json` (the device's `control`) polled every --poll-ms. Converged at a
//               join: the earliest sample after it from which, to the end of the observation
//               (join 1: up to join 2), the controller is active, not probing, its smoothed
//               slowdown <= target, and its `allow` stays within one step (max − min <= 0.05);
//               that sample must leave >= --sustain seconds of observation, else "not converged".
//               The time is from the join (the `coloc run` spawn) to that sample. Also shown: from when
//               on the same holds without the condition on `allow` (the high job within target as the
//               controller measures it, while allow may still climb), and the first plateau: from when
//               all the conditions hold for --sustain seconds, whatever comes later.
//   launch hook the cost of a launch in gate state kWindow (tracked), which a best-effort job's
//               launches take while its gate is open and every launch of a high job under
//               priority takes: `interpose_bench run ... --colocd` (RUN vs kWindow, null driver
//               and simgpu fast mode) with fewer rounds, or build/bench/interpose.json if the
//               interpose bench is not there.
//
// Prints the tables with the goals (high >= 0.95 of solo with WC >= 0.8, convergence <=
// 10 s) met / missed, and writes JSON (--out). A benchmark, not a test: it reports, it does not
// fail on a missed goal (it fails only when a run cannot be made).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/wire.h"
#include "machine.h"
#include "spawn.h"

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

constexpr double kGoalHigh = 0.95, kGoalWc = 0.8, kGoalConvergenceS = 10;
constexpr double kAllowStep = 0.05;  // PriorityPolicy::kStep

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "priority_bench: %s\n", what.c_str());
  std::exit(1);
}

double now_s() { return double(coloc::wire::now_ns()) / 1e9; }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// Starts `args` with `env`, stdout to `out`, stderr to `err` (both truncated); dies when it cannot.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& out,
            const std::string& err) {
  const pid_t pid = coloc::bench::spawn_to(args, env, out, err);
  if (pid < 0) die("cannot start " + args[0]);
  return pid;
}

using coloc::bench::wait_exit;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// ---- options ---------------------------------------------------------------------------------------

struct Mix {
  std::string name, high;
  std::vector<std::string> best_effort;
};

struct Args {
  std::string build = "build", out, lucid_dir = "tools/workload/lucid", log_level = "debug";
  double seconds = 10, solo_seconds = 8, lead = 1, join_before = 20, join_after = 20, sustain = 5;
  int poll_ms = 100, target_pct = 5;
  std::string quantum = "100ms";
  std::vector<std::string> mixes = {"A", "B", "D"}, modes = {"share", "timeslice", "priority"};
  bool convergence = true, hook = true, keep = false;
  uint64_t hook_launches = 2000000;
  int hook_rounds = 3;
};

const std::vector<Mix> kMixes = {
    // A lighter high job (59% busy) beside two GPU-hungry jobs of about twice its period.
    {"A", "ResNet18/CIFAR-10/32", {"MobileNetV3/ImageNet/128", "MobileNetV2/CIFAR-10/128"}},
    // A light high job (45% busy) beside one GPU-hungry job of three times its period.
    {"B", "MobileNetV3/ImageNet/32", {"ResNet50/ImageNet/32"}},
    // A short-period GPU-hungry best-effort job (14 ms) beside a 41%-busy high job (19 ms).
    {"C", "ResNet18/CIFAR-10/32/amp", {"LSTM/Wikitext2/64"}},
    // Issue 27: best-effort jobs with real training's launch pattern (coloc-train --pattern async:
    // a pass of mixed kernels queued ahead of the device, the host synchronizing every 4
    // iterations), one with the default mix (400 kernels per 100 ms iteration) and one with few,
    // long kernels (60 per iteration: the long ones 22 ms): the first bursts and mixed durations.
    {"D", "ResNet18/CIFAR-10/32", {"async", "async60"}},
};

/// coloc-train's options for a job of key `key`: a Lucid configuration (--lucid), or `async` /
/// `async60` (--pattern async, 400 or 60 kernels per iteration, two streams, synchronized every 4).
std::vector<std::string> workload_args(const std::string& key, const std::string& lucid_dir) {
  if (key == "async" || key == "async60") {
    std::vector<std::string> a = {"--pattern", "async", "--streams", "2", "--sync-every", "4"};
    if (key == "async60") a.insert(a.end(), {"--kernels", "60"});
    return a;
  }
  return {"--lucid", key, "--lucid-dir", lucid_dir};
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help") {
      std::printf(
          "priority_bench [--build DIR] [--out FILE] [--lucid-dir DIR] [--seconds S] [--solo-seconds S] [--lead S]\n"
          "               [--mixes A,B,D(,C)] [--modes share,timeslice,priority] [--target-pct 5] [--quantum 100ms]\n"
          "               [--join-before S] [--join-after S] [--sustain S] [--poll-ms MS] [--no-convergence]\n"
          "               [--hook-launches N] [--hook-rounds N] [--no-hook] [--log-level LEVEL] [--keep]\n"
          "mixes: A = high ResNet18/CIFAR-10/32, best-effort MobileNetV3/ImageNet/128 + MobileNetV2/CIFAR-10/128;\n"
          "       D = high ResNet18/CIFAR-10/32, best-effort coloc-train --pattern async (400 and 60 kernels per iteration);\n"
          "       B = high MobileNetV3/ImageNet/32, best-effort ResNet50/ImageNet/32;\n"
          "       C = high ResNet18/CIFAR-10/32/amp, best-effort LSTM/Wikitext2/64\n");
      std::exit(0);
    }
    if (k == "--no-convergence") {
      a.convergence = false;
      continue;
    }
    if (k == "--no-hook") {
      a.hook = false;
      continue;
    }
    if (k == "--keep") {
      a.keep = true;
      continue;
    }
    if (i + 1 >= argc) die("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--build") a.build = v;
    else if (k == "--out") a.out = v;
    else if (k == "--lucid-dir") a.lucid_dir = v;
    else if (k == "--log-level") a.log_level = v;
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--solo-seconds") a.solo_seconds = std::stod(v);
    else if (k == "--lead") a.lead = std::stod(v);
    else if (k == "--join-before") a.join_before = std::stod(v);
    else if (k == "--join-after") a.join_after = std::stod(v);
    else if (k == "--sustain") a.sustain = std::stod(v);
    else if (k == "--poll-ms") a.poll_ms = std::stoi(v);
    else if (k == "--target-pct") a.target_pct = std::stoi(v);
    else if (k == "--quantum") a.quantum = v;
    else if (k == "--mixes") a.mixes = split(v);
    else if (k == "--modes") a.modes = split(v);
    else if (k == "--hook-launches") a.hook_launches = std::stoull(v);
    else if (k == "--hook-rounds") a.hook_rounds = std::stoi(v);
    else die("unknown option " + k + " (--help)");
  }
  if (!(a.seconds > 0) || !(a.solo_seconds > 0) || a.poll_ms < 10) die("bad --seconds, --solo-seconds or --poll-ms");
  for (const std::string& m : a.mixes)
    if (std::none_of(kMixes.begin(), kMixes.end(), [&](const Mix& x) { return x.name == m; })) die("unknown mix " + m);
  for (const std::string& m : a.modes)
    if (m != "share" && m != "timeslice" && m != "priority") die("unknown mode " + m);
  return a;
}

const Mix& mix_named(const std::string& name) {
  for (const Mix& m : kMixes)
    if (m.name == name) return m;
  die("unknown mix " + name);
}

// ---- the trace ---------------------------------------------------------------------------------------

struct Slice {
  long pid;
  unsigned long launch;
  uint64_t start, end;
};

/// Every slice on device 0 of the trace at `path` (simgpu's README, "The trace").
std::vector<Slice> slices(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  std::vector<Slice> out;
  while (std::getline(in, line)) {
    long pid;
    int dev;
    unsigned ctx, stream;
    unsigned long launch, start, end;
    char name[128];
    if (std::sscanf(line.c_str(), "%ld,%d,%u,%u,%lu,%127[^,],%lu,%lu", &pid, &dev, &ctx, &stream, &launch, name, &start,
                    &end) != 8 ||
        dev != 0)
      continue;
    out.push_back({pid, launch, start, end});
  }
  return out;
}

/// One process in a trace: its first slice's start, its last slice's end, each kernel's end.
struct Proc {
  uint64_t first = UINT64_MAX, last = 0;
  std::vector<uint64_t> kernel_ends;
};

std::map<long, Proc> procs(const std::vector<Slice>& ss) {
  std::map<std::pair<long, unsigned long>, uint64_t> end_of;  // (pid, launch) -> last slice's end
  std::map<long, Proc> out;
  for (const Slice& s : ss) {
    Proc& p = out[s.pid];
    p.first = std::min(p.first, s.start);
    p.last = std::max(p.last, s.end);
    uint64_t& e = end_of[{s.pid, s.launch}];
    e = std::max(e, s.end);
  }
  for (auto& [key, e] : end_of) out[key.first].kernel_ends.push_back(e);
  for (auto& [pid, p] : out) std::sort(p.kernel_ends.begin(), p.kernel_ends.end());
  return out;
}

/// Kernels of `p` ending in [from, to), per second.
double kernel_rate(const Proc& p, uint64_t from, uint64_t to) {
  if (to <= from) return 0;
  const auto a = std::lower_bound(p.kernel_ends.begin(), p.kernel_ends.end(), from);
  const auto b = std::lower_bound(p.kernel_ends.begin(), p.kernel_ends.end(), to);
  return double(b - a) * 1e9 / double(to - from);
}

/// Device time of each pid within [from, to): its slices clipped.
std::map<long, uint64_t> busy(const std::vector<Slice>& ss, uint64_t from, uint64_t to) {
  std::map<long, uint64_t> out;
  for (const Slice& s : ss) {
    const uint64_t a = std::max(s.start, from), b = std::min(s.end, to);
    if (b > a) out[s.pid] += b - a;
  }
  return out;
}

/// Work conservation over [from, to) leaving out the spells in which the other jobs were held:
/// gaps of at least `hold_ns` with no slice of theirs (a probe of the priority controller holds
/// them for 0.5-2 s; their own host gaps are far shorter). Returns {wc, seconds left out}.
std::pair<double, double> wc_outside_holds(const std::vector<Slice>& ss, long high, uint64_t from, uint64_t to,
                                           uint64_t hold_ns = 250'000'000) {
  std::vector<std::pair<uint64_t, uint64_t>> others;
  for (const Slice& x : ss)
    if (x.pid != high && x.end > from && x.start < to) others.push_back({std::max(x.start, from), std::min(x.end, to)});
  std::sort(others.begin(), others.end());
  std::vector<std::pair<uint64_t, uint64_t>> holds;
  uint64_t cursor = from;
  for (auto& [a, b] : others) {
    if (a > cursor && a - cursor >= hold_ns) holds.push_back({cursor, a});
    cursor = std::max(cursor, b);
  }
  if (to > cursor && to - cursor >= hold_ns) holds.push_back({cursor, to});
  double used = 0, high_busy = 0, held = 0;
  for (const Slice& x : ss) {
    const uint64_t a = std::max(x.start, from), b = std::min(x.end, to);
    if (b <= a) continue;
    if (x.pid != high) {
      used += double(b - a);
      continue;
    }
    high_busy += double(b - a);
    for (auto& [ha, hb] : holds) {  // the high job's time inside the holds is not counted either
      const uint64_t c = std::max(a, ha), d = std::min(b, hb);
      if (d > c) high_busy -= double(d - c);
    }
  }
  for (auto& [a, b] : holds) held += double(b - a);
  const double idle = double(to - from) - held - high_busy;
  return {idle > 0 ? used / idle : 0, held / 1e9};
}

// ---- a node: one colocd and one simulated device -----------------------------------------------------

struct Node {
  const Args* args = nullptr;
  std::string build, dir, socket, log, trace;
  std::vector<std::string> env;
  pid_t daemon = -1;
  int spawned = 0;

  Node(const Args& a, const std::string& build_dir, const std::string& parent, const std::string& name) : args(&a) {
    build = build_dir;
    dir = parent + "/" + name;
    fs::create_directories(dir);
    socket = dir + "/colocd.sock";
    log = dir + "/colocd.log";
    trace = dir + "/trace.csv";
    const char* path = std::getenv("PATH");
    env = {"PATH=" + std::string(path ? path : "/usr/bin:/bin"), "LD_LIBRARY_PATH=" + build + "/sim",
           "SIMGPU_STATE_DIR=" + dir + "/simgpu", "SIMGPU_DEVICES=16GiB", "HOME=" + dir,
           "COLOC_SOCKET=" + socket};
    daemon = spawn({build + "/bin/colocd", "--socket", socket, "--state-dir", dir + "/state", "--log-level", a.log_level},
                   env, dir + "/colocd.out", log);  // colocd logs on stderr
    for (int i = 0; i < 2000 && ::access(socket.c_str(), F_OK) != 0; ++i) ::usleep(5000);
    if (::access(socket.c_str(), F_OK) != 0) die("colocd did not start: " + read_file(log));
  }
  ~Node() {
    if (daemon > 0) {
      ::kill(daemon, SIGTERM);
      wait_exit(daemon);
    }
  }

  /// coloc ARGS; returns its stdout (dies on failure unless `may_fail`).
  std::string cli(const std::vector<std::string>& a, bool may_fail = false) {
    std::vector<std::string> argv = {build + "/bin/coloc"};
    argv.insert(argv.end(), a.begin(), a.end());
    const std::string out = dir + "/cli.out", err = dir + "/cli.err";
    const int rc = wait_exit(spawn(argv, env, out, err));
    if (rc != 0 && !may_fail) die("coloc " + a[0] + " failed (" + std::to_string(rc) + "): " + read_file(err));
    return rc == 0 ? read_file(out) : std::string();
  }

  /// The device's `control` object from `coloc policy --json` (null when there is none).
  json control() {
    json p = json::parse(cli({"policy", "--json"}, true), nullptr, false);
    if (p.is_discarded() || !p.contains("devices") || p["devices"].empty()) return nullptr;
    return p["devices"][0].value("control", json());
  }

  void policy(const std::string& mode) {
    if (mode == "share") cli({"policy", "all", "share"});
    else if (mode == "timeslice") cli({"policy", "all", "timeslice", "--quantum", args->quantum});
    else cli({"policy", "all", "priority", "--target-slowdown", std::to_string(args->target_pct) + "%"});
  }

  /// `coloc run --sim --job NAME --priority P -- coloc-train --lucid KEY --duration S`, traced.
  pid_t job(const std::string& name, const std::string& priority, const std::string& lucid, double seconds) {
    ++spawned;
    std::vector<std::string> e = env;
    e.push_back("SIMGPU_TRACE=" + trace);
    std::vector<std::string> a = {build + "/bin/coloc", "run", "--sim", "--job", name, "--priority", priority, "--",
                                  build + "/bin/coloc-train"};
    for (const std::string& w : workload_args(lucid, args->lucid_dir)) a.push_back(w);
    for (const std::string& w : {std::string("--duration"), fmt("%g", seconds), std::string("--job"), name}) a.push_back(w);
    return spawn(a, e, dir + "/" + name + ".out", dir + "/" + name + ".err");
  }

  /// coloc-train's JSON line of job `name` (after it ended).
  json result(const std::string& name, int rc) const {
    const std::string out = read_file(dir + "/" + name + ".out");
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] != '{') continue;
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("iters_per_s") && j["iters_per_s"].is_number() && rc == 0) return j;
    }
    die("job " + name + " (exit " + std::to_string(rc) + ") gave no result: " + out + read_file(dir + "/" + name + ".err"));
  }

  /// The pid of each job once colocd shows it with one process and its device; waits up to 30 s.
  std::vector<long> pids(const std::vector<std::string>& names) {
    for (int tries = 0; tries < 600; ++tries) {
      json s = json::parse(cli({"status", "--json"}, true), nullptr, false);
      std::vector<long> found(names.size(), 0);
      if (!s.is_discarded() && s.contains("jobs"))
        for (auto& j : s["jobs"]) {
          const std::string id = j.value("job", "");
          for (size_t i = 0; i < names.size(); ++i)
            if ((id == names[i] || id.rfind(names[i] + "-", 0) == 0) && j.contains("pids") && j["pids"].size() == 1 &&
                j.contains("devices") && !j["devices"].empty())
              found[i] = j["pids"][0].get<long>();
        }
      if (std::count(found.begin(), found.end(), 0) == 0) return found;
      ::usleep(50000);
    }
    die("the jobs did not show up in coloc status: " + read_file(log));
  }
};

std::string label(const json& r) {
  if (r.contains("pattern"))
    return "async (" + fmt("%.0f", r.value("kernels_per_iter", 0.0)) + " kernels per " + fmt("%.0f", r.value("step_ms", 0.0)) +
           " ms, " + fmt("%.0f", r.value("streams", 0.0)) + " streams, synchronized every " +
           fmt("%.0f", r.value("sync_every", 0.0)) + ")";
  return r.value("lucid", "?") + " (" + fmt("%.0f", r["gpu_util"].get<double>()) + "% of " +
         fmt("%.1f", r["iter_ms"].get<double>()) + " ms)";
}

// ---- solo --------------------------------------------------------------------------------------------

struct Solo {
  json result;        // coloc-train's line
  double iters = 0;   // iters_per_s
  double kernels = 0; // kernels per second, first kernel to last
  double busy = 0;    // device busy share over the same span
};

Solo run_solo(const Args& a, const std::string& build, const std::string& tmp, const std::string& key,
              const std::string& priority, int index) {
  Node n(a, build, tmp, "solo" + std::to_string(index));
  const std::string name = "solo" + std::to_string(index);
  const pid_t p = n.job(name, priority, key, a.solo_seconds);
  const long pid = n.pids({name})[0];
  Solo s;
  s.result = n.result(name, wait_exit(p));
  s.iters = s.result["iters_per_s"].get<double>();
  const auto ss = slices(n.trace);
  const auto ps = procs(ss);
  if (!ps.count(pid)) die("solo " + key + ": no kernel of pid " + std::to_string(pid) + " in the trace");
  const Proc& pr = ps.at(pid);
  s.kernels = kernel_rate(pr, pr.first, pr.last + 1);
  s.busy = double(busy(ss, pr.first, pr.last)[pid]) / double(pr.last - pr.first);
  return s;
}

// ---- a mix under one mode ------------------------------------------------------------------------------

json run_mix(const Args& a, const std::string& build, const std::string& tmp, const Mix& m, const std::string& mode,
             const std::map<std::string, Solo>& solo) {
  Node n(a, build, tmp, "mix" + m.name + "-" + mode);
  n.policy(mode);
  std::vector<std::string> names;
  std::vector<pid_t> ps;
  for (size_t i = 0; i < m.best_effort.size(); ++i) {
    names.push_back("be" + std::to_string(i + 1));
    ps.push_back(n.job(names.back(), "best-effort", m.best_effort[i], a.seconds + a.lead + 3));
  }
  std::vector<long> pids = n.pids(names);
  ::usleep(useconds_t(a.lead * 1e6));
  const pid_t hp = n.job("high", "high", m.high, a.seconds);
  const long high_pid = n.pids({"high"})[0];
  // Under priority, the controller's state every half second while the high job runs.
  json controls = json::array();
  const double high_from = now_s();
  int high_rc = -1;
  while (mode == "priority") {
    int st = 0;
    if (::waitpid(hp, &st, WNOHANG) == hp) {
      high_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
      break;
    }
    const json c = n.control();
    if (c.is_object()) controls.push_back({{"t_s", std::round((now_s() - high_from) * 100) / 100}, {"control", c}});
    ::usleep(500000);
  }
  const json high = n.result("high", high_rc >= 0 ? high_rc : wait_exit(hp));
  for (size_t i = 0; i < ps.size(); ++i) {
    const int rc = wait_exit(ps[i]);
    if (rc != 0) die("best-effort job " + m.best_effort[i] + " exited " + std::to_string(rc) + ": " +
                     read_file(n.dir + "/" + names[i] + ".err"));
  }
  names.insert(names.begin(), "high");
  pids.insert(pids.begin(), high_pid);
  std::vector<std::string> keys = {m.high};
  keys.insert(keys.end(), m.best_effort.begin(), m.best_effort.end());

  const auto ss = slices(n.trace);
  const auto pr = procs(ss);
  uint64_t from = 0, to = UINT64_MAX;
  for (long pid : pids) {
    if (!pr.count(pid)) die("mix " + m.name + " " + mode + ": no kernel of pid " + std::to_string(pid) + " in the trace");
    from = std::max(from, pr.at(pid).first);
    to = std::min(to, pr.at(pid).last);
  }
  if (to <= from) die("mix " + m.name + " " + mode + ": the jobs never ran together");
  const auto b = busy(ss, from, to);
  const double interval = double(to - from);
  json jobs = json::array();
  double total = 0, others = 0, all_busy = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    const double rate = kernel_rate(pr.at(pids[i]), from, to);
    const double speed = rate / solo.at(keys[i]).kernels;
    const double dev = b.count(pids[i]) ? double(b.at(pids[i])) : 0;
    total += speed;
    all_busy += dev;
    if (i) others += dev;
    jobs.push_back({{"role", i ? "best-effort" : "high"},
                    {"lucid", keys[i]},
                    {"kernels_per_s", rate},
                    {"solo_kernels_per_s", solo.at(keys[i]).kernels},
                    {"speed", speed},
                    {"device_share", dev / interval}});
  }
  // The same from 3 s after the high job's first kernel on (past the controller's probe).
  const uint64_t late = std::min<uint64_t>(pr.at(high_pid).first + 3'000'000'000ull, to);
  const auto b_late = busy(ss, late, to);
  double others_late = 0;
  for (size_t i = 1; i < pids.size(); ++i) others_late += b_late.count(pids[i]) ? double(b_late.at(pids[i])) : 0;
  const double idle_late = double(to - late) - (b_late.count(high_pid) ? double(b_late.at(high_pid)) : 0);
  const double wc_late = idle_late > 0 ? others_late / idle_late : 0;
  const auto [wc_free, held_s] = wc_outside_holds(ss, high_pid, from, to);
  const double high_busy = b.count(high_pid) ? double(b.at(high_pid)) : 0;
  const double idle_by_high = interval - high_busy;
  const double wc = idle_by_high > 0 ? others / idle_by_high : 0;
  const double high_speed = high["iters_per_s"].get<double>() / solo.at(m.high).iters;
  // The high job after its first 3 s (the controller's probe and first windows under priority).
  const double steady = kernel_rate(pr.at(high_pid), late, to) / solo.at(m.high).kernels;
  json r = {{"mode", mode},
            {"high_iters_per_s", high["iters_per_s"]},
            {"high_speed", high_speed},
            {"high_speed_trace", jobs[0]["speed"]},
            {"high_speed_after_3s", steady},
            {"total_normalized", total},
            {"all_ran_s", interval / 1e9},
            {"idle_by_high_s", idle_by_high / 1e9},
            {"used_by_others_s", others / 1e9},
            {"work_conservation", wc},
            {"work_conservation_after_3s", wc_late},
            {"work_conservation_outside_holds", wc_free},
            {"others_held_s", held_s},
            {"device_idle_share", 1 - all_busy / interval},
            {"goal_high_met", high_speed >= kGoalHigh},
            {"goal_wc_met", wc >= kGoalWc},
            {"jobs", jobs}};
  if (mode == "priority") {
    // The last sample while the controller was on, and the samples.
    for (auto it = controls.rbegin(); it != controls.rend(); ++it)
      if ((*it)["control"].value("active", false)) {
        r["control_last"] = *it;
        break;
      }
    r["controls"] = controls;
  }
  if (a.keep) r["dir"] = n.dir;
  return r;
}

// ---- convergence ---------------------------------------------------------------------------------------

struct Sample {
  double t;
  json control;
};

/// The convergence at a join at `tj`, observed until `tend` (see the header).
json converge(const std::vector<Sample>& all, double tj, double tend, double target, double sustain) {
  std::vector<const Sample*> s;
  for (const Sample& x : all)
    if (x.t >= tj && x.t <= tend && x.control.is_object()) s.push_back(&x);
  json out = {{"join_s", tj}, {"observed_s", tend - tj}, {"samples", s.size()}};
  if (s.empty()) {
    out["converged"] = false;
    return out;
  }
  // Backwards: the longest suffix that is active, not probing, under target, allow within a step;
  // and the longest that is only active, not probing and under target (the high job protected,
  // as the controller sees it, while allow may still move).
  double lo = 1e9, hi = -1e9;
  long first_ok = -1, first_protected = -1;
  for (long i = long(s.size()) - 1; i >= 0; --i) {
    const json& c = s[size_t(i)]->control;
    if (!c.value("active", false) || c.value("probing", true) || c.value("slowdown", 1.0) > target + 1e-9) break;
    first_protected = i;
  }
  for (long i = long(s.size()) - 1; i >= first_protected && first_protected >= 0; --i) {
    const double allow = s[size_t(i)]->control.value("allow", 0.0);
    const double nlo = std::min(lo, allow), nhi = std::max(hi, allow);
    if (nhi - nlo > kAllowStep + 1e-9) break;
    lo = nlo, hi = nhi;
    first_ok = i;
  }
  if (first_protected >= 0 && tend - s[size_t(first_protected)]->t >= sustain)
    out["protected_s"] = s[size_t(first_protected)]->t - tj;
  // The first plateau: the earliest sample from which the conditions hold for `sustain` seconds
  // (not necessarily to the end: a later exploration may leave it).
  for (size_t i = 0; i < s.size() && !out.contains("settled_s"); ++i) {
    if (s[i]->t + sustain > tend) break;
    double plo = 1e9, phi = -1e9;
    bool ok = true;
    for (size_t k = i; k < s.size() && s[k]->t <= s[i]->t + sustain && ok; ++k) {
      const json& c = s[k]->control;
      plo = std::min(plo, c.value("allow", 0.0));
      phi = std::max(phi, c.value("allow", 0.0));
      ok = c.value("active", false) && !c.value("probing", true) && c.value("slowdown", 1.0) <= target + 1e-9 &&
           phi - plo <= kAllowStep + 1e-9;
    }
    if (ok) out["settled_s"] = s[i]->t - tj;
  }
  // What the controller did meanwhile: every change of allow or phase.
  json changes = json::array();
  std::string prev;
  for (const Sample* x : s) {
    const json& c = x->control;
    const std::string key = fmt("%.3f", c.value("allow", 0.0)) + (c.value("probing", false) ? "p" : "") +
                            (c.value("active", false) ? "" : "-");
    if (key != prev)
      changes.push_back({{"t_s", std::round((x->t - tj) * 100) / 100},
                         {"allow", c.value("allow", 0.0)},
                         {"slowdown", c.value("slowdown", 0.0)},
                         {"probing", c.value("probing", false)},
                         {"active", c.value("active", false)}});
    prev = key;
  }
  out["changes"] = changes;
  if (first_ok < 0 || tend - s[size_t(first_ok)]->t < sustain) {
    out["converged"] = false;
    return out;
  }
  const json& c = s[size_t(first_ok)]->control;
  out["converged"] = true;
  out["convergence_s"] = s[size_t(first_ok)]->t - tj;
  out["allow_settled"] = {lo, hi};
  out["slowdown_at"] = c.value("slowdown", 0.0);
  out["goal_met"] = s[size_t(first_ok)]->t - tj <= kGoalConvergenceS;
  return out;
}

json run_convergence(const Args& a, const std::string& build, const std::string& tmp, const Mix& m,
                     const std::map<std::string, Solo>& solo) {
  Node n(a, build, tmp, "convergence");
  n.policy("priority");
  if (m.best_effort.size() < 2) die("the convergence run needs a mix of two best-effort jobs");
  const double total = a.join_before + a.join_after;
  const pid_t hp = n.job("high", "high", m.high, total + 4);
  const long high_pid = n.pids({"high"})[0];
  ::usleep(1'000'000);
  std::vector<Sample> samples;
  auto poll_until = [&](double until) {
    while (now_s() < until) {
      const double t0 = now_s();
      const json c = n.control();
      const double t1 = now_s();
      samples.push_back({(t0 + t1) / 2, c});
      const double next = t0 + a.poll_ms / 1000.0;
      if (now_s() < next) ::usleep(useconds_t((next - now_s()) * 1e6));
    }
  };
  const double t_start = now_s();
  poll_until(t_start + 1);  // the high job alone: the controller is idle
  const double j1 = now_s();
  const pid_t b1 = n.job("be1", "best-effort", m.best_effort[0], total + 2);
  poll_until(j1 + a.join_before);
  const double j2 = now_s();
  const pid_t b2 = n.job("be2", "best-effort", m.best_effort[1], a.join_after + 1);
  poll_until(j2 + a.join_after);
  const std::vector<long> be_pids = n.pids({"be1", "be2"});
  const json high = n.result("high", wait_exit(hp));
  wait_exit(b1);
  wait_exit(b2);

  const double target = a.target_pct / 100.0;
  json first = converge(samples, j1, j2, target, a.sustain);
  json second = converge(samples, j2, j2 + a.join_after, target, a.sustain);
  // The high job's speed per second of the run (trace; CLOCK_MONOTONIC like now_s()), against solo.
  const auto ss = slices(n.trace);
  const auto pr = procs(ss);
  // Work conservation between the joins and after join 2 (as in the mixes: the best-effort jobs'
  // device time over the time the high job left idle).
  auto wc = [&](double from_s, double to_s) {
    const uint64_t from = uint64_t(from_s * 1e9), to = uint64_t(to_s * 1e9);
    const auto b = busy(ss, from, to);
    double used = 0;
    for (long p : be_pids) used += b.count(p) ? double(b.at(p)) : 0;
    const double idle = double(to - from) - (b.count(high_pid) ? double(b.at(high_pid)) : 0);
    return idle > 0 ? used / idle : 0;
  };
  json per_s = json::array();
  if (pr.count(high_pid)) {
    const Proc& h = pr.at(high_pid);
    for (double t = std::floor(j1 - t_start) - 1; t < j2 + a.join_after - t_start; t += 1) {
      const uint64_t from = uint64_t((t_start + t) * 1e9), to = uint64_t((t_start + t + 1) * 1e9);
      per_s.push_back({{"t_s", t - (j1 - t_start)}, {"high_speed", kernel_rate(h, from, to) / solo.at(m.high).kernels}});
    }
  }
  auto mean_speed = [&](double from, double to) {
    if (!pr.count(high_pid) || to <= from) return 0.0;
    return kernel_rate(pr.at(high_pid), uint64_t(from * 1e9), uint64_t(to * 1e9)) / solo.at(m.high).kernels;
  };
  json samples_j = json::array();
  for (const Sample& s : samples) samples_j.push_back({{"t_s", std::round((s.t - j1) * 1000) / 1000}, {"control", s.control}});
  return json{{"mix", m.name},
              {"high", m.high},
              {"best_effort", m.best_effort},
              {"poll_ms", a.poll_ms},
              {"definition",
               "from the join (coloc run spawned) to the earliest sample from which, to the end of the observation, "
               "control.active, !control.probing, control.slowdown <= target, and max-min of control.allow <= 0.05 "
               "(one step); that sample must leave >= " + fmt("%g", a.sustain) + " s of observation"},
              {"protected_definition",
               "protected_s: the same without the condition on allow (the high job within target as the controller "
               "measures it, while allow may still move)"},
              {"settled_definition",
               "settled_s: the earliest sample from which all conditions of the definition hold for " +
                   fmt("%g", a.sustain) + " s (a plateau; a later exploration of the ceiling may leave it)"},
              {"join1", first},
              {"join2", second},
              {"high_speed_between_joins", mean_speed(j1, j2)},
              {"high_speed_after_join2", mean_speed(j2, j2 + a.join_after)},
              {"work_conservation_between_joins", wc(j1, j2)},
              {"work_conservation_after_join2", wc(j2, j2 + a.join_after)},
              {"work_conservation_after_join2_outside_holds",
               wc_outside_holds(ss, high_pid, uint64_t(j2 * 1e9), uint64_t((j2 + a.join_after) * 1e9)).first},
              {"high_iters_per_s", high["iters_per_s"]},
              {"high_speed_per_second", per_s},
              {"samples", samples_j}};
}

// ---- the launch hook in kWindow ------------------------------------------------------------------------

json run_hook(const Args& a, const std::string& build, const std::string& tmp) {
  const std::string bench = build + "/bench/interpose_bench", nulldrv = build + "/bench/nulldriver";
  const std::string existing = build + "/bench/interpose.json";
  if (::access(bench.c_str(), X_OK) == 0 && ::access((nulldrv + "/libcuda.so.1").c_str(), F_OK) == 0) {
    const std::string out = tmp + "/interpose.json";
    const char* path = std::getenv("PATH");
    std::vector<std::string> env = {"PATH=" + std::string(path ? path : "/usr/bin:/bin"),
                                    "LD_LIBRARY_PATH=" + build + "/sim", "HOME=" + tmp};
    const std::vector<std::string> cmd = {bench, "run", "--sim", build + "/sim", "--null-driver", nulldrv, "--lib",
                                          build + "/lib/libcoloc.so", "--colocd", build + "/bin/colocd", "--out", out,
                                          "--launches", std::to_string(a.hook_launches), "--pairs", "20000", "--rounds",
                                          std::to_string(a.hook_rounds), "--grows", "20"};
    const int rc = wait_exit(spawn(cmd, env, tmp + "/interpose.log", tmp + "/interpose.log.err"));
    json j = json::parse(read_file(out), nullptr, false);
    if (rc == 0 && !j.is_discarded() && j.contains("window") && j["window"].contains("simgpu")) {
      std::string shown;
      for (size_t i = 1; i < cmd.size(); ++i) shown += (shown.empty() ? "" : " ") + cmd[i];
      return {{"source", "measured now: interpose_bench " + shown},
              {"launches_per_repetition", j["window"]["simgpu"]["launches_per_repetition"]},
              {"rounds", a.hook_rounds},
              {"window", j["window"]}};
    }
    std::fprintf(stderr, "priority_bench: interpose_bench failed (%d): %s\n", rc, read_file(tmp + "/interpose.log.err").c_str());
  }
  json j = json::parse(read_file(existing), nullptr, false);
  if (!j.is_discarded() && j.contains("window") && j["window"].contains("simgpu")) {
    struct stat st{};
    ::stat(existing.c_str(), &st);
    char when[64];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", std::localtime(&st.st_mtime));
    return {{"source", existing + " (make bench-interpose, written " + std::string(when) + ")"}, {"window", j["window"]}};
  }
  return {{"source", "none: no interpose_bench and no " + existing + " (make bench-interpose)"}};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  char* abs = ::realpath(a.build.c_str(), nullptr);
  if (!abs) die("no build directory " + a.build);
  const std::string build = abs;
  std::free(abs);
  Args args = a;
  if (char* ld = ::realpath(a.lucid_dir.c_str(), nullptr)) {
    args.lucid_dir = ld;
    std::free(ld);
  }
  ::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/coloc-priority-bench.XXXXXX";
  if (!::mkdtemp(tmpl)) die("cannot make a temporary directory");
  const std::string tmp = tmpl;
  const double t0 = now_s();

  std::vector<Mix> mixes;
  for (const std::string& name : args.mixes) mixes.push_back(mix_named(name));
  const bool conv = args.convergence && !mixes.empty() && mixes[0].best_effort.size() >= 2;
  std::printf("priority_bench: Lucid-calibrated mixes on one simgpu device under colocd (a fresh one per scenario); modes "
              "share / timeslice (--quantum %s, equal weights) / priority (--target-slowdown %d%%); high job %g s, solo "
              "runs %g s\n",
              args.quantum.c_str(), args.target_pct, args.seconds, args.solo_seconds);
  std::fflush(stdout);

  // Solo speeds, each configuration alone under its own priority (policy share).
  std::map<std::string, Solo> solo;
  std::printf("\n  alone                                              it/s   kernels/s  busy\n");
  int index = 0;
  for (const Mix& m : mixes) {
    std::vector<std::pair<std::string, std::string>> keys = {{m.high, "high"}};
    for (const std::string& b : m.best_effort) keys.push_back({b, "best-effort"});
    for (auto& [key, prio] : keys) {
      if (solo.count(key)) continue;
      solo[key] = run_solo(args, build, tmp, key, prio, index++);
      const Solo& s = solo[key];
      std::printf("  %-48s %6.2f %9.1f %5.1f%%\n", label(s.result).c_str(), s.iters, s.kernels, s.busy * 100);
      std::fflush(stdout);
    }
  }

  json mixes_j = json::array();
  for (const Mix& m : mixes) {
    std::printf("\n  mix %s: high %s; best-effort %s", m.name.c_str(), label(solo[m.high].result).c_str(),
                label(solo[m.best_effort[0]].result).c_str());
    for (size_t i = 1; i < m.best_effort.size(); ++i) std::printf(", %s", label(solo[m.best_effort[i]].result).c_str());
    std::printf("\n  %-9s %9s %-20s %6s %6s %8s %10s %7s %13s  %s\n", "mode", "high/solo", "speeds high/be...", "total",
                "WC", "dev idle", "high >3s", "WC >3s", "WC unheld (s)", "goals: high >= 0.95, WC >= 0.8");
    std::fflush(stdout);
    json rows = json::array();
    for (const std::string& mode : args.modes) {
      json r = run_mix(args, build, tmp, m, mode, solo);
      std::string speeds;
      for (auto& j : r["jobs"]) speeds += (speeds.empty() ? "" : "/") + fmt("%.2f", j["speed"].get<double>());
      std::printf("  %-9s %9.3f %-20s %6.2f %6.3f %7.1f%% %10.3f %7.2f %7.2f (%3.1f)  high %s, WC %s\n", mode.c_str(),
                  r["high_speed"].get<double>(), speeds.c_str(), r["total_normalized"].get<double>(),
                  r["work_conservation"].get<double>(), r["device_idle_share"].get<double>() * 100,
                  r["high_speed_after_3s"].get<double>(), r["work_conservation_after_3s"].get<double>(),
                  r["work_conservation_outside_holds"].get<double>(), r["others_held_s"].get<double>(),
                  r["goal_high_met"].get<bool>() ? "met" : "missed",
                  r["goal_wc_met"].get<bool>() ? "met" : "missed");
      if (r.contains("control_last")) {
        const json& c = r["control_last"]["control"];
        std::printf("  %-9s controller %.1f s into the high job's run: allow %.2f, slowdown %.3f (target %.2f), "
                    "window %.2f ms, %llu probe(s)\n",
                    "", r["control_last"]["t_s"].get<double>(), c.value("allow", 0.0), c.value("slowdown", 0.0),
                    c.value("target", 0.0), c.value("window_ms", 0.0), (unsigned long long)c.value("probes", 0ull));
      }
      std::fflush(stdout);
      rows.push_back(r);
    }
    mixes_j.push_back({{"mix", m.name}, {"high", m.high}, {"best_effort", m.best_effort}, {"scenarios", rows}});
  }

  json conv_j;
  if (conv) {
    std::printf("\n  convergence (priority, mix %s): the high job alone, best-effort %s joins (join 1), %g s later %s "
                "joins (join 2), observed %g s; coloc policy --json every %d ms\n",
                mixes[0].name.c_str(), mixes[0].best_effort[0].c_str(), args.join_before,
                mixes[0].best_effort[1].c_str(), args.join_after, args.poll_ms);
    std::fflush(stdout);
    conv_j = run_convergence(args, build, tmp, mixes[0], solo);
    for (const char* j : {"join1", "join2"}) {
      const json& c = conv_j[j];
      std::string trail;
      for (auto& ch : c["changes"])
        trail += (trail.empty() ? "" : ", ") + fmt("%.1fs:", ch["t_s"].get<double>()) +
                 (ch["active"].get<bool>() ? (ch["probing"].get<bool>() ? std::string("probe")
                                                                         : fmt("%.2f", ch["allow"].get<double>()))
                                           : std::string("off"));
      std::string prot = c.contains("protected_s")
                             ? fmt("slowdown <= target (not probing) from %.1f s on", c["protected_s"].get<double>())
                             : std::string("slowdown over target or probing near the end");
      if (c.contains("settled_s")) prot += fmt("; first plateau (held %g s) from ", args.sustain) +
                                          fmt("%.1f s", c["settled_s"].get<double>());
      if (c["converged"].get<bool>())
        std::printf("  %s: converged after %.1f s (goal <= 10 s: %s); allow settled in %.2f-%.2f, slowdown %.3f; %s\n", j,
                    c["convergence_s"].get<double>(), c["goal_met"].get<bool>() ? "met" : "missed",
                    c["allow_settled"][0].get<double>(), c["allow_settled"][1].get<double>(),
                    c["slowdown_at"].get<double>(), prot.c_str());
      else
        std::printf("  %s: not converged within %.0f s (goal <= 10 s: missed); %s\n", j, c["observed_s"].get<double>(),
                    prot.c_str());
      std::printf("         allow over time (probe = probing, off = inactive): %s\n", trail.c_str());
    }
    std::printf("  high job's speed (trace) between the joins %.3f, after join 2 %.3f of solo; work conservation %.2f, "
                "%.2f (%.2f outside holds)\n",
                conv_j["high_speed_between_joins"].get<double>(), conv_j["high_speed_after_join2"].get<double>(),
                conv_j["work_conservation_between_joins"].get<double>(),
                conv_j["work_conservation_after_join2"].get<double>(),
                conv_j["work_conservation_after_join2_outside_holds"].get<double>());
    std::printf("  converged: from the join (coloc run spawned) to the earliest sample after which, to the end of the "
                "observation, the controller is active, not probing, slowdown <= target and allow stays within one step "
                "(0.05), with >= %g s of observation left (goal judged on this); the first plateau: the same held for "
                "%g s, whatever follows\n",
                args.sustain, args.sustain);
    std::fflush(stdout);
  }

  json hook_j;
  if (args.hook) {
    hook_j = run_hook(args, build, tmp);
    std::printf("\n  launch hook in kWindow (tracked, as a throttled job's launches while its gate is open), from %s\n",
                hook_j["source"].get<std::string>().c_str());
    if (hook_j.contains("window"))
      for (const char* drv : {"null_driver", "simgpu"}) {
        if (!hook_j["window"].contains(drv)) continue;
        const json& w = hook_j["window"][drv];
        std::printf("  %-12s RUN %7.1f ns   kWindow %7.1f ns   added %+7.1f ns\n",
                    std::strcmp(drv, "simgpu") == 0 ? "simgpu fast" : "null driver", w["run_ns"].get<double>(),
                    w["window_ns"].get<double>(), w["added_ns"].get<double>());
      }
  }

  const double took = now_s() - t0;
  std::printf("\n  goals (issue 11): high job >= %.2f of solo with work conservation >= %.1f; convergence <= %.0f s (%.0f s)\n",
              kGoalHigh, kGoalWc, kGoalConvergenceS, took);
  if (!args.keep) fs::remove_all(tmp);
  else std::printf("  kept %s\n", tmp.c_str());

  if (!args.out.empty()) {
    json doc = {{"benchmark", "priority"},
                {"what",
                 "Lucid-calibrated duty-cycle jobs (coloc-train --lucid) under coloc run --priority high|best-effort on "
                 "one simgpu device with colocd, per mode share / timeslice / priority. high_speed: the high job's "
                 "iters_per_s over its solo one; jobs[].speed: kernels/s over the interval when all jobs ran "
                 "(SIMGPU_TRACE) over solo kernels/s; total_normalized: their sum; work_conservation: the other jobs' "
                 "device time over (interval - the high job's device time); work_conservation_outside_holds: the same "
                 "leaving out spells >= 250 ms in which no best-effort job ran (the controller's probes); "
                 "convergence: see its definitions"},
                {"machine", coloc::bench::machine()},
                {"config",
                 {{"seconds", args.seconds},
                  {"solo_seconds", args.solo_seconds},
                  {"lead_s", args.lead},
                  {"quantum", args.quantum},
                  {"target_pct", args.target_pct},
                  {"simgpu_devices", "16GiB"}}},
                {"goals", {{"high_speed", kGoalHigh}, {"work_conservation", kGoalWc}, {"convergence_s", kGoalConvergenceS}}},
                {"took_s", took}};
    json solo_j = json::object();
    for (auto& [k, s] : solo)
      solo_j[k] = {{"iters_per_s", s.iters}, {"kernels_per_s", s.kernels}, {"busy", s.busy},
                   {"gpu_util", s.result["gpu_util"]}, {"iter_ms", s.result["iter_ms"]}};
    doc["solo"] = solo_j;
    doc["mixes"] = mixes_j;
    if (!conv_j.is_null()) doc["convergence"] = conv_j;
    if (!hook_j.is_null()) doc["launch_hook"] = hook_j;
    if (fs::path(args.out).has_parent_path()) fs::create_directories(fs::path(args.out).parent_path());
    std::ofstream(args.out) << doc.dump(2) << "\n";
    std::printf("  written to %s\n", args.out.c_str());
  }
  return 0;
}
