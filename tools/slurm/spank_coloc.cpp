// tools/slurm/spank_coloc.cpp — coloc's SPANK plugin: a Slurm job on a node with colocd runs as
// one coloc job, `slurm-<jobid>` (array tasks `slurm-<arrayjobid>_<taskid>`), with coloc's
// admission, limit, waits, compute policy and report. docs/slurm.md is the admin's and user's
// guide; this comment is the developer's.
//
// Contexts (spank.h) and what the plugin does in each:
//   local (srun), allocator (sbatch, salloc)
//       registers the options and checks their values as they are given (command line or
//       SLURM_SPANK_COLOC_* variables): a bad value fails srun/sbatch before the job is queued,
//       with coloc's own message.
//   remote (slurmstepd, one per step and node)
//       init_post_opt: starts the job's anchor, `coloc anchor`, as the job's user, detached from
//           the step (double fork, own session) so that the step's signals are not its; it holds
//           the coloc job until this slurmstepd ends (the until-pipe's write end lives here,
//           close-on-exec). Every step but the extern one anchors (PrologFlags=contain's extern
//           step sees none of the job's options): a job's steps that overlap (sbatch and its srun
//           steps) are one coloc job, as colocd counts a job's anchors.
//       task_init: in each task, just before exec, as the user: LD_PRELOAD (libcoloc.so added
//           once, in front; any other copy of libcoloc.so removed), COLOC_JOB, COLOC_STEP, COLOC_SOCKET, COLOC_MEM_LIMIT, COLOC_PRIORITY,
//           COLOC_ON_FULL (and COLOC_REQUIRE_DAEMON=1 with required=1); COLOC_PRIORITY is the one
//           colocd granted the anchor. Messages for the user go to the task's own stderr, from its
//           local task 0. With --coloc=off: no anchor, and a task that inherits this job's coloc
//           environment (an srun in a batch script under coloc) loses it.
//       task_exit, exit: the step's exit status (its first failing task's, else 0) goes to the
//           anchor, which says goodbye with it: the report's exit_status.
//   slurmd, job script (prolog/epilog)
//       nothing: these callbacks always return 0, since a failing prolog drains the node.
//
// Plugin arguments (plugstack.conf), all optional:
//   socket=PATH        colocd's socket (default /run/coloc/colocd.sock)
//   lib=PATH           libcoloc.so (default: next to this plugin)
//   coloc=PATH         the coloc binary (default: ../../bin/coloc from this plugin, make install's layout)
//   mem_per_shard=SIZE without --coloc-mem, the limit is SLURM_SHARDS_ON_NODE x SIZE
//   required=0|1       without colocd: run with a warning (0, default) or refuse the step (1)
//   allow_off=0|1      whether users may opt out with --coloc=off (default 1)
// A malformed argument is logged, and the plugin does nothing for the job (a typo in plugstack.conf
// must not stop every job on the cluster).
//
// Written in C++ (Debian's slurm/spank.h compiles as C++, inside extern "C") so that sizes have one grammar,
// coloc/size.h's, as everywhere else in coloc.

#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// spank.h declares the callbacks (slurm_spank_init, ...) outside its own extern "C" block: included
// bare in C++ they would get C++ linkage (mangled names Slurm never finds), so it is wrapped here.
extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "coloc/protocol.h"
#include "coloc/size.h"

// What Slurm looks for in a SPANK plugin (spank.h's SPANK_PLUGIN, spelled out: in C++ a const at
// namespace scope would have internal linkage).
#define COLOC_SPANK_EXPORT __attribute__((visibility("default")))
extern "C" {
COLOC_SPANK_EXPORT extern const char plugin_name[] = "coloc";
COLOC_SPANK_EXPORT extern const char plugin_type[] = "spank";
COLOC_SPANK_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
COLOC_SPANK_EXPORT extern const unsigned int spank_plugin_version = 1;
}

