// start_bench — a mass start: N processes (default 200) started at once on simgpu, each making a
// CUDA context and one allocation (cuprobe init ctx 0 alloc 16MiB), as a scheduler starts a node's
// array tasks. Measured side by side in one run, rounds interleaved:
//
//   without coloc   cuprobe as it is
//   coloc run       `coloc run --sim -- cuprobe ...` against a colocd (anchor + registration +
//                   admission per job)
//   preload only    LD_PRELOAD=libcoloc.so with COLOC_SOCKET, no coloc run (the library's share)
//
// for two workloads: the probe (cuprobe, a C++ program that starts in under a millisecond) and a
// Python process (python3 with ctypes: cuInit, a context, the allocation), as ML jobs start.
//
// The figure is the time from the first spawn to the last process's first allocation (its
// "alloc" line on stdout), median over the rounds, and its ratio to "without coloc". Also
// counted: processes that warned of a lost connection (must be 0). Prints a table and writes
// JSON (--out). A benchmark, not a test: it reports, it does not fail on slowness.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/wire.h"
#include "machine.h"

using nlohmann::json;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "start_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // its stdout and stderr
  std::string text;
  bool allocated = false;
};

Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) die("pipe");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, p[1], 2);
  Child c;
  if (posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) die("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  c.out = p[0];
  return c;
}

struct Round {
  double last_alloc_s = 0;  // first spawn -> the last process's alloc line
  int failed = 0;
  int lost = 0;
};

