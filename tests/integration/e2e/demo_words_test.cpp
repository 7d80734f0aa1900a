// The demo's words: tools/demo/demo.sh --help prints a usage (not its own source), and the
// summary's verdict says what a job waited for — to be admitted, or for memory to grow — as the
// job's report records it (tools/demo/summary.py on prepared inputs; no jobs are run).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <string>

#include "../../support/proc.h"

using namespace coloc::test;

namespace {

/// Inputs for summary.py: two jobs; `a` crashes without coloc; with coloc both complete and `a`
/// waited `admission_s` to be admitted and `memory_s` for memory.
std::string verdict(double admission_s, double memory_s) {
  TempDir out("coloc-demo-words");
  REQUIRE(::mkdir((out / "nocoloc").c_str(), 0755) == 0);
  REQUIRE(::mkdir((out / "coloc").c_str(), 0755) == 0);
  write_file(out / "jobs.tsv", "a\tjob a\t1073741824\nb\tjob b\t1073741824\n");
  write_file(out / "device.txt", "2147483648 SimGPU");
  for (const char* job : {"a", "b"}) {
    std::string j = job;
    write_file(out / ("nocoloc/" + j + ".rc"), j == "a" ? "3" : "0");
    write_file(out / ("nocoloc/" + j + ".json"), j == "a" ? "{\"status\":\"oom\",\"peak_bytes\":1}" : "{\"peak_bytes\":1}");
    write_file(out / ("coloc/" + j + ".rc"), "0");
    write_file(out / ("coloc/" + j + ".json"), "{\"peak_bytes\":1}");
    double adm = j == "a" ? admission_s : 0, mem = j == "a" ? memory_s : 0;
    write_file(out / ("coloc/" + j + ".report.json"),
               "{\"devices\":[{\"wait_admission_s\":" + std::to_string(adm) + ",\"wait_memory_s\":" +
                   std::to_string(mem) + "}]}");
  }
  ProcResult r = run({"python3", source_path("tools/demo/summary.py"), out.path()}, Env(), 20s);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  size_t at = r.out.find("Verdict:");
  REQUIRE(at != std::string::npos);
  return r.out.substr(at);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("demo: --help prints a usage, not the script's source") {
  ProcResult r = run({source_path("tools/demo/demo.sh"), "--help"}, Env(), 20s);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("Usage: tools/demo/demo.sh", 0) == 0);
  for (const char* opt : {"--quick", "--no-monitor", "--out DIR", "--keep", "BUILD_DIR"}) {
    CAPTURE(opt);
    CHECK(r.out.find(opt) != std::string::npos);
  }
  CHECK(r.out.find("set -euo") == std::string::npos);
  CHECK(r.out.find("#") == std::string::npos);
  ProcResult bad = run({source_path("tools/demo/demo.sh"), "--bogus"}, Env(), 20s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("unknown option --bogus") != std::string::npos);
}

TEST_CASE("demo: the verdict words a wait by what happened (admission, or memory to grow)") {
  std::string v = verdict(1.25, 0);
  CHECK_MESSAGE(v.find("a waited 1.2 s to be admitted instead of crashing") != std::string::npos, v);
  CHECK(v.find("for memory") == std::string::npos);
  v = verdict(0, 2.5);
  CHECK_MESSAGE(v.find("a waited 2.5 s for memory to grow instead of crashing") != std::string::npos, v);
  CHECK(v.find("admitted") == std::string::npos);
  v = verdict(1.0, 2.0);
  CHECK_MESSAGE(v.find("a waited 1.0 s to be admitted and 2.0 s for memory to grow") != std::string::npos, v);
  v = verdict(0, 0);
  CHECK(v.find("waited") == std::string::npos);
  CHECK(v.find("Verdict: PASS") != std::string::npos);
}

}  // TEST_SUITE
