// tests/integration/simgpu/probe.h — running cuprobe (tests/programs/cuprobe.cpp) against simgpu
// in real processes, and reading its one-JSON-line-per-step output.
#pragma once

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/proc.h"

namespace probetest {

using coloc::test::Env;
using coloc::test::ProcResult;
using coloc::test::TempDir;
using nlohmann::json;
using namespace std::chrono_literals;

inline constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

inline std::string cuprobe() { return coloc::test::build_path("tests/bin/cuprobe"); }

/// argv for cuprobe with `steps`.
inline std::vector<std::string> probe_args(const std::vector<std::string>& steps) {
  std::vector<std::string> argv{cuprobe()};
  argv.insert(argv.end(), steps.begin(), steps.end());
  return argv;
}

/// An environment pointing at simgpu with the state in `dir`, and contexts costing `context`.
/// Under ThreadSanitizer the child skips TSan's default one-second pause at exit, which would
/// otherwise be counted in the wall-clock bounds of the timing tests.
inline Env sim_env(const TempDir& dir, const std::string& devices, const std::string& context = "256MiB") {
  Env e;
  e.simgpu(dir, devices);
  e.set("SIMGPU_CONTEXT_BYTES", context);
  if (coloc::test::sanitizer() == "tsan") e.set("TSAN_OPTIONS", e.get("TSAN_OPTIONS").value_or("") + " atexit_sleep_ms=0");
  return e;
}

/// Every JSON line of `out`, in order.
inline std::vector<json> lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) v.push_back(std::move(j));
  }
  return v;
}

/// Runs cuprobe to completion; requires exit 0 and one line per step.
inline std::vector<json> run_probe(const Env& env, const std::vector<std::string>& steps, size_t expected_lines,
                                   std::chrono::milliseconds timeout = 60s) {
  ProcResult r = coloc::test::run(probe_args(steps), env, timeout);
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  std::vector<json> v = lines(r.out);
  REQUIRE_MESSAGE(v.size() == expected_lines, coloc::test::describe(r));
  return v;
}

/// The step's CUresult name.
inline std::string rc(const json& step) { return step.value("rc_name", "<missing>"); }

/// Waits until the running probe has printed at least `n` lines; returns them.
inline std::vector<json> wait_lines(coloc::test::Proc& p, size_t n, std::chrono::milliseconds timeout = 30s) {
  std::vector<json> v;
  bool ok = coloc::test::wait_until(
      [&] {
        v = lines(p.out_so_far());
        return v.size() >= n || !p.running();
      },
      timeout);
  REQUIRE_MESSAGE((ok && v.size() >= n), "cuprobe printed " << v.size() << " of " << n << " lines; stderr:\n"
                                                           << p.err_so_far());
  return v;
}

}  // namespace probetest
