// coloc — the command line: run a job under coloc, and see and steer what colocd does.
//
//   coloc run [--mem SIZE | --estimate-from MODEL --batch N [...]] [--priority P] [--weight W] [--on-full wait|fail]
//             [--job NAME] [--sim] -- CMD ARGS...
//   coloc status [--json] [--wide]      coloc jobs [--json]
//   coloc report JOB [--json] [--svg FILE]
//   coloc set JOB [--mem SIZE] [--priority P] [--weight W]
//   coloc pause JOB      coloc resume JOB      coloc suspend JOB [--no-wait]
//   coloc policy [--json]      coloc policy DEVICE share|timeslice|priority [--quantum 100ms] [--target-slowdown 5%]
//   coloc history [--json] [--wide]     coloc history forget FINGERPRINT|--all
//   coloc estimate --model NAME|--model-file FILE --batch N [...] [--json]   (estimate_cmd.h)
//   coloc doctor [--sim] [--json]   (doctor_cmd.h)      coloc top [--once]   (top_cmd.h)
//   coloc anchor --job ID --until-fd N [--ready-fd M] [--mem ...]   (anchor_cmd.h; for launchers: the Slurm plugin)
//
// Exit codes: 0 done; 1 the daemon refused or failed; 2 bad usage; 3 the daemon is unreachable;
// 4 no such job, device or fingerprint; 5 not allowed; 127 the command of `coloc run` could not be
// started.
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "coloc/protocol.h"
#include "coloc/size.h"
#include "coloc/version.h"
#include "coloc/wire.h"
#include "anchor_cmd.h"
#include "daemon_client.h"
#include "doctor_cmd.h"
#include "estimate_cmd.h"
#include "../../estimator/input_error.h"
#include "format.h"
#include "run_plan.h"
#include "svg_plot.h"
#include "top_cmd.h"
#include "util/log.h"

extern char** environ;

