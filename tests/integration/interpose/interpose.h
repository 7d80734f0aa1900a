// Helpers of the interposer's integration tests: run a test client under simgpu with libcoloc.so
// preloaded, read its JSON lines and its COLOC_REPORT ledger.
#pragma once

#include <cuda.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/proc.h"

namespace coloc::test::interpose {

using nlohmann::json;

inline constexpr uint64_t MiB = 1ull << 20;
inline constexpr uint64_t GiB = 1ull << 30;

inline std::string client() { return build_path("tests/bin/interpose_client"); }
inline std::string cudart() { return build_path("tests/bin/interpose_cudart"); }

/// A run of one test process: its own simgpu state (so tests never share devices), its own report.
struct Job {
  TempDir dir{"coloc-interpose"};
  Env env;
  std::string report = dir / "report.json";

  /// simgpu with `devices`, libcoloc.so preloaded, COLOC_CONTEXT_BYTES=256MiB (round numbers),
  /// COLOC_REPORT set.
  explicit Job(const std::string& devices = "80GiB", bool preload = true) {
    env.simgpu(dir, devices).set("COLOC_CONTEXT_BYTES", "256MiB").set("COLOC_REPORT", report);
    if (preload) env.preload_coloc();
  }
  Job& limit(const std::string& size) {
    env.set("COLOC_MEM_LIMIT", size);
    return *this;
  }
  /// Runs `argv`; fails the test case when it does not exit 0.
  ProcResult run(const std::vector<std::string>& argv) {
    ProcResult r = coloc::test::run(argv, env);
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    return r;
  }
  /// The report the process wrote at exit.
  json ledger() const {
    std::string text = read_file(report);
    INFO("report: " << report);
    REQUIRE_FALSE(text.empty());
    return json::parse(text);
  }
};

/// The JSON lines a client printed, in order.
inline std::vector<json> lines(const ProcResult& r) {
  std::vector<json> out;
  size_t start = 0;
  while (start < r.out.size()) {
    size_t end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    std::string line = r.out.substr(start, end - start);
    if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
    start = end + 1;
  }
  return out;
}

/// The n-th (0-based) line of step `name`.
inline json step(const std::vector<json>& ls, const std::string& name, int n = 0) {
  for (const json& l : ls)
    if (l.value("step", "") == name && n-- == 0) return l;
  FAIL("no step " << name);
  return {};
}

/// rc_name of every line, in order.
inline std::vector<std::string> results(const std::vector<json>& ls) {
  std::vector<std::string> out;
  for (const json& l : ls) out.push_back(l.value("rc_name", ""));
  return out;
}

/// The report's entry for device slot 0.
inline json device0(const json& report) {
  REQUIRE(report["devices"].size() >= 1);
  return report["devices"][0];
}

/// Iterations, a tenth of them under ThreadSanitizer (each atomic there costs ~100x).
inline uint64_t scaled(uint64_t n) { return sanitizer() == "tsan" ? n / 10 : n; }

}  // namespace coloc::test::interpose