namespace {

// ---- settings ---------------------------------------------------------------------------

struct Config {
  std::string socket = "/run/coloc/colocd.sock";
  std::string lib;    ///< libcoloc.so
  std::string coloc;  ///< the coloc binary
  uint64_t mem_per_shard = 0;  ///< bytes; 0 = none
  bool required = false;
  bool allow_off = true;
  bool broken = false;  ///< a malformed argument: the plugin does nothing (refuses GPU steps with required=1)
  std::string error;    ///< the first malformed argument and what is wrong with it
};

/// The user's options, as given (validated by their callback).
struct Options {
  uint64_t mem = 0;  ///< bytes; 0 = not given
  std::string mem_text;
  std::string priority;  ///< "" = normal
  std::string on_full;   ///< "" = wait
  std::string weight;    ///< "" = colocd's default
  bool off = false;
};

/// What this slurmstepd knows of the job and its anchor (remote context only).
struct Step {
  bool active = false;  ///< coloc applies to this step
  bool gpu = false;     ///< the step has a GPU here (gpu or shard GRES), or asked for coloc (--coloc-*)
  bool lib_ok = true;   ///< lib= is there to preload
  std::string job;      ///< slurm-<jobid> or slurm-<arrayjobid>_<taskid>
  std::string label;    ///< batch, extern, interactive, or the step number
  uint64_t limit = 0;   ///< bytes; 0 = none
  enum class Anchor { kNone, kOk, kBusy, kError } anchor = Anchor::kNone;
  std::string why;                 ///< with kBusy and kError: colocd's or the anchor's sentence
  std::vector<std::string> notes;  ///< the anchor's notes (a lowered priority, a refused weight)
  std::string granted;             ///< the priority colocd granted, when it lowered the one asked for
  bool off = false;                ///< --coloc=off: the tasks get none of coloc's environment
  int until_fd = -1;               ///< the until-pipe's write end: closing it ends the anchor
  int status = -1;                 ///< the step's exit status (0..255), -1 = none yet
};

Config g_config;
Options g_opt;
Step g_step;

/// The exit status of a task refused for want of colocd (required=1): as a shell's for a command
/// found but not run.
constexpr int kRefusedExit = 126;

/// The smallest --coloc-mem: one CUDA context as libcoloc.so counts it (COLOC_CONTEXT_BYTES's
/// default, tools/coloc/run_plan.h kDefaultContextBytes).
constexpr uint64_t kMinLimit = 512ull << 20;

enum OptionId { kOptMem = 1, kOptPriority, kOptOnFull, kOptWeight, kOptColoc };

// ---- small helpers ------------------------------------------------------------------------

std::string plugin_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_dir), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

/// A value for a log line or a message: printable ASCII only, at most 200 characters.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (out.size() >= 200) {
      out += "...";
      break;
    }
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= size_t(n);
  }
}

/// Checks one user option's value; "" when good, else coloc's sentence.
std::string check_option(int id, const char* arg, Options* into) {
  const std::string v = arg ? arg : "";
  switch (id) {
    case kOptMem: {
      coloc::SizeParse s = coloc::parse_limit(v);
      if (!s) return "--coloc-mem=" + printable(v) + ": " + s.error + " (e.g. --coloc-mem=20G)";
      // Below what coloc counts for one CUDA context (libcoloc.so's COLOC_CONTEXT_BYTES default,
      // 512 MiB) no CUDA job can run: most likely a unit left out ("20" is 20 bytes).
      if (*s.bytes < kMinLimit) {
        const bool bare = v.find_first_not_of("0123456789") == std::string::npos;
        return "--coloc-mem=" + printable(v) + ": less than one CUDA context (512 MiB), which coloc counts for every " +
               "process" + (bare ? "; a size without a unit is bytes (did you mean " + printable(v) + "G?)" : "");
      }
      into->mem = *s.bytes;
      into->mem_text = v;
      return "";
    }
    case kOptPriority: {
      coloc::proto::Priority p;
      if (!coloc::proto::parse_priority(v.c_str(), &p))
        return "--coloc-priority=" + printable(v) + ": use high, normal or best-effort";
      into->priority = v;
      return "";
    }
    case kOptOnFull:
      if (v != "wait" && v != "fail") return "--coloc-on-full=" + printable(v) + ": use wait or fail";
      into->on_full = v;
      return "";
    case kOptWeight: {
      char* end = nullptr;
      errno = 0;
      long w = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || w < coloc::proto::kMinWeight || w > coloc::proto::kMaxWeight)
        return "--coloc-weight=" + printable(v) + ": a whole number from " +
               std::to_string(coloc::proto::kMinWeight) + " to " + std::to_string(coloc::proto::kMaxWeight);
      into->weight = v;
      return "";
    }
    case kOptColoc:
      if (v == "on") {
        into->off = false;
        return "";
      }
      if (v != "off") return "--coloc=" + printable(v) + ": use --coloc=off to run this job without coloc";
      if (!g_config.allow_off) return "--coloc=off: this cluster runs every GPU job under coloc (allow_off=0)";
      into->off = true;
      return "";
  }
  return "unknown option";
}

