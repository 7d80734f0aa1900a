// contention_bench — how well simgpu's contention matches a real GPU's: pairs of training jobs that
// Lucid (ASPLOS'23) ran together on one real GPU, replayed as duty-cycle jobs on simgpu.
//
// Each job is `coloc-train --lucid MODEL/DATASET/BATCH[/amp] --duration SECONDS`: its solo
// gpu_util percent of a period of batch / speed (tools/workload/lucid.h), run with each host model
// of tools/workload/duty.h: serial (kernels, then a fixed host wait) and overlap (host work beside
// the kernels). From lucid-pairs.csv the bench takes the pairs whose two configurations simgpu
// can emulate (lucid::exclusion: periods from 5 slices to 200 ms), sorts them by the sum of their
// solo utilizations and picks --pairs of them evenly spread over that order. It runs every
// configuration alone and every pair together on simgpu (no colocd: plain LD_LIBRARY_PATH=build/sim,
// a private SIMGPU_STATE_DIR per run), each for --seconds, and compares each job's speed together /
// its speed alone (both measured here, per host model) with Lucid's speed1 / speed2. Prints a table
// with the absolute errors and, per host model, their mean (MAE; also over the pairs whose solo
// utilizations sum to 120% or more), the mean signed error (bias: negative = simgpu slows jobs
// more than the real GPU did) and, for scale, the MAE of a model that predicts no slowdown at all;
// writes the same as JSON (--out). A benchmark, not a test: it reports, it does not fail on the
// error (it fails only when a run cannot be made). simgpu is not tuned to these pairs.
#include <fcntl.h>
#include <spawn.h>
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
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../tools/workload/errors.h"
#include "../../tools/workload/lucid.h"
#include "machine.h"
#include "spawn.h"

using json = nlohmann::ordered_json;
namespace lu = coloc::workload::lucid;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "contention_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Args {
  std::string build = "build", out, data = "tools/workload/lucid";
  double seconds = 3;
  size_t pairs = 14;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help") {
      std::printf("contention_bench [--build DIR] [--out FILE] [--data DIR] [--seconds S] [--pairs N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) die("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--build") a.build = v;
    else if (k == "--out") a.out = v;
    else if (k == "--data") a.data = v;
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--pairs") a.pairs = std::stoul(v);
    else die("unknown option " + k);
  }
  if (!(a.seconds > 0) || a.pairs < 2) die("--seconds must be > 0 and --pairs >= 2");
  return a;
}

/// Starts `args` with `env`, stdout to `out`, stderr to `err` (both truncated); dies when it cannot.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& out,
            const std::string& err) {
  const pid_t pid = coloc::bench::spawn_to(args, env, out, err);
  if (pid < 0) die("cannot start " + args[0]);
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// One coloc-train in a run: a configuration, its host model, and the simulated device it shares
/// with the other jobs of the same group (each group gets its own SIMGPU_STATE_DIR).
struct Job {
  std::string key, host_model;
  int group = 0;
};

/// Starts `jobs` at once and waits for them; returns each one's iterations per second.
std::vector<double> run_jobs(const Args& a, const fs::path& tmp, const std::vector<Job>& jobs, int run_no) {
  const fs::path dir = tmp / ("run" + std::to_string(run_no));
  fs::create_directories(dir);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", a.seconds);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + fs::absolute(a.build + "/sim").string(),
                                    "SIMGPU_STATE_DIR=" + (dir / ("simgpu" + std::to_string(jobs[i].group))).string(),
                                    "SIMGPU_DEVICES=16GiB", "SIMGPU_CONTEXT_BYTES=64MiB"};
    for (const char* keep : {"PATH", "HOME", "TMPDIR"})
      if (const char* v = std::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
    const std::string tag = "job" + std::to_string(i);
    pids.push_back(spawn({a.build + "/bin/coloc-train", "--lucid", jobs[i].key, "--lucid-dir", a.data, "--host-model",
                          jobs[i].host_model, "--duration", secs, "--job", tag},
                         env, (dir / (tag + ".out")).string(), (dir / (tag + ".err")).string()));
  }
  std::vector<double> speeds;
  for (size_t i = 0; i < jobs.size(); ++i) {
    int st = 0;
    ::waitpid(pids[i], &st, 0);
    const std::string tag = "job" + std::to_string(i);
    const std::string out = read_file((dir / (tag + ".out")).string());
    json j = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || j.is_discarded() || !j["iters_per_s"].is_number())
      die("coloc-train --lucid " + jobs[i].key + " failed: " + out + read_file((dir / (tag + ".err")).string()));
    speeds.push_back(j["iters_per_s"].get<double>());
  }
  return speeds;
}

