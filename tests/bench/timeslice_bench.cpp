// timeslice_bench — the timeslice policy measured from simgpu's trace (SIMGPU_TRACE): one colocd
// on simgpu (one 16 GiB device), `coloc policy all timeslice --quantum Q`, and three GPU-bound jobs
// (`coloc run --sim -- interpose_client init ctx 0 spin kernel 2000000 SECONDS 10 0`: coloc_spin
// kernels of 2 ms, in batches of 10, each batch synchronized), run in turn at each quantum
// (default 50, 100 and 500 ms, equal weights), then once with weights 2:1:1 at 100 ms
// (`--weights-all`: at every quantum); then, at 50 ms, the same three jobs with real training's
// launch pattern (`async`: coloc-train --pattern async --streams 2 --sync-every 4, mixed kernels
// queued ahead of the device) and with mixed durations queued in one burst (`mixed`: 9 kernels of
// 20 us then one of 20 ms, 1.2 s of device time per job, synchronized only at the end;
// `--patterns` picks them). From each run's trace (slices joined by pid, device and
// launch_id into kernels; a *run* is consecutive kernels of one pid):
//
//   idle      share of the wall time, from the first kernel to the end of the first job to end
//             its last, in which no kernel runs; split into the gaps between runs of different
//             jobs (handovers) and the gaps inside one job's run (its own host side: the
//             synchronize after each batch, the next launches)
//   handover  the gaps between consecutive runs of different jobs: p50, p99, max (the previous
//             holder's last kernel ends -> the next holder's first kernel starts)
//   runs      median length of a run (a turn as the device saw it; expected: weight x quantum)
//   shares    each job's device time over the time all three ran, against weight / sum of weights;
//             and over whole rounds within it (err pts / rounds: the worst job's error, in points)
//   overlaps  kernels that started while another job's kernel ran (must be 0)
//
// Also from colocd's debug log: the drains it waited for at each turn's end and any drain
// timeout. Prints a table and writes JSON (--out). A benchmark, not a test: it reports, it does
// not fail on slowness (it fails only when a run cannot be made).
#include "../integration/e2e/trace.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/wire.h"
#include "machine.h"

using json = nlohmann::ordered_json;

namespace {

constexpr double kMs = 1e6;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "timeslice_bench: %s\n", what.c_str());
  std::exit(1);
}

/// Starts `args` with `env`, its stdout and stderr appended to `log`.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& log) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) die("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int wait_exit(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---- the trace -------------------------------------------------------------------------------------

using Kernel = coloc::test::trace::Kernel;

/// The kernels on device 0 in the trace at `path`, by start time (tests/integration/e2e/trace.h).
std::vector<Kernel> kernels(const std::string& path) {
  std::vector<Kernel> out = coloc::test::trace::kernels(path);
  std::erase_if(out, [](const Kernel& k) { return k.device != 0; });
  return out;
}

struct Run {
  long pid = 0;
  uint64_t start = 0, end = 0;
  uint64_t busy = 0;  // sum of its kernels' union
};

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