/// Starts `n` copies of `args` and waits for all of them.
Round run_round(int n, const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<Child> kids;
  kids.reserve(size_t(n));
  const uint64_t t0 = coloc::wire::now_ns();
  for (int i = 0; i < n; ++i) kids.push_back(spawn(args, env));
  uint64_t last = t0;
  size_t open = kids.size();
  std::vector<pollfd> fds(kids.size());
  char buf[4096];
  while (open > 0) {
    for (size_t i = 0; i < kids.size(); ++i) fds[i] = {kids[i].out, POLLIN, 0};
    if (::poll(fds.data(), fds.size(), 60000) <= 0) die("processes hang");
    for (size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].out < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t r = ::read(kids[i].out, buf, sizeof buf);
      if (r > 0) {
        kids[i].text.append(buf, size_t(r));
        if (!kids[i].allocated && kids[i].text.find("\"step\":\"alloc\"") != std::string::npos) {
          kids[i].allocated = true;
          last = std::max(last, coloc::wire::now_ns());
        }
        continue;
      }
      ::close(kids[i].out);
      kids[i].out = -1;
      --open;
    }
  }
  Round r;
  for (Child& k : kids) {
    int st = 0;
    ::waitpid(k.pid, &st, 0);
    const size_t at = k.text.find("\"step\":\"alloc\"");
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && k.allocated &&
                    k.text.find("\"rc_name\":\"CUDA_SUCCESS\"", at) != std::string::npos;
    r.failed += !ok;
    r.lost += k.text.find("lost the connection") != std::string::npos;
  }
  r.last_alloc_s = double(last - t0) / 1e9;
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string build = "build", out = "build/bench/start.json";
  int n = 200, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--build") build = v;
    else if (a == "--out") out = v;
    else if (a == "--processes") n = std::atoi(v.c_str());
    else if (a == "--rounds") rounds = std::atoi(v.c_str());
    else die("unknown option " + a + " (--build DIR --out FILE --processes N --rounds R)");
  }
  char* abs = ::realpath(build.c_str(), nullptr);
  if (!abs) die("no build directory " + build);
  build = abs;
  std::free(abs);
  rlimit rl;
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  ::signal(SIGPIPE, SIG_IGN);

  char tmpl[] = "/tmp/coloc-start-bench.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string socket = dir + "/colocd.sock";
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  // 200 contexts of 512 MiB would not fit an 80 GiB device: small contexts, on both sides.
  std::vector<std::string> base = {"PATH=" + path, "LD_LIBRARY_PATH=" + build + "/sim", "SIMGPU_STATE_DIR=" + dir + "/simgpu",
                                   "SIMGPU_DEVICES=80GiB", "SIMGPU_CONTEXT_BYTES=64MiB", "COLOC_CONTEXT_BYTES=64MiB",
                                   "HOME=" + dir};
  const std::vector<std::string> probe = {build + "/tests/bin/cuprobe", "init", "ctx", "0", "alloc", "16MiB", "a"};
  Child daemon = spawn({build + "/bin/colocd", "--socket", socket, "--state-dir", dir + "/state", "--log-level", "warn"}, base);
  for (int i = 0; i < 2000 && ::access(socket.c_str(), F_OK) != 0; ++i) ::usleep(5000);
  if (::access(socket.c_str(), F_OK) != 0) die("colocd did not start");

  std::vector<std::string> with_env = base;
  with_env.push_back("COLOC_SOCKET=" + socket);
  std::vector<std::string> preload_env = with_env;
  preload_env.push_back("LD_PRELOAD=" + build + "/lib/libcoloc.so");
  const std::string py_script = dir + "/probe.py";
  std::ofstream(py_script) << "import ctypes\n"
                              "cu = ctypes.CDLL('libcuda.so.1')\n"
                              "assert cu.cuInit(0) == 0\n"
                              "dev = ctypes.c_int()\n"
                              "assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0\n"
                              "ctx = ctypes.c_void_p()\n"
                              "assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0\n"
                              "ptr = ctypes.c_uint64()\n"
                              "rc = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(16 << 20))\n"
                              "print('{\"step\":\"alloc\",\"rc_name\":\"%s\"}' % ('CUDA_SUCCESS' if rc == 0 else rc), flush=True)\n";
  const std::vector<std::string> python = {"/usr/bin/python3", py_script};
  auto under_run = [&](const std::vector<std::string>& cmd) {
    std::vector<std::string> a = {build + "/bin/coloc", "run", "--sim", "--"};
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  };

  struct Variant {
    std::string name;
    std::vector<std::string> args, env;
    std::vector<double> times;
    int failed = 0, lost = 0;
  };
  std::vector<Variant> v;
  for (auto& [wl, cmd] : {std::pair<std::string, std::vector<std::string>>{"probe", probe}, {"python", python}}) {
    v.push_back({wl + ": without coloc", cmd, base, {}, 0, 0});
    v.push_back({wl + ": coloc run", under_run(cmd), with_env, {}, 0, 0});
    v.push_back({wl + ": preload only", cmd, preload_env, {}, 0, 0});
  }
  std::printf("start_bench: %d processes at once, %d rounds each (interleaved), simgpu 80 GiB\n", n, rounds);
  std::fflush(stdout);
  run_round(n, probe, base);  // warm the page cache
  for (int r = 0; r < rounds; ++r)
    for (Variant& x : v) {
      Round res = run_round(n, x.args, x.env);
      x.times.push_back(res.last_alloc_s);
      x.failed += res.failed;
      x.lost += res.lost;
    }
  ::kill(daemon.pid, SIGTERM);
  ::waitpid(daemon.pid, nullptr, 0);
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "start_bench: could not remove %s\n", dir.c_str());

  json variants = json::object();
  std::printf("  %-24s %10s %10s %8s %8s %6s\n", "", "median s", "min s", "ratio", "failed", "lost");
  for (size_t i = 0; i < v.size(); ++i) {
    Variant& x = v[i];
    const double base_s = median(v[i - i % 3].times);  // the workload's "without coloc"
    const double m = median(x.times);
    variants[x.name] = {{"last_first_alloc_s_median", m},
                        {"last_first_alloc_s_min", *std::min_element(x.times.begin(), x.times.end())},
                        {"rounds_s", x.times},
                        {"ratio_to_without", base_s > 0 ? m / base_s : 0},
                        {"failed", x.failed},
                        {"lost_connections", x.lost}};
    std::printf("  %-24s %10.3f %10.3f %7.2fx %8d %6d\n", x.name.c_str(), m, *std::min_element(x.times.begin(), x.times.end()),
                base_s > 0 ? m / base_s : 0, x.failed, x.lost);
  }
  json j{{"processes", n},
         {"rounds", rounds},
         {"machine", coloc::bench::machine()},
         {"variants", variants},
         {"goal_ratio", 1.2}};
  std::string parent = out.substr(0, out.rfind('/'));
  if (out.find('/') != std::string::npos) ::mkdir(parent.c_str(), 0755);
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("  goal: coloc run <= 1.2x without coloc; written to %s\n", out.c_str());
  return 0;
}
