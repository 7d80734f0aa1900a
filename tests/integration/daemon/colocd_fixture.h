// A real colocd for integration tests: its own socket and state directory in a TempDir, the
// build's binaries, and helpers to run protocol-speaking fake clients (colocd_client) and ask
// the daemon for its books.
#pragma once

#include <dirent.h>
#include <pwd.h>
#include <sys/wait.h>

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../support/proc.h"
#include "daemon_client.h"

namespace coloc::test {

class Colocd {
 public:
  /// `nvml`: colocd finds simgpu's NVML (which knows none of the fake clients' devices: an idle
  /// one drops out of status); false: no NVML at all, as on a machine without it.
  explicit Colocd(std::vector<std::string> args = {}, bool start_now = true, bool nvml = true)
      : dir_("colocd-test"), args_(std::move(args)), nvml_(nvml) {
    ::chmod(dir_.path().c_str(), 0755);  // other users (nobody) reach the socket
    socket_ = dir_ / "run/colocd.sock";
    state_ = dir_ / "state";
    if (start_now) start();
  }
  ~Colocd() {
    if (proc_) proc_->kill(SIGKILL);
  }

  void start() {
    std::vector<std::string> argv = {build_path("bin/colocd"), "--socket", socket_, "--state-dir", state_, "--log-level", "info"};
    argv.insert(argv.end(), args_.begin(), args_.end());
    if (proc_) old_logs_ += proc_->err_so_far();
    // As on a simgpu node: colocd finds the simulated NVML, which knows none of the fake
    // clients' devices, so their reports alone shape the books (as without NVML).
    Env env;
    env.simgpu(dir_);
    if (!nvml_) env.unset("LD_LIBRARY_PATH");
    proc_ = std::make_unique<Proc>(argv, env);
    bool up = wait_until([&] { return ask(proto::AdminOp::kStatus).kind == cli::Answer::Kind::kOk || !proc_->running(); }, 20s);
    REQUIRE_MESSAGE(up, "colocd did not come up:\n", log());
    // (Not a REQUIRE_MESSAGE: doctest's -s evaluates a message on success too, and this one waits
    // for the process, killing it after 1 s.)
    if (!proc_->running()) FAIL("colocd exited:\n" << describe(proc_->wait(1s)));
  }
  /// SIGKILL, and wait until it is gone.
  void kill9() {
    proc_->kill(SIGKILL);
    proc_->wait(10s);
  }
  ProcResult stop() {
    proc_->kill(SIGTERM);
    return proc_->wait(10s);
  }
  bool running() { return proc_->running(); }

  cli::Answer ask(proto::AdminOp op, const std::string& job = "") const {
    proto::AdminMsg m;
    std::memset(&m, 0, sizeof m);
    m.op = uint32_t(op);
    proto::set_string(m.job, job.c_str());
    return cli::admin_request(socket_, m, 5000);
  }
  /// Status as text, or why there is none, for a failure message: never asserts (doctest builds a
  /// message under its reporter's lock; an assertion there deadlocks).
  std::string status_text() const {
    cli::Answer a = ask(proto::AdminOp::kStatus);
    if (a.kind != cli::Answer::Kind::kOk) return "(status failed: " + a.text + ")";
    nlohmann::json j = nlohmann::json::parse(a.text, nullptr, false);
    return j.is_discarded() ? a.text : j.dump(1);
  }
  nlohmann::json status() const {
    cli::Answer a = ask(proto::AdminOp::kStatus);
    REQUIRE_MESSAGE(a.kind == cli::Answer::Kind::kOk, a.text);
    return nlohmann::json::parse(a.text);
  }
  /// The job `id` as status shows it, or null.
  nlohmann::json job(const std::string& id) const {
    nlohmann::json s = status();
    for (auto& j : s["jobs"])
      if (j["job"] == id) return j;
    return nullptr;
  }