int option_cb(int val, const char* optarg, int /*remote*/) {
  const std::string err = check_option(val, optarg, &g_opt);
  if (err.empty()) return 0;
  slurm_error("coloc: %s", err.c_str());
  return -1;
}

struct spank_option g_options[] = {
    {const_cast<char*>("coloc-mem"), const_cast<char*>("SIZE"),
     const_cast<char*>("coloc: the job's GPU memory limit per device, also held for it at admission (e.g. 20G)"), 1,
     kOptMem, option_cb},
    {const_cast<char*>("coloc-priority"), const_cast<char*>("PRIORITY"),
     const_cast<char*>("coloc: high, normal (default) or best-effort"), 1, kOptPriority, option_cb},
    {const_cast<char*>("coloc-on-full"), const_cast<char*>("wait|fail"),
     const_cast<char*>("coloc: when the GPU is full, wait for memory (default) or fail at once"), 1, kOptOnFull,
     option_cb},
    {const_cast<char*>("coloc-weight"), const_cast<char*>("W"),
     const_cast<char*>("coloc: quanta per round on time-sliced GPUs, 1-100 (default 1)"), 1, kOptWeight, option_cb},
    {const_cast<char*>("coloc"), const_cast<char*>("off"),
     const_cast<char*>("coloc: --coloc=off runs the job without coloc (where the admin allows it)"), 1, kOptColoc,
     option_cb},
};

/// Reads plugstack.conf's arguments into g_config; logs and marks it broken on a bad one.
void parse_args(int ac, char** av) {
  const std::string dir = plugin_dir();
  g_config.lib = dir + "/libcoloc.so";
  g_config.coloc = dir + "/../../bin/coloc";
  for (int i = 0; i < ac; ++i) {
    const std::string a = av[i] ? av[i] : "";
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    std::string err;
    if (eq == std::string::npos || value.empty()) err = "expected KEY=VALUE";
    else if (key == "socket") g_config.socket = value;
    else if (key == "lib") g_config.lib = value;
    else if (key == "coloc") g_config.coloc = value;
    else if (key == "mem_per_shard") {
      coloc::SizeParse s = coloc::parse_limit(value);
      if (!s || *s.bytes == 0) err = s ? "must be above 0" : s.error;
      else g_config.mem_per_shard = *s.bytes;
    } else if (key == "required" || key == "allow_off") {
      if (value != "0" && value != "1") err = "use 0 or 1";
      else (key == "required" ? g_config.required : g_config.allow_off) = value == "1";
    } else {
      err = "unknown argument (socket=, lib=, coloc=, mem_per_shard=, required=, allow_off=)";
    }
    if (!err.empty()) {
      slurm_error("coloc: plugstack.conf: '%s': %s; coloc does nothing for this job", printable(a).c_str(),
                  err.c_str());
      if (!g_config.broken) g_config.error = "plugstack.conf's '" + printable(a) + "': " + err;
      g_config.broken = true;
    }
  }
}

// ---- the anchor ---------------------------------------------------------------------------

std::string step_label(uint32_t stepid) {
  switch (stepid) {
    case SLURM_BATCH_SCRIPT: return "batch";
    case SLURM_EXTERN_CONT: return "extern";
    case SLURM_INTERACTIVE_STEP: return "interactive";
    default: return std::to_string(stepid);
  }
}

