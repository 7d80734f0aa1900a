// End-to-end: a process that joins a running job with another COLOC_MEM_LIMIT than the job's.
// The environment can only lower what colocd says: a lower limit holds for that process alone,
// a higher one is ignored; either way one warning names both values.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

std::unique_ptr<Proc> member(const Node& n, const std::string& job, const std::string& limit,
                             const std::vector<std::string>& steps) {
  Env e = n.base_env();
  e.preload_coloc();
  e.set("COLOC_JOB", job);
  if (!limit.empty()) e.set("COLOC_MEM_LIMIT", limit);
  std::vector<std::string> argv = {cuprobe()};
  argv.insert(argv.end(), steps.begin(), steps.end());
  return std::make_unique<Proc>(argv, e);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: a process joining a job with a lower COLOC_MEM_LIMIT is held to it; a higher one is ignored; both warn") {
  if (simulated_only()) return;
  Node n("16GiB");
  SUBCASE("lower: the job has no limit, the joining process asks 4 GiB") {
    auto first = member(n, "shared", "", {"init", "ctx", "0", "touch", n.file("up"), "hold-file", n.file("go")});
    REQUIRE(reached(*first, n.file("up")));
    auto joiner = member(n, "shared", "4GiB", {"init", "ctx", "0", "alloc", "6GiB", "big", "alloc", "3GiB", "small"});
    ProcResult r = finish(*joiner);
    CHECK(step(r.out, "alloc", 0)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // 6 GiB: past its own 4 GiB
    CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
    CHECK(r.err.find("COLOC_MEM_LIMIT=4.00 GiB is lower than the limit of job shared") != std::string::npos);
    CHECK(r.err.find("(none)") != std::string::npos);
    CHECK(n.job("shared")["limit"].is_null());  // the job's own limit is untouched
    write_file(n.file("go"), "");
    finish(*first);
  }
  SUBCASE("higher: the job has 4 GiB, the joining process asks 8 GiB") {
    auto first = member(n, "capped", "4GiB", {"init", "ctx", "0", "touch", n.file("up"), "hold-file", n.file("go")});
    REQUIRE(reached(*first, n.file("up")));
    auto joiner = member(n, "capped", "8GiB", {"init", "ctx", "0", "alloc", "6GiB", "big"});
    ProcResult r = finish(*joiner);
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // the job's 4 GiB holds
    CHECK(r.err.find("COLOC_MEM_LIMIT=8.00 GiB is higher than the limit of job capped") != std::string::npos);
    CHECK(r.err.find("ignored") != std::string::npos);
    write_file(n.file("go"), "");
    finish(*first);
  }
  SUBCASE("the same limit: no warning") {
    auto first = member(n, "same", "4GiB", {"init", "ctx", "0", "touch", n.file("up"), "hold-file", n.file("go")});
    REQUIRE(reached(*first, n.file("up")));
    auto joiner = member(n, "same", "4GiB", {"init", "ctx", "0", "alloc", "1GiB", "a"});
    ProcResult r = finish(*joiner);
    CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
    CHECK(r.err.find("COLOC_MEM_LIMIT") == std::string::npos);
    write_file(n.file("go"), "");
    finish(*first);
  }
}

}  // TEST_SUITE