  /// The report of job `name` (<state>/reports/<name>.json), once colocd's report writer has
  /// written it: a job leaves `status` before its report is on disk. Fails the test after
  /// `timeout` without one.
  nlohmann::json report(const std::string& name, std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    const std::string path = state_ + "/reports/" + name + ".json";
    REQUIRE_MESSAGE(wait_until([&] { return file_exists(path); }, timeout), "no report for job ", name, "\n", log());
    return nlohmann::json::parse(read_file(path), nullptr, false);  // written whole (a link of a complete file)
  }

  /// Starts a fake client talking to this daemon.
  std::unique_ptr<Proc> client(std::vector<std::string> args) const {
    std::vector<std::string> argv = {build_path("tests/bin/colocd_client"), "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Proc>(argv, Env());
  }
  /// An environment pointing the coloc CLI at this daemon.
  Env env() const {
    Env e;
    e.set("COLOC_SOCKET", socket_);
    return e;
  }

  std::string log() const { return old_logs_ + (proc_ ? proc_->err_so_far() : ""); }
  const std::string& socket() const { return socket_; }
  const std::string& state() const { return state_; }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::vector<std::string> args_;
  bool nvml_ = true;
  std::string socket_, state_, old_logs_;
  std::unique_ptr<Proc> proc_;
};

/// Sends admin request `m` to `d` as user `pw` (a forked child drops to its uid and gid, asks,
/// and reports back through a pipe): 0 when answered ok, else 10 + the AdminStatus; 99 when the
/// child could not become the user, 999 when it said nothing.
inline uint32_t ask_as(const Colocd& d, const struct passwd* pw, const proto::AdminMsg& m) {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    uint32_t st = 99;
    if (::setgid(pw->pw_gid) == 0 && ::setuid(pw->pw_uid) == 0) {
      auto a = cli::admin_request(d.socket(), m, 5000);
      st = a.kind == cli::Answer::Kind::kOk ? 0 : uint32_t(a.status) + 10;
    }
    (void)!::write(pipefd[1], &st, sizeof st);
    _exit(0);
  }
  ::close(pipefd[1]);
  uint32_t st = 999;
  (void)!::read(pipefd[0], &st, sizeof st);
  ::close(pipefd[0]);
  int ws;
  ::waitpid(pid, &ws, 0);
  return st;
}

/// The saved state of job `id` in <state>/jobs (null when none).
inline nlohmann::json saved_job(const Colocd& d, const std::string& id) {
  nlohmann::json found;
  if (DIR* dir = ::opendir((d.state() + "/jobs").c_str())) {
    while (dirent* e = ::readdir(dir)) {
      std::string n = e->d_name;
      if (n.size() < 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
      auto j = nlohmann::json::parse(read_file(d.state() + "/jobs/" + n), nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("job", "") == id) found = j;
    }
    ::closedir(dir);
  }
  return found;
}

/// The last JSON line of a client's stdout whose "event" is `event` (null when none yet).
inline nlohmann::json event_of(const Proc& p, const std::string& event) {
  nlohmann::json last;
  std::string out = p.out_so_far();
  size_t start = 0;
  while (start < out.size()) {
    size_t nl = out.find('\n', start);
    if (nl == std::string::npos) break;
    auto j = nlohmann::json::parse(out.substr(start, nl - start), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("event", "") == event) last = j;
    start = nl + 1;
  }
  return last;
}

/// All JSON lines of a client's stdout with this event.
inline std::vector<nlohmann::json> events_of(const Proc& p, const std::string& event) {
  std::vector<nlohmann::json> all;
  std::string out = p.out_so_far();
  size_t start = 0;
  while (start < out.size()) {
    size_t nl = out.find('\n', start);
    if (nl == std::string::npos) break;
    auto j = nlohmann::json::parse(out.substr(start, nl - start), nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("event", "") == event) all.push_back(j);
    start = nl + 1;
  }
  return all;
}

inline bool has_event(const Proc& p, const std::string& event) { return !event_of(p, event).is_null(); }

}  // namespace coloc::test