std::string label(const lu::Solo& s) {
  char buf[96];
  const auto d = lu::duty_of(s);
  std::snprintf(buf, sizeof buf, "%s (%.0f%% of %.1f ms)", s.config.key().c_str(), d.gpu_util, d.iter_ms);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  std::vector<lu::Solo> solos;
  std::vector<lu::Pair> pairs;
  try {
    solos = lu::load_solo(a.data + "/lucid-solo.csv");
    pairs = lu::load_pairs(a.data + "/lucid-pairs.csv");
  } catch (const coloc::workload::InputError& e) {
    die(e.what());
  }
  const lu::Limits limits = lu::limits_for(2000);  // simgpu's default slice: the runs leave it alone

  // The pairs simgpu can emulate, by the sum of their solo utilizations.
  struct Candidate {
    const lu::Pair* pair;
    const lu::Solo* solo[2];
    double util_sum;
  };
  std::vector<Candidate> ok;
  size_t excluded = 0;
  for (const lu::Pair& p : pairs) {
    const lu::Solo* s0 = lu::find(solos, p.job[0]);
    const lu::Solo* s1 = lu::find(solos, p.job[1]);
    if (!s0 || !s1) die("pair at line " + std::to_string(p.line) + " has a job not in lucid-solo.csv");
    if (p.gpu_num[0] != 1 || p.gpu_num[1] != 1 || !lu::exclusion(*s0, limits).empty() ||
        !lu::exclusion(*s1, limits).empty()) {
      ++excluded;
      continue;
    }
    ok.push_back({&p, {s0, s1}, s0->gpu_util + s1->gpu_util});
  }
  if (ok.size() < a.pairs) die("only " + std::to_string(ok.size()) + " emulatable pairs");
  std::stable_sort(ok.begin(), ok.end(), [](const Candidate& x, const Candidate& y) { return x.util_sum < y.util_sum; });
  std::vector<Candidate> chosen;
  for (size_t i = 0; i < a.pairs; ++i) chosen.push_back(ok[size_t(std::llround(double(i) * double(ok.size() - 1) / double(a.pairs - 1)))]);

  std::printf("contention_bench: %zu of %zu Lucid pairs are emulatable on simgpu (%zu left out: a period outside "
              "%.0f-%.0f ms, or several GPUs); %zu of them, spread over the sum of solo utilizations, %g s per run\n",
              ok.size(), pairs.size(), excluded, limits.min_period_ms, limits.max_period_ms, a.pairs, a.seconds);

  char tmpl[] = "/tmp/coloc-contention-XXXXXX";
  if (!::mkdtemp(tmpl)) die("cannot make a temporary directory");
  const fs::path tmp = tmpl;
  int run_no = 0;

  // Every configuration alone, once per host model: both models at once, each on its own device
  // (the processes mostly sleep, so they hardly compete for the CPU).
  const char* const models[] = {"serial", "overlap"};
  std::map<std::string, double> solo_speed[2];
  std::printf("\n  alone (it/s, and x the pace of its period)     serial           overlap\n");
  for (const Candidate& c : chosen)
    for (const lu::Solo* s : c.solo) {
      const std::string key = s->config.key();
      if (solo_speed[0].count(key)) continue;
      const auto sp = run_jobs(a, tmp, {{key, models[0], 0}, {key, models[1], 1}}, run_no++);
      const double period_s = lu::duty_of(*s).iter_ms / 1000;
      std::printf("  %-46s %7.2f %5.3f    %7.2f %5.3f\n", label(*s).c_str(), sp[0], sp[0] * period_s, sp[1], sp[1] * period_s);
      std::fflush(stdout);
      for (int m = 0; m < 2; ++m) solo_speed[m][key] = sp[m];
    }

  // Every pair together, once per host model (one after the other).
  std::printf("\n%-3s %-46s %-46s %5s | %-11s | %-23s | %-23s\n", "#", "job 1 (solo: util of period)", "job 2", "utils",
              "lucid s1 s2", "serial s1 s2  |err| 1 2", "overlap s1 s2 |err| 1 2");
  json rows = json::array();
  double abs_sum[2] = {0, 0}, signed_sum[2] = {0, 0}, none_sum = 0;
  int n = 0;
  // The same split at a sum of solo utilizations of 120%: below, jobs hardly slow each other.
  constexpr double kContended = 120;
  double hi_abs[2] = {0, 0}, hi_none = 0;
  int hi_n = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Candidate& c = chosen[i];
    const std::string key[2] = {c.solo[0]->config.key(), c.solo[1]->config.key()};
    double sim[2][2], err[2][2], together[2][2];
    for (int m = 0; m < 2; ++m) {
      const auto sp = run_jobs(a, tmp, {{key[0], models[m], 0}, {key[1], models[m], 0}}, run_no++);
      for (int j = 0; j < 2; ++j) {
        together[m][j] = sp[j];
        sim[m][j] = sp[j] / solo_speed[m][key[j]];
        err[m][j] = std::fabs(sim[m][j] - c.pair->speed[j]);
        abs_sum[m] += err[m][j];
        if (c.util_sum >= kContended) hi_abs[m] += err[m][j];
        signed_sum[m] += sim[m][j] - c.pair->speed[j];
      }
    }
    for (int j = 0; j < 2; ++j, ++n) {
      none_sum += std::fabs(1.0 - c.pair->speed[j]);
      if (c.util_sum >= kContended) hi_none += std::fabs(1.0 - c.pair->speed[j]), ++hi_n;
    }
    std::printf("%-3zu %-46s %-46s %4.0f%% | %5.3f %5.3f | %5.3f %5.3f %5.3f %5.3f | %5.3f %5.3f %5.3f %5.3f\n", i + 1,
                label(*c.solo[0]).c_str(), label(*c.solo[1]).c_str(), c.util_sum, c.pair->speed[0], c.pair->speed[1],
                sim[0][0], sim[0][1], err[0][0], err[0][1], sim[1][0], sim[1][1], err[1][0], err[1][1]);
    std::fflush(stdout);
    json jobs = json::array();
    for (int j = 0; j < 2; ++j) {
      const coloc::workload::Duty d = lu::duty_of(*c.solo[j]);
      json job = {{"config", key[j]}, {"gpu_util", d.gpu_util}, {"iter_ms", std::round(d.iter_ms * 1000) / 1000},
                  {"lucid_speed", c.pair->speed[j]}};
      for (int m = 0; m < 2; ++m)
        job[models[m]] = {{"solo_iters_per_s", solo_speed[m][key[j]]},
                          {"pair_iters_per_s", together[m][j]},
                          {"speed", std::round(sim[m][j] * 1000) / 1000},
                          {"abs_error", std::round(err[m][j] * 1000) / 1000}};
      jobs.push_back(job);
    }
    rows.push_back(json{{"line", c.pair->line}, {"util_sum", c.util_sum}, {"lucid_pair_gpu_util", c.pair->gpu_util}, {"jobs", jobs}});
  }
  const double mae_none = none_sum / n;
  json summary = json::object();
  std::printf("\n");
  for (int m = 0; m < 2; ++m) {
    const double mae = abs_sum[m] / n, bias = signed_sum[m] / n;
    const double hi = hi_n ? hi_abs[m] / hi_n : 0;
    std::printf("MAE %.3f (--host-model %s) over %d job speeds; bias %+.3f (simgpu %s than the real GPU); "
                "MAE %.3f over its %d speeds in pairs with utils >= 120%%\n",
                mae, models[m], n, bias, bias < 0 ? "slows jobs more" : "slows jobs less", hi, hi_n);
    summary[models[m]] = {{"mae", std::round(mae * 10000) / 10000},
                          {"bias", std::round(bias * 10000) / 10000},
                          {"mae_utils_ge_120", std::round(hi * 10000) / 10000}};
  }
  const double hi_none_mae = hi_n ? hi_none / hi_n : 0;
  std::printf("For scale, predicting no slowdown at all: MAE %.3f (%.3f with utils >= 120%%)\n", mae_none, hi_none_mae);
  fs::remove_all(tmp);

  if (!a.out.empty()) {
    json doc = {{"bench", "contention"},
                {"machine", coloc::bench::machine()},
                {"seconds_per_run", a.seconds},
                {"simgpu_timeslice_us", 2000},
                {"emulatable", {{"min_period_ms", limits.min_period_ms}, {"max_period_ms", limits.max_period_ms}}},
                {"pairs_emulatable", ok.size()},
                {"pairs_total", pairs.size()},
                {"pairs", rows},
                {"mae", summary},
                {"mae_no_slowdown", std::round(mae_none * 10000) / 10000},
                {"mae_no_slowdown_utils_ge_120", std::round(hi_none_mae * 10000) / 10000}};
    fs::create_directories(fs::path(a.out).parent_path());
    std::ofstream(a.out) << doc.dump(2) << "\n";
    std::printf("wrote %s\n", a.out.c_str());
  }
  return 0;
}
