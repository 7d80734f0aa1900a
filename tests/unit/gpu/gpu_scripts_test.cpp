// The real-GPU scripts cannot run in CI, but they must parse, and they must skip (exit 77) on a
// machine without a GPU rather than fail or hang.
#include <doctest/doctest.h>

#include <unistd.h>

#include "../../support/proc.h"

using namespace coloc::test;

TEST_SUITE("gpu") {
TEST_CASE("the GPU scripts parse") {
  Env env;
  for (const char* sh : {"tests/gpu/run.sh", "tests/gpu/pack.sh", "tests/gpu/torch_pair.sh",
                         "tests/gpu/torch_timeslice.sh", "tests/gpu/torch_priority.sh",
                         "tests/gpu/torch_history.sh"}) {
    auto r = run({"bash", "-n", source_path(sh)}, env, 20s);
    CHECK_MESSAGE(r.exit_code == 0, sh << ": " << describe(r));
  }
  for (const char* py : {"tests/gpu/torch_limit.py", "tests/gpu/torch_train.py", "tests/gpu/torch_models.py",
                         "tests/gpu/torch_estimate.py", "tests/gpu/queue_depth.py", "tests/gpu/torch_suspend.py"}) {
    TempDir tmp;
    auto r = run({"python3", "-c", std::string("import ast,sys; ast.parse(open('") + source_path(py) + "').read())"}, env, 20s);
    CHECK_MESSAGE(r.exit_code == 0, py << ": " << describe(r));
  }
}

TEST_CASE("run.sh skips without a GPU") {
  if (access("/proc/driver/nvidia/version", F_OK) == 0) return;  // a GPU machine: run.sh really runs
  TempDir tmp;
  Env env;
  env.set("OUT", tmp.path());
  env.set("PATH", "/usr/bin:/bin");  // no nvidia-smi on a machine without a driver
  auto r = run({source_path("tests/gpu/run.sh")}, env, 20s);
  CHECK_MESSAGE(r.exit_code == 77, describe(r));
}
}
