// simgpu's configuration parsing: SIMGPU_DEVICES, the other variables, UUIDs, CUDA_VISIBLE_DEVICES.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tools/simgpu/config.h"

using simgpu::Config;
using simgpu::DeviceSpec;

namespace {
constexpr uint64_t GiB = 1ull << 30, MiB = 1ull << 20;

std::vector<DeviceSpec> devices(const std::string& spec) {
  std::vector<DeviceSpec> out;
  std::string error;
  REQUIRE_MESSAGE(simgpu::parse_devices(spec, &out, &error), error);
  return out;
}

std::string devices_error(const std::string& spec) {
  std::vector<DeviceSpec> out;
  std::string error;
  CHECK_FALSE(simgpu::parse_devices(spec, &out, &error));
  return error;
}

simgpu::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("SIMGPU_DEVICES: names and sizes in the project's size grammar") {
  auto d = devices("H100:80GiB,H100:80GiB");
  REQUIRE(d.size() == 2);
  CHECK(d[0] == DeviceSpec{"H100", 80 * GiB});
  CHECK(d[1] == DeviceSpec{"H100", 80 * GiB});

  d = devices("24GiB");
  REQUIRE(d.size() == 1);
  CHECK(d[0].name == "SimGPU");
  CHECK(d[0].bytes == 24 * GiB);

  d = devices(" A100 40GB : 40GB , 512MiB,1.5GiB,4096,2T ");
  REQUIRE(d.size() == 5);
  CHECK(d[0] == DeviceSpec{"A100 40GB", 40'000'000'000ull});
  CHECK(d[1].bytes == 512 * MiB);
  CHECK(d[2].bytes == 3 * GiB / 2);
  CHECK(d[3].bytes == 4096);
  CHECK(d[4].bytes == 2048 * GiB);
}

TEST_CASE("SIMGPU_DEVICES: malformed values name the variable and the entry") {
  CHECK(devices_error("").find("SIMGPU_DEVICES is empty") != std::string::npos);
  std::string e = devices_error("H100:80GiB,H100:80XB");
  CHECK(e.find("SIMGPU_DEVICES entry 2") != std::string::npos);
  CHECK(e.find("H100:80XB") != std::string::npos);
  CHECK(e.find("unknown unit") != std::string::npos);
  CHECK(devices_error("8GiB,,8GiB").find("entry 2") != std::string::npos);
  CHECK(devices_error(":8GiB").find("empty device name") != std::string::npos);
  CHECK(devices_error("H100:").find("empty size") != std::string::npos);
  CHECK(devices_error("0").find("more than 0 bytes") != std::string::npos);
  CHECK(devices_error("-8GiB").find("negative") != std::string::npos);
  CHECK(devices_error("H100:eighty").find("no digits") != std::string::npos);
  CHECK(devices_error("1.5").find("fractional") != std::string::npos);
  CHECK(devices_error(std::string(64, 'n') + ":1GiB").find("longer than") != std::string::npos);
  CHECK(devices_error("a\tb\x01:1GiB").find("control character") != std::string::npos);
  std::string many;
  for (int i = 0; i < 17; ++i) many += (i ? "," : "") + std::string("1GiB");
  CHECK(devices_error(many).find("at most 16") != std::string::npos);
}

TEST_CASE("load_config: defaults and every variable") {
  Config c;
  std::string error;
  REQUIRE(simgpu::load_config(env_of({}), 1000, &c, &error));
  REQUIRE(c.devices.size() == 1);
  CHECK(c.devices[0].bytes == 80 * GiB);
  CHECK(c.state_dir == "/dev/shm/simgpu-1000");
  CHECK(c.context_bytes == 512 * MiB);
  CHECK(c.timeslice_ns == 2'000'000);
  CHECK(c.kernel_ns == 10'000);
  CHECK(c.queue_depth == 1024);
  CHECK(c.trace_path.empty());
  CHECK_FALSE(c.fast);
  CHECK_FALSE(c.visible.has_value());

  REQUIRE(simgpu::load_config(env_of({{"SIMGPU_DEVICES", "X:2GiB"},
                                      {"SIMGPU_STATE_DIR", "/tmp/s"},
                                      {"SIMGPU_CONTEXT_BYTES", "300MiB"},
                                      {"SIMGPU_TIMESLICE_US", "500"},
                                      {"SIMGPU_KERNEL_NS", "0"},
                                      {"SIMGPU_QUEUE_DEPTH", "8"},
                                      {"SIMGPU_TRACE", "/tmp/t.csv"},
                                      {"SIMGPU_FAST", "1"},
                                      {"CUDA_VISIBLE_DEVICES", ""}}),
                              0, &c, &error));
  CHECK(c.devices[0] == DeviceSpec{"X", 2 * GiB});
  CHECK(c.state_dir == "/tmp/s");
  CHECK(c.context_bytes == 300 * MiB);
  CHECK(c.timeslice_ns == 500'000);
  CHECK(c.kernel_ns == 0);
  CHECK(c.queue_depth == 8);
  CHECK(c.trace_path == "/tmp/t.csv");
  CHECK(c.fast);
  CHECK(c.visible == std::string());
}

TEST_CASE("load_config: malformed values are errors that name the variable") {
  Config c;
  std::string error;
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {{"SIMGPU_DEVICES", "80XiB"},        {"SIMGPU_CONTEXT_BYTES", "lots"}, {"SIMGPU_TIMESLICE_US", "0"},
               {"SIMGPU_TIMESLICE_US", "2ms"},     {"SIMGPU_TIMESLICE_US", "-5"},    {"SIMGPU_KERNEL_NS", "1e4"},
               {"SIMGPU_KERNEL_NS", "99999999999999"}, {"SIMGPU_FAST", "yes"},
               {"SIMGPU_QUEUE_DEPTH", "0"},     {"SIMGPU_QUEUE_DEPTH", "1000001"}, {"SIMGPU_QUEUE_DEPTH", "many"}};
  for (const Case& k : cases) {
    CAPTURE(k.var);
    CAPTURE(k.value);
    error.clear();
    CHECK_FALSE(simgpu::load_config(env_of({{k.var, k.value}}), 0, &c, &error));
    CHECK(error.find(k.var) != std::string::npos);
  }
}

TEST_CASE("device UUIDs are stable per state directory and index, printed as nvidia-smi does") {
  auto a = simgpu::device_uuid("/dev/shm/x", 0);
  CHECK(a == simgpu::device_uuid("/dev/shm/x", 0));
  CHECK(a != simgpu::device_uuid("/dev/shm/x", 1));
  CHECK(a != simgpu::device_uuid("/dev/shm/y", 0));
  std::string s = simgpu::format_uuid(a);
  REQUIRE(s.size() == 40);
  CHECK(s.rfind("GPU-", 0) == 0);
  for (size_t i : {12u, 17u, 22u, 27u}) CHECK(s[i] == '-');
  CHECK(s.find_first_not_of("GPU-0123456789abcdef") == std::string::npos);
}

TEST_CASE("CUDA_VISIBLE_DEVICES: indices, UUIDs, and the first invalid entry hides the rest") {
  std::vector<simgpu::Uuid> u;
  for (int i = 0; i < 3; ++i) u.push_back(simgpu::device_uuid("/d", i));
  auto vis = [&](const std::string& s) { return simgpu::apply_visible_devices(s, u); };
  CHECK(vis("0,1,2") == std::vector<int>{0, 1, 2});
  CHECK(vis("2,0") == std::vector<int>{2, 0});
  CHECK(vis(" 1 ") == std::vector<int>{1});
  CHECK(vis("1,7,0") == std::vector<int>{1});   // 7 is out of range: it and 0 are hidden
  CHECK(vis("0,0,1") == std::vector<int>{0});   // a duplicate is invalid
  CHECK(vis("-1") == std::vector<int>{});
  CHECK(vis("") == std::vector<int>{});
  CHECK(vis("0,,1") == std::vector<int>{0});
  CHECK(vis("MIG-1234,0") == std::vector<int>{});
  const std::string full = simgpu::format_uuid(u[1]);
  CHECK(vis(full) == std::vector<int>{1});
  CHECK(vis("2," + full) == std::vector<int>{2, 1});
  std::string upper = full;
  for (char& c : upper) c = char(std::toupper((unsigned char)c));
  CHECK(vis(upper) == std::vector<int>{1});
  CHECK(vis(full.substr(0, 12)) == std::vector<int>{1});  // a unique prefix
  CHECK(vis("GPU-") == std::vector<int>{});
  CHECK(vis("GPU-zz") == std::vector<int>{});
  CHECK(vis("GPU-ffffffff-0000") == std::vector<int>{});  // matches nothing
}
}
