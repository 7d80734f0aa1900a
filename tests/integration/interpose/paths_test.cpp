// Integration tests of libcoloc.so: every allocation path is counted to the byte and limited with a
// clean CUDA_ERROR_OUT_OF_MEMORY, contexts cost their configured size, and cuMemGetInfo /
// cuDeviceTotalMem show the job's limit. Real processes on simgpu (interpose_client).
#include <doctest/doctest.h>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

namespace {

// Tests that rely on simgpu's configurable devices or its exact rounding skip on a real driver
// (COLOC_TEST_DRIVER=real).
bool simgpu_only() {
  if (real_driver()) MESSAGE("skipped on a real driver: relies on simgpu's devices or rounding");
  return real_driver();
}

json simgpu_calls(const std::string& path) {
  std::string text = read_file(path);
  REQUIRE_FALSE(text.empty());
  return json::parse(text);
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("device allocations are counted to the byte and limited without calling the driver") {
  Job job;
  job.limit("4GiB").env.set("COLOC_JOB", "paths").set("SIMGPU_CALLS", job.dir / "calls.json");
  ProcResult r = job.run({client(), "init", "ctx", "0", "alloc", "1GiB", "a", "managed", "512MiB", "m", "pitch",
                          "1000", "3", "4", "p", "meminfo", "alloc", "3GiB", "big", "free", "a", "free", "m", "free", "p",
                          "meminfo"});
  auto ls = lines(r);
  CHECK(results(ls) == std::vector<std::string>{"CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS",
                                                "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY",
                                                "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS", "CUDA_SUCCESS"});
  uint64_t pitch = step(ls, "pitch")["pitch"];
  CHECK(pitch >= 1000);
  uint64_t allocated = GiB + 512 * MiB + 3 * pitch;
  CHECK(step(ls, "meminfo", 0)["total"] == 4 * GiB);
  CHECK(step(ls, "meminfo", 0)["free"] == 4 * GiB - 256 * MiB - allocated);
  CHECK(step(ls, "meminfo", 1)["free"] == 4 * GiB - 256 * MiB);

  json d = device0(job.ledger());
  CHECK(d["limit"] == 4 * GiB);
  CHECK(d["allocs"] == 3);
  CHECK(d["frees"] == 3);
  CHECK(d["failed"] == 1);
  CHECK(d["refused"] == 1);
  CHECK(d["untracked_frees"] == 0);
  CHECK(d["in_use"]["allocation"] == 0);
  CHECK(d["in_use"]["context"] == 256 * MiB);
  CHECK(d["in_use"]["total"] == 256 * MiB);
  CHECK(d["peak"]["allocation"] == allocated);
  CHECK(d["peak"]["total"] == 256 * MiB + allocated);
  json calls = job.ledger()["calls"];
  CHECK(calls["cuMemAlloc_v2"] == 2);
  CHECK(calls["cuMemAllocManaged"] == 1);
  CHECK(calls["cuMemAllocPitch_v2"] == 1);
  CHECK(calls["cuMemFree_v2"] == 3);
  // The refused allocation never reached the driver.
  if (!real_driver()) CHECK(simgpu_calls(job.dir / "calls.json")["cuMemAlloc_v2"] == 1);
  // One warning, naming the job, the device, the request, the use and the limit.
  CHECK(r.err.find("out of memory (own limit): job paths, device 0 (GPU-") != std::string::npos);
  CHECK(r.err.find("cuMemAlloc_v2 requests 3.00 GiB, in use 1.75 GiB, limit 4.00 GiB") != std::string::npos);
}

TEST_CASE("stream-ordered allocations cost their pools' reserved memory and are limited") {
  if (simgpu_only()) return;  // pool chunk sizes and trimming are the driver's choice
  Job job;
  job.limit("4GiB");
  ProcResult r = job.run({client(), "init", "ctx", "0", "async", "1GiB", "a", "pool-create", "P", "pool-alloc", "P",
                          "512MiB", "b", "pool-alloc-ptsz", "P", "256MiB", "c", "async-ptsz", "128MiB", "d", "meminfo",
                          "pool-alloc", "P", "3GiB", "big", "free-async", "a", "free-async-ptsz", "b", "free", "c",
                          "free-async", "d", "meminfo", "pool-trim", "P", "0", "meminfo", "sync", "meminfo",
                          "pool-destroy", "P"});
  auto ls = lines(r);
  CHECK(step(ls, "pool-alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  for (const char* s : {"async", "pool-alloc-ptsz", "async-ptsz", "free-async", "free-async-ptsz", "free", "sync",
                        "pool-destroy"})
    CHECK(step(ls, s)["rc_name"] == "CUDA_SUCCESS");
  const uint64_t default_pool = GiB + 128 * MiB, pool_p = 768 * MiB;
  CHECK(step(ls, "meminfo", 0)["free"] == 4 * GiB - 256 * MiB - default_pool - pool_p);
  // Freed blocks stay reserved in their pools: the device has not got them back.
  CHECK(step(ls, "meminfo", 1)["free"] == 4 * GiB - 256 * MiB - default_pool - pool_p);
  // Trimming P gives its memory back; synchronizing trims the default pool (threshold 0).
  CHECK(step(ls, "meminfo", 2)["free"] == 4 * GiB - 256 * MiB - default_pool);
  CHECK(step(ls, "meminfo", 3)["free"] == 4 * GiB - 256 * MiB);

  json report = job.ledger();
  json d = device0(report);
  CHECK(d["allocs"] == 4);
  CHECK(d["frees"] == 4);
  CHECK(d["failed"] == 1);
  CHECK(d["refused"] == 1);
  CHECK(d["in_use"]["pool"] == 0);
  CHECK(d["peak"]["pool"] == default_pool + pool_p);
  CHECK(report["calls"]["cuMemAllocAsync"] == 1);
  CHECK(report["calls"]["cuMemAllocAsync_ptsz"] == 1);
  CHECK(report["calls"]["cuMemAllocFromPoolAsync"] == 2);
  CHECK(report["calls"]["cuMemAllocFromPoolAsync_ptsz"] == 1);
  CHECK(report["calls"]["cuMemFreeAsync_ptsz"] == 1);
}

TEST_CASE("VMM: device-located handles are charged, host-located ones are not") {
  Job job;
  job.limit("4GiB");
  ProcResult r = job.run({client(), "init", "ctx", "0", "vmm", "1GiB", "v", "vmm-host", "64MiB", "h", "meminfo", "vmm",
                          "3GiB", "big", "release", "v", "release", "h", "meminfo"});
  auto ls = lines(r);
  CHECK(step(ls, "vmm", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "vmm-host")["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "vmm", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(ls, "meminfo", 0)["free"] == 4 * GiB - 256 * MiB - GiB);
  CHECK(step(ls, "meminfo", 1)["free"] == 4 * GiB - 256 * MiB);
  json d = device0(job.ledger());
  CHECK(d["allocs"] == 1);
  CHECK(d["frees"] == 1);
  CHECK(d["untracked_frees"] == 0);  // the host-located handle was known, just not charged
  CHECK(d["peak"]["vmm"] == GiB);
  CHECK(d["in_use"]["vmm"] == 0);
}

TEST_CASE("arrays and mipmapped arrays are charged the size of their data") {
  Job job;
  job.limit("4GiB");
  ProcResult r = job.run({client(), "init", "ctx", "0", "array", "1024", "1024", "A", "array3d", "64", "64", "64", "B",
                          "mipmap", "256", "256", "3", "M", "meminfo", "array", "32768", "32768", "huge",
                          "array-destroy", "A", "array-destroy", "B", "mipmap-destroy", "M", "meminfo"});
  auto ls = lines(r);
  const uint64_t a = 1024 * 1024 * 4, b = 64 * 64 * 64 * 4, m = (256 * 256 + 128 * 128 + 64 * 64) * 4;
  CHECK(step(ls, "array", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // 4 GiB of floats
  CHECK(step(ls, "meminfo", 0)["free"] == 4 * GiB - 256 * MiB - a - b - m);
  CHECK(step(ls, "meminfo", 1)["free"] == 4 * GiB - 256 * MiB);
  json d = device0(job.ledger());
  CHECK(d["allocs"] == 3);
  CHECK(d["frees"] == 3);
  CHECK(d["peak"]["array"] == a + b + m);
  CHECK(d["in_use"]["array"] == 0);
}

TEST_CASE("contexts cost their configured size once per live context") {
  Job job;
  job.limit("4GiB");
  ProcResult r = job.run({client(), "init", "ctx", "0", "ctx", "0", "meminfo", "ctx-create", "0", "alloc", "1GiB", "x",
                          "meminfo", "ctx-destroy", "meminfo", "ctx-release", "0", "ctx-release", "0"});
  auto ls = lines(r);
  for (const json& l : ls) CHECK(l["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "meminfo", 0)["free"] == 4 * GiB - 256 * MiB);  // retained twice, charged once
  CHECK(step(ls, "meminfo", 1)["free"] == 4 * GiB - 512 * MiB - GiB);
  CHECK(step(ls, "meminfo", 2)["free"] == 4 * GiB - 256 * MiB);  // x died with its context
  json d = device0(job.ledger());
  CHECK(d["in_use"]["total"] == 0);
  CHECK(d["peak"]["context"] == 512 * MiB);
  CHECK(d["released_with_context"] == 1);
  CHECK(d["allocs"] == 1);
  CHECK(d["frees"] == 0);
}

TEST_CASE("a context that does not fit the limit is refused before the driver creates it") {
  Job job;
  job.limit("100MiB").env.set("SIMGPU_CALLS", job.dir / "calls.json");
  ProcResult r = job.run({client(), "init", "ctx", "0", "ctx-create", "0"});
  auto ls = lines(r);
  CHECK(step(ls, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(ls, "ctx-create")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  json d = device0(job.ledger());
  CHECK(d["in_use"]["total"] == 0);
  CHECK(d["refused"] == 2);
  if (!real_driver()) {
    json calls = simgpu_calls(job.dir / "calls.json");
    CHECK(calls.value("cuDevicePrimaryCtxRetain", 0) == 0);
    CHECK(calls.value("cuCtxCreate_v4", 0) == 0);
  }
}

TEST_CASE("cuMemGetInfo and cuDeviceTotalMem show the limit, and only with a limit") {
  SUBCASE("limit below the device") {
    Job job;
    job.limit("4GiB");
    auto ls = lines(job.run({client(), "init", "total-mem", "0", "ctx", "0", "meminfo"}));
    CHECK(step(ls, "total-mem")["total"] == 4 * GiB);
    CHECK(step(ls, "meminfo")["total"] == 4 * GiB);
    CHECK(step(ls, "meminfo")["free"] == 4 * GiB - 256 * MiB);
  }
  SUBCASE("limit above the device: the device's own numbers") {
    if (simgpu_only()) return;  // a 16 GiB device
    Job job("16GiB");
    job.limit("100GiB");
    auto ls = lines(job.run({client(), "init", "total-mem", "0", "ctx", "0", "meminfo"}));
    CHECK(step(ls, "total-mem")["total"] == 16 * GiB);
    CHECK(step(ls, "meminfo")["total"] == 16 * GiB);
    // min(total - used, physical free): simgpu's context costs 512 MiB, ours is booked at 256 MiB.
    CHECK(step(ls, "meminfo")["free"] <= 16 * GiB - 512 * MiB);
  }
  SUBCASE("no limit: exactly what the driver says") {
    std::vector<std::string> script = {client(), "init", "total-mem", "0", "ctx", "0", "alloc", "1GiB", "a",
                                       "meminfo", "meminfo-v1"};
    Job with, without("80GiB", false);
    auto a = lines(with.run(script)), b = lines(without.run(script));
    CHECK(step(a, "total-mem") == step(b, "total-mem"));
    CHECK(step(a, "meminfo") == step(b, "meminfo"));
    CHECK(step(a, "meminfo-v1") == step(b, "meminfo-v1"));
  }
  SUBCASE("a pool's chunk counts before the driver call: a 1-byte allocation past the limit is refused") {
    if (simgpu_only()) return;  // simgpu's 2 MiB pool chunks
    // The context takes 256 MiB of the 257: the pool would grow by a 2 MiB chunk for one byte.
    Job job;
    job.limit("257MiB");
    auto ls = lines(job.run({client(), "init", "ctx", "0", "pool-create", "P", "pool-alloc", "P", "1", "b", "meminfo",
                             "pool-reserved", "P"}));
    CHECK(step(ls, "pool-alloc")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(step(ls, "meminfo")["total"] == 257 * MiB);
    CHECK(step(ls, "meminfo")["free"] == MiB);
    CHECK(step(ls, "pool-reserved")["reserved"] == 0);  // the driver was never asked
    CHECK(device0(job.ledger())["in_use"]["total"] == 256 * MiB);
  }
}

TEST_CASE("COLOC_MEM_LIMIT_<n> limits one device, as this process numbers it") {
  if (simgpu_only()) return;  // two devices
  Job job("8GiB,8GiB");
  job.limit("2GiB").env.set("COLOC_MEM_LIMIT_1", "6GiB");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "3GiB", "a", "ctx", "1", "alloc", "3GiB", "b",
                           "total-mem", "0", "total-mem", "1"}));
  CHECK(step(ls, "alloc", 0)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(step(ls, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "total-mem", 0)["total"] == 2 * GiB);
  CHECK(step(ls, "total-mem", 1)["total"] == 6 * GiB);
  json report = job.ledger();
  REQUIRE(report["devices"].size() == 2);
  for (const json& d : report["devices"]) {
    if (d["ordinal"] == 0) {
      CHECK(d["limit"] == 2 * GiB);
      CHECK(d["refused"] == 1);
    } else {
      CHECK(d["limit"] == 6 * GiB);
      CHECK(d["in_use"]["allocation"] == 3 * GiB);
    }
    CHECK(d["uuid"].get<std::string>().rfind("GPU-", 0) == 0);
  }
  CHECK(report["devices"][0]["uuid"] != report["devices"][1]["uuid"]);
}

TEST_CASE("the 32-bit legacy entry points behave as the driver says, and are counted") {
  std::vector<std::string> script = {client(), "init", "ctx", "0", "alloc-v1", "1MiB", "a", "meminfo-v1"};
  Job with, without("80GiB", false);
  with.limit("4GiB");
  auto a = lines(with.run(script)), b = lines(without.run(script));
  CHECK(step(a, "alloc-v1")["rc_name"] == step(b, "alloc-v1")["rc_name"]);
  json report = with.ledger();
  CHECK(report["calls"]["cuMemAlloc"] == 1);
  if (step(a, "alloc-v1")["rc_name"] != "CUDA_SUCCESS") CHECK(device0(report)["in_use"]["allocation"] == 0);
  else CHECK(device0(report)["in_use"]["allocation"] == MiB);
}

}  // TEST_SUITE

TEST_SUITE("interpose") {

TEST_CASE("every launch entry point goes through the gate and is counted once") {
  Job job;
  job.env.set("SIMGPU_CALLS", job.dir / "calls.json");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "launch", "7", "launch-ptsz", "5", "launch-ex", "4",
                           "launch-coop", "3", "graph-launch", "2"}));
  for (const json& l : ls) CHECK(l["rc_name"] == "CUDA_SUCCESS");
  json calls = job.ledger()["calls"];
  // The graph step captures one cuLaunchKernel on its stream before launching the graph.
  CHECK(calls["cuLaunchKernel"] == 7 + 1);
  CHECK(calls["cuLaunchKernel_ptsz"] == 5);
  CHECK(calls["cuLaunchKernelEx"] == 4);
  CHECK(calls["cuLaunchCooperativeKernel"] == 3);
  CHECK(calls["cuGraphLaunch"] == 2);
  if (!real_driver()) {
    json sim = simgpu_calls(job.dir / "calls.json");
    for (const char* n : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
                          "cuGraphLaunch"})
      CHECK(sim[n] == calls[n]);  // every counted launch reached the driver, exactly once
  }
}

TEST_CASE("the deprecated launches, the multi-device launch and every async copy and memset reach the driver") {
  Job job;
  job.env.set("SIMGPU_CALLS", job.dir / "calls.json");
  auto ls = lines(job.run({client(), "init", "ctx", "0", "timeslice-entries"}));
  REQUIRE(ls.size() == 3);
  CHECK(ls[2]["rc_name"] == "CUDA_SUCCESS");
  json calls = job.ledger()["calls"];
  for (const char* n : {"cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchCooperativeKernelMultiDevice"})
    CHECK(calls[n] == 1);  // counted as launches by the hook
  if (real_driver()) return;
  json sim = simgpu_calls(job.dir / "calls.json");
  REQUIRE(ls[2]["calls"].size() == 43);
  for (const auto& item : ls[2]["calls"].items()) {
    const std::string name = item.key();
    CAPTURE(name);
    CHECK(item.value() == 0);
    CHECK(sim[name] == 1);  // the hook passed it on, once
  }
}

}  // TEST_SUITE