namespace {

using coloc::cli::Answer;
using nlohmann::json;

enum Exit { kOk = 0, kFailed = 1, kUsage = 2, kUnreachable = 3, kNotFound = 4, kNotAllowed = 5, kCannotRun = 127 };

/// Set once an answer of colocd's has been read: only then can an exception that escapes come
/// from colocd (an answer from a colocd of another version); before, it is coloc's own.
bool g_answered = false;

int fail(int code, const std::string& msg) {
  std::fprintf(stderr, "coloc: %s\n", msg.c_str());
  return code;
}

/// Turns a daemon answer that is not OK into a message and an exit code.
int answer_error(const Answer& a) {
  switch (a.kind) {
    case Answer::Kind::kUnreachable: return fail(kUnreachable, a.text);
    case Answer::Kind::kProtocol: return fail(kFailed, a.text);
    case Answer::Kind::kRefused:
      switch (a.status) {
        case coloc::proto::AdminStatus::kNotFound: return fail(kNotFound, a.text);
        case coloc::proto::AdminStatus::kNotAllowed: return fail(kNotAllowed, "not allowed: " + a.text);
        case coloc::proto::AdminStatus::kInvalid:
        case coloc::proto::AdminStatus::kAmbiguous: return fail(kUsage, a.text);
        default: return fail(kFailed, a.text);
      }
    case Answer::Kind::kOk: break;
  }
  return kOk;
}

coloc::proto::AdminMsg admin_msg(coloc::proto::AdminOp op, const std::string& job = "") {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(op);
  coloc::proto::set_string(m.job, job.c_str());
  return m;
}

/// Sends, checks, parses. On failure returns the exit code in *code.
bool ask(const std::string& socket, const coloc::proto::AdminMsg& m, json* out, int* code) {
  coloc::log::get("cli")->debug("asking colocd at {}", socket);
  Answer a = coloc::cli::admin_request(socket, m);
  if (a.kind != Answer::Kind::kOk) {
    *code = answer_error(a);
    return false;
  }
  *out = json::parse(a.text, nullptr, false);
  if (out->is_discarded()) {
    *code = fail(kFailed, "colocd sent an answer that is not JSON");
    return false;
  }
  g_answered = true;
  return true;
}

/// What an empty value of each option would be, for the error that names it.
const char* empty_what(const std::string& option) {
  static const std::map<std::string, const char*> what = {
      {"--mem", "empty size"},
      {"--estimate-from", "empty model: a preset name (coloc estimate --list-models) or a model file"},
      {"--priority", "empty priority: use high, normal or best-effort"},
      {"--on-full", "empty value: use wait or fail"},
      {"--job", "empty job name"},
      {"--svg", "empty file name: --svg needs a file name to write the plot to"},
      {"--socket", "empty path"},
      {"--weight", "empty weight: a whole number from 1 to 100"},
      {"--quantum", "empty duration: such as 100ms"},
      {"--target-slowdown", "empty target: a whole percentage from 1% to 50%, such as 5%"},
  };
  auto it = what.find(option);
  return it == what.end() ? "empty value" : it->second;
}

/// The first option of `app` or of its parsed subcommand given an empty value ("--mem ''",
/// "--job="), as the usage error to print; "" when none was. An empty value is never taken as
/// "not given": `--mem ''` would otherwise run a job with no limit and no reservation.
std::string empty_option_error(const CLI::App& app) {
  std::vector<const CLI::App*> apps = {&app};
  for (const CLI::App* sub : app.get_subcommands()) apps.push_back(sub);
  for (const CLI::App* a : apps)
    for (const CLI::Option* o : a->get_options([](const CLI::Option* o) {
           return o->nonpositional() && o->get_type_size_min() > 0 && o->count() > 0;
         }))
      for (const std::string& v : o->results())
        if (v.empty()) return o->get_name() + " '': " + empty_what(o->get_name());
  return "";
}

std::string exe_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

/// Who may run jobs at priority high, for coloc run's warning: "root and the groups gpuadmin and
/// ml" from colocd's status (admin_group, high_priority_group); a general phrase when colocd does
/// not say.
std::string high_priority_holders(const std::string& socket) {
  const std::string general = "root and the members of colocd's admin and high-priority groups";
  Answer a = coloc::cli::admin_request(socket, admin_msg(coloc::proto::AdminOp::kStatus), 2000);
  if (a.kind != Answer::Kind::kOk) return general;
  json s = json::parse(a.text, nullptr, false);
  if (s.is_discarded() || !s.is_object() || !s.contains("daemon") || !s["daemon"].is_object() ||
      !s["daemon"].contains("high_priority_group"))
    return general;
  std::vector<std::string> groups;
  for (const char* key : {"admin_group", "high_priority_group"}) {
    const json& g = s["daemon"][key];
    if (g.is_string() && std::find(groups.begin(), groups.end(), g.get<std::string>()) == groups.end())
      groups.push_back(g.get<std::string>());
  }
  if (groups.empty()) return "root only";
  if (groups.size() == 1) return "root and the group " + groups[0];
  return "root and the groups " + groups[0] + " and " + groups[1];
}

/// The command `coloc run` waits for (0 before it is forked).
volatile sig_atomic_t g_child = 0;

/// Forwards a signal sent to coloc run by a process (kill, a scheduler) to the command. One the
/// kernel sent (the terminal's ^C reaches the whole foreground process group) already reached the
/// command itself.
void forward_signal(int sig, siginfo_t* info, void*) {
  if (g_child > 0 && info && info->si_code <= 0) ::kill(pid_t(g_child), sig);
}

/// Waits for the command `child` to end (its wait status in *status) while holding the job's
/// anchor (coloc::cli::hold_anchor: registered again after a colocd restart). Returns the
/// anchor's descriptor then (-1 when not registered at that moment).
int wait_anchored(pid_t child, int anchor, const std::string& socket, const coloc::cli::AnchorSpec& spec, int* status) {
  const int pidfd = int(::syscall(SYS_pidfd_open, child, 0));
  if (pidfd >= 0) {  // readable once the command ended (an old kernel has no pidfd: just wait)
    anchor = coloc::cli::hold_anchor(pidfd, anchor, socket, spec);
    ::close(pidfd);
  }
  while (::waitpid(child, status, 0) < 0 && errno == EINTR) {
  }
  return anchor;
}

int do_run(const coloc::cli::RunOptions& opt) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  coloc::cli::RunPlan plan;
  std::string error;
  if (!coloc::cli::plan_run(opt, env, exe_dir(), coloc::cli::random_suffix(), &plan, &error)) return fail(kUsage, error);
  for (const std::string& n : plan.notes) std::fprintf(stderr, "coloc: note: %s\n", n.c_str());
  // The id carries a random suffix: say it (once colocd's answer tells how), so `coloc report ID`
  // can be typed (a rewritten name's note above already names it).
  const bool id_said = !plan.notes.empty() && plan.notes.front().rfind("job name ", 0) == 0;
  auto say_id = [&](bool daemon) {
    if (id_said) return;
    if (daemon)
      std::fprintf(stderr, "coloc: job %s (coloc status shows it; coloc report %s after it ends)\n", plan.job_id.c_str(),
                   plan.job_id.c_str());
    else
      std::fprintf(stderr, "coloc: job %s (no colocd at %s: the job runs on the limits of its environment)\n",
                   plan.job_id.c_str(), plan.env["COLOC_SOCKET"].c_str());
  };
  coloc::log::get("cli")->debug("running {} as job {}", plan.argv.front(), plan.job_id);