/// The job's (or, in task_init, the task's) variable `name` ("" when unset), whatever its length.
std::string task_getenv(spank_t sp, const char* name) {
  std::vector<char> buf(4096);
  for (;;) {
    const spank_err_t rc = spank_getenv(sp, name, buf.data(), int(buf.size()));
    if (rc == ESPANK_SUCCESS) return std::string(buf.data());
    if (rc != ESPANK_NOSPACE || buf.size() >= (1u << 20)) return "";
    buf.resize(buf.size() * 4);
  }
}

/// The last non-empty line of the file at `path` (its first 64 KiB), "" when unreadable.
std::string last_line(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  ssize_t n;
  while (text.size() < (64u << 10) && ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)))
    if (n > 0) text.append(buf, size_t(n));
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

/// The step's command for the report (and the job's fingerprint in colocd's run history): its
/// argv, joined and made printable; for the batch step, whose argv is a copy of the script in
/// slurmd's spool (a new path for every job), "sbatch " and the job's name.
std::string step_command(spank_t sp) {
  int argc = 0;
  char** argv = nullptr;
  const bool have_argv = spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 && argv;
  if (g_step.label == "batch") {
    const std::string name = task_getenv(sp, "SLURM_JOB_NAME");  // any length (printable() cuts it)
    // Every `sbatch --wrap` job is named "wrap": its command is the wrapped one, the script's last
    // line, so that unrelated wrapped commands do not share a run history.
    if (name == "wrap" && have_argv && argv[0]) {
      const std::string wrapped = last_line(argv[0]);
      if (!wrapped.empty()) return printable("sbatch --wrap " + wrapped);
    }
    if (!name.empty()) return printable("sbatch " + name);
  }
  if (!have_argv) return "";
  std::string cmd;
  for (int i = 0; i < argc && argv[i]; ++i) {
    if (!cmd.empty()) cmd += ' ';
    cmd += argv[i];
  }
  return printable(cmd);
}

/// Reads the anchor's answer from `fd` (anchor_cmd.h: "note ..." lines, then ok/busy/error),
/// waiting up to `timeout_ms` in all.
void read_answer(int fd, int timeout_ms) {
  std::string text;
  timespec start{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (spent >= timeout_ms) {
      g_step.anchor = Step::Anchor::kBusy;
      g_step.why = "coloc anchor did not answer within " + std::to_string(timeout_ms / 1000) + " s";
      return;
    }
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, int(timeout_ms - spent));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < 8192) text.append(buf, size_t(n));
  }
  g_step.anchor = Step::Anchor::kError;
  g_step.why = "coloc anchor ended without an answer";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t sp = line.find(' ');
    const std::string word = line.substr(0, sp), rest = sp == std::string::npos ? "" : printable(line.substr(sp + 1));
    coloc::proto::Priority granted;
    if (word == "note") g_step.notes.push_back(rest);
    else if (word == "priority" && coloc::proto::parse_priority(rest.c_str(), &granted)) g_step.granted = rest;
    else if (word == "ok") g_step.anchor = Step::Anchor::kOk;
    else if (word == "busy") g_step.anchor = Step::Anchor::kBusy, g_step.why = rest;
    else if (word == "error") g_step.anchor = Step::Anchor::kError, g_step.why = rest;
  }
}