/// Everything the trace of one run says (see the header).
json analyse(const std::vector<Kernel>& ks, const std::vector<long>& pids, const std::vector<double>& expected) {
  if (ks.empty()) die("the trace holds no kernel");
  std::map<long, std::pair<uint64_t, uint64_t>> span;  // pid -> first start, last end
  for (const Kernel& k : ks) {
    auto [it, fresh] = span.try_emplace(k.pid, k.start, k.end);
    if (!fresh) it->second.first = std::min(it->second.first, k.start), it->second.second = std::max(it->second.second, k.end);
  }
  if (span.size() != pids.size()) die("the trace holds " + std::to_string(span.size()) + " processes, expected " + std::to_string(pids.size()));
  uint64_t from = UINT64_MAX, all_from = 0, to = UINT64_MAX;
  for (auto& [pid, s] : span) {
    from = std::min(from, s.first);
    all_from = std::max(all_from, s.first);
    to = std::min(to, s.second);
  }
  // Overlaps between processes (kernels starting while another's runs), over the whole trace.
  int overlaps = 0;
  {
    std::vector<Kernel> active;
    for (const Kernel& k : ks) {
      std::erase_if(active, [&](const Kernel& a) { return a.end <= k.start; });
      for (const Kernel& a : active)
        if (a.pid != k.pid) {
          ++overlaps;
          break;
        }
      active.push_back(k);
    }
  }
  // Runs, and the device's busy time (union of kernels) within [from, to).
  std::vector<Run> runs;
  uint64_t covered = 0, cursor = from;
  uint64_t idle_in_handover = 0, idle_in_run = 0;
  for (const Kernel& k : ks) {
    const uint64_t s = std::max(k.start, from), e = std::min(k.end, to);
    if (e > s && e > cursor) {
      const uint64_t add_from = std::max(s, cursor);
      if (add_from > cursor) {  // an idle gap [cursor, add_from)
        const bool handover = !runs.empty() && runs.back().pid != k.pid;
        (handover ? idle_in_handover : idle_in_run) += add_from - cursor;
      }
      covered += e - add_from;
      cursor = e;
    }
    if (!runs.empty() && runs.back().pid == k.pid) {
      runs.back().end = std::max(runs.back().end, k.end);
      runs.back().busy += k.end - k.start;
    } else {
      runs.push_back({k.pid, k.start, k.end, k.end - k.start});
    }
  }
  const uint64_t wall = to > from ? to - from : 1;
  // Handovers: between consecutive runs of different processes, the next one starting in [from, to).
  std::vector<double> gaps;
  int negative = 0;
  for (size_t i = 1; i < runs.size(); ++i) {
    if (runs[i].start < from || runs[i].start >= to) continue;
    if (runs[i].start < runs[i - 1].end) {
      ++negative;
      gaps.push_back(0);
    } else {
      gaps.push_back(double(runs[i].start - runs[i - 1].end) / kMs);
    }
  }
  // Run lengths: the runs that are neither a process's first nor its last, within [all_from, to).
  std::map<long, std::pair<size_t, size_t>> first_last;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto [it, fresh] = first_last.try_emplace(runs[i].pid, i, i);
    if (!fresh) it->second.second = i;
  }
  std::map<long, std::vector<double>> lengths;
  std::vector<double> all_lengths;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto fl = first_last[runs[i].pid];
    if (i == fl.first || i == fl.second || runs[i].start < all_from || runs[i].end > to) continue;
    lengths[runs[i].pid].push_back(double(runs[i].end - runs[i].start) / kMs);
    all_lengths.push_back(double(runs[i].end - runs[i].start) / kMs);
  }
  // Shares while all ran: [all_from, to).
  std::map<long, uint64_t> busy;
  uint64_t total = 0;
  for (const Kernel& k : ks) {
    const uint64_t s = std::max(k.start, all_from), e = std::min(k.end, to);
    if (e > s) busy[k.pid] += e - s, total += e - s;
  }
  // The same over whole rounds: from the first run that starts once all ran to the start of the
  // last run of the same process before `to` (a window that cuts no turn short: at long quanta,
  // one turn more or less in the window above moves a share by quantum / window).
  std::map<long, uint64_t> busy_rounds;
  uint64_t total_rounds = 0, r_from = 0, r_to = 0;
  for (size_t i = 0; i < runs.size() && !r_from; ++i)
    if (runs[i].start >= all_from) {
      r_from = runs[i].start;
      for (size_t k = runs.size(); k-- > i + 1;)
        if (runs[k].pid == runs[i].pid && runs[k].start <= to) {
          r_to = runs[k].start;
          break;
        }
    }
  for (const Kernel& k : ks) {
    const uint64_t s = std::max(k.start, r_from), e = std::min(k.end, r_to);
    if (e > s) busy_rounds[k.pid] += e - s, total_rounds += e - s;
  }
  json jobs = json::array();
  double worst = 0, worst_rounds = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    const double share = total ? double(busy[pids[i]]) / double(total) : 0;
    const double share_rounds = total_rounds ? double(busy_rounds[pids[i]]) / double(total_rounds) : 0;
    worst = std::max(worst, std::abs(share - expected[i]) * 100);
    worst_rounds = std::max(worst_rounds, std::abs(share_rounds - expected[i]) * 100);
    jobs.push_back({{"pid", pids[i]},
                    {"expected_share", expected[i]},
                    {"share", share},
                    {"error_points", (share - expected[i]) * 100},
                    {"share_whole_rounds", share_rounds},
                    {"error_points_whole_rounds", (share_rounds - expected[i]) * 100},
                    {"runs", lengths[pids[i]].size()},
                    {"run_ms_median", pct(lengths[pids[i]], 0.5)}});
  }
  return json{{"kernels", ks.size()},
              {"overlaps", overlaps},
              {"wall_s", double(wall) / 1e9},
              {"idle_share", 1.0 - double(covered) / double(wall)},
              {"idle_in_handovers_share", double(idle_in_handover) / double(wall)},
              {"idle_in_runs_share", double(idle_in_run) / double(wall)},
              {"handovers", gaps.size()},
              {"handover_overlapping", negative},
              {"handover_ms_p50", pct(gaps, 0.5)},
              {"handover_ms_p90", pct(gaps, 0.9)},
              {"handover_ms_p99", pct(gaps, 0.99)},
              {"handover_ms_max", gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end())},
              {"run_ms_p10", pct(all_lengths, 0.1)},
              {"run_ms_median", pct(all_lengths, 0.5)},
              {"run_ms_p90", pct(all_lengths, 0.9)},
              {"all_ran_s", double(to > all_from ? to - all_from : 0) / 1e9},
              {"share_worst_error_points", worst},
              {"whole_rounds_s", double(r_to - r_from) / 1e9},
              {"share_worst_error_points_whole_rounds", worst_rounds},
              {"jobs", jobs}};
}

