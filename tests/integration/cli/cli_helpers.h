// The coloc CLI run against a test colocd (colocd_fixture.h): as this user, or as `nobody`.
#pragma once

#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../daemon/colocd_fixture.h"

namespace coloc::test {

inline ProcResult coloc_cli(const Colocd& d, std::vector<std::string> args) {
  args.insert(args.begin(), build_path("bin/coloc"));
  return run(args, d.env(), 20s);
}

/// Runs the coloc CLI as user `nobody` (fork, setuid, exec), for permission checks.
inline ProcResult coloc_as_nobody(const Colocd& d, std::vector<std::string> args) {
  struct passwd* pw = ::getpwnam("nobody");
  REQUIRE(pw);
  TempDir io("coloc-nobody");
  ::chmod(io.path().c_str(), 0777);
  std::string out = io / "out", err = io / "err";
  std::fflush(stdout);  // or the child would repeat what is buffered
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::freopen(out.c_str(), "w", stdout) == nullptr || ::freopen(err.c_str(), "w", stderr) == nullptr) _exit(98);
    if (::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0) _exit(99);
    std::vector<std::string> all = {build_path("bin/coloc")};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envs = d.env().strings();
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(97);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ProcResult r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace coloc::test
