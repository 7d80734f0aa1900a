// `coloc run --estimate-from MODEL --batch N [...]` (run_plan.h): the plan carries the analytic
// estimate (estimator/analytic.h) and sets COLOC_MEM_ESTIMATE, says it in a note; --mem with it,
// its shape options without it, and what the estimator refuses are usage errors; an inherited
// COLOC_MEM_ESTIMATE is not passed on without it. And the tables name an estimate's reservation.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "../../../estimator/analytic.h"
#include "../../support/proc.h"
#include "format.h"
#include "run_plan.h"

using namespace coloc::cli;
using nlohmann::json;
using coloc::test::TempDir;

namespace {

/// A fake install: <tmp>/bin (coloc), <tmp>/lib/libcoloc.so.
struct Install {
  TempDir dir{"coloc-install"};
  Install() {
    ::mkdir((dir / "bin").c_str(), 0755);
    ::mkdir((dir / "lib").c_str(), 0755);
    coloc::test::write_file(dir / "lib/libcoloc.so", "");
  }
};

RunOptions estimated(const std::string& model, const std::string& batch) {
  RunOptions o;
  o.job = "train";
  o.command = {"python", "train.py"};
  o.estimate_from = model;
  o.batch = batch;
  return o;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc run --estimate-from: the estimate goes in COLOC_MEM_ESTIMATE and the plan, with a note") {
  Install in;
  RunOptions o = estimated("bert-base", "4");
  o.seq = "128";
  o.optimizer = "sgd";
  RunPlan p;
  std::string err;
  REQUIRE_MESSAGE(plan_run(o, {{"COLOC_MEM_LIMIT", "old"}}, in.dir / "bin", "a1b2c3", &p, &err), err);
  // What `coloc estimate` says for the same run.
  coloc::est::RunShape shape;
  shape.batch = 4;
  shape.seq = 128;
  coloc::est::EstimateOptions eo;
  eo.optimizer = coloc::est::Optimizer::sgd;
  const uint64_t expected = coloc::est::estimate_training(coloc::est::resolve_model("bert-base", shape), eo).total_bytes;
  CHECK(p.estimate == expected);
  CHECK(p.env["COLOC_MEM_ESTIMATE"] == std::to_string(expected));
  CHECK(p.limit == coloc::proto::kNoLimit);  // an estimate is not a limit
  CHECK(p.env.count("COLOC_MEM_LIMIT") == 0);
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].rfind("estimate for bert-base batch 4: ", 0) == 0);
  CHECK_MESSAGE(p.notes[0].find("(coloc estimate --model bert-base --batch 4 --seq 128 --optimizer sgd for the breakdown)") !=
                    std::string::npos,
                p.notes[0]);
  // A bf16 run is built and estimated in bf16: less than fp32's.
  o.dtype = "bf16";
  RunPlan half;
  REQUIRE_MESSAGE(plan_run(o, {}, in.dir / "bin", "a1b2c3", &half, &err), err);
  CHECK(half.estimate > 0);
  CHECK(half.estimate != p.estimate);
}

TEST_CASE("coloc run --estimate-from: a model file is named as coloc estimate names it") {
  Install in;
  TempDir d("coloc-model");
  const std::string file = d / "config.json";
  coloc::test::write_file(file, R"({"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2,
                                    "n_positions": 512, "vocab_size": 1000})");
  RunPlan p;
  std::string err;
  if (!plan_run(estimated(file, "2"), {}, in.dir / "bin", "a1b2c3", &p, &err)) {
    // The estimator decides which files it reads; whatever it refuses is a usage error naming it.
    CHECK(err.rfind("--estimate-from '" + file + "': ", 0) == 0);
    return;
  }
  CHECK(p.estimate > 0);
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].find("coloc estimate --model-file " + file + " --batch 2") != std::string::npos);
}

