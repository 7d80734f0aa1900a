#include "proc.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace coloc::test {

namespace fs = std::filesystem;

std::string source_path(const std::string& rel) { return std::string(COLOC_SOURCE_DIR) + "/" + rel; }

bool real_driver() {
  const char* v = std::getenv("COLOC_TEST_DRIVER");
  return v && std::string(v) == "real";
}

TempDir::TempDir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + tag + ".XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

static bool scrubbed(const std::string& key) {
  return key.rfind("COLOC_", 0) == 0 || key.rfind("SIMGPU_", 0) == 0 || key == "LD_PRELOAD" ||
         key == "CUDA_VISIBLE_DEVICES";
}

Env::Env() {
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (!scrubbed(key)) vars_[key] = kv.substr(eq + 1);
  }
  // A colocd started by a test never reads the node's /etc/coloc/colocd.toml (config/config.h):
  // empty is "no file" (a test that wants one sets it, or passes --config).
  vars_["COLOC_CONFIG"] = "";
}

Env& Env::set(const std::string& key, const std::string& value) {
  vars_[key] = value;
  return *this;
}

Env& Env::unset(const std::string& key) {
  vars_.erase(key);
  return *this;
}

std::optional<std::string> Env::get(const std::string& key) const {
  auto it = vars_.find(key);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Env::strings() const {
  std::vector<std::string> out;
  for (auto& [k, v] : vars_) out.push_back(k + "=" + v);
  return out;
}

Env& Env::simgpu(const TempDir& dir, const std::string& devices) {
  if (!real_driver()) {
    std::string lib = build_path("sim");
    auto old = get("LD_LIBRARY_PATH");
    set("LD_LIBRARY_PATH", old && !old->empty() ? lib + ":" + *old : lib);
  }
  set("SIMGPU_STATE_DIR", dir / "simgpu");
  set("SIMGPU_DEVICES", devices);
  return *this;
}

Env& Env::preload_coloc() {
  std::string pre = build_path("lib/libcoloc.so");
  std::string rt = sanitizer_runtime();
  set("LD_PRELOAD", rt.empty() ? pre : rt + ":" + pre);
  return *this;
}

nlohmann::json ProcResult::last_json() const {
  std::istringstream in(out);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) last = std::move(j);
  }
  return last;
}

Proc::Proc(const std::vector<std::string>& argv, const Env& env, const std::string& cwd) : io_("coloc-proc") {
  if (argv.empty()) throw std::invalid_argument("Proc: empty argv");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> envs = env.strings();
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::string out = io_ / "stdout", err = io_ / "stderr";
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Children start with default signal dispositions and an empty mask, whatever the test runner has.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawnp(&pid_, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("spawn " + argv[0] + ": " + std::strerror(rc));
}

Proc::~Proc() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
  }
}

bool Proc::running() {
  if (reaped_) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == 0) return true;
  // Reaped here: keep the status for wait().
  reaped_ = true;
  last_status_ = st;
  return false;
}

void Proc::kill(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

std::string Proc::out_so_far() const { return read_file(io_ / "stdout"); }
std::string Proc::err_so_far() const { return read_file(io_ / "stderr"); }

ProcResult Proc::collect(int status, bool timed_out) {
  ProcResult r;
  r.timed_out = timed_out;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = out_so_far();
  r.err = err_so_far();
  return r;
}

ProcResult Proc::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return collect(last_status_, false);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  auto sleep = 1ms;
  for (;;) {
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      last_status_ = st;
      return collect(st, false);
    }
    if (r < 0 && errno != EINTR) throw std::runtime_error("waitpid: " + std::string(std::strerror(errno)));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
      reaped_ = true;
      last_status_ = st;
      return collect(st, true);
    }
    std::this_thread::sleep_for(sleep);
    if (sleep < 20ms) sleep *= 2;
  }
}

ProcResult run(const std::vector<std::string>& argv, const Env& env, std::chrono::milliseconds timeout) {
  Proc p(argv, env);
  return p.wait(timeout);
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(interval);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << content;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

static std::string tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

std::string describe(const ProcResult& r) {
  std::ostringstream o;
  o << "exit=" << r.exit_code << " signal=" << r.signal << (r.timed_out ? " TIMED OUT" : "")
    << "\n--- stdout ---\n" << tail(r.out, 3000) << "\n--- stderr ---\n" << tail(r.err, 3000);
  return o.str();
}

}  // namespace coloc::test
