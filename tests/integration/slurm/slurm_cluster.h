// tests/integration/slurm/slurm_cluster.h — a live single-node Slurm cluster for the tests:
// munged, slurmctld and slurmd started by cluster.sh in a temporary directory (free ports, one
// node with gpu:1 and shard:8, a given plugstack.conf), the clients (srun, sbatch, squeue,
// scontrol, scancel) run against it with deadlines, and the waits a test needs (a job running, a
// job done) done by polling Slurm, never by sleeping a guessed time.
//
// Needs root (slurmd runs jobs as their user) and Slurm with munge installed (Debian: slurmctld
// slurmd slurm-client munge). slurm_skip() says when a test cannot run here.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../../support/proc.h"

namespace coloc::test::slurm {

/// True (with a MESSAGE saying why) when the Slurm tests cannot run here and the test should
/// return: a sanitizer build (slurmstepd is not sanitized: it can neither load a sanitized plugin
/// nor preload a sanitized libcoloc.so into its tasks), the real driver (the tests size their GPU
/// with simgpu), not root, or Slurm/munge not installed. Under CI=true a missing Slurm is a test
/// failure instead (FAIL_CHECK with the same sentence, and true).
bool slurm_skip();

/// What a finished Slurm job looked like to `scontrol show job`.
struct JobInfo {
  long id = 0;
  std::string state;      ///< JobState: COMPLETED, FAILED, CANCELLED, ... ("" when unknown)
  int exit_code = -1;     ///< ExitCode's first half (the batch script's status)
  int exit_signal = 0;    ///< ExitCode's second half
  std::string raw;        ///< scontrol's one-line record, for messages
  bool done() const;      ///< a final state (not PENDING, RUNNING, COMPLETING, ...)
};

/// A submitted batch job: its id and where its output goes.
struct BatchJob {
  long id = 0;             ///< 0 when sbatch refused it
  ProcResult submit;       ///< sbatch's own outcome
  std::string out_path;    ///< the job's stdout (-o)
  std::string err_path;    ///< the job's stderr (-e)
  std::string out() const; ///< the job's stdout so far ("" when there is none yet)
  std::string err() const;
};

class SlurmCluster {
 public:
  /// Starts a cluster whose PlugStackConfig is a file holding `plugstack` (may be empty), with
  /// `extra_conf` (lines) appended to its slurm.conf; FAILs
  /// the test (REQUIRE) with the daemons' logs when it does not come up within 20 s.
  explicit SlurmCluster(const std::string& plugstack = "", const std::string& tag = "slurm",
                        const std::string& extra_conf = "");
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  /// Stops the daemons (cluster.sh stop); the destructor does it too.
  void stop();
  bool running() const { return started_; }

  /// The cluster's directory; `file(name)` a path in it (job outputs go there by default).
  const std::string& dir() const { return dir_.path(); }
  std::string file(const std::string& name) const { return dir_ / name; }
  const std::string& conf() const { return conf_; }
  const std::string& plugstack_path() const { return plugstack_path_; }
  /// Rewrites plugstack.conf. Slurm 22.05 needs no restart and no `scontrol reconfigure` for it:
  /// srun and sbatch read it at each run, and slurmd's slurmstepd at each step it starts.
  void set_plugstack(const std::string& text) const { write_file(plugstack_path_, text); }
  /// Seconds cluster.sh start took (the node idle).
  double start_seconds() const { return start_s_; }

  /// An environment for the clients: `base` (default: a fresh Env) with SLURM_CONF pointing at this
  /// cluster and no SLURM_* job variables inherited from a caller (SLURM_SPANK_* options stay).
  Env env(const Env& base = Env()) const;

  /// `srun ARGS` in `env` (SLURM_CONF added), waited for up to `timeout`.
  ProcResult srun(const std::vector<std::string>& args, const Env& env = Env(),
                  std::chrono::milliseconds timeout = 60s) const;
  /// `srun ARGS` started, not waited for.
  std::unique_ptr<Proc> srun_async(const std::vector<std::string>& args, const Env& env = Env()) const;
  /// `sbatch --parsable -o DIR/job-%j.out -e DIR/job-%j.err ARGS` (add --wrap or a script); `id` 0
  /// when sbatch refused it (see `submit`).
  BatchJob sbatch(const std::vector<std::string>& args, const Env& env = Env()) const;
  /// Any Slurm client (scontrol, squeue, scancel, sinfo) against this cluster.
  ProcResult client(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 20s) const;

  /// `scontrol show job -o ID`, parsed (state "" when scontrol does not know the job).
  JobInfo job(long id) const;
  /// Polls until the job is RUNNING (true), or done / `timeout` (false).
  bool wait_job_running(long id, std::chrono::milliseconds timeout = 30s) const;
  /// Polls until the job is in a final state; its last JobInfo (state "" or not done on timeout).
  JobInfo wait_job_done(long id, std::chrono::milliseconds timeout = 60s) const;
  /// `scancel ID`; true when scancel exited 0.
  bool scancel(long id) const;
  /// The ids of the jobs Slurm still remembers (any state) with name `name`.
  std::vector<long> jobs_named(const std::string& name) const;

  /// The tails of the daemons' logs and of slurm.conf's plugstack, for failure messages.
  std::string logs() const;

 private:
  TempDir dir_;
  std::string conf_, plugstack_path_;
  bool started_ = false;
  double start_s_ = 0;
};

/// The path of cluster.sh in the source tree.
std::string cluster_script();

/// A name no other test run uses (tag-<pid>-<counter>): job names, files.
std::string unique_name(const std::string& tag);

/// How many times `needle` occurs in `hay`.
size_t count_of(const std::string& hay, const std::string& needle);

}  // namespace coloc::test::slurm