/// colocd's debug lines "turn drained (waited X ms)" and drain timeouts in `log` from byte `at`.
json drains(const std::string& log, size_t at) {
  std::vector<double> waited;
  int timeouts = 0;
  std::istringstream in(log.substr(std::min(at, log.size())));
  for (std::string line; std::getline(in, line);) {
    if (line.find("did not complete within") != std::string::npos) ++timeouts;
    const size_t p = line.find("turn drained");
    if (p == std::string::npos) continue;
    const size_t w = line.find("(waited ", p);
    if (w != std::string::npos) waited.push_back(std::atof(line.c_str() + w + 8));
  }
  return json{{"turns_drained", waited.size()},
              {"drain_ms_p50", pct(waited, 0.5)},
              {"drain_ms_p99", pct(waited, 0.99)},
              {"drain_ms_max", waited.empty() ? 0 : *std::max_element(waited.begin(), waited.end())},
              {"drain_timeouts", timeouts}};
}

struct Node {
  std::string build, dir, socket, log;
  std::vector<std::string> env;
  pid_t daemon = -1;

  std::vector<std::string> cli_env() const {
    std::vector<std::string> e = env;
    e.push_back("COLOC_SOCKET=" + socket);
    return e;
  }
  int cli(const std::vector<std::string>& args, const std::string& out) const {
    std::vector<std::string> a = {build + "/bin/coloc"};
    a.insert(a.end(), args.begin(), args.end());
    ::unlink(out.c_str());
    return wait_exit(spawn(a, cli_env(), out));
  }
  /// The pid of each job (by coloc run's id prefix) once each has one process; waits up to 20 s.
  std::vector<long> pids(const std::vector<std::string>& names) const {
    const std::string out = dir + "/status.json";
    for (int tries = 0; tries < 400; ++tries) {
      if (cli({"status", "--json"}, out) == 0) {
        json s = json::parse(read_file(out), nullptr, false);
        std::vector<long> found(names.size(), 0);
        if (!s.is_discarded())
          for (auto& j : s["jobs"]) {
            const std::string id = j.value("job", "");
            for (size_t i = 0; i < names.size(); ++i)
              if ((id == names[i] || id.rfind(names[i] + "-", 0) == 0) && j["pids"].size() == 1)
                found[i] = j["pids"][0].get<long>();
          }
        if (std::count(found.begin(), found.end(), 0) == 0) return found;
      }
      ::usleep(50000);
    }
    die("the jobs did not show up in coloc status");
  }
};