TEST_CASE("coloc run --estimate-from: usage errors, each naming what is wrong") {
  Install in;
  RunPlan p;
  std::string err;
  auto refused = [&](RunOptions o, const std::string& says) {
    err.clear();
    CAPTURE(says);
    CHECK_FALSE(plan_run(o, {}, in.dir / "bin", "a1b2c3", &p, &err));
    CHECK_MESSAGE(err.find(says) != std::string::npos, err);
  };
  RunOptions both = estimated("bert-base", "4");
  both.mem = "8GiB";
  refused(both, "--estimate-from with --mem: --mem already declares the job's footprint");
  for (std::string RunOptions::*field : {&RunOptions::batch, &RunOptions::seq, &RunOptions::image, &RunOptions::classes,
                                         &RunOptions::dtype, &RunOptions::optimizer, &RunOptions::allocator,
                                         &RunOptions::device_model}) {
    RunOptions o;
    o.command = {"true"};
    o.*field = "1";
    refused(o, "describes the run --estimate-from estimates: give --estimate-from MODEL");
  }
  refused(estimated("bert-base", ""), "--estimate-from needs --batch N");
  refused(estimated("bert-base", "0"), "--batch '0': a whole number, at least 1");
  refused(estimated("bert-base", "four"), "--batch 'four'");
  refused(estimated("no-such-model", "4"), "--estimate-from 'no-such-model': ");
  RunOptions o = estimated("bert-base", "4");
  o.dtype = "fp8";
  refused(o, "--dtype 'fp8': unknown");
  o = estimated("bert-base", "4");
  o.allocator = "jemalloc";
  refused(o, "--allocator 'jemalloc': unknown");
  o = estimated("bert-base", "4");
  o.device_model = "Voodoo2";
  refused(o, "--device-model 'Voodoo2': unknown (known: A100");
  o = estimated("bert-base", "4");
  o.seq = "-3";
  refused(o, "--seq '-3'");
}

TEST_CASE("coloc run without --estimate-from passes no inherited COLOC_MEM_ESTIMATE on") {
  Install in;
  RunOptions o;
  o.command = {"python", "train.py"};
  RunPlan p;
  std::string err;
  REQUIRE_MESSAGE(plan_run(o, {{"COLOC_MEM_ESTIMATE", "6GiB"}}, in.dir / "bin", "a1b2c3", &p, &err), err);
  CHECK(p.env.count("COLOC_MEM_ESTIMATE") == 0);
  CHECK(p.estimate == 0);
  o.mem = "8GiB";  // --mem declares the footprint: no estimate either
  REQUIRE_MESSAGE(plan_run(o, {{"COLOC_MEM_ESTIMATE", "6GiB"}}, in.dir / "bin", "a1b2c3", &p, &err), err);
  CHECK(p.env.count("COLOC_MEM_ESTIMATE") == 0);
}

TEST_CASE("tables: a reservation from the job's estimate says so") {
  json report = json::parse(R"({
    "job": "train-a1b2c3", "uid": 1000, "user": "alice", "command": "python train.py", "priority": "normal",
    "complete": true, "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:01:40.000Z", "duration_s": 100.0,
    "exit_status": 0, "exit_signal": null, "processes": [],
    "devices": [{
      "uuid": "GPU-00000000-0000-0000-0000-000000000001", "capacity": 85899345920, "limit": null,
      "reservation": 6442450944, "reservation_source": "estimate", "peak": 5368709120, "allocations": 1, "frees": 1,
      "failures": 0, "kernel_launches": 0, "wait_memory_s": 0, "wait_admission_s": 0, "driver_ooms": 0, "waits": [],
      "oom_events": [], "timeline": {"t_s": [0.0, 100.0], "bytes": [0, 0]}
    }]
  })");
  const std::string r = report_table(report);
  CHECK_MESSAGE(r.find("reservation 6.00 GiB (from its estimate: coloc run --estimate-from / COLOC_MEM_ESTIMATE)") !=
                    std::string::npos,
                r);
  json status = json::parse(R"({
    "daemon": {"pid": 7, "protocol": 10, "watcher": "pidfd", "policy": "priority-fifo", "uptime_s": 5, "holding_for_restart": false},
    "devices": [{"uuid": "GPU-1", "capacity": 85899345920, "headroom": 0, "outside": 0, "granted": 1073741824,
                 "committed": 6442450944, "in_use": 1073741824, "available": 79456894976, "driver_ooms": 0,
                 "jobs": [{"job": "train-x", "user": "alice", "priority": "normal", "state": "running", "limit": null,
                           "reserved": 6442450944, "reservation_source": "estimate", "in_use": 1073741824,
                           "peak": 1073741824, "granted": 1073741824, "driver_overhead": 0}]}],
    "jobs": []})");
  const std::string wide = status_table(status, true);
  CHECK_MESSAGE(wide.find("6.00 GiB (estimate)") != std::string::npos, wide);
}

}  // TEST_SUITE