/// Starts `coloc anchor` for the job as its user, detached from the step, and waits for its
/// answer. Everything the child needs is built before fork: between fork and exec it makes
/// system calls only (slurmstepd has threads).
void start_anchor(spank_t sp) {
  uid_t uid = 0;
  gid_t gid = 0;
  gid_t* gids = nullptr;
  int ngids = 0;
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    g_step.anchor = Step::Anchor::kError;
    g_step.why = "the job's user is not known to the plugin";
    return;
  }
  if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) != ESPANK_SUCCESS) {
    gids = nullptr;
    ngids = 0;
  }
  std::vector<gid_t> groups(gids && ngids > 0 ? size_t(ngids) : 1, gid);
  if (gids && ngids > 0) std::copy(gids, gids + ngids, groups.begin());

  std::vector<std::string> args = {g_config.coloc, "anchor", "--socket", g_config.socket, "--job", g_step.job};
  if (g_step.limit > 0) args.insert(args.end(), {"--mem", std::to_string(g_step.limit)});
  if (!g_opt.priority.empty()) args.insert(args.end(), {"--priority", g_opt.priority});
  if (!g_opt.on_full.empty()) args.insert(args.end(), {"--on-full", g_opt.on_full});
  if (!g_opt.weight.empty()) args.insert(args.end(), {"--weight", g_opt.weight});
  const std::string cmd = step_command(sp);
  if (!cmd.empty()) args.insert(args.end(), {"--command", cmd});
  args.insert(args.end(), {"--step", g_step.label});
  args.insert(args.end(), {"--until-fd", "3", "--ready-fd", "4"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char path_env[] = "PATH=/usr/local/bin:/usr/bin:/bin";
  char* envp[] = {path_env, nullptr};
  const char* root_dir = "/";  // the anchor holds no directory of the step's
  const std::string cannot_run =
      "error cannot run " + printable(g_config.coloc) + " (check the plugin's coloc= argument)\n";
  sigset_t no_signals;
  ::sigemptyset(&no_signals);

  int until[2], ready[2];
  if (::pipe2(until, O_CLOEXEC) != 0) {
    g_step.anchor = Step::Anchor::kError;
    g_step.why = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    g_step.anchor = Step::Anchor::kError;
    g_step.why = std::string("pipe: ") + std::strerror(errno);
    ::close(until[0]);
    ::close(until[1]);
    return;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    // The first child: a new session, and a grandchild that init adopts, so that the step's
    // process tracking and its signals leave the anchor alone; it ends with the until-pipe.
    ::setsid();
    // slurmstepd's thread blocks signals; a blocked mask survives exec: the anchor starts clean.
    ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    const pid_t grandchild = ::fork();
    if (grandchild != 0) ::_exit(grandchild < 0 ? 127 : 0);
    const int u = ::fcntl(until[0], F_DUPFD, 10), r = ::fcntl(ready[1], F_DUPFD, 10);
    if (u < 0 || r < 0 || ::dup2(u, 3) < 0 || ::dup2(r, 4) < 0) ::_exit(127);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::close_range(5, ~0u, 0);
    static const char cannot_become[] = "error cannot take on the job's user and groups\n";
    if (::chdir(root_dir) != 0 || ::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
        ::setuid(uid) != 0) {
      (void)!::write(4, cannot_become, sizeof cannot_become - 1);
      ::_exit(126);
    }
    ::execve(argv[0], argv.data(), envp);
    (void)!::write(4, cannot_run.data(), cannot_run.size());
    ::_exit(127);
  }
  ::close(until[0]);
  ::close(ready[1]);
  if (child < 0) {
    g_step.anchor = Step::Anchor::kError;
    g_step.why = std::string("fork: ") + std::strerror(errno);
    ::close(until[1]);
    ::close(ready[0]);
    return;
  }
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  // coloc anchor answers within its own timeouts (connect 10 s while colocd's listen queue is
  // full, answer 10 s): a stalled colocd delays the step by 10 s, 15 s at most (docs/slurm.md).
  read_answer(ready[0], 15000);
  ::close(ready[0]);
  if (g_step.anchor == Step::Anchor::kError) {
    ::close(until[1]);
  } else {
    g_step.until_fd = until[1];
  }
}

// ---- remote context -----------------------------------------------------------------------

/// The step's settings: job id, step label, limit. False when coloc has nothing to do.
bool plan_step(spank_t sp) {
  uint32_t jobid = 0, stepid = 0, array_id = 0, array_task = 0;
  if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) return false;
  if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS) return false;
  // A job outside an array has its own id as array id and NO_VAL as task id (Slurm 22.05).
  if (spank_get_item(sp, S_JOB_ARRAY_ID, &array_id) == ESPANK_SUCCESS && array_id != 0 &&
      spank_get_item(sp, S_JOB_ARRAY_TASK_ID, &array_task) == ESPANK_SUCCESS && array_task != NO_VAL)
    g_step.job = "slurm-" + std::to_string(array_id) + "_" + std::to_string(array_task);
  else
    g_step.job = "slurm-" + std::to_string(jobid);
  g_step.label = step_label(stepid);
  g_step.limit = g_opt.mem;
  if (g_step.limit == 0 && g_config.mem_per_shard > 0) {
    char buf[32] = {0};
    if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", buf, sizeof buf) == ESPANK_SUCCESS) {
      char* end = nullptr;
      unsigned long long shards = std::strtoull(buf, &end, 10);
      if (end != buf && *end == '\0' && shards > 0 && shards <= (~0ull) / g_config.mem_per_shard)
        g_step.limit = shards * g_config.mem_per_shard;
    }
  }
  return true;
}