/// What each job runs: `spin` (interpose_client spin: 2 ms kernels in synchronized batches of
/// 10), `async` (coloc-train --pattern async --streams 2 --sync-every 4: a training pass of mixed
/// kernels queued ahead of the device on two streams, the host synchronizing every 4 iterations)
/// or `mixed` (interpose_client burst: 9 kernels of 20 us then one of 20 ms, queued without a
/// synchronize until the end; `seconds` of device time per job).
struct Spec {
  int quantum_ms;
  std::vector<int> weights;
  double seconds;
  std::string work = "spin";
};

/// The command of one job of `s` (its coloc run options come before).
std::vector<std::string> job_command(const Node& n, const Spec& s, const std::string& name) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", s.seconds);
  if (s.work == "async")
    return {n.build + "/bin/coloc-train", "--pattern", "async", "--streams", "2", "--sync-every", "4",
            "--duration", secs, "--job", name};
  if (s.work == "mixed") {
    // 10 launches are 20.18 ms of device time: seconds / 20.18 ms rounds of them.
    const int count = 10 * std::max(1, int(s.seconds / 0.02018 + 0.5));
    return {n.build + "/tests/bin/interpose_client", "init", "ctx", "0", "burst", "kernel", std::to_string(count),
            "20000,20000,20000,20000,20000,20000,20000,20000,20000,20000000", "0", "0", "0"};
  }
  return {n.build + "/tests/bin/interpose_client", "init", "ctx", "0", "spin", "kernel", "2000000", secs, "10", "0"};
}

json run_one(const Node& n, const Spec& s, int index) {
  const std::string q = std::to_string(s.quantum_ms) + "ms";
  if (n.cli({"policy", "all", "timeslice", "--quantum", q}, n.dir + "/policy.out") != 0)
    die("coloc policy all timeslice --quantum " + q + " failed: " + read_file(n.dir + "/policy.out"));
  const std::string trace = n.dir + "/trace-" + std::to_string(index) + ".csv";
  const size_t log_at = read_file(n.log).size();
  std::vector<std::string> names;
  std::vector<pid_t> procs;
  int weight_sum = 0;
  for (int w : s.weights) weight_sum += w;
  for (size_t i = 0; i < s.weights.size(); ++i) {
    names.push_back("ts" + std::to_string(index) + "-" + std::string(1, char('a' + i)));
    std::vector<std::string> a = {n.build + "/bin/coloc", "run", "--sim", "--job", names.back()};
    if (s.weights[i] != 1) a.insert(a.end(), {"--weight", std::to_string(s.weights[i])});
    a.push_back("--");
    for (const std::string& c : job_command(n, s, names.back())) a.push_back(c);
    std::vector<std::string> e = n.cli_env();
    e.push_back("SIMGPU_TRACE=" + trace);
    procs.push_back(spawn(a, e, n.dir + "/" + names.back() + ".out"));
  }
  const std::vector<long> pids = n.pids(names);
  for (size_t i = 0; i < procs.size(); ++i)
    if (int rc = wait_exit(procs[i]); rc != 0)
      die("job " + names[i] + " exited " + std::to_string(rc) + ": " + read_file(n.dir + "/" + names[i] + ".out"));
  std::vector<double> expected;
  for (int w : s.weights) expected.push_back(double(w) / double(weight_sum));
  json r = {{"work", s.work}, {"quantum_ms", s.quantum_ms}, {"weights", s.weights}, {"seconds", s.seconds}};
  r.update(analyse(kernels(trace), pids, expected));
  r["daemon"] = drains(read_file(n.log), log_at);
  return r;
}

