// Running a test's process as another user with chosen supplementary groups (root only): for the
// checks colocd makes from SO_PEERCRED and SO_PEERGROUPS (priority high, admin requests).
#pragma once

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "../../support/proc.h"

namespace coloc::test {

/// A user and the groups its processes carry (the primary `gid` and the supplementary `groups`).
struct Who {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

/// `nobody`, in no supplementary group but `groups`. Skips the test case (returns false) when the
/// tests do not run as root or there is no `nobody`.
inline bool nobody(Who* out, std::vector<gid_t> groups = {}) {
  struct passwd* pw = ::getpwnam("nobody");
  if (::geteuid() != 0 || !pw) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return false;
  }
  *out = Who{pw->pw_uid, pw->pw_gid, std::move(groups)};
  return true;
}

/// Two groups of this machine that are neither root's nor nobody's own (name, gid), for an admin
/// and a high-priority group; empty (with a note) when the machine has fewer.
inline std::vector<std::pair<std::string, gid_t>> spare_groups() {
  std::vector<std::pair<std::string, gid_t>> out;
  struct passwd* pw = ::getpwnam("nobody");
  const gid_t nobody_gid = pw ? pw->pw_gid : gid_t(-1);
  ::setgrent();
  while (struct group* g = ::getgrent()) {
    if (g->gr_gid == 0 || g->gr_gid == nobody_gid) continue;
    out.emplace_back(g->gr_name, g->gr_gid);
    if (out.size() == 2) break;
  }
  ::endgrent();
  if (out.size() < 2) {
    MESSAGE("skipped: needs two groups besides root's and nobody's");
    out.clear();
  }
  return out;
}

/// Becomes `who` in a forked child (groups first, then gid, then uid). False when it could not.
inline bool become(const Who& who) {
  return ::setgroups(who.groups.size(), who.groups.empty() ? nullptr : who.groups.data()) == 0 &&
         ::setgid(who.gid) == 0 && ::setuid(who.uid) == 0;
}

/// Runs `argv` as `who` with `env` (exact) to completion (up to `timeout`, then SIGKILL), its
/// output in files of a directory every user may write.
inline ProcResult run_as(const Who& who, const std::vector<std::string>& argv, const Env& env,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  TempDir io("coloc-as-user");
  ::chmod(io.path().c_str(), 0777);
  const std::string out = io / "out", err = io / "err";
  std::fflush(stdout);  // or the child would repeat what is buffered
  std::fflush(stderr);
  std::vector<std::string> args = argv, envs = env.strings();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::freopen(out.c_str(), "w", stdout) == nullptr || ::freopen(err.c_str(), "w", stderr) == nullptr) _exit(98);
    if (!become(who)) _exit(99);
    std::vector<char*> a, e;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : envs) e.push_back(s.data());
    e.push_back(nullptr);
    ::execve(a[0], a.data(), e.data());
    _exit(97);
  }
  ProcResult r;
  int st = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a child's exit, not synchronising
  }
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

/// How often `needle` occurs in `text`.
inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace coloc::test
