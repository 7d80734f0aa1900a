// colocd's NVML reader (daemon/device/nvml_reader): how it fails when NVML is missing or broken
// (colocd then falls back to the clients' reports), and what it reads from simgpu's simulated
// libnvidia-ml.so.1, loaded into the test process as colocd loads it.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "../../../tools/simgpu/config.h"
#include "../../support/proc.h"
#include "device/nvml_reader.h"

using coloc::broker::Uuid;
using coloc::device::NvmlReader;

namespace {

/// Sets environment variables for the life of the object, restoring the previous values after.
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

std::string sim_nvml() { return coloc::test::build_path("sim/libnvidia-ml.so.1"); }

}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("NVML reader: a missing library, one without NVML, or a failing nvmlInit_v2 is a clear error") {
  auto missing = NvmlReader::open("/nonexistent/libnvidia-ml.so.1");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message().find("cannot load /nonexistent/libnvidia-ml.so.1") == 0);

  auto not_nvml = NvmlReader::open(coloc::test::build_path("sim/libcuda.so.1"));
  REQUIRE_FALSE(not_nvml.ok());
  CHECK(not_nvml.error().message().find("has no nvmlInit_v2") != std::string::npos);

  coloc::test::TempDir tmp("nvml-reader");
  ScopedEnv env({{"SIMGPU_STATE_DIR", tmp / "simgpu"}, {"SIMGPU_DEVICES", "80XB"}});  // simgpu refuses it
  auto broken = NvmlReader::open(sim_nvml());
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message() == "nvmlInit_v2 failed: Unknown Error (nvmlReturn_t 999)");
}

TEST_CASE("NVML reader: reads a simulated device's free memory by its CUDA UUID") {
  coloc::test::TempDir tmp("nvml-reader");
  ScopedEnv env({{"SIMGPU_STATE_DIR", tmp / "simgpu"}, {"SIMGPU_DEVICES", "16GiB,8GiB"}});
  auto r = NvmlReader::open(sim_nvml());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  NvmlReader& nvml = *r.value();
  CHECK(std::string(nvml.name()) == "nvml");
  char* real = realpath((tmp / "simgpu").c_str(), nullptr);
  REQUIRE(real);
  std::string dir = real;
  free(real);
  auto uuid = [&](int i) {
    simgpu::Uuid u = simgpu::device_uuid(dir, i);
    Uuid b;
    std::copy(u.begin(), u.end(), b.bytes.begin());
    return b;
  };
  REQUIRE(nvml.memory(uuid(0)).has_value());
  CHECK(nvml.memory(uuid(0))->free == 16ull << 30);
  CHECK(nvml.memory(uuid(0))->total == 16ull << 30);
  CHECK(nvml.memory(uuid(1))->free == 8ull << 30);
  CHECK(nvml.memory(uuid(1))->total == 8ull << 30);
  Uuid unknown;
  unknown.bytes.fill(0x5A);
  CHECK_FALSE(nvml.memory(unknown).has_value());
  CHECK_FALSE(nvml.memory(unknown).has_value());  // retried, logged once
}
TEST_CASE("NVML reader: each process's memory through nvmlDeviceGetComputeRunningProcesses_v3, however many run") {
  if (coloc::test::real_driver()) return;  // cuprobe runs on simgpu here
  using namespace std::chrono_literals;
  coloc::test::TempDir tmp("nvml-reader");
  ScopedEnv env({{"SIMGPU_STATE_DIR", tmp / "simgpu"}, {"SIMGPU_DEVICES", "16GiB"}});
  auto r = NvmlReader::open(sim_nvml());
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  NvmlReader& nvml = *r.value();
  char* real = realpath((tmp / "simgpu").c_str(), nullptr);
  REQUIRE(real);
  simgpu::Uuid su = simgpu::device_uuid(real, 0);
  free(real);
  Uuid u;
  std::copy(su.begin(), su.end(), u.bytes.begin());
  REQUIRE(nvml.processes(u).has_value());
  CHECK(nvml.processes(u)->empty());

  // More processes than the reader's first buffer holds (16): it asks again with NVML's count.
  coloc::test::Env e;
  e.simgpu(tmp, "16GiB");
  e.set("SIMGPU_CONTEXT_BYTES", "64MiB");
  std::vector<std::unique_ptr<coloc::test::Proc>> procs;
  for (int i = 0; i < 20; ++i) {
    std::string mark = tmp / ("ready" + std::to_string(i));
    procs.push_back(std::make_unique<coloc::test::Proc>(
        std::vector<std::string>{coloc::test::build_path("tests/bin/cuprobe"), "init", "ctx", "alloc",
                                 std::to_string(i + 1) + "MiB", "a", "touch", mark, "hold-file", tmp / "done"},
        e));
  }
  for (int i = 0; i < 20; ++i) {
    std::string mark = tmp / ("ready" + std::to_string(i));
    REQUIRE(coloc::test::wait_until([&] { return coloc::test::file_exists(mark) || !procs[size_t(i)]->running(); }, 60s));
    REQUIRE(procs[size_t(i)]->running());
  }
  auto list = nvml.processes(u);
  REQUIRE(list.has_value());
  REQUIRE(list->size() == 20);
  std::map<int32_t, uint64_t> used;
  for (auto& p : *list) used[p.pid] = p.used;
  for (int i = 0; i < 20; ++i) {
    // Its context plus its allocation.
    CHECK(used.at(procs[size_t(i)]->pid()) == (64ull << 20) + (uint64_t(i + 1) << 20));
  }
  coloc::test::write_file(tmp / "done", "");
  for (auto& p : procs) CHECK(p->wait(30s).exit_code == 0);
  CHECK(nvml.processes(u)->empty());
}

}  // TEST_SUITE