std::string weights_str(const json& w) {
  std::string s;
  for (auto& x : w) s += (s.empty() ? "" : ":") + std::to_string(x.get<int>());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string build = "build", out = "build/bench/timeslice.json";
  double seconds = 10, weight_seconds = 10;
  bool weights_all = false;
  std::vector<std::string> patterns = {"async", "mixed"};  // rows at 50 ms beside the spin rows
  std::vector<int> quanta = {50, 100, 500};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--weights-all") {
      weights_all = true;
      continue;
    }
    if (i + 1 >= argc) die("option " + a + " needs a value");
    std::string v = argv[++i];
    if (a == "--build") build = v;
    else if (a == "--out") out = v;
    else if (a == "--seconds") seconds = std::atof(v.c_str());
    else if (a == "--weight-seconds") weight_seconds = std::atof(v.c_str());
    else if (a == "--patterns") {
      patterns.clear();
      std::istringstream in(v);
      for (std::string x; std::getline(in, x, ',');) {
        if (x != "async" && x != "mixed" && x != "none") die("--patterns: async, mixed or none, not " + x);
        if (x != "none") patterns.push_back(x);
      }
    } else if (a == "--quanta") {
      quanta.clear();
      std::istringstream in(v);
      for (std::string x; std::getline(in, x, ',');) quanta.push_back(std::atoi(x.c_str()));
    } else {
      die("unknown option " + a +
          " (--build DIR --out FILE --seconds S --weight-seconds S --quanta 50,100,500 --weights-all "
          "--patterns async,mixed|none)");
    }
  }
  char* abs = ::realpath(build.c_str(), nullptr);
  if (!abs) die("no build directory " + build);
  build = abs;
  std::free(abs);
  ::signal(SIGPIPE, SIG_IGN);

  char tmpl[] = "/tmp/coloc-timeslice-bench.XXXXXX";
  Node n;
  n.build = build;
  n.dir = ::mkdtemp(tmpl);
  n.socket = n.dir + "/colocd.sock";
  n.log = n.dir + "/colocd.log";
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  n.env = {"PATH=" + path, "LD_LIBRARY_PATH=" + build + "/sim", "SIMGPU_STATE_DIR=" + n.dir + "/simgpu",
           "SIMGPU_DEVICES=16GiB", "HOME=" + n.dir};
  // Debug: colocd logs each turn's drain (how long it waited for the holder's work to complete).
  n.daemon = spawn({build + "/bin/colocd", "--socket", n.socket, "--state-dir", n.dir + "/state", "--log-level", "debug"},
                   n.env, n.log);
  for (int i = 0; i < 2000 && ::access(n.socket.c_str(), F_OK) != 0; ++i) ::usleep(5000);
  if (::access(n.socket.c_str(), F_OK) != 0) die("colocd did not start: " + read_file(n.log));

  std::vector<Spec> specs;
  for (int q : quanta) specs.push_back({q, {1, 1, 1}, seconds});
  for (int q : quanta)
    if (weights_all || q == 100) specs.push_back({q, {2, 1, 1}, weight_seconds});
  for (const std::string& p : patterns) specs.push_back({50, {1, 1, 1}, p == "mixed" ? 1.2 : seconds / 2, p});
  std::printf("timeslice_bench: 3 GPU-bound jobs (2 ms kernels in batches of 10) on one simgpu device, quanta %s ms%s;"
              " then async and mixed launch patterns at 50 ms\n",
              [&] {
                std::string s;
                for (int q : quanta) s += (s.empty() ? "" : "/") + std::to_string(q);
                return s;
              }().c_str(),
              weights_all ? ", weights 2:1:1 at each" : ", weights 2:1:1 at 100 ms");
  std::fflush(stdout);
  const uint64_t t0 = coloc::wire::now_ns();
  json runs = json::array();
  for (size_t i = 0; i < specs.size(); ++i) runs.push_back(run_one(n, specs[i], int(i)));
  const double took = double(coloc::wire::now_ns() - t0) / 1e9;
  ::kill(n.daemon, SIGTERM);
  wait_exit(n.daemon);
  std::string cleanup = "rm -rf '" + n.dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "timeslice_bench: could not remove %s\n", n.dir.c_str());

  std::printf("  %6s %7s %7s %6s %7s %9s %9s %8s %8s %8s %8s %14s %8s %7s\n", "work", "quantum", "weights", "idle", "in hand", "hand p50",
              "hand p99", "hand max", "handovrs", "run p50", "drain99", "shares", "err pts", "rounds");
  for (const json& r : runs) {
    std::string shares;
    for (auto& j : r["jobs"]) {
      char b[16];
      std::snprintf(b, sizeof b, "%s%.2f", shares.empty() ? "" : "/", j["share"].get<double>());
      shares += b;
    }
    std::printf("  %6s %5dms %7s %5.1f%% %6.1f%% %7.2fms %7.2fms %6.1fms %8zu %6.1fms %6.1fms %14s %8.1f %7.1f%s\n",
                r["work"].get<std::string>().c_str(), r["quantum_ms"].get<int>(), weights_str(r["weights"]).c_str(), r["idle_share"].get<double>() * 100,
                r["idle_in_handovers_share"].get<double>() * 100, r["handover_ms_p50"].get<double>(),
                r["handover_ms_p99"].get<double>(), r["handover_ms_max"].get<double>(),
                r["handovers"].get<size_t>(), r["run_ms_median"].get<double>(),
                r["daemon"]["drain_ms_p99"].get<double>(), shares.c_str(),
                r["share_worst_error_points"].get<double>(), r["share_worst_error_points_whole_rounds"].get<double>(),
                r["overlaps"].get<int>() || r["daemon"]["drain_timeouts"].get<int>()
                    ? ("  overlaps " + std::to_string(r["overlaps"].get<int>()) + ", drain timeouts " +
                       std::to_string(r["daemon"]["drain_timeouts"].get<int>()))
                          .c_str()
                    : "");
  }
  std::printf("  goals: idle < 3%% at 100 ms, handover p50 <= 5 ms and p99 <= 50 ms, shares within 5 points (%.0f s)\n", took);
  json j{{"benchmark", "timeslice"},
         {"what", "3 GPU-bound jobs (interpose_client spin: coloc_spin 2 ms kernels, batches of 10) under coloc run on "
                  "one simgpu device in timeslice mode (work spin), and at 50 ms with real training's launch pattern (work async: "
                  "coloc-train --pattern async --streams 2 --sync-every 4) and mixed durations queued in one burst (work "
                  "mixed: 9 x 20 us then 1 x 20 ms, synchronized at the end), judged from SIMGPU_TRACE (slices joined into kernels by pid "
                  "and launch_id; a run is consecutive kernels of one pid). idle_share: time with no kernel, from the "
                  "first kernel to the first job's last; handover: gaps between runs of different jobs; shares: "
                  "device time while all three ran, against weight / sum; daemon: colocd's own drain times"},
         {"machine", coloc::bench::machine()},
         {"goals", {{"idle_share_at_100ms", 0.03}, {"handover_ms_p50", 5}, {"handover_ms_p99", 50}, {"share_error_points", 5}}},
         {"took_s", took},
         {"runs", runs}};
  if (out.find('/') != std::string::npos) {
    std::string parent = out.substr(0, out.rfind('/'));
    ::mkdir(parent.c_str(), 0755);
  }
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("  written to %s\n", out.c_str());
  return 0;
}