/// Whether the step has a GPU on this node (Slurm's gpu or shard GRES) or the user asked for
/// coloc with an option: only such steps are anchored (a CPU-only job gets no coloc job and no
/// report, and required=1 never refuses it).
bool gpu_step(spank_t sp) {
  if (g_opt.mem > 0 || !g_opt.priority.empty() || !g_opt.on_full.empty() || !g_opt.weight.empty()) return true;
  for (const char* v : {"SLURM_GPUS_ON_NODE", "SLURM_SHARDS_ON_NODE"}) {
    const std::string n = task_getenv(sp, v);
    if (!n.empty() && n != "0") return true;
  }
  return false;
}

int remote_init_post_opt(spank_t sp) {
  if (g_config.broken && !g_config.required) return 0;
  if (!plan_step(sp)) {
    slurm_error("coloc: cannot read the job's id or step; coloc does nothing for this step");
    return 0;
  }
  g_step.gpu = gpu_step(sp);
  if (g_config.broken) {
    // required=1 with a malformed argument: fail closed, for GPU steps (a typo must not run GPU
    // jobs outside coloc where the site requires it).
    if (!g_step.gpu) return 0;
    g_step.active = true;
    g_step.lib_ok = false;
    g_step.anchor = Step::Anchor::kError;
    g_step.why = g_config.error;
    return 0;
  }
  if (g_step.label == "extern") {
    // PrologFlags=contain's extern step: Slurm gives it none of the job's options (nor its
    // SLURM_SHARDS_ON_NODE), and it starts first: its anchor would make the coloc job with no
    // limit, priority normal and no command, and the job's own steps could not change that. The
    // job's steps anchor it instead; the extern step's processes (pam_slurm_adopt's) are left alone.
    slurm_verbose("coloc: job %s: the extern step does not anchor the job", g_step.job.c_str());
    return 0;
  }
  if (g_opt.off) {
    // No anchor; and the tasks lose what they would inherit of coloc from an enclosing step
    // (an srun --coloc=off in a batch script that runs under coloc): task_init.
    g_step.off = true;
    return 0;
  }
  g_step.active = true;
  g_step.lib_ok = ::access(g_config.lib.c_str(), R_OK) == 0;
  if (!g_step.lib_ok) {
    // Preloading a library that is not there only fills the task's stderr with ld.so errors.
    g_step.anchor = Step::Anchor::kError;
    g_step.why = "there is no libcoloc.so at " + g_config.lib + " (plugstack.conf's lib=)";
    if (g_step.gpu) slurm_error("coloc: job %s: %s", g_step.job.c_str(), g_step.why.c_str());
    return 0;
  }
  if (!g_step.gpu) {
    slurm_verbose("coloc: job %s step %s: no GPU here: not anchored", g_step.job.c_str(), g_step.label.c_str());
    return 0;
  }
  start_anchor(sp);
  // The anchor's sentence for `coloc run` users names COLOC_SOCKET and --socket; here it is the
  // plugin's socket= that says where colocd is.
  const std::string cli_hint = "set COLOC_SOCKET or --socket";
  if (size_t at = g_step.why.find(cli_hint); at != std::string::npos)
    g_step.why.replace(at, cli_hint.size(), "plugstack.conf's socket= says where it is");
  if (g_step.anchor == Step::Anchor::kError)
    slurm_error("coloc: job %s step %s: no coloc job: %s", g_step.job.c_str(), g_step.label.c_str(),
                g_step.why.c_str());
  else
    slurm_verbose("coloc: job %s step %s: anchored (%s)", g_step.job.c_str(), g_step.label.c_str(),
                  g_step.anchor == Step::Anchor::kOk ? "ok" : g_step.why.c_str());
  return 0;
}

