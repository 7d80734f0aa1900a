// Integration tests of how libcoloc.so is reached: the cudart path (dlopen + dlsym(handle,
// "cuGetProcAddress_v2") + resolution at 12000/13000, with and without the per-thread flag, before
// cuInit), dlsym's RTLD_NEXT answers for other libraries, libcuda's own lookups, hooks called
// before our constructor, and a machine without libcuda.
#include <doctest/doctest.h>

#include <filesystem>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

TEST_SUITE("interpose") {

TEST_CASE("cudart-style resolution returns our hooks for exactly the ABI the driver chose") {
  for (const char* version : {"12000", "13000"})
    for (const char* flags : {"0", "ptsz"}) {
      CAPTURE(version);
      CAPTURE(flags);
      Job with, without("80GiB", false);
      json a = lines(with.run({cudart(), "resolve", version, flags}))[0];
      json b = lines(without.run({cudart(), "resolve", version, flags}))[0];
      for (auto& [name, want] : b.items()) {
        if (name == "mode") continue;
        CAPTURE(name);
        const json& got = a[name];
        CHECK(got["rc"] == want["rc"]);
        CHECK(got["status"] == want["status"]);
        CHECK(got.value("export", "") == want.value("export", ""));  // same ABI, same _ptsz choice
        bool hooked = name != "cuModuleLoadData";
        CHECK(got.value("library", "") == (hooked ? "libcoloc.so" : want.value("library", "")));
      }
      if (std::string(flags) == "ptsz") CHECK(a["cuLaunchKernel"]["export"] == "cuLaunchKernel_ptsz");
      else CHECK(a["cuLaunchKernel"]["export"] == "cuLaunchKernel");
    }
}

TEST_CASE("libcuda's own dlsym lookups are not redirected (its cuGetProcAddress keeps its answers)") {
  // simgpu's cuGetProcAddress looks the answer up with dlsym on its own handle and refuses its
  // not-supported stub. At version 2000 cuMemAlloc is the 32-bit ABI, which simgpu does not
  // implement: redirected into our hook, the lookup would wrongly succeed.
  Job with, without("80GiB", false);
  json a = lines(with.run({cudart(), "resolve", "2000", "0"}))[0];
  json b = lines(without.run({cudart(), "resolve", "2000", "0"}))[0];
  CHECK(a["cuMemAlloc"]["rc"] == b["cuMemAlloc"]["rc"]);
  CHECK(a["cuInit"]["library"] == "libcoloc.so");
}

TEST_CASE("the cudart path: the limit holds and the per-thread launches are the ones called") {
  for (const char* version : {"12000", "13000"})
    for (const char* flags : {"0", "ptsz"}) {
      CAPTURE(version);
      CAPTURE(flags);
      Job job;
      job.limit("2GiB").env.set("SIMGPU_CALLS", job.dir / "calls.json");
      json out = lines(job.run({cudart(), "run", version, flags, "2GiB", "50"}))[0];
      CHECK(out["init"] == 0);
      CHECK(out["retain"] == 0);
      CHECK(out["alloc_big"] == int(CUDA_ERROR_OUT_OF_MEMORY));
      CHECK(out["alloc_small"] == 0);
      CHECK(out["total_bytes"] == 2 * GiB);
      CHECK(out["free_bytes"] == 2 * GiB - 256 * MiB - MiB);
      CHECK(out["launched"] == 50);
      CHECK(out["sync"] == 0);
      bool ptsz = std::string(flags) == "ptsz";
      const char* launch = ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel";
      json report = job.ledger();
      CHECK(report["calls"][launch] == 50);
      CHECK(report["calls"][ptsz ? "cuLaunchKernel" : "cuLaunchKernel_ptsz"] == 0);
      CHECK(report["calls"]["cuGetProcAddress_v2"] >= 11);
      CHECK(device0(report)["refused"] == 1);
      if (!real_driver()) {
        json calls = json::parse(read_file(job.dir / "calls.json"));
        CHECK(calls[launch] == 50);
        CHECK(calls.value(ptsz ? "cuLaunchKernel" : "cuLaunchKernel_ptsz", 0) == 0);
        CHECK(calls["cuMemAlloc_v2"] == 1);  // the refused allocation never reached the driver
      }
    }
}

TEST_CASE("dlsym: RTLD_NEXT from another library is relative to it; libcuda's handle gives our hooks") {
  Job with, without("80GiB", false);
  json a = lines(with.run({build_path("tests/bin/interpose_next")}))[0];
  json b = lines(without.run({build_path("tests/bin/interpose_next")}))[0];
  for (json* j : {&a, &b}) {
    CHECK((*j)["next_from_a"] == 2);  // the definition after library A: B's
    CHECK((*j)["default"] == 1);
    CHECK((*j)["cu_next_before"].is_null());  // no libcuda loaded: nothing to find
    CHECK((*j)["dlopen"] == true);
    CHECK((*j)["unhooked_handle"]["library"] == "libcuda.so.1");
    CHECK((*j)["missing"] == true);  // a failed lookup still sets dlerror()
  }
  CHECK(b["cu_handle"]["library"] == "libcuda.so.1");
  CHECK(a["cu_handle"]["library"] == "libcoloc.so");
  CHECK(a["cu_handle"]["export"] == "cuMemAlloc_v2");
  CHECK(a["cu_next_after"]["library"] == "libcoloc.so");
}

TEST_CASE("hooks called before our constructor ran work, and are counted") {
  Job job;
  job.limit("4GiB").env.set("COLOC_LOG_LEVEL", "debug");
  ProcResult r = job.run({build_path("tests/bin/interpose_early")});
  json out = lines(r)[0];
  CHECK(out == json{{"init", 0}, {"retain", 0}, {"set_current", 0}, {"alloc", 0}});
  // The first hook, not the constructor, brought the runtime up.
  CHECK(r.err.find("initialised from cuInit") != std::string::npos);
  json d = device0(job.ledger());
  CHECK(d["in_use"]["allocation"] == 64 * MiB);
  CHECK(d["in_use"]["context"] == 256 * MiB);
}

TEST_CASE("without libcuda every hook answers what the toolkit's stub driver answers") {
  // The stub (CUDA_HOME/lib64/stubs/libcuda.so) is what a program finds on a machine without a
  // driver. Every hook of the manifest, called with null arguments, must answer like it.
  TempDir dir;
  std::filesystem::create_directories(dir / "stub");
  std::filesystem::create_directories(dir / "empty");
  std::filesystem::create_symlink(std::string(COLOC_CUDA_HOME) + "/lib64/stubs/libcuda.so", dir / "stub/libcuda.so.1");
  Env stub_env;
  stub_env.set("LD_LIBRARY_PATH", dir / "stub");
  ProcResult stub = run({cudart(), "hooks", "dlopen"}, stub_env);
  REQUIRE_MESSAGE(stub.exit_code == 0, describe(stub));
  Env ours;
  ours.set("LD_LIBRARY_PATH", dir / "empty").preload_coloc();
  ProcResult got = run({cudart(), "hooks"}, ours);
  REQUIRE_MESSAGE(got.exit_code == 0, describe(got));
  json a = lines(got)[0], b = lines(stub)[0];
  CHECK(a.size() == b.size());
  for (auto& [name, rc] : b.items()) {
    if (name == "mode") continue;
    CAPTURE(name);
    CHECK(rc == int(CUDA_ERROR_STUB_LIBRARY));
    CHECK(a[name] == rc);
  }
  CHECK(got.err.find("cannot load libcuda.so.1") != std::string::npos);
  CHECK(got.out.find("coloc[") == std::string::npos);  // never on stdout
}

}  // TEST_SUITE

