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
}  // TEST_SUITE