/// Whether an LD_PRELOAD entry is `lib` or another copy of libcoloc.so (another install's, a
/// `coloc run` the job was submitted from): two copies in one process would each count the
/// process's memory against the job's limit.
bool is_coloc_lib(const std::string& entry, const std::string& lib) {
  if (entry == lib) return true;
  const size_t slash = entry.rfind('/');
  const std::string base = slash == std::string::npos ? entry : entry.substr(slash + 1);
  return base == "libcoloc.so" || base.rfind("libcoloc.so.", 0) == 0;
}

/// LD_PRELOAD without `lib` and any other libcoloc.so (entries separated by ':' or ' ').
std::string without_preload(const std::string& current, const std::string& lib) {
  std::string out;
  size_t pos = 0;
  while (pos <= current.size()) {
    size_t end = current.find_first_of(": ", pos);
    if (end == std::string::npos) end = current.size();
    const std::string entry = current.substr(pos, end - pos);
    if (!entry.empty() && !is_coloc_lib(entry, lib)) out += (out.empty() ? "" : ":") + entry;
    pos = end + 1;
  }
  return out;
}

/// LD_PRELOAD with `lib` in front, once, and no other libcoloc.so (an sbatch script's inner srun
/// inherits its batch step's; a job submitted from `coloc run` brings that one's).
std::string with_preload(const std::string& current, const std::string& lib) {
  const std::string rest = without_preload(current, lib);
  return rest.empty() ? lib : lib + ":" + rest;
}

/// The variables task_init sets.
const char* const kTaskVars[] = {"COLOC_JOB",     "COLOC_STEP",    "COLOC_SOCKET",        "COLOC_MEM_LIMIT",
                                 "COLOC_PRIORITY", "COLOC_ON_FULL", "COLOC_REQUIRE_DAEMON"};

/// --coloc=off: a task that inherits coloc's environment from this job's enclosing step (its
/// batch step) gets none of it.
void strip_task(spank_t sp) {
  if (task_getenv(sp, "COLOC_JOB") != g_step.job) return;  // not this job's (a user's own)
  const std::string preload = task_getenv(sp, "LD_PRELOAD");
  const std::string rest = without_preload(preload, g_config.lib);
  if (rest.empty()) spank_unsetenv(sp, "LD_PRELOAD");
  else if (rest != preload) spank_setenv(sp, "LD_PRELOAD", rest.c_str(), 1);
  for (const char* v : kTaskVars) spank_unsetenv(sp, v);
}

