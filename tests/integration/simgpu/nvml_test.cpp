// The simulated NVML (build/sim/libnvidia-ml.so.1): loaded into the test process with dlopen as
// colocd loads it, it answers from simgpu's shared state, so its free memory follows every
// simulated process's allocations (here cuprobe's, with no coloc anywhere) and their release.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

#include <map>
#include <optional>

#include "probe.h"

using namespace probetest;
using coloc::test::file_exists;
using coloc::test::Proc;
using coloc::test::wait_until;

namespace {

// As nvml.h declares them (see tools/simgpu/nvml/nvml.cpp).
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
using Device = void*;
// nvml.h's nvmlProcessInfo_t, the struct of nvmlDeviceGetComputeRunningProcesses_v3.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

/// Sets environment variables for the life of the object (the simulated NVML reads them at
/// nvmlInit_v2), restoring the previous values after.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (auto& [k, v] : vars) {
      const char* old = getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) {
      if (v) setenv(k.c_str(), v->c_str(), 1);
      else unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

/// The simulated NVML's entry points.
struct Nvml {
  void* h = dlopen(coloc::test::build_path("sim/libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  template <class F>
  F fn(const char* name) {
    REQUIRE(h);
    void* p = dlsym(h, name);
    REQUIRE_MESSAGE(p, name);
    return reinterpret_cast<F>(p);
  }
  int init() { return fn<int (*)()>("nvmlInit_v2")(); }
  int shutdown() { return fn<int (*)()>("nvmlShutdown")(); }
  int count(unsigned* n) { return fn<int (*)(unsigned*)>("nvmlDeviceGetCount_v2")(n); }
  int by_index(unsigned i, Device* d) { return fn<int (*)(unsigned, Device*)>("nvmlDeviceGetHandleByIndex_v2")(i, d); }
  int by_uuid(const char* u, Device* d) { return fn<int (*)(const char*, Device*)>("nvmlDeviceGetHandleByUUID")(u, d); }
  int uuid(Device d, char* out, unsigned n) { return fn<int (*)(Device, char*, unsigned)>("nvmlDeviceGetUUID")(d, out, n); }
  int memory(Device d, nvmlMemory_t* m) { return fn<int (*)(Device, nvmlMemory_t*)>("nvmlDeviceGetMemoryInfo")(d, m); }
  int processes(Device d, unsigned* n, nvmlProcessInfo_t* infos) {
    return fn<int (*)(Device, unsigned*, nvmlProcessInfo_t*)>("nvmlDeviceGetComputeRunningProcesses_v3")(d, n, infos);
  }
  /// pid -> usedGpuMemory of every process nvmlDeviceGetComputeRunningProcesses_v3 lists.
  std::map<unsigned, unsigned long long> process_map(Device d) {
    unsigned n = 0;
    int rc = processes(d, &n, nullptr);
    REQUIRE((rc == 0 || rc == 7));
    std::vector<nvmlProcessInfo_t> v(n + 4);
    n = unsigned(v.size());
    REQUIRE(processes(d, &n, v.data()) == 0);
    std::map<unsigned, unsigned long long> m;
    for (unsigned i = 0; i < n; ++i) m[v[i].pid] = v[i].usedGpuMemory;
    return m;
  }
  std::string error(int rc) { return fn<const char* (*)(int)>("nvmlErrorString")(rc); }
  ~Nvml() {
    if (h) dlclose(h);
  }
};

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("NVML: free memory follows every simulated process's allocations, under coloc or not") {
  if (coloc::test::real_driver()) return;  // cuprobe would not run on simgpu
  TempDir tmp("simgpu-nvml");
  Env env = sim_env(tmp, "Sim:8GiB,4GiB");
  ScopedEnv scoped({{"SIMGPU_STATE_DIR", *env.get("SIMGPU_STATE_DIR")}, {"SIMGPU_DEVICES", "Sim:8GiB,4GiB"}});
  Nvml nvml;
  REQUIRE(nvml.h);
  Device d0 = nullptr;
  CHECK(nvml.by_index(0, &d0) == 1);  // NVML_ERROR_UNINITIALIZED
  CHECK(nvml.error(1) == "Uninitialized");
  REQUIRE(nvml.init() == 0);
  unsigned n = 0;
  REQUIRE(nvml.count(&n) == 0);
  CHECK(n == 2);
  REQUIRE(nvml.by_index(0, &d0) == 0);
  CHECK(nvml.by_index(2, &d0) == 2);  // NVML_ERROR_INVALID_ARGUMENT
  REQUIRE(nvml.by_index(0, &d0) == 0);
  nvmlMemory_t m{};
  REQUIRE(nvml.memory(d0, &m) == 0);
  CHECK(m.total == 8 * GiB);
  CHECK(m.free == 8 * GiB);
  CHECK(m.used == 0);

  // The UUID is the one cuDeviceGetUuid reports, and finds the device.
  Proc holder(probe_args({"init", "uuid", "0", "ctx", "alloc", "3GiB", "a", "touch", tmp / "held", "hold-file",
                          tmp / "done"}),
              env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "held") || !holder.running(); }, 30s));
  REQUIRE(holder.running());
  std::string cuda_uuid = lines(holder.out_so_far()).at(1).value("uuid", "");
  char buf[96] = {};
  REQUIRE(nvml.uuid(d0, buf, sizeof buf) == 0);
  CHECK(std::string(buf) == cuda_uuid);
  Device by_uuid = nullptr;
  REQUIRE(nvml.by_uuid(cuda_uuid.c_str(), &by_uuid) == 0);
  CHECK(by_uuid == d0);
  CHECK(nvml.by_uuid("GPU-00000000-0000-0000-0000-000000000000", &by_uuid) == 6);  // NVML_ERROR_NOT_FOUND
  CHECK(nvml.error(6) == "Not Found");

  REQUIRE(nvml.memory(d0, &m) == 0);
  CHECK(m.used == 3 * GiB + 256 * MiB);  // the allocation and the context
  CHECK(m.free == 8 * GiB - 3 * GiB - 256 * MiB);
  Device d1 = nullptr;
  REQUIRE(nvml.by_index(1, &d1) == 0);
  REQUIRE(nvml.memory(d1, &m) == 0);
  CHECK(m.free == 4 * GiB);

  // It exits: the memory comes back.
  coloc::test::write_file(tmp / "done", "");
  auto r = holder.wait(30s);
  REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
  REQUIRE(nvml.memory(d0, &m) == 0);
  CHECK(m.free == 8 * GiB);
  CHECK(nvml.shutdown() == 0);
  CHECK(nvml.shutdown() == 1);  // not initialized any more
}

