// colocd and a process's step within its job (Register v11, kRegStep) with the reference client
// (tests/programs/colocd_client --step, as libcoloc.so sends COLOC_STEP): each process of the job
// is listed in the report with the step it registered; a process without one, and a v10 client's
// (the reference client leaves the step out, as libcoloc.so would), has null there. Such a job is
// Slurm's: `coloc cancel` points to scancel.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstring>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

TEST_SUITE("daemon") {

TEST_CASE("colocd step: the report lists each process with its step; none, or a v10 client's, is null") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto batch = d.client({"--job", "slurm-9", "--step", "batch", "attach:1:16GiB:512MiB", "hold-file:" + go, "goodbye:0",
                         "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*batch, "holding"); }));
  auto s0 = d.client({"--job", "slurm-9", "--step", "0", "attach:1:16GiB:512MiB", "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*s0, "holding"); }));
  auto none = d.client({"--job", "slurm-9", "attach:1:16GiB:512MiB", "hold-file:" + go, "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*none, "holding"); }));
  auto old = d.client({"--job", "slurm-9", "--proto", "10", "--step", "1", "attach:1:16GiB:512MiB", "hold-file:" + go,
                       "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*old, "holding"); }));
  // The job is Slurm's (its processes registered with a step): `coloc cancel` points to scancel
  // (and the processes, signalled or not, end below as they were told: exit 0).
  {
    coloc::proto::AdminMsg m;
    std::memset(&m, 0, sizeof m);
    m.op = uint32_t(coloc::proto::AdminOp::kCancel);
    m.mode = SIGTERM;
    coloc::proto::set_string(m.job, "slurm-9");
    coloc::cli::Answer a = coloc::cli::admin_request(d.socket(), m, 5000);
    CHECK(a.kind == coloc::cli::Answer::Kind::kRefused);
    CHECK(a.status == coloc::proto::AdminStatus::kInvalid);
    CHECK_MESSAGE(a.text.find("cancel it with `scancel 9`") != std::string::npos, a.text);
  }
  write_file(go, "");
  for (Proc* p : {batch.get(), s0.get(), none.get(), old.get()}) {
    ProcResult r = p->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  json rep = d.report("slurm-9");
  INFO(rep["processes"].dump());
  REQUIRE(rep["processes"].size() == 4);
  CHECK(rep["processes"][0]["pid"] == batch->pid());
  CHECK(rep["processes"][0]["step"] == "batch");
  CHECK(rep["processes"][1]["pid"] == s0->pid());
  CHECK(rep["processes"][1]["step"] == "0");
  CHECK(rep["processes"][2]["pid"] == none->pid());
  CHECK(rep["processes"][2]["step"].is_null());
  CHECK(rep["processes"][3]["pid"] == old->pid());
  CHECK(rep["processes"][3]["step"].is_null());
  for (const json& p : rep["processes"]) CHECK(p["exit_code"] == 0);  // its step is no part of how it ended
}

}  // TEST_SUITE
