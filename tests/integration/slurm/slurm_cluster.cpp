#include "slurm_cluster.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace coloc::test::slurm {

namespace {

/// `name` found on PATH or in the sbin directories (the daemons live there, and a user's PATH may
/// lack them).
bool installed(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/local/sbin";
  std::istringstream in(path);
  for (std::string d; std::getline(in, d, ':');) {
    if (d.empty()) continue;
    if (::access((d + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string tail(const std::string& s, size_t n = 3000) { return s.size() > n ? "..." + s.substr(s.size() - n) : s; }

/// The value of `key=` in scontrol's one-line record, up to the next space ("" when absent).
std::string field(const std::string& rec, const std::string& key) {
  size_t at = rec.find(" " + key + "=");
  if (at == std::string::npos) {
    if (rec.rfind(key + "=", 0) != 0) return "";
    at = 0;
  } else {
    at += 1;
  }
  at += key.size() + 1;
  size_t end = rec.find_first_of(" \n", at);
  return rec.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

namespace {

/// Says `why` the Slurm tests skip: a MESSAGE for the test (shown on failure and under -s), and
/// once per binary on stderr, so that a plain run says it too.
void skip_note(const std::string& why) {
  static bool said = false;
  if (!said) {
    said = true;
    std::fprintf(stderr, "slurm tests skipped: %s\n", why.c_str());
  }
  MESSAGE("skipped: ", why);
}

}  // namespace

bool slurm_skip() {
  if (!sanitizer().empty()) {
    skip_note("a " + sanitizer() +
              " build: slurmstepd is not sanitized, so it can load neither a sanitized spank_coloc.so nor "
              "preload a sanitized libcoloc.so into its tasks (the plain build runs these tests)");
    return true;
  }
  if (real_driver()) {
    skip_note("the Slurm tests size their GPU with simgpu (COLOC_TEST_DRIVER=real)");
    return true;
  }
  std::string missing;
  for (const char* b : {"munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scontrol", "scancel", "sinfo",
                        "python3"})
    if (!installed(b)) missing += std::string(missing.empty() ? "" : ", ") + b;
  if (!missing.empty()) {
    const std::string why = "Slurm is not installed (missing: " + missing +
                            "); COLOC_WITH_SLURM=1 mk/deps.sh installs it (slurmctld slurmd slurm-client munge)";
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") {
      FAIL_CHECK("CI=true, and ", why);
    } else {
      skip_note(why);
    }
    return true;
  }
  if (::geteuid() != 0) {
    skip_note("not root: the Slurm tests start slurmd, which must run as root to start jobs");
    return true;
  }
  return false;
}

bool JobInfo::done() const {
  for (const char* s : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                        "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"})
    if (state == s) return true;
  return false;
}

std::string BatchJob::out() const { return read_file(out_path); }
std::string BatchJob::err() const { return read_file(err_path); }

std::string cluster_script() { return source_path("tests/integration/slurm/cluster.sh"); }

std::string unique_name(const std::string& tag) {
  static std::atomic<int> n{0};
  return tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

size_t count_of(const std::string& hay, const std::string& needle) {
  if (needle.empty()) return 0;
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + needle.size())) ++n;
  return n;
}

SlurmCluster::SlurmCluster(const std::string& plugstack, const std::string& tag, const std::string& extra_conf)
    : dir_("coloc-" + tag) {
  conf_ = dir_ / "slurm.conf";
  plugstack_path_ = dir_ / "plugstack.conf";
  write_file(plugstack_path_, plugstack);
  Env e;
  // The watchdog stops the daemons if this binary dies before it stops them.
  e.set("CLUSTER_OWNER_PID", std::to_string(::getpid()));
  if (!extra_conf.empty()) e.set("CLUSTER_EXTRA_CONF", extra_conf);
  const auto t0 = std::chrono::steady_clock::now();
  ProcResult r = run({"bash", cluster_script(), "start", dir_.path(), plugstack_path_}, e, 40s);
  start_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  started_ = true;
  if (r.exit_code != 0) {
    // The constructor throws below, so no destructor will: stop here whatever did start (cluster.sh
    // stops its daemons itself when it fails, not when it was killed on the deadline).
    const std::string why = describe(r) + "\n" + logs();
    stop();
    FAIL("cluster.sh start failed:\n", why);
  }
}

SlurmCluster::~SlurmCluster() { stop(); }

void SlurmCluster::stop() {
  if (!started_) return;
  started_ = false;
  run({"bash", cluster_script(), "stop", dir_.path()}, Env(), 30s);
}

Env SlurmCluster::env(const Env& base) const {
  Env e = base;
  // A caller inside a Slurm job (or an earlier srun's environment) must not make the clients think
  // they run inside that job. SLURM_SPANK_* stay: they are plugin options, which a test sets.
  for (const std::string& kv : base.strings())
    if ((kv.rfind("SLURM_", 0) == 0 && kv.rfind("SLURM_SPANK_", 0) != 0) || kv.rfind("SBATCH_", 0) == 0 ||
        kv.rfind("SRUN_", 0) == 0 || kv.rfind("SALLOC_", 0) == 0)
      e.unset(kv.substr(0, kv.find('=')));
  e.set("SLURM_CONF", conf_);
  return e;
}

ProcResult SlurmCluster::srun(const std::vector<std::string>& args, const Env& env,
                              std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {"srun"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, this->env(env), timeout);
}

std::unique_ptr<Proc> SlurmCluster::srun_async(const std::vector<std::string>& args, const Env& env) const {
  std::vector<std::string> argv = {"srun"};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<Proc>(argv, this->env(env));
}

BatchJob SlurmCluster::sbatch(const std::vector<std::string>& args, const Env& env) const {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--chdir", dir(), "-o", dir_ / "job-%j.out",
                                   "-e", dir_ / "job-%j.err"};
  argv.insert(argv.end(), args.begin(), args.end());
  BatchJob b;
  b.submit = run(argv, this->env(env), 30s);
  if (b.submit.exit_code == 0) {
    // "ID" or "ID;CLUSTER"
    try {
      b.id = std::stol(b.submit.out);
    } catch (...) {
      b.id = 0;
    }
  }
  if (b.id > 0) {
    b.out_path = dir_ / ("job-" + std::to_string(b.id) + ".out");
    b.err_path = dir_ / ("job-" + std::to_string(b.id) + ".err");
  }
  return b;
}

ProcResult SlurmCluster::client(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) const {
  return run(argv, env(), timeout);
}

JobInfo SlurmCluster::job(long id) const {
  JobInfo j;
  j.id = id;
  ProcResult r = client({"scontrol", "show", "job", "-o", std::to_string(id)});
  if (r.exit_code != 0) {
    j.raw = r.err;
    return j;
  }
  j.raw = r.out;
  j.state = field(r.out, "JobState");
  const std::string ec = field(r.out, "ExitCode");
  const size_t colon = ec.find(':');
  if (colon != std::string::npos) {
    try {
      j.exit_code = std::stoi(ec.substr(0, colon));
      j.exit_signal = std::stoi(ec.substr(colon + 1));
    } catch (...) {
    }
  }
  return j;
}

bool SlurmCluster::wait_job_running(long id, std::chrono::milliseconds timeout) const {
  bool ended = false;
  bool ok = wait_until([&] {
    JobInfo j = job(id);
    ended = j.done();
    return j.state == "RUNNING" || ended;
  }, timeout, 20ms);
  return ok && !ended;
}

JobInfo SlurmCluster::wait_job_done(long id, std::chrono::milliseconds timeout) const {
  JobInfo last;
  wait_until([&] {
    last = job(id);
    return last.done();
  }, timeout, 25ms);
  return last;
}

bool SlurmCluster::scancel(long id) const { return client({"scancel", std::to_string(id)}).exit_code == 0; }

std::vector<long> SlurmCluster::jobs_named(const std::string& name) const {
  std::vector<long> ids;
  ProcResult r = client({"squeue", "-h", "--states=all", "-n", name, "-o", "%i"});
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    try {
      if (!l.empty()) ids.push_back(std::stol(l));
    } catch (...) {
    }
  }
  return ids;
}

std::string SlurmCluster::logs() const {
  std::string s;
  for (const char* f : {"slurmctld.log", "slurmd.log", "munged.log", "slurmctld.out", "slurmd.out"}) {
    const std::string text = read_file(dir_ / f);
    if (text.empty()) continue;
    s += "---- " + (dir_ / f) + " ----\n" + tail(text) + "\n";
  }
  s += "---- plugstack.conf ----\n" + read_file(plugstack_path_);
  return s;
}

}  // namespace coloc::test::slurm