TEST_CASE("NVML: the memory of a process killed with SIGKILL comes back") {
  if (coloc::test::real_driver()) return;
  TempDir tmp("simgpu-nvml");
  Env env = sim_env(tmp, "8GiB");
  ScopedEnv scoped({{"SIMGPU_STATE_DIR", *env.get("SIMGPU_STATE_DIR")}, {"SIMGPU_DEVICES", "8GiB"}});
  Nvml nvml;
  REQUIRE(nvml.init() == 0);
  Device d = nullptr;
  REQUIRE(nvml.by_index(0, &d) == 0);
  Proc holder(probe_args({"init", "ctx", "alloc", "2GiB", "a", "touch", tmp / "held", "hold-file", tmp / "never"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "held") || !holder.running(); }, 30s));
  nvmlMemory_t m{};
  REQUIRE(nvml.memory(d, &m) == 0);
  CHECK(m.free == 8 * GiB - 2 * GiB - 256 * MiB);
  holder.kill(SIGKILL);
  holder.wait(30s);
  // Dead processes are reclaimed at most every 100 ms: await it.
  CHECK(wait_until([&] { return nvml.memory(d, &m) == 0 && m.free == 8 * GiB; }, 5s));
  CHECK(nvml.shutdown() == 0);
}
TEST_CASE("NVML: nvmlDeviceGetComputeRunningProcesses_v3 lists each live process's contexts and allocations") {
  if (coloc::test::real_driver()) return;
  TempDir tmp("simgpu-nvml");
  Env env = sim_env(tmp, "8GiB,4GiB", "2GiB");
  ScopedEnv scoped({{"SIMGPU_STATE_DIR", *env.get("SIMGPU_STATE_DIR")}, {"SIMGPU_DEVICES", "8GiB,4GiB"}});
  Nvml nvml;
  Device d = nullptr, d1 = nullptr;
  unsigned n = 5;
  CHECK(nvml.processes(d, &n, nullptr) == 1);  // NVML_ERROR_UNINITIALIZED
  REQUIRE(nvml.init() == 0);
  REQUIRE(nvml.by_index(0, &d) == 0);
  REQUIRE(nvml.by_index(1, &d1) == 0);
  CHECK(nvml.processes(d, nullptr, nullptr) == 2);  // NVML_ERROR_INVALID_ARGUMENT
  CHECK(nvml.processes(reinterpret_cast<Device>(&n), &n, nullptr) == 2);
  // Nobody runs: success with 0 entries, infos may be NULL.
  n = 0;
  CHECK(nvml.processes(d, &n, nullptr) == 0);
  CHECK(n == 0);

  Proc a(probe_args({"init", "ctx", "alloc", "1GiB", "x", "touch", tmp / "a", "hold-file", tmp / "a-done"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "a") || !a.running(); }, 30s));
  Proc b(probe_args({"init", "ctx", "touch", tmp / "b", "hold-file", tmp / "b-done"}), env);
  REQUIRE(wait_until([&] { return file_exists(tmp / "b") || !b.running(); }, 30s));
  REQUIRE(a.running());
  REQUIRE(b.running());

  // Asking with too small a count: NVML_ERROR_INSUFFICIENT_SIZE and the count needed, nothing written.
  n = 1;
  nvmlProcessInfo_t one[1] = {{77, 77, 77, 77}};
  CHECK(nvml.processes(d, &n, one) == 7);
  CHECK(n == 2);
  CHECK(one[0].pid == 77);
  // Enough room: each process's context (2 GiB here) plus its allocations, MIG ids "not applicable".
  nvmlProcessInfo_t infos[4] = {};
  n = 4;
  REQUIRE(nvml.processes(d, &n, infos) == 0);
  REQUIRE(n == 2);
  std::map<unsigned, unsigned long long> used;
  for (unsigned i = 0; i < n; ++i) {
    used[infos[i].pid] = infos[i].usedGpuMemory;
    CHECK(infos[i].gpuInstanceId == 0xFFFFFFFFu);
    CHECK(infos[i].computeInstanceId == 0xFFFFFFFFu);
  }
  CHECK(used.at(unsigned(a.pid())) == 2 * GiB + 1 * GiB);
  CHECK(used.at(unsigned(b.pid())) == 2 * GiB);
  // The other device has none of them.
  CHECK(nvml.process_map(d1).empty());

  // A process killed with SIGKILL drops out (dead processes are reclaimed at most every 100 ms).
  a.kill(SIGKILL);
  a.wait(30s);
  CHECK(wait_until([&] { return nvml.process_map(d).size() == 1; }, 5s));
  std::map<unsigned, unsigned long long> left = nvml.process_map(d);
  CHECK(left.count(unsigned(b.pid())) == 1);
  coloc::test::write_file(tmp / "b-done", "");
  REQUIRE(b.wait(30s).exit_code == 0);
  CHECK(nvml.process_map(d).empty());
  CHECK(nvml.shutdown() == 0);
}
}  // TEST_SUITE
