// Process-level behaviour: initialization, fork, CUDA_VISIBLE_DEVICES, configuration errors,
// the shared state file, per-entry-point call counts, and cuprobe's own script checking.
#include "probe.h"

using namespace probetest;
using coloc::test::file_exists;
using coloc::test::Proc;
using coloc::test::wait_until;

TEST_SUITE("simgpu") {
TEST_CASE("calls before cuInit get CUDA_ERROR_NOT_INITIALIZED") {
  TempDir tmp("simgpu-it");
  auto v = run_probe(sim_env(tmp, "8GiB"), {"meminfo", "total-mem", "ctx", "init", "ctx", "meminfo"}, 6);
  CHECK(rc(v[0]) == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(rc(v[1]) == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(rc(v[2]) == "CUDA_ERROR_NOT_INITIALIZED");
  CHECK(rc(v[3]) == "CUDA_SUCCESS");
  CHECK(v[3]["driver_version"] == 13000);
  CHECK(rc(v[5]) == "CUDA_SUCCESS");
}

TEST_CASE("a forked child of an initialized process gets CUDA_ERROR_NOT_INITIALIZED from every call") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  auto v = run_probe(env, {"init", "ctx", "alloc", "1GiB", "fork", "alloc", "1GiB", "meminfo"}, 6);
  const json& child = v[3]["child"];
  REQUIRE(child.is_object());
  for (auto& [call, result] : child.items()) {
    CAPTURE(call);
    CHECK(result == "CUDA_ERROR_NOT_INITIALIZED");
  }
  CHECK(v[3]["child_exit"] == 0);
  // The parent carries on, and its books are untouched by the child's exit.
  CHECK(rc(v[4]) == "CUDA_SUCCESS");
  CHECK(v[5]["free"] == 8 * GiB - 256 * MiB - 2 * GiB);
  // A process that never initialized the driver may fork, and its child may initialize it.
  v = run_probe(env, {"fork"}, 1);
  CHECK(v[0]["child"]["cuInit"] == "CUDA_SUCCESS");
}

TEST_CASE("CUDA_VISIBLE_DEVICES selects and renumbers devices by index and by UUID") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "A:1GiB,B:2GiB,C:3GiB");
  auto all = run_probe(env, {"init", "uuid", "0", "uuid", "1", "uuid", "2"}, 4);
  CHECK(all[0]["devices"] == 3);
  const std::string uuid_b = all[2]["uuid"];
  CHECK(uuid_b.rfind("GPU-", 0) == 0);
  CHECK(uuid_b != all[1]["uuid"]);

  env.set("CUDA_VISIBLE_DEVICES", "2,0");
  auto v = run_probe(env, {"init", "name", "0", "name", "1", "total-mem", "0", "uuid", "1"}, 5);
  CHECK(v[0]["devices"] == 2);
  CHECK(v[1]["name"] == "C");
  CHECK(v[2]["name"] == "A");
  CHECK(v[3]["total"] == 3 * GiB);
  CHECK(v[4]["uuid"] == all[1]["uuid"]);  // a device keeps its UUID under any numbering

  env.set("CUDA_VISIBLE_DEVICES", uuid_b);
  v = run_probe(env, {"init", "name", "0"}, 2);
  CHECK(v[0]["devices"] == 1);
  CHECK(v[1]["name"] == "B");
  env.set("CUDA_VISIBLE_DEVICES", uuid_b.substr(0, 12) + ",0");  // a unique prefix, then an index
  v = run_probe(env, {"init", "name", "0", "name", "1"}, 3);
  CHECK(v[0]["devices"] == 2);
  CHECK(v[1]["name"] == "B");
  CHECK(v[2]["name"] == "A");

  env.set("CUDA_VISIBLE_DEVICES", "1,7,0");  // 7 does not exist: it and everything after are hidden
  v = run_probe(env, {"init", "name", "0", "name", "1"}, 3);
  CHECK(v[0]["devices"] == 1);
  CHECK(v[1]["name"] == "B");
  CHECK(rc(v[2]) == "CUDA_ERROR_INVALID_DEVICE");

  env.set("CUDA_VISIBLE_DEVICES", "");
  v = run_probe(env, {"init", "ctx"}, 2);
  CHECK(rc(v[0]) == "CUDA_ERROR_NO_DEVICE");
  CHECK(rc(v[1]) == "CUDA_ERROR_NOT_INITIALIZED");
}