TEST_SUITE("interpose") {

TEST_CASE("an internal entry point from cuGetProcAddress is mapped to our hook by name, and logged once") {
  // build/tests/fakecuda/libcuda.so.1 answers cuMemAlloc with a function it does not export.
  for (bool preload : {false, true}) {
    CAPTURE(preload);
    Env env;
    env.set("LD_LIBRARY_PATH", build_path("tests/fakecuda")).set("COLOC_LOG_LEVEL", "info");
    if (preload) env.preload_coloc();
    ProcResult r = run({cudart(), "resolve", "12000", "0"}, env);
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    json out = lines(r)[0];
    CHECK(out["cuMemAlloc"]["rc"] == 0);
    CHECK(out["cuModuleLoadData"]["rc"] == int(CUDA_ERROR_NOT_FOUND));
    if (preload) {
      CHECK(out["cuMemAlloc"]["library"] == "libcoloc.so");
      CHECK(out["cuMemAlloc"]["export"] == "cuMemAlloc_v2");  // the ABI cudaTypedefs.h names for 12000
      CHECK(out["cuInit"]["library"] == "libcoloc.so");       // an export: mapped by identity
      size_t at = r.err.find("gave an entry point that is not the driver's export");
      CHECK(at != std::string::npos);
      CHECK(r.err.find("gave an entry point", at + 1) == std::string::npos);  // once
    } else {
      CHECK(out["cuMemAlloc"]["library"] == "libcuda.so.1");
      CHECK(out["cuMemAlloc"].value("export", "") != "cuMemAlloc_v2");
    }
  }
}

}  // TEST_SUITE