  // With colocd: register as the job's anchor first, so that the job (its limit, priority, any
  // `coloc set`, and its reservation between the command's steps) lives exactly as long as this
  // `coloc run`; then run the command as a child and wait for it. Without colocd (fail-open):
  // exec the command, as the library will run it on its local limits anyway.
  coloc::cli::AnchorSpec spec{plan.job_id, plan.limit, plan.priority, plan.on_full, plan.wait_timeout_ns, plan.argv,
                              plan.estimate};
  std::string why;
  bool busy = false;
  coloc::proto::RegisterReplyMsg reply;
  std::memset(&reply, 0, sizeof reply);
  int anchor = coloc::cli::register_anchor(plan.env["COLOC_SOCKET"], spec, &why, coloc::wire::kConnectTimeoutMs,
                                           false, &busy, &reply);
  say_id(anchor >= 0 || busy);
  // The priority colocd granted (protocol v8; an older colocd does not tell): the command's
  // processes register with it, so that they neither ask again for what was refused nor warn
  // again; the anchor asks for it when it registers again after a restart.
  if (anchor >= 0 && reply.granted_priority != 0) {
    const auto granted = coloc::proto::Priority(reply.granted_priority - 1);
    if (reply.priority_flags & coloc::proto::kPriorityLowered)
      std::fprintf(stderr, "coloc: warning: priority %s is for %s; job %s runs as %s\n",
                   coloc::proto::priority_name(plan.priority),
                   high_priority_holders(plan.env["COLOC_SOCKET"]).c_str(), plan.job_id.c_str(),
                   coloc::proto::priority_name(granted));
    plan.priority = spec.priority = granted;
    plan.env["COLOC_PRIORITY"] = coloc::proto::priority_name(granted);
  }
  std::vector<std::string> env_strings;
  for (auto& [k, v] : plan.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : plan.argv) argv.push_back(s.data());
  argv.push_back(nullptr);
  if (anchor < 0 && busy) {
    // A colocd is there but does not answer: never run outside its books. The command runs (its
    // CUDA processes wait for colocd at their first context), and the anchor registers once
    // colocd answers.
    std::fprintf(stderr, "coloc: warning: %s; the command starts, and its GPU work waits for colocd\n", why.c_str());
  } else if (anchor < 0) {
    coloc::log::get("cli")->debug("running without an anchor: {}", why);
    if (plan.weight > 1)
      std::fprintf(stderr, "coloc: note: --weight %u is not set: there is no colocd to time-slice the job\n", plan.weight);
    ::execvpe(argv[0], argv.data(), envp.data());
    return fail(errno == ENOENT ? kCannotRun : 126, "cannot run " + plan.argv.front() + ": " + std::strerror(errno));
  }
  // --weight: set as any `coloc set --weight` is, as this user, once the anchor made the job (a
  // weight above the default needs an admin: refused, the command does not run).
  if (plan.weight > 1) {
    if (anchor < 0) {
      std::fprintf(stderr, "coloc: warning: colocd is busy: --weight %u is not set (coloc set %s --weight %u later)\n",
                   plan.weight, plan.job_id.c_str(), plan.weight);
    } else {
      coloc::proto::AdminMsg m = admin_msg(coloc::proto::AdminOp::kSet, plan.job_id);
      m.set_fields = coloc::proto::kSetWeight;
      m.weight = uint8_t(plan.weight);
      Answer a = coloc::cli::admin_request(plan.env["COLOC_SOCKET"], m);
      if (a.kind != Answer::Kind::kOk) {
        coloc::cli::anchor_goodbye(anchor, kNotAllowed);
        if (a.kind == Answer::Kind::kRefused && a.status == coloc::proto::AdminStatus::kNotAllowed)
          return fail(kNotAllowed, "not allowed: --weight " + std::to_string(plan.weight) + ": " + a.text +
                                       "; the command was not run");
        std::fprintf(stderr, "coloc: --weight %u could not be set; the command was not run\n", plan.weight);
        return answer_error(a);
      }
    }
  }
  // Signals sent to coloc run (kill, a scheduler's SIGTERM) are forwarded to the command; those
  // from the terminal reach the command directly (same process group) and are not sent twice.
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  int exec_pipe[2];  // close-on-exec: EOF = the command runs; one int = exec's errno
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    coloc::cli::anchor_goodbye(anchor, 1);
    return fail(kFailed, std::string("cannot run the command: pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    coloc::cli::anchor_goodbye(anchor, 1);
    return fail(kFailed, std::string("cannot run the command: fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    // As when coloc run exec'd the command: killing coloc run (even with SIGKILL) kills it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(exec_pipe[1], &e, sizeof e);
    ::_exit(e == ENOENT ? kCannotRun : 126);
  }
  ::close(exec_pipe[1]);
  g_child = child;
  struct sigaction sa{};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) ::sigaction(sig, &sa, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  int status = 0;
  anchor = wait_anchored(child, anchor, plan.env["COLOC_SOCKET"], spec, &status);
  const int code = coloc::cli::exit_code_of(status);
  coloc::cli::anchor_goodbye(anchor, code);
  if (n == ssize_t(sizeof exec_errno))
    return fail(code, "cannot run " + plan.argv.front() + ": " + std::strerror(exec_errno));
  if (WIFSIGNALED(status)) {
    // Killed by a signal: end the same way, as when coloc run exec'd the command (a shell or a
    // scheduler sees the signal, not an exit code); no core file of coloc run's own.
    const int sig = WTERMSIG(status);
    struct rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::signal(sig, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::raise(sig);
  }
  return code;  // (or a signal whose default is not to end the process: 128 + it)
}

}  // namespace

int run_cli(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run_cli(argc, argv);
  } catch (const coloc::est::InputError& e) {  // a model file or spec (coloc's own checks name the field)
    return fail(kUsage, e.what());
  } catch (const std::exception& e) {
    // After an answer of colocd's: e.g. one from a colocd of another version. Before: coloc's own.
    return fail(kFailed, g_answered ? std::string("unexpected answer from colocd: ") + e.what()
                                    : std::string("internal error: ") + e.what() + " (please report it)");
  }
}

int run_cli(int argc, char** argv) {
  const char* lvl = std::getenv("COLOC_LOG_LEVEL");
  coloc::log::set_level(lvl && *lvl ? lvl : "warn");

  CLI::App app{"coloc: run GPU jobs side by side without running each other out of memory, and see what colocd does.",
               "coloc"};
  app.require_subcommand(1);
  app.fallthrough();  // --socket may come after the subcommand
  app.footer(
      "The daemon is found through --socket, else $COLOC_SOCKET, else /run/coloc/colocd.sock.\n"
      "Sizes: 20GiB, 20G (powers of 1024), 20GB (powers of 1000), 1.5GiB, or bytes.\n"
      "Exit codes: 0 ok, 1 failed, 2 usage, 3 daemon unreachable, 4 no such job, device or fingerprint, 5 not allowed.");
  char version[128];
  app.set_version_flag("--version", std::string(coloc::version_line(version, sizeof version, "coloc", false)),
                       "Print coloc's version and its protocol version, and exit");
  std::string socket_flag;
  app.add_option("--socket", socket_flag, "colocd's socket (default: $COLOC_SOCKET, else /run/coloc/colocd.sock)");

  // run
  coloc::cli::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Run a command as one coloc job (sets LD_PRELOAD and the COLOC_* environment; with colocd, holds the job "
             "for all of the command's steps and exits with its status)");
  run_cmd->add_option("--mem", run.mem,
                      "The job's memory limit per device, also held for it at admission (e.g. 20GiB). Without it, colocd "
                      "holds the footprint it knows from the job's earlier runs (coloc history), else its --estimate-from "
                      "estimate, else its predicted peak once its iterations repeat");
  run_cmd->add_option("--estimate-from", run.estimate_from,
                      "A preset model or a model file (as coloc estimate takes them): the job declares its estimated "
                      "peak per device, held for it at admission when it has no --mem and no history (not a limit; "
                      "needs --batch)");
  run_cmd->add_option("--batch", run.batch, "With --estimate-from: sequences or images per step (required)");
  run_cmd->add_option("--seq", run.seq, "With --estimate-from: tokens per sequence (transformers; default: the model's)");
  run_cmd->add_option("--image", run.image, "With --estimate-from: image side in pixels (CNNs; default: the model's)");
  run_cmd->add_option("--classes", run.classes, "With --estimate-from: classifier outputs (CNNs; default: the model's)");
  run_cmd->add_option("--dtype", run.dtype, "With --estimate-from: fp32 (default), bf16 or fp16");
  run_cmd->add_option("--optimizer", run.optimizer, "With --estimate-from: sgd, sgd-momentum, adam (default) or adamw");
  run_cmd->add_option("--allocator", run.allocator, "With --estimate-from: pytorch (default) or plain");
  run_cmd->add_option("--device-model", run.device_model, "With --estimate-from: the GPU model (default A100)");
  run_cmd->add_option("--priority", run.priority, "high, normal (default) or best-effort");
  run_cmd->add_option("--weight", run.weight,
                      "Quanta per round on timesliced devices, 1-100 (default 1; above 1 needs root or the admin group)");
  run_cmd->add_option("--on-full", run.on_full, "When the device is full: wait (default) or fail");
  run_cmd->add_option("--job", run.job, "Job name (a random suffix is added); default: the command's name");
  run_cmd->add_option("--wait-timeout", run.wait_timeout,
                      "Longest wait for memory or admission, e.g. 30s, 5m (default: $COLOC_WAIT_TIMEOUT, else colocd's 300s)");
  run_cmd->add_flag("--sim", run.sim, "Run on simgpu, the simulated GPU (for machines without one)");
  run_cmd->add_option("command", run.command, "The command and its arguments (after --)");
  run_cmd->footer("Examples: coloc run --mem 20GiB --priority high -- python train.py\n"
                  "          coloc run --estimate-from resnet50 --batch 32 -- python train.py\n"
                  "Exit codes: the command's own (one a signal ended, coloc run ends by the same signal), 2 usage, "
                  "127 the command cannot be run.");

  // status, jobs
  bool json_out = false, wide = false;
  CLI::App* status_cmd =
      app.add_subcommand("status", "Each device (index, policy, capacity, headroom, in use) and its jobs (state, weight, GPU share)");
  status_cmd->add_flag("--json", json_out, "Print the daemon's JSON");
  status_cmd->add_flag("--wide", wide, "Also grants, reservations, driver overhead and peaks (lines over 100 columns)");
  CLI::App* jobs_cmd = app.add_subcommand(
      "jobs", "Every job: limit, in use, peak, state, priority; a waiting job's REASON and estimated START");
  jobs_cmd->add_flag("--json", json_out, "Print the daemon's JSON");
  bool jobs_all = false;
  std::string jobs_since, jobs_user;
  jobs_cmd->add_flag("--all", jobs_all, "The jobs that ended (from their reports), newest first, as sacct lists them");
  jobs_cmd->add_option("--since", jobs_since, "With --all: only jobs that ended within this long (e.g. 2h, 2d)");
  jobs_cmd->add_option("--user", jobs_user, "With --all: only this user's jobs (a name or a uid)");

  // report
  std::string job, svg_file;
  CLI::App* report_cmd = app.add_subcommand("report", "A job's memory report (running or ended): a table, JSON, or an SVG plot");
  report_cmd->add_option("job", job, "Job id (as coloc jobs shows it), or UID:JOB")->required();
  report_cmd->add_flag("--json", json_out, "Print the report's JSON");
  report_cmd->add_option("--svg", svg_file, "Also write a plot of memory over time (and the turns on timesliced devices) to this SVG file");

  // cancel
  std::string cancel_signal = "TERM", cancel_grace = "10s";
  CLI::App* cancel_cmd = app.add_subcommand(
      "cancel", "End a job: its processes get a signal (SIGTERM), then SIGKILL after the grace; a waiting job leaves the queue");
  cancel_cmd->add_option("job", job, "Job id (as coloc jobs shows it), or UID:JOB")->required();
  cancel_cmd->add_option("--signal", cancel_signal, "The signal sent first (default TERM; a name or a number)");
  cancel_cmd->add_option("--grace", cancel_grace, "How long before SIGKILL (default 10s; 0: at once; at most 1h)");
  cancel_cmd->add_flag("--json", json_out, "Print the daemon's JSON answer");
  cancel_cmd->footer("Owners may cancel their own jobs; other users' jobs need root or the admin group (exit 5). A job "
                     "that has ended exits 4. A job of the Slurm plugin is cancelled with scancel (root and the admin "
                     "group may cancel it here).");


  // set
  std::string set_mem, set_priority, set_weight;
  CLI::App* set_cmd =
      app.add_subcommand("set", "Change a running job's limit, priority or weight (owners may only lower them)");
  set_cmd->add_option("job", job, "Job id, or UID:JOB")->required();
  set_cmd->add_option("--mem", set_mem, "New limit per device; below current use, new allocations fail and nothing is killed");
  set_cmd->add_option("--priority", set_priority, "high, normal or best-effort");
  set_cmd->add_option("--weight", set_weight, "Quanta per round on timesliced devices, 1-100 (default 1)");
  set_cmd->add_flag("--json", json_out, "Print the daemon's JSON answer (the job, and reservation_changes)");

  // pause, resume
  CLI::App* pause_cmd = app.add_subcommand(
      "pause", "Hold a running job's launches on every device until `coloc resume` (its memory stays)");
  pause_cmd->add_option("job", job, "Job id, or UID:JOB")->required();
  pause_cmd->add_flag("--json", json_out, "Print the daemon's JSON answer (the job, and who had paused it)");
  pause_cmd->footer("Owners may pause and resume their own jobs; resuming a pause an admin set needs root or the admin group.");
  CLI::App* resume_cmd = app.add_subcommand("resume", "Let a paused job launch again, or restore a suspended one");
  resume_cmd->add_option("job", job, "Job id, or UID:JOB")->required();
  resume_cmd->add_flag("--json", json_out,
                       "Print the daemon's JSON answer (the job, who had paused it, and what was ended: \"ended\")");
  resume_cmd->footer("A suspended job's restore then waits for the room it held (reason Suspended), ahead of new jobs of "
                     "its priority or lower.");
  CLI::App* suspend_cmd = app.add_subcommand(
      "suspend", "Checkpoint a running job's processes to host memory, freeing its GPU memory, until `coloc resume`");
  bool no_wait = false;
  suspend_cmd->add_option("job", job, "Job id, or UID:JOB")->required();
  suspend_cmd->add_flag("--no-wait", no_wait, "Return once the suspension has started (else: once it is done)");
  suspend_cmd->add_flag("--json", json_out, "Print the job as colocd shows it then (its \"suspension\")");
  suspend_cmd->footer("Owners may suspend and resume their own jobs; resuming a suspension an admin made needs root or the "
                      "admin group. A job that used managed memory, or whose libcoloc.so is older than protocol v14, "
                      "cannot be suspended (see docs/suspension.md).");

  // policy
  std::string policy_device, policy_mode, quantum, target_slowdown;
  CLI::App* policy_cmd = app.add_subcommand(
      "policy", "Show each device's compute policy, or set one device's (or all devices') policy (root or the admin group)");
  policy_cmd->add_option("device", policy_device,
                         "A device: its index (as coloc status shows it), its UUID or a unique prefix of it, or all "
                         "(every device, and those colocd learns of later)");
  policy_cmd->add_option("mode", policy_mode,
                         "share (no gating, the default), timeslice (one job at a time, in turns) or priority (high-priority "
                         "jobs first: the others are throttled to keep them near their solo speed)");
  policy_cmd->add_option("--quantum", quantum, "timeslice: one quantum, e.g. 50ms, 100ms (default), 1s");
  policy_cmd->add_option("--target-slowdown", target_slowdown,
                         "priority: the most a high-priority job may be slowed against running alone, 1% to 50% "
                         "(default 5%)");
  policy_cmd->add_flag("--json", json_out, "Print the daemon's JSON");
  policy_cmd->footer(
      "Examples: coloc policy            (every device)\n"
      "          coloc policy 0 timeslice --quantum 50ms\n"
      "          coloc policy all share\n"
      "          coloc policy 0 priority --target-slowdown 10%\n"
      "A job of weight W (coloc set JOB --weight W) gets W quanta per round. Under priority, jobs of priority high\n"
      "(root, colocd's --admin-group and --high-priority-group) keep within the target; normal and best-effort\n"
      "jobs get what is left. The policy is kept in colocd's state directory and survives restarts.");

  // history, history forget
  std::string forget_fingerprint;
  bool forget_all = false;
  CLI::App* history_cmd = app.add_subcommand(
      "history", "The run history colocd keeps per fingerprint (user, command, environment, device model): runs, "
                 "p50/p95 peaks and the estimate a rerun is admitted on");
  history_cmd->add_flag("--json", json_out, "Print the daemon's JSON");
  history_cmd->add_flag("--wide", wide, "Whole command lines (else cut in the middle past 60 characters)");
  history_cmd->require_subcommand(0, 1);
  history_cmd->footer(
      "A fingerprint's command line is shown to its owner and root only (\"(hidden)\" to others).\n"
      "Exit codes: 0 ok, 1 failed, 2 usage, 3 daemon unreachable; history forget also 4 and 5 (see its --help).");
  CLI::App* forget_cmd = history_cmd->add_subcommand(
      "forget", "Forget a fingerprint's runs (yours; root: anyone's), or with --all every fingerprint of yours (root: all)");
  forget_cmd->add_option("fingerprint", forget_fingerprint, "The fingerprint, 16 hex digits as coloc history shows it");
  forget_cmd->add_flag("--all", forget_all, "Every fingerprint you own (root: every fingerprint)");
  forget_cmd->add_flag("--json", json_out, "Print the daemon's JSON answer ({\"forgotten\": N})");
  forget_cmd->footer(
      "Exit codes: 0 forgotten, 2 bad usage, 3 daemon unreachable, 4 no such fingerprint, 5 another user's "
      "fingerprint (root only).");

  // estimate (no daemon)
  coloc::cli::EstimateCommand estimate;
  CLI::App* estimate_cmd = estimate.add_to(app);
  // doctor, top
  coloc::cli::DoctorCommand doctor;
  CLI::App* doctor_cmd = doctor.add_to(app);
  coloc::cli::TopCommand top;
  CLI::App* top_cmd = top.add_to(app);

  // Every subcommand's --help names the global option too (it may come before or after the subcommand).
  // anchor: for launchers other than coloc run (the Slurm plugin); listed last, as it is not for people
  coloc::cli::AnchorOptions anchor_opt;
  CLI::App* anchor_cmd = app.add_subcommand(
      "anchor", "For launchers such as the Slurm plugin: hold a job's anchor until --until-fd says it ended");
  anchor_cmd->add_option("--job", anchor_opt.job, "The job id, used as given (e.g. slurm-1234)")->required();
  anchor_cmd->add_option("--mem", anchor_opt.mem, "The job's memory limit per device (e.g. 20GiB)");
  anchor_cmd->add_option("--priority", anchor_opt.priority, "high, normal (default) or best-effort");
  anchor_cmd->add_option("--on-full", anchor_opt.on_full, "wait (default) or fail");
  anchor_cmd->add_option("--weight", anchor_opt.weight, "Quanta per round on timesliced devices, 1-100");
  anchor_cmd->add_option("--command", anchor_opt.command, "What the job's report names as its command");
  anchor_cmd->add_option("--step", anchor_opt.step,
                         "The Slurm step it stands for (the Slurm plugin sets it; `coloc cancel` then points to scancel)");
  anchor_cmd->add_option("--until-fd", anchor_opt.until_fd,
                         "An inherited descriptor: readable = the job ended (one line: its exit status, optional)")
      ->required();
  anchor_cmd->add_option("--ready-fd", anchor_opt.ready_fd,
                         "An inherited descriptor for the outcome: 'note ...' lines, then 'ok', 'busy ...' or 'error ...'");
  anchor_cmd->footer("Exit codes: 0 the job ended, 2 usage, 3 no colocd (or it refused the anchor).");

  // A subcommand with a footer of its own does not show coloc's (its exit codes): it says its own,
  // or coloc's general ones.
  for (CLI::App* sub : {run_cmd, status_cmd, jobs_cmd, report_cmd, cancel_cmd, set_cmd, pause_cmd, resume_cmd, suspend_cmd, policy_cmd,
                        history_cmd, forget_cmd, doctor_cmd, top_cmd, anchor_cmd}) {
    std::string own = sub->get_footer();
    if (!own.empty() && own.find("Exit codes:") == std::string::npos)
      own += "\nExit codes: 0 ok, 1 failed, 2 usage, 3 daemon unreachable, 4 no such job, device or fingerprint, 5 not "
             "allowed.";
    sub->footer((own.empty() ? std::string() : own + "\n") +
                "Global: --socket PATH  colocd's socket, before or after the subcommand (default: $COLOC_SOCKET, else "
                "/run/coloc/colocd.sock)");
  }

  try {
    // `coloc run ... -- CMD ARGS`: CMD ARGS reach the command verbatim, not through CLI11 (which
    // would turn "[1,2]" into "1" "2" and "[x]" into "x", and drop "[]").
    int cli_argc = argc;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "run") != 0) continue;
      for (int k = i + 1; k < argc; ++k)
        if (std::strcmp(argv[k], "--") == 0) {
          cli_argc = k;
          break;
        }
      break;
    }
    app.parse(cli_argc, argv);
    if (cli_argc < argc) run.command.insert(run.command.end(), argv + cli_argc + 1, argv + argc);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kUsage;
  }
  if (std::string empty = empty_option_error(app); !empty.empty()) return fail(kUsage, empty);
  const std::string socket = coloc::cli::resolve_socket(socket_flag);
  int code = kOk;
  json j;

  if (estimate_cmd->parsed()) return estimate.run();
  if (doctor_cmd->parsed()) return doctor.run(socket);
  if (top_cmd->parsed()) return top.run(socket);
  if (anchor_cmd->parsed()) {
    anchor_opt.socket = socket;
    return coloc::cli::run_anchor(anchor_opt);
  }
  if (run_cmd->parsed()) {
    run.socket = socket;
    return do_run(run);
  }
  if (status_cmd->parsed()) {
    if (!ask(socket, admin_msg(coloc::proto::AdminOp::kStatus), &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::status_table(j, wide));
    return kOk;
  }
  if (jobs_cmd->parsed()) {
    if (!jobs_all && (!jobs_since.empty() || !jobs_user.empty()))
      return fail(kUsage, "jobs: --since and --user go with --all (the jobs that ended)");
    if (jobs_all) {
      uint64_t since_ns = 0;
      std::string error;
      if (!jobs_since.empty() && !coloc::cli::parse_duration_option("--since", jobs_since, &since_ns, &error))
        return fail(kUsage, error);
      // colocd filters, before it caps the list at its newest 1,000.
      coloc::proto::AdminMsg m = admin_msg(coloc::proto::AdminOp::kEnded);
      if (!jobs_since.empty()) {
        const int64_t since_ms = int64_t(::time(nullptr)) * 1000 - int64_t(since_ns / 1'000'000);
        m.mem = uint64_t(std::max<int64_t>(since_ms, 1));
      }
      if (!jobs_user.empty()) {
        auto uid = coloc::cli::resolve_user(jobs_user, &error);
        if (!uid) return fail(kUsage, "jobs: --user " + error);
        m.set_fields = coloc::proto::kEndedUser;
        m.quantum_ms = *uid;
      }
      if (!ask(socket, m, &j, &code)) return code;
      std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::ended_table(j));
      return kOk;
    }
    if (!ask(socket, admin_msg(coloc::proto::AdminOp::kJobs), &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::jobs_table(j));
    return kOk;
  }
  if (policy_cmd->parsed()) {
    if (policy_device.empty() && policy_mode.empty()) {
      if (!quantum.empty()) return fail(kUsage, "policy: --quantum goes with a device and the mode timeslice");
      if (!target_slowdown.empty())
        return fail(kUsage, "policy: --target-slowdown goes with a device and the mode priority");
      if (!ask(socket, admin_msg(coloc::proto::AdminOp::kStatus), &j, &code)) return code;
      if (json_out) {
        std::cout << j.value("policies", json(nullptr)).dump(2) << "\n";
        return kOk;
      }
      std::string text = coloc::cli::policy_table(j);
      if (text.empty())
        return fail(kFailed, "this colocd (protocol " + j["daemon"].value("protocol", json("?")).dump() +
                                 ") has no compute policies: every device is shared");
      std::cout << text;
      return kOk;
    }
    if (policy_mode.empty()) return fail(kUsage, "policy: give the device and the mode (share, timeslice or priority)");
    if (!coloc::proto::valid_job_id(policy_device.c_str()))
      return fail(kUsage, "'" + policy_device + "' is not a device (an index, a UUID or a prefix of one, or all)");
    auto m = admin_msg(coloc::proto::AdminOp::kPolicy, policy_device);
    if (!target_slowdown.empty() && (policy_mode == "share" || policy_mode == "timeslice"))
      return fail(kUsage, "policy: --target-slowdown goes with priority (" + policy_mode + " has no target)");
    if (policy_mode == "share") {
      m.mode = uint8_t(coloc::proto::PolicyMode::kShare);
      if (!quantum.empty()) return fail(kUsage, "policy: --quantum goes with timeslice (share has no quanta)");
    } else if (policy_mode == "timeslice") {
      m.mode = uint8_t(coloc::proto::PolicyMode::kTimeslice);
      if (!quantum.empty()) {
        std::string error;
        uint32_t ms = 0;
        if (!coloc::cli::parse_quantum(quantum, &ms, &error)) return fail(kUsage, error);
        m.quantum_ms = ms;
      }
    } else if (policy_mode == "priority") {
      m.mode = uint8_t(coloc::proto::PolicyMode::kPriority);
      if (!quantum.empty()) return fail(kUsage, "policy: --quantum goes with timeslice (priority has no quanta)");
      if (!target_slowdown.empty()) {
        std::string error;
        uint32_t pct = 0;
        if (!coloc::cli::parse_target_slowdown(target_slowdown, &pct, &error)) return fail(kUsage, error);
        m.target_pct = uint8_t(pct);
      }
    } else {
      return fail(kUsage, "policy: unknown mode '" + policy_mode + "': use share, timeslice or priority");
    }
    if (!ask(socket, m, &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::policy_set_text(j));
    return kOk;
  }
  if (history_cmd->parsed()) {
    if (forget_cmd->parsed()) {
      if (forget_all == !forget_fingerprint.empty())
        return fail(kUsage, "history forget: give a fingerprint or --all (not both)");
      std::string what = forget_all ? "all" : forget_fingerprint;
      if (!forget_all) {
        for (char& c : what) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (what.size() != 16 || what.find_first_not_of("0123456789abcdef") != std::string::npos)
          return fail(kUsage, "'" + forget_fingerprint + "' is not a fingerprint (16 hex digits, as coloc history shows)");
      }
      if (!ask(socket, admin_msg(coloc::proto::AdminOp::kHistoryForget, what), &j, &code)) return code;
      std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::history_forget_text(j, what));
      return kOk;
    }
    if (!ask(socket, admin_msg(coloc::proto::AdminOp::kHistory), &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::history_table(j, wide));
    return kOk;
  }
  if (!coloc::proto::valid_job_id(job.c_str()) || job.empty())
    return fail(kUsage, "'" + job + "' is not a job id (printable characters without spaces or '/', at most 63)");
  if (report_cmd->parsed()) {
    if (!ask(socket, admin_msg(coloc::proto::AdminOp::kReport, job), &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::report_table(j));
    if (!svg_file.empty()) {
      std::ofstream out(svg_file, std::ios::trunc);
      out << coloc::cli::render_svg(j);
      out.close();
      if (!out) return fail(kFailed, "cannot write " + svg_file + ": " + std::strerror(errno));
      if (!json_out) std::cout << "\nPlot written to " << svg_file << "\n";
    }
    return kOk;
  }
  if (set_cmd->parsed()) {
    auto m = admin_msg(coloc::proto::AdminOp::kSet, job);
    if (set_mem.empty() && set_priority.empty() && set_weight.empty())
      return fail(kUsage, "set: give --mem SIZE, --priority P and/or --weight W");
    if (!set_mem.empty()) {
      coloc::SizeParse s = coloc::parse_limit(set_mem);
      if (!s) return fail(kUsage, "--mem '" + set_mem + "': " + s.error);
      if (*s.bytes == 0) return fail(kUsage, "--mem must be more than 0");
      m.set_fields |= coloc::proto::kSetMem;
      m.mem = *s.bytes;
    }
    if (!set_priority.empty()) {
      coloc::proto::Priority p;
      if (!coloc::proto::parse_priority(set_priority.c_str(), &p))
        return fail(kUsage, "--priority '" + set_priority + "': use high, normal or best-effort");
      m.set_fields |= coloc::proto::kSetPriority;
      m.priority = uint8_t(p);
    }
    if (!set_weight.empty()) {
      uint32_t w = 0;
      std::string error;
      if (!coloc::cli::parse_weight(set_weight, &w, &error)) return fail(kUsage, error);
      m.set_fields |= coloc::proto::kSetWeight;
      m.weight = uint8_t(w);
    }
    if (!ask(socket, m, &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::set_text(j));
    return kOk;
  }
  if (cancel_cmd->parsed()) {
    auto m = admin_msg(coloc::proto::AdminOp::kCancel, job);
    int sig = 0;
    uint64_t grace_ns = 0;
    std::string error;
    if (!coloc::cli::parse_signal(cancel_signal, &sig, &error)) return fail(kUsage, error);
    if (!coloc::cli::parse_duration_option("--grace", cancel_grace, &grace_ns, &error)) return fail(kUsage, error);
    if (grace_ns / 1'000'000 > coloc::proto::kMaxCancelGraceMs)
      return fail(kUsage, "--grace '" + cancel_grace + "': at most 1h");
    m.mode = uint8_t(sig);
    m.quantum_ms = uint32_t(grace_ns / 1'000'000);
    if (!ask(socket, m, &j, &code)) return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::cancel_text(j));
    return kOk;
  }
  if (suspend_cmd->parsed()) {
    if (!ask(socket, admin_msg(coloc::proto::AdminOp::kSuspend, job), &j, &code)) return code;
    // The helper runs in colocd's background: follow the job until it is suspended or runs on.
    const std::string id = j.value("job", job);
    const uint64_t uid = j.value("uid", uint64_t(0));
    for (int polls = 0; !no_wait && polls < 6000; ++polls) {
      const json s = j.value("suspension", json(nullptr));
      if (!s.is_object() || s.value("state", std::string()) != "suspending") break;
      ::usleep(100'000);  // (another process's progress: there is nothing to wait on but colocd's answer)
      json all;
      if (!ask(socket, admin_msg(coloc::proto::AdminOp::kJobs), &all, &code)) return code;
      json found = nullptr;
      for (const json& k : all.value("jobs", json::array()))
        if (k.value("job", std::string()) == id && k.value("uid", uint64_t(0)) == uid) found = k;
      if (found.is_null()) return fail(kFailed, "job " + id + " ended while it was being suspended");
      j = found;
    }
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::suspend_text(j, no_wait));
    const json s = j.value("suspension", json(nullptr));
    return s.is_object() ? kOk : kFailed;
  }
  if (pause_cmd->parsed() || resume_cmd->parsed()) {
    const bool pause = pause_cmd->parsed();
    if (!ask(socket, admin_msg(pause ? coloc::proto::AdminOp::kPause : coloc::proto::AdminOp::kResume, job), &j, &code))
      return code;
    std::cout << (json_out ? j.dump(2) + "\n" : coloc::cli::pause_text(j, pause));
    return kOk;
  }
  return kUsage;
}
