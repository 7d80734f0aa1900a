// Integration tests of libcoloc.so with bad input: NULL out-pointers, zero and huge sizes, unknown
// and double frees get the driver's own answers and nothing is lost or miscounted; a malformed
// COLOC_MEM_LIMIT is one clear error and means no limit.
#include <doctest/doctest.h>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

TEST_SUITE("interpose") {

TEST_CASE("bad arguments get the driver's own errors, and the ledger stays exact") {
  // 2^63 bytes: no device has them. 12345: not a pointer anyone allocated.
  std::vector<std::string> script = {client(), "init", "ctx", "0", "null-alloc", "null-meminfo", "null-pool",
                                     "alloc", "0", "zero", "alloc", "9223372036854775808", "huge", "free-ptr", "12345",
                                     "alloc", "1MiB", "a", "free", "a", "free", "a", "meminfo"};
  Job with, without("80GiB", false);
  auto a = lines(with.run(script)), b = lines(without.run(script));
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(b[i].dump());
    for (const char* k : {"ptr", "pid"}) {  // addresses and pids differ between runs
      a[i].erase(k);
      b[i].erase(k);
    }
    if (a[i]["step"] != "meminfo") CHECK(a[i] == b[i]);  // meminfo: our context is booked at 256 MiB
  }
  CHECK(step(a, "null-alloc")["rc_name"] != "CUDA_SUCCESS");
  CHECK(step(a, "alloc", 0)["rc_name"] != "CUDA_SUCCESS");  // zero bytes
  CHECK(step(a, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(a, "free", 1)["rc_name"] != "CUDA_SUCCESS");  // double free
  json d = device0(with.ledger());
  CHECK(d["allocs"] == 1);
  CHECK(d["frees"] == 3);            // one tracked, two untracked (12345 and the double free)
  CHECK(d["untracked_frees"] == 2);
  CHECK(d["failed"] == 1);           // the 2^63 request; invalid arguments are not failed allocations
  CHECK(d["refused"] == 0);          // no limit: the driver refused it
  CHECK(d["in_use"]["allocation"] == 0);
  CHECK(d["in_use"]["total"] == 256 * MiB);
}

TEST_CASE("a huge request under a limit is refused without reaching the driver") {
  Job job;
  job.limit("4GiB").env.set("SIMGPU_CALLS", job.dir / "calls.json");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "9223372036854775808", "huge", "pitch",
                           "4294967296", "4294967296", "4", "p", "meminfo"}));
  CHECK(step(ls, "alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(ls, "pitch")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // width x height overflows 64 bits
  CHECK(step(ls, "meminfo")["free"] == 4 * GiB - 256 * MiB);
  CHECK(device0(job.ledger())["refused"] == 2);
  if (!real_driver()) {
    json calls = json::parse(read_file(job.dir / "calls.json"));
    CHECK(calls.value("cuMemAlloc_v2", 0) == 0);
    CHECK(calls.value("cuMemAllocPitch_v2", 0) == 0);
  }
}

TEST_CASE("a malformed COLOC_MEM_LIMIT is one clear error and means no limit") {
  for (const char* bad : {"lots", "20 GiBs", "-1G", "1.5", "", "0", "0GiB"}) {
    CAPTURE(bad);
    Job job;
    job.limit(bad);
    ProcResult r = job.run({client(), "init", "ctx", "0", "alloc", "8GiB", "a", "total-mem", "0"});
    auto ls = lines(r);
    CHECK(step(ls, "alloc")["rc_name"] == "CUDA_SUCCESS");
    CHECK(step(ls, "total-mem")["total"] == 80 * GiB);
    CHECK(device0(job.ledger())["limit"].is_null());
    std::string needle = std::string("error: COLOC_MEM_LIMIT=\"") + bad + "\"";
    size_t at = r.err.find(needle);
    CHECK(at != std::string::npos);
    CHECK(r.err.find(needle, at + 1) == std::string::npos);  // once
    CHECK(r.err.find("no limit applies") != std::string::npos);
    CHECK(r.out.find("coloc[") == std::string::npos);  // never on stdout
  }
}

TEST_CASE("a malformed setting is reported by the processes that use CUDA, once each, not by every program") {
  // LD_PRELOAD reaches the shell and every program it starts; only the two CUDA processes (at
  // cuInit) report the error, and the second one only once although it calls cuInit twice.
  Job job;
  job.limit("abc").env.unset("COLOC_REPORT");
  std::string script = "ls / >/dev/null; echo x | cat >/dev/null; date >/dev/null; " + client() + " init; " +
                       client() + " init init ctx 0";
  ProcResult r = job.run({"/bin/sh", "-c", script});
  size_t errors = 0;
  for (size_t at = 0; (at = r.err.find("COLOC_MEM_LIMIT=\"abc\"", at)) != std::string::npos; ++at) ++errors;
  CHECK(errors == 2);
  CHECK(r.err.find("coloc[sh ") == std::string::npos);
  CHECK(r.err.find("coloc[ls ") == std::string::npos);
  CHECK(r.err.find("coloc[cat ") == std::string::npos);
  CHECK(r.err.find("coloc[date ") == std::string::npos);
}

}  // TEST_SUITE
