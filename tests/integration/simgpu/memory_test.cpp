// Device memory behaves like a real GPU's across processes: one capacity shared by every process,
// free memory falls as others allocate, a killed process's memory comes back, contexts cost
// memory, device pointers hold data, and a big device costs no RAM until written.
#include <signal.h>

#include "probe.h"

using namespace probetest;
using coloc::test::file_exists;
using coloc::test::Proc;
using coloc::test::wait_until;

TEST_SUITE("simgpu") {
TEST_CASE("capacity is shared: the later allocation of two processes gets CUDA_ERROR_OUT_OF_MEMORY") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  Proc holder(probe_args({"init", "ctx", "alloc", "5GiB", "a", "touch", tmp / "held", "hold-file", tmp / "done"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "held") || !holder.running(); }, 30s));
  auto v = run_probe(env, {"init", "ctx", "alloc", "5GiB", "b", "alloc", "2GiB", "c", "meminfo"}, 5);
  CHECK(rc(v[2]) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(rc(v[3]) == "CUDA_SUCCESS");
  CHECK(v[4]["total"] == 8 * GiB);
  CHECK(v[4]["free"] == 8 * GiB - 2 * 256 * MiB - 5 * GiB - 2 * GiB);  // both contexts, both allocations
  coloc::test::write_file(tmp / "done", "");
  auto r = holder.wait();
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  auto h = lines(r.out);
  REQUIRE(h.size() == 5);
  CHECK(rc(h[2]) == "CUDA_SUCCESS");
  // Both gone: everything is free again.
  v = run_probe(env, {"init", "ctx", "meminfo"}, 3);
  CHECK(v[2]["free"] == 8 * GiB - 256 * MiB);
}

TEST_CASE("cuMemGetInfo shows free memory falling as another process allocates") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "16GiB");
  Proc watcher(probe_args({"init", "ctx", "meminfo", "touch", tmp / "first", "hold-file", tmp / "again", "meminfo"}), env);
  auto w = wait_lines(watcher, 4);
  const uint64_t before = w[2]["free"];
  Proc other(probe_args({"init", "ctx", "alloc", "3GiB", "touch", tmp / "allocated", "hold-file", tmp / "done"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "allocated") || !other.running(); }, 30s));
  coloc::test::write_file(tmp / "again", "");
  auto r = watcher.wait();
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  w = lines(r.out);
  REQUIRE(w.size() == 6);
  CHECK(uint64_t(w[5]["free"]) == before - 256 * MiB - 3 * GiB);  // the other's context and allocation
  coloc::test::write_file(tmp / "done", "");
  CHECK(other.wait().exit_code == 0);
}

TEST_CASE("the memory of a process killed with SIGKILL is reclaimed") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  Proc victim(probe_args({"init", "ctx", "alloc", "6GiB", "touch", tmp / "held", "hold-file", tmp / "never"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "held") || !victim.running(); }, 30s));
  auto v = run_probe(env, {"init", "ctx", "meminfo", "alloc", "6GiB"}, 4);
  CHECK(v[2]["free"] == 8 * GiB - 2 * 256 * MiB - 6 * GiB);
  CHECK(rc(v[3]) == "CUDA_ERROR_OUT_OF_MEMORY");
  victim.kill(SIGKILL);  // not reaped yet: a zombie, which counts as dead
  // SIGKILL is asynchronous: the kernel tears the process down (its 6 GiB mapping too) before it
  // is a zombie, and until then it is alive to anyone who asks.
  REQUIRE(wait_until([&] {
    const std::string stat = coloc::test::read_file("/proc/" + std::to_string(victim.pid()) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'Z';
  }, 30s));
  v = run_probe(env, {"init", "ctx", "alloc", "6GiB", "meminfo"}, 4);
  CHECK(rc(v[2]) == "CUDA_SUCCESS");
  CHECK(v[3]["free"] == 8 * GiB - 256 * MiB - 6 * GiB);
  CHECK(victim.wait().signal == SIGKILL);
}

TEST_CASE("contexts consume their cost") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "2GiB", "768MiB");
  auto v = run_probe(env, {"init", "ctx", "meminfo", "ctx-create", "meminfo", "ctx-create", "ctx-destroy", "meminfo"}, 8);
  CHECK(v[2]["free"] == 2 * GiB - 768 * MiB);
  CHECK(rc(v[3]) == "CUDA_SUCCESS");
  CHECK(v[4]["free"] == 2 * GiB - 2 * 768 * MiB);
  CHECK(rc(v[5]) == "CUDA_ERROR_OUT_OF_MEMORY");  // a third context does not fit
  CHECK(rc(v[6]) == "CUDA_SUCCESS");              // destroys the second
  CHECK(v[7]["free"] == 2 * GiB - 768 * MiB);
}

TEST_CASE("device pointers hold data: uploads, memsets, fills and device copies round-trip") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  auto v = run_probe(env,
                     {"init", "ctx", "alloc", "24MiB", "a", "alloc", "24MiB", "b",  //
                      "upload", "a", "1.25", "check", "a", "1.25",                  //
                      "fill", "a", "-3.5", "check", "a", "-3.5",                    //
                      "copy", "b", "a", "check", "b", "-3.5",                       //
                      "memset32", "b", "42", "check", "b", "42", "check", "a", "-3.5",
                      "free", "a", "check", "a", "-3.5", "free", "a"},
                     16);
  for (int i : {5, 7, 9, 11, 12}) {
    CAPTURE(i);
    CHECK(rc(v[i]) == "CUDA_SUCCESS");
    CHECK(v[i]["ok"] == true);
    CHECK(v[i]["mismatches"] == 0);
  }
  CHECK(rc(v[13]) == "CUDA_SUCCESS");
  CHECK(rc(v[14]) == "CUDA_ERROR_INVALID_VALUE");  // reading freed memory is caught
  CHECK(rc(v[15]) == "CUDA_ERROR_INVALID_VALUE");  // so is a double free
}

TEST_CASE("an 80 GiB device allocated in full costs no RAM; written pages go back when freed") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "80GiB");  // 512 MiB contexts: 79.5 GiB left
  env.set("SIMGPU_CONTEXT_BYTES", "512MiB");
  auto v = run_probe(env,
                     {"init", "ctx", "rss", "alloc", "79GiB", "big", "rss", "meminfo",  //
                      "alloc", "256MiB", "w", "fill", "w", "1", "sync", "rss", "free", "w", "rss"},
                     12);
  REQUIRE(rc(v[3]) == "CUDA_SUCCESS");
  CHECK(v[5]["free"] == 512 * MiB);
  const int64_t base = v[2]["vm_rss_kb"], allocated = v[4]["vm_rss_kb"], written = v[9]["vm_rss_kb"],
                freed = v[11]["vm_rss_kb"];
  MESSAGE("VmRSS KiB: start " << base << ", 79 GiB allocated " << allocated << ", 256 MiB written " << written
                              << ", freed " << freed);
  CHECK(allocated - base < 32 * 1024);      // allocating touches nothing
  CHECK(written - allocated > 200 * 1024);  // writing 256 MiB commits it
  CHECK(written - freed > 200 * 1024);      // and freeing gives it back
}
}
