// tests/integration/e2e/e2e.h — one simulated GPU node for end-to-end tests: colocd with its socket
// and state in a temporary directory, simgpu's shared device state beside it, jobs started the way
// users start them (`coloc run --sim`, which preloads libcoloc.so), and the books read the way
// admins read them (`coloc status --json`, `coloc set`, the daemon's report files).
//
// Synchronisation is on files (cuprobe's and interpose_client's touch / hold-file steps), on the
// daemon's status, on process output and on process exit: never on sleeping.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../support/proc.h"

namespace coloc::test::e2e {

using nlohmann::json;

inline constexpr uint64_t MiB = 1ull << 20;
inline constexpr uint64_t GiB = 1ull << 30;
/// What coloc charges, and simgpu costs, per CUDA context (both defaults).
inline constexpr uint64_t kContext = 512 * MiB;

inline std::string cuprobe() { return build_path("tests/bin/cuprobe"); }
inline std::string client() { return build_path("tests/bin/interpose_client"); }
inline std::string coloc_train() { return build_path("bin/coloc-train"); }
inline std::string trace(const std::string& name) { return source_path("tools/workload/traces/" + name); }

/// True (with a note) when the tests run against a real driver (COLOC_TEST_DRIVER=real): these
/// tests size their GPUs with simgpu, so they skip there (tests/gpu/ runs the demo on a real GPU).
inline bool simulated_only() {
  if (!real_driver()) return false;
  MESSAGE("skipped: end-to-end tests need simgpu's configurable devices");
  return true;
}

/// The JSON lines a process printed so far, in order.
inline std::vector<json> lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l.front() != '{') continue;
    json j = json::parse(l, nullptr, false);
    if (!j.is_discarded()) v.push_back(std::move(j));
  }
  return v;
}

/// The n-th line (0-based) of step `name` in a cuprobe / interpose_client output, or null.
inline json step(const std::string& out, const std::string& name, int n = 0) {
  for (const json& l : lines(out))
    if (l.value("step", "") == name && n-- == 0) return l;
  return nullptr;
}

class Node {
 public:
  /// A node with simgpu devices `devices` (SIMGPU_DEVICES) and a running colocd (extra flags in
  /// `daemon_args`), unless `start` is false.
  explicit Node(const std::string& devices = "16GiB", std::vector<std::string> daemon_args = {}, bool start = true)
      : devices_(devices), daemon_args_(std::move(daemon_args)) {
    socket_ = dir_ / "run/colocd.sock";
    state_ = dir_ / "state";
    if (start) start_daemon();
  }
  ~Node() {
    if (daemon_) daemon_->kill(SIGKILL);
  }
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Starts colocd (again) and waits until `coloc status` answers.
  void start_daemon() {
    if (daemon_) old_log_ += daemon_->err_so_far();
    std::vector<std::string> argv = daemon_prefix_;
    for (const std::string& a : {build_path("bin/colocd"), std::string("--socket"), socket_, std::string("--state-dir"),
                                 state_, std::string("--log-level"), std::string("info")})
      argv.push_back(a);
    argv.insert(argv.end(), daemon_args_.begin(), daemon_args_.end());
    daemon_ = std::make_unique<Proc>(argv, base_env());
    bool up = wait_until([&] { return cli({"status"}).exit_code == 0 || !daemon_->running(); }, 20s, 10ms);
    REQUIRE_MESSAGE((up && daemon_->running()), "colocd did not come up:\n", log());
  }
  /// A command colocd is started under (e.g. {"prlimit", "--nofile=128:128", "--"}): it must exec
  /// colocd (the daemon's pid is the command's).
  void set_daemon_prefix(std::vector<std::string> prefix) { daemon_prefix_ = std::move(prefix); }
  pid_t daemon_pid() const { return daemon_ ? daemon_->pid() : -1; }
  /// Bytes colocd has logged so far (this run).
  size_t log_size() const { return daemon_ ? daemon_->err_so_far().size() : 0; }
  /// SIGKILL of colocd; returns once it is reaped.
  void kill_daemon() {
    daemon_->kill(SIGKILL);
    daemon_->wait(10s);
  }
  std::string log() const { return old_log_ + (daemon_ ? daemon_->err_so_far() : ""); }

  const std::string& socket() const { return socket_; }
  const std::string& state() const { return state_; }
  /// A path in the node's temporary directory.
  std::string file(const std::string& name) const { return dir_ / name; }

  /// The environment of a process on this node: simgpu with the node's devices and state,
  /// COLOC_SOCKET; no preload (coloc run adds it).
  Env base_env() const {
    Env e;
    e.simgpu(dir_, devices_);
    e.set("COLOC_SOCKET", socket_);
    if (sanitizer() == "tsan") e.set("TSAN_OPTIONS", e.get("TSAN_OPTIONS").value_or("") + " atexit_sleep_ms=0");
    return e;
  }

