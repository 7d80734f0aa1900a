// `coloc anchor` (tools/coloc/anchor_cmd.h), the anchor a launcher such as the Slurm plugin holds
// for a job: its answer on --ready-fd, the job in colocd while --until-fd is open, the exit status
// passed on, its refusals. Runs everywhere (no Slurm needed); tests/integration/slurm/ drives it
// through the plugin.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "cli_helpers.h"

using namespace coloc::test;
using namespace std::chrono_literals;

namespace {

/// A `coloc anchor` started as the plugin starts it: the until-pipe's read end as fd 3, the
/// ready-pipe's write end as fd 4; this side keeps the other ends.
struct Anchor {
  pid_t pid = -1;
  int until = -1;  ///< write end: a status line, then close = the job ended
  int ready = -1;  ///< read end: the anchor's answer
  TempDir io{"coloc-anchor"};

  Anchor(const std::string& socket, std::vector<std::string> args) {
    int u[2], r[2];
    REQUIRE(::pipe2(u, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(r, O_CLOEXEC) == 0);
    std::vector<std::string> all = {build_path("bin/coloc"), "anchor", "--socket", socket};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), {"--until-fd", "3", "--ready-fd", "4"});
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string err = io / "err";
    std::fflush(stdout);
    std::fflush(stderr);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int uu = ::fcntl(u[0], F_DUPFD, 10), rr = ::fcntl(r[1], F_DUPFD, 10);
      if (uu < 0 || rr < 0 || ::dup2(uu, 3) < 0 || ::dup2(rr, 4) < 0) ::_exit(98);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (e >= 0) ::dup2(e, 2);
      ::close_range(5, ~0u, 0);
      ::execv(argv[0], argv.data());
      ::_exit(97);
    }
    ::close(u[0]);
    ::close(r[1]);
    until = u[1];
    ready = r[0];
  }
  ~Anchor() {
    if (until >= 0) ::close(until);
    if (ready >= 0) ::close(ready);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  /// Everything written to --ready-fd until the anchor closed it (10 s at most).
  std::string answer() {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{ready, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = ::read(ready, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, size_t(n));
    }
    return text;
  }

  /// Ends the job: `status` ("" = none), then EOF.
  void end(const std::string& status) {
    if (!status.empty()) REQUIRE(::write(until, status.data(), status.size()) == ssize_t(status.size()));
    ::close(until);
    until = -1;
  }

  /// Its exit code once it exited (10 s at most), else -1.
  int exit_code() {
    int st = 0;
    pid_t got = 0;
    REQUIRE(wait_until([&] { return (got = ::waitpid(pid, &st, WNOHANG)) == pid; }, 10s));
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  bool exited_within(std::chrono::milliseconds t) {
    int st = 0;
    if (wait_until([&] { return ::waitpid(pid, &st, WNOHANG) == pid; }, t)) {
      pid = -1;
      return true;
    }
    return false;
  }

  std::string err() const { return read_file(io / "err"); }
};

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc anchor: holds the job with its settings until the launcher ends it, and the report has the status it passed on") {
  Colocd d;
  Anchor a(d.socket(), {"--job", "slurm-77", "--mem", "2GiB", "--priority", "best-effort", "--on-full", "fail",
                        "--command", "sbatch train.sh"});
  const std::string answer = a.answer();
  REQUIRE_MESSAGE(answer == "ok\n", answer, a.err(), d.log());
  nlohmann::json j = d.job("slurm-77");
  REQUIRE_MESSAGE(j.is_object(), d.status_text());
  CHECK(j["limit"] == 2ull << 30);
  CHECK(j["priority"] == "best-effort");
  CHECK(j["pids"].empty());  // an anchor is no process of the job's

  // A process of the job comes and goes: the anchor keeps the job.
  ProcResult p = run({build_path("tests/bin/colocd_client"), "--socket", d.socket(), "--job", "slurm-77", "goodbye:0"},
                     Env(), 20s);
  CHECK_MESSAGE(p.exit_code == 0, describe(p));
  CHECK_MESSAGE(d.job("slurm-77").is_object(), d.status_text());

  a.end("3\n");
  CHECK(a.exit_code() == 0);
  nlohmann::json r = d.report("slurm-77");
  CHECK(r["exit_status"] == 3);
  CHECK(r["command"] == "sbatch train.sh");
  CHECK(r["limit"] == 2ull << 30);
}

TEST_CASE("coloc anchor: SIGTERM and SIGINT are the job's, not the anchor's; EOF alone ends it without a status") {
  Colocd d;
  Anchor a(d.socket(), {"--job", "slurm-78"});
  REQUIRE_MESSAGE(a.answer() == "ok\n", a.err(), d.log());
  ::kill(a.pid, SIGTERM);
  ::kill(a.pid, SIGINT);
  ::kill(a.pid, SIGHUP);
  CHECK_FALSE(a.exited_within(500ms));
  CHECK(d.job("slurm-78").is_object());
  a.end("");
  CHECK(a.exit_code() == 0);
  nlohmann::json r = d.report("slurm-78");
  CHECK(r["exit_status"].is_null());
  CHECK(r["command"] == "(anchor)");
}

TEST_CASE("coloc anchor: without colocd it answers 'error' with the reason and exits 3") {
  TempDir t("coloc-anchor-nodaemon");
  Anchor a(t / "none.sock", {"--job", "slurm-79"});
  const std::string answer = a.answer();
  CHECK_MESSAGE(answer.rfind("error ", 0) == 0, answer);
  CHECK_MESSAGE(answer.find("none.sock") != std::string::npos, answer);
  CHECK(a.exit_code() == 3);
}

TEST_CASE("coloc anchor: bad options are refused with exit 2 and an 'error' answer naming the option") {
  Colocd d;
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--job", "slurm-80", "--mem", "12X"}, "--mem '12X'"},
      {{"--job", "slurm-80", "--mem", "-1G"}, "--mem '-1G'"},
      {{"--job", "slurm 80"}, "--job 'slurm 80'"},
      {{"--job", "slurm-80", "--priority", "urgent"}, "--priority 'urgent'"},
      {{"--job", "slurm-80", "--on-full", "retry"}, "--on-full 'retry'"},
      {{"--job", "slurm-80", "--weight", "101"}, "--weight"},
  };
  for (const auto& [args, names] : bad) {
    CAPTURE(names);
    Anchor a(d.socket(), args);
    const std::string answer = a.answer();
    CHECK_MESSAGE(answer.rfind("error ", 0) == 0, answer);
    CHECK_MESSAGE(answer.find(names) != std::string::npos, answer);
    CHECK(a.exit_code() == 2);
  }
  CHECK(d.job("slurm-80").is_null());

  // --until-fd must be a descriptor it was given.
  ProcResult r = coloc_cli(d, {"anchor", "--job", "slurm-80", "--until-fd", "1"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err.find("--until-fd") != std::string::npos, describe(r));
}

}  // TEST_SUITE
