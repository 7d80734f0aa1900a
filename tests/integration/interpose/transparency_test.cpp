// Transparency: coloc-train (tools/workload) run with libcoloc.so preloaded gives the same output as
// without it — with no limit, and with a limit the job stays within — apart from timings. Nothing
// is written to stdout or stderr by the preload.
#include <doctest/doctest.h>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

namespace {

json train(Job& job, std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), build_path("bin/coloc-train"));
  args.insert(args.end(), {"--job", "transparency"});
  ProcResult r = job.run(args);
  if (err) *err = r.err;
  json out = r.last_json();
  REQUIRE(out.is_object());
  for (const char* timing : {"iter_ms_p50", "wall_ms", "loop_ms", "iters_per_s"}) out.erase(timing);
  return out;
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("coloc-train gives the same output with and without the preload") {
  const std::vector<std::vector<std::string>> runs = {
      {"--model", "gpt2-small", "--batch", "4", "--iters", "3"},
      {"--model", "resnet50", "--batch", "16", "--iters", "2", "--dtype", "bf16"},
      {"--model", "bert-base", "--batch", "8", "--iters", "2", "--optimizer", "sgd"},
      {"--trace", source_path("tools/workload/traces/transformer-lm-ctx256-fullstep.csv"), "--time-scale", "0",
       "--loops", "2"},
  };
  for (const auto& args : runs) {
    CAPTURE(args[1]);
    Job plain("80GiB", false), preloaded, limited;
    for (Job* j : {&plain, &preloaded, &limited}) j->env.set("SIMGPU_FAST", "1");
    limited.limit("79GiB");
    std::string err_preloaded, err_limited;
    json a = train(plain, args);
    json b = train(preloaded, args, &err_preloaded);
    json c = train(limited, args, &err_limited);
    CHECK(a["status"] == "ok");
    CHECK(b == a);
    // Within its limit the job sees a 79 GiB device, and nothing else changes.
    CHECK(c["device_total_bytes"] == 79 * GiB);
    c["device_total_bytes"] = a["device_total_bytes"];
    CHECK(c == a);
    CHECK(err_preloaded.empty());
    CHECK(err_limited.empty());
    // The ledger saw the job.
    json d = device0(preloaded.ledger());
    CHECK(d["allocs"].get<uint64_t>() > 0);
    CHECK(d["allocs"] == d["frees"]);  // coloc-train frees everything before it exits
  }
}

}  // TEST_SUITE