TEST_CASE("a malformed configuration is a clear error at cuInit") {
  TempDir tmp("simgpu-it");
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {{"SIMGPU_DEVICES", "H100:80XB"}, {"SIMGPU_DEVICES", ""},         {"SIMGPU_DEVICES", "8GiB,,8GiB"},
               {"SIMGPU_DEVICES", "0"},         {"SIMGPU_TIMESLICE_US", "0"}, {"SIMGPU_CONTEXT_BYTES", "big"}};
  for (const Case& c : cases) {
    CAPTURE(c.var);
    CAPTURE(c.value);
    Env env = sim_env(tmp, "8GiB");
    env.set(c.var, c.value);
    auto r = coloc::test::run(probe_args({"init", "ctx", "init"}), env);
    REQUIRE_MESSAGE(r.exit_code == 0, coloc::test::describe(r));
    auto v = lines(r.out);
    REQUIRE(v.size() == 3);
    CHECK(rc(v[0]) == "CUDA_ERROR_INVALID_VALUE");
    CHECK(rc(v[1]) == "CUDA_ERROR_NOT_INITIALIZED");
    CHECK(rc(v[2]) == "CUDA_ERROR_INVALID_VALUE");  // cuInit keeps failing the same way
    CHECK(r.err.find(std::string("simgpu: ") + c.var) != std::string::npos);
  }
}

TEST_CASE("the state file refuses another device configuration while in use, and is re-created after") {
  TempDir tmp("simgpu-it");
  Proc holder(probe_args({"init", "touch", tmp / "up", "hold-file", tmp / "done"}), sim_env(tmp, "8GiB"));
  REQUIRE(wait_until([&] { return file_exists(tmp / "up") || !holder.running(); }, 30s));
  auto r = coloc::test::run(probe_args({"init"}), sim_env(tmp, "16GiB"));
  auto v = lines(r.out);
  REQUIRE(v.size() == 1);
  CHECK(rc(v[0]) == "CUDA_ERROR_INVALID_VALUE");
  CHECK(r.err.find("in use") != std::string::npos);
  CHECK(r.err.find("SIMGPU_STATE_DIR") != std::string::npos);
  coloc::test::write_file(tmp / "done", "");
  CHECK(holder.wait().exit_code == 0);
  v = run_probe(sim_env(tmp, "16GiB"), {"init", "total-mem"}, 2);
  CHECK(rc(v[0]) == "CUDA_SUCCESS");
  CHECK(v[1]["total"] == 16 * GiB);
}

TEST_CASE("SIMGPU_CALLS counts the calls of every entry point reached") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  env.set("SIMGPU_CALLS", tmp / "calls-%p.json");
  auto v = run_probe(env, {"init", "ctx", "alloc", "1MiB", "a", "free", "a", "launch-spin", "1000", "3", "sync"}, 6);
  const std::string path = tmp / ("calls-" + std::to_string(int(v[0]["pid"])) + ".json");
  json calls = json::parse(coloc::test::read_file(path), nullptr, false);
  REQUIRE_MESSAGE(calls.is_object(), path);
  CHECK(calls["cuInit"] == 1);
  CHECK(calls["cuMemAlloc_v2"] == 1);
  CHECK(calls["cuMemFree_v2"] == 1);
  CHECK(calls["cuLaunchKernel"] == 3);
  CHECK(calls["cuCtxSynchronize"] == 1);
  CHECK_FALSE(calls.contains("cuLaunchKernel_ptsz"));  // only entry points called at least once
  for (auto& [name, count] : calls.items()) {
    CAPTURE(name);
    CHECK(name.rfind("cu", 0) == 0);
    CHECK(count.get<int>() > 0);
  }
}

TEST_CASE("the trace header is written once however many processes append") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  env.set("SIMGPU_TRACE", tmp / "trace.csv");
  std::vector<std::unique_ptr<Proc>> procs;
  for (int i = 0; i < 4; ++i) procs.push_back(std::make_unique<Proc>(probe_args({"init", "ctx", "launch-spin", "100000", "5", "sync"}), env));
  for (auto& p : procs) CHECK(p->wait().exit_code == 0);
  std::istringstream in(coloc::test::read_file(tmp / "trace.csv"));
  std::string line;
  int headers = 0, rows = 0;
  while (std::getline(in, line)) {
    if (line.rfind("pid,", 0) == 0) {
      ++headers;
    } else {
      CHECK(std::count(line.begin(), line.end(), ',') == 7);
      ++rows;
    }
  }
  CHECK(headers == 1);
  CHECK(rows >= 20);
}

TEST_CASE("cuprobe: a malformed script exits 2 before running anything") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  for (std::vector<std::string> script : {std::vector<std::string>{"bogus"}, {"init", "alloc"}, {"init", "alloc", "8XB"},
                                          {"init", "launch-spin", "ten"}, {"init", "exit", "1", "2"}, {}}) {
    auto r = coloc::test::run(probe_args(script), env);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.out).empty());
    CHECK(r.err.find("cuprobe:") != std::string::npos);
  }
  auto r = coloc::test::run(probe_args({"init", "free", "nothing"}), env);
  CHECK(r.exit_code == 2);  // an allocation name it never made
  r = coloc::test::run(probe_args({"init", "exit", "7", "init"}), env);
  CHECK(r.exit_code == 7);
  CHECK(lines(r.out).size() == 1);
}
}