  /// Starts `coloc run --sim <coloc_args> -- <cmd>` with `extra` variables on top of base_env().
  std::unique_ptr<Proc> run(const std::vector<std::string>& coloc_args, const std::vector<std::string>& cmd,
                            const std::vector<std::pair<std::string, std::string>>& extra = {}) const {
    std::vector<std::string> argv = {build_path("bin/coloc"), "run", "--sim"};
    argv.insert(argv.end(), coloc_args.begin(), coloc_args.end());
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    Env e = base_env();
    for (auto& [k, v] : extra) e.set(k, v);
    return std::make_unique<Proc>(argv, e);
  }

  /// The coloc CLI against this node's daemon.
  ProcResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {build_path("bin/coloc")};
    argv.insert(argv.end(), args.begin(), args.end());
    Env e;
    e.set("COLOC_SOCKET", socket_);
    return coloc::test::run(argv, e, 20s);
  }
  /// `coloc status --json`, parsed.
  json status() const {
    ProcResult r = cli({"status", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    return json::parse(r.out);
  }
  /// `coloc status --json`'s output, or why there is none, for a failure message: never asserts
  /// (doctest builds a message under its reporter's lock; an assertion there deadlocks).
  std::string status_text() const {
    ProcResult r = cli({"status", "--json"});
    return r.exit_code == 0 ? r.out : "(coloc status failed: " + describe(r) + ")";
  }
  /// The job whose id is `name` or `name-<suffix>` (coloc run's ids), as status shows it; null
  /// when there is none.
  json job(const std::string& name) const {
    json s = status();
    for (auto& j : s["jobs"]) {
      std::string id = j["job"];
      if (id == name || id.rfind(name + "-", 0) == 0) return j;
    }
    return nullptr;
  }
  /// Waits until job `name` is in `state` (running, waiting, admission-pending).
  bool wait_state(const std::string& name, const std::string& state, std::chrono::milliseconds timeout = 20s) const {
    return wait_until([&] {
      json j = job(name);
      return !j.is_null() && j["state"] == state;
    }, timeout, 10ms);
  }
  /// The daemon's report of job `name` (id `name` or `name-<suffix>`), waiting up to `timeout`
  /// for it to be written.
  json report(const std::string& name, std::chrono::milliseconds timeout = 20s) const {
    std::string path;
    bool found = wait_until([&] {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(state_ + "/reports", ec)) {
        std::string f = e.path().filename();
        if (f == name + ".json" || (f.rfind(name + "-", 0) == 0 && f.size() == name.size() + 12 &&
                                    f.compare(f.size() - 5, 5, ".json") == 0)) {
          path = e.path();
          return true;
        }
      }
      return false;
    }, timeout, 10ms);
    REQUIRE_MESSAGE(found, "no report for job ", name, "\n", log());
    json r = json::parse(read_file(path), nullptr, false);
    REQUIRE_MESSAGE(!r.is_discarded(), "report ", path, " is not JSON");
    return r;
  }

 private:
  TempDir dir_{"coloc-e2e"};
  std::string devices_;
  std::vector<std::string> daemon_args_, daemon_prefix_;
  std::string socket_, state_, old_log_;
  std::unique_ptr<Proc> daemon_;
};

/// Waits up to `timeout` for `p` to exit; fails the test with its output when it does not exit 0.
/// `coloc run --job NAME -- coloc-train --pattern async ARGS... --duration SECONDS --job NAME` on
/// `n`, traced to its trace.csv (SIMGPU_TRACE): real training's launch pattern
/// (tools/workload/pattern.cpp), for the compute-sharing cases.
inline std::unique_ptr<Proc> train_async(const Node& n, const std::string& name, const std::vector<std::string>& args,
                                         const std::string& seconds) {
  std::vector<std::string> cmd = {coloc_train(), "--pattern", "async"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  for (const std::string& a : {std::string("--duration"), seconds, std::string("--job"), name}) cmd.push_back(a);
  return n.run({"--job", name}, cmd, {{"SIMGPU_TRACE", n.file("trace.csv")}});
}

inline ProcResult finish(Proc& p, std::chrono::milliseconds timeout = 60s) {
  ProcResult r = p.wait(timeout);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  return r;
}

/// Waits until `path` exists (a process's touch step), or `p` ends.
inline bool reached(Proc& p, const std::string& path, std::chrono::milliseconds timeout = 30s) {
  return wait_until([&] { return file_exists(path) || !p.running(); }, timeout, 5ms) && file_exists(path);
}

}  // namespace coloc::test::e2e
