// tests/support/proc.h — real processes for integration tests: spawn with an exact environment,
// capture output to files, wait with a deadline, kill; temporary directories; waiting on a
// condition instead of sleeping; the paths of the build's products.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace coloc::test {

using namespace std::chrono_literals;

/// Absolute path of `rel` under the build directory of this variant (build/, build/asan/, ...).
std::string build_path(const std::string& rel);
/// Absolute path of `rel` under the source tree.
std::string source_path(const std::string& rel);
/// "asan", "tsan" or "" for the plain build.
std::string sanitizer();
/// The sanitizer's runtime library, which a preloaded libcoloc.so needs in front of it; empty in
/// the plain build.
std::string sanitizer_runtime();
/// True when COLOC_TEST_DRIVER=real: the tests run against the machine's real libcuda.so.1
/// (tests/gpu/run.sh sets it on a GPU machine). Env::simgpu() then leaves the driver alone, and
/// tests that depend on simgpu-only features (its call counts, trace, configurable devices) skip.
bool real_driver();

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "coloc-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

/// An environment for a child process. Starts from this process's environment with every
/// COLOC_*, SIMGPU_*, LD_PRELOAD and CUDA_VISIBLE_DEVICES variable removed, so tests state what
/// they depend on.
class Env {
 public:
  Env();
  Env& set(const std::string& key, const std::string& value);
  Env& unset(const std::string& key);
  std::optional<std::string> get(const std::string& key) const;
  std::vector<std::string> strings() const;

  /// Points the child at simgpu: LD_LIBRARY_PATH=build/sim, SIMGPU_STATE_DIR=<dir>/simgpu,
  /// SIMGPU_DEVICES=<devices>. Under real_driver() only the SIMGPU_* variables are set (the real
  /// driver ignores them) and LD_LIBRARY_PATH is left as it is.
  Env& simgpu(const TempDir& dir, const std::string& devices = "80GiB");
  /// Preloads build/lib/libcoloc.so (after the sanitizer runtime in sanitizer builds).
  Env& preload_coloc();

 private:
  std::map<std::string, std::string> vars_;
};

/// Outcome of a finished child.
struct ProcResult {
  int exit_code = -1;   ///< exit status when it exited, else -1
  int signal = 0;       ///< terminating signal, else 0
  bool timed_out = false;
  std::string out;      ///< everything it wrote to stdout
  std::string err;      ///< everything it wrote to stderr
  /// The last line of stdout that parses as a JSON object (coloc-train's result line), or null.
  nlohmann::json last_json() const;
};

/// A running child process. Its stdout and stderr go to files in a private temporary directory,
/// so a chatty child never blocks on a full pipe. Killed (SIGKILL) on destruction if still running.
class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const Env& env, const std::string& cwd = "");
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  /// Waits up to `timeout`; on timeout sends SIGKILL, reaps, and sets timed_out.
  ProcResult wait(std::chrono::milliseconds timeout = 60s);
  void kill(int sig);
  /// What the child has written so far.
  std::string out_so_far() const;
  std::string err_so_far() const;

 private:
  ProcResult collect(int status, bool timed_out);
  pid_t pid_ = -1;
  bool reaped_ = false;
  int last_status_ = 0;
  TempDir io_;
};

/// Runs a command to completion (see Proc::wait).
ProcResult run(const std::vector<std::string>& argv, const Env& env, std::chrono::milliseconds timeout = 60s);

/// Polls `pred` every `interval` until it is true or `timeout` passes; returns its last value.
/// Use this instead of sleeping for a fixed time.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s,
                std::chrono::milliseconds interval = 5ms);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& content);
bool file_exists(const std::string& path);

/// Formats a ProcResult for failure messages (exit, signal, tails of stdout and stderr).
std::string describe(const ProcResult& r);

}  // namespace coloc::test