int remote_task_init(spank_t sp) {
  if (g_step.off) {
    strip_task(sp);
    return 0;
  }
  if (!g_step.active) return 0;
  int local_task = 0;
  if (spank_get_item(sp, S_TASK_ID, &local_task) != ESPANK_SUCCESS) local_task = 0;
  const bool speaker = local_task == 0;  // messages once per node, from local task 0
  if (g_step.anchor == Step::Anchor::kError && g_config.required && g_step.gpu) {
    // Refused here, in the task's own process just before its exec: returning an error would do
    // only for a plugin listed as `required` in plugstack.conf (Slurm ignores an `optional` one's
    // failure, and runs the task anyway).
    write_all(2, "coloc: " + g_step.job + ": colocd is required on this cluster, and " + g_step.why +
                     "; the step is refused (ask the admin to check colocd on this node: coloc doctor)\n");
    ::_exit(kRefusedExit);
  }
  if (!g_step.lib_ok) {
    if (speaker && g_step.gpu)
      write_all(2, "coloc: warning: " + g_step.job + ": " + g_step.why + "; the job runs without coloc\n");
    return 0;
  }
  spank_setenv(sp, "LD_PRELOAD", with_preload(task_getenv(sp, "LD_PRELOAD"), g_config.lib).c_str(), 1);
  spank_setenv(sp, "COLOC_JOB", g_step.job.c_str(), 1);
  spank_setenv(sp, "COLOC_STEP", g_step.label.c_str(), 1);
  spank_setenv(sp, "COLOC_SOCKET", g_config.socket.c_str(), 1);
  // No limit: none inherited either (a job submitted from a `coloc run --mem` shell, or from
  // another job's step, has its COLOC_MEM_LIMIT).
  if (g_step.limit > 0) spank_setenv(sp, "COLOC_MEM_LIMIT", std::to_string(g_step.limit).c_str(), 1);
  else spank_unsetenv(sp, "COLOC_MEM_LIMIT");
  // The priority colocd granted, when it lowered the one asked for: each process asking again for
  // the refused one would be lowered again, and warn again.
  const std::string priority = !g_step.granted.empty() ? g_step.granted
                               : g_opt.priority.empty() ? std::string("normal")
                                                        : g_opt.priority;
  spank_setenv(sp, "COLOC_PRIORITY", priority.c_str(), 1);
  spank_setenv(sp, "COLOC_ON_FULL", g_opt.on_full.empty() ? "wait" : g_opt.on_full.c_str(), 1);
  if (g_config.required) spank_setenv(sp, "COLOC_REQUIRE_DAEMON", "1", 1);
  else spank_unsetenv(sp, "COLOC_REQUIRE_DAEMON");
  if (!speaker) return 0;
  for (const std::string& n : g_step.notes) write_all(2, "coloc: warning: " + n + "\n");
  if (g_step.anchor == Step::Anchor::kError && g_step.gpu) {
    char limit[32];
    write_all(2, "coloc: warning: " + g_step.job + ": " + g_step.why + "; the job runs without colocd" +
                     (g_step.limit > 0 ? std::string(" (each process still holds its limit of ") +
                                             coloc::format_size(g_step.limit, limit, sizeof limit) + ")"
                                       : std::string()) +
                     "\n");
  }
  else if (g_step.anchor == Step::Anchor::kBusy)
    write_all(2, "coloc: warning: " + g_step.job + ": " + g_step.why +
                     "; the job starts, and its GPU work waits for colocd\n");
  return 0;
}

int remote_task_exit(spank_t sp) {
  if (!g_step.active) return 0;
  int wstatus = 0;
  if (spank_get_item(sp, S_TASK_EXIT_STATUS, &wstatus) != ESPANK_SUCCESS) return 0;
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : 1;
  if (g_step.status <= 0) g_step.status = code;  // the first failing task's
  return 0;
}

int remote_exit() {
  if (g_step.until_fd < 0) return 0;
  if (g_step.status >= 0) write_all(g_step.until_fd, std::to_string(g_step.status) + "\n");
  ::close(g_step.until_fd);
  g_step.until_fd = -1;
  return 0;
}

}  // namespace

// ---- the callbacks Slurm calls --------------------------------------------------------------

extern "C" {

COLOC_SPANK_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  const spank_context_t ctx = spank_context();
  if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR) return 0;  // slurmd, prolog: never fail
  parse_args(ac, av);
  for (spank_option& o : g_options) {
    spank_err_t rc = spank_option_register(sp, &o);
    if (rc != ESPANK_SUCCESS) slurm_error("coloc: cannot register --%s: %s", o.name, spank_strerror(rc));
  }
  return 0;
}

COLOC_SPANK_EXPORT int slurm_spank_init_post_opt(spank_t sp, int /*ac*/, char** /*av*/) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return remote_init_post_opt(sp);
}

COLOC_SPANK_EXPORT int slurm_spank_task_init(spank_t sp, int /*ac*/, char** /*av*/) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return remote_task_init(sp);
}

COLOC_SPANK_EXPORT int slurm_spank_task_exit(spank_t sp, int /*ac*/, char** /*av*/) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return remote_task_exit(sp);
}

COLOC_SPANK_EXPORT int slurm_spank_exit(spank_t /*sp*/, int /*ac*/, char** /*av*/) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return remote_exit();
}

}  // extern "C"
