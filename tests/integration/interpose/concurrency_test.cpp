// Integration tests of libcoloc.so under concurrency and fork: 16 threads allocating and freeing
// at random stay exact and within the limit; a fork from a thread holding allocations leaves the
// parent's ledger alone and gives the child none; fork+exec.
#include <doctest/doctest.h>

#include <filesystem>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

TEST_SUITE("interpose") {

TEST_CASE("16 threads x 100k random allocations and frees: the ledger is exact and the limit holds") {
  // Sizes up to 16 MiB, at most 8 live per thread: up to 2 GiB wanted against a 1 GiB limit, so
  // many requests are refused while others succeed, from every thread at once.
  const uint64_t per_thread = scaled(100000);
  Job job;
  job.limit("1GiB");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "threads", "16", std::to_string(per_thread), "7", "16MiB",
                           "meminfo"}));
  json t = step(ls, "threads");
  uint64_t ok = t["allocs"], oom = t["oom"];
  CHECK(ok + oom == 16 * per_thread);
  CHECK(ok > 0);
  CHECK(oom > 0);
  CHECK(t["other_errors"] == 0);
  CHECK(t["frees"] == ok);
  CHECK(t["free_errors"] == 0);
  CHECK(step(ls, "meminfo")["free"] == GiB - 256 * MiB);  // everything given back

  json d = device0(job.ledger());
  CHECK(d["allocs"] == ok);
  CHECK(d["frees"] == ok);
  CHECK(d["failed"] == oom);
  CHECK(d["refused"] == oom);
  CHECK(d["untracked_frees"] == 0);
  CHECK(d["in_use"]["allocation"] == 0);
  CHECK(d["in_use"]["total"] == 256 * MiB);
  CHECK(d["peak"]["total"] <= GiB);
  CHECK(job.ledger()["calls"]["cuMemAlloc_v2"] == 16 * per_thread);
}

TEST_CASE("fork from a thread holding allocations: the child gets no ledger, the parent's is unchanged") {
  Job job;
  job.limit("4GiB").env.set("COLOC_REPORT", job.dir / "report.%p.json");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "1GiB", "a", "fork-thread", "64MiB", "quiet",
                           "fork-thread", "64MiB", "touch", "meminfo"}));
  CHECK(step(ls, "fork-thread", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "fork-thread", 0)["child_exit"] == 0);
  CHECK(step(ls, "fork-thread", 0)["child_signal"] == 0);
  // A child that calls the driver gets the driver's answer for a forked child (an initialisation
  // error on a real GPU and on simgpu), not a crash or a deadlock.
  CHECK(step(ls, "fork-thread", 1)["child_signal"] == 0);
  CHECK(step(ls, "fork-thread", 1)["child_exit"] == int(CUDA_ERROR_NOT_INITIALIZED));
  CHECK(step(ls, "meminfo")["free"] == 4 * GiB - 256 * MiB - GiB);

  int parent = step(ls, "init")["pid"];
  json mine;
  std::vector<json> children;
  for (const auto& e : std::filesystem::directory_iterator(job.dir.path())) {
    std::string name = e.path().filename();
    if (name.rfind("report.", 0) != 0) continue;
    json r = json::parse(read_file(e.path()));
    if (r["pid"] == parent) mine = r;
    else children.push_back(r);
  }
  // The quiet child wrote nothing (it called no hook); the touching one wrote an empty ledger.
  REQUIRE(children.size() == 1);
  for (const json& d : children[0]["devices"]) {
    CHECK(d["in_use"]["total"] == 0);
    CHECK(d["allocs"] == 0);
  }
  CHECK(children[0]["calls"]["cuMemAlloc_v2"] == 1);
  REQUIRE(mine.is_object());
  json d = device0(mine);
  CHECK(d["allocs"] == 3);
  CHECK(d["frees"] == 2);
  CHECK(d["in_use"]["allocation"] == GiB);
  CHECK(d["peak"]["allocation"] == GiB + 64 * MiB);
}

TEST_CASE("fork + exec: the new program has its own ledger") {
  Job job;
  job.limit("4GiB").env.set("COLOC_REPORT", job.dir / "report.%p.json");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "1GiB", "a", "fork-exec", client(), "init", "ctx",
                           "0", "alloc", "2GiB", "b", "alloc", "2GiB", "c"}));
  CHECK(step(ls, "fork-exec")["child_exit"] == 0);
  CHECK(step(ls, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");             // the child's 2 GiB
  CHECK(step(ls, "alloc", 2)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // its own limit
  int parent = step(ls, "init", 0)["pid"], child = step(ls, "init", 1)["pid"];
  json p = json::parse(read_file(job.dir / ("report." + std::to_string(parent) + ".json")));
  json c = json::parse(read_file(job.dir / ("report." + std::to_string(child) + ".json")));
  CHECK(device0(p)["in_use"]["allocation"] == GiB);
  CHECK(device0(p)["refused"] == 0);
  CHECK(device0(c)["in_use"]["allocation"] == 2 * GiB);
  CHECK(device0(c)["refused"] == 1);
}

}  // TEST_SUITE
