// colocd and a process's step within its job (Register v11, kRegStep) with the reference client
// (tests/programs/colocd_client --step, as libcoloc.so sends COLOC_STEP): each process of the job
// is listed in the report with the step it registered; a process without one, and a v10 client's
// (the reference client leaves the step out, as libcoloc.so would), has null there. Such a job is
// Slurm's: `coloc cancel` by its owner points to scancel (exit 5); root may still cancel it, since a
// job can say it runs under Slurm without doing so.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstring>

#include "as_user.h"
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

TEST_CASE("colocd step: the owner of a Slurm job is pointed to scancel (exit 5); root may cancel it here") {
  Who user;
  if (!nobody(&user)) return;
  Colocd d;
  const std::string go = d.dir() / "go";
  // The job's one process, as `nobody`, says it runs in step 0 of Slurm job 7.
  Proc p({"/usr/bin/setpriv", "--reuid=" + std::to_string(user.uid), "--regid=" + std::to_string(user.gid),
          "--clear-groups", build_path("tests/bin/colocd_client"), "--socket", d.socket(), "--job", "slurm-7", "--step",
          "0", "attach:1:16GiB:512MiB", "hold-file:" + go, "goodbye:0", "exit:0"},
         Env());
  REQUIRE_MESSAGE(wait_until([&] { return has_event(p, "holding"); }), p.err_so_far());
  const std::string job = std::to_string(user.uid) + ":slurm-7";
  ProcResult own = run_as(user, {build_path("bin/coloc"), "cancel", "slurm-7"}, d.env());
  CHECK_MESSAGE(own.exit_code == 5, describe(own));
  CHECK_MESSAGE(own.err.find("cancel it with `scancel 7`") != std::string::npos, own.err);
  CHECK_MESSAGE(own.err.find("root and the admin group may cancel it here") != std::string::npos, own.err);
  CHECK(d.job("slurm-7")["state"] == "running");  // refused: nothing happened to it
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(coloc::proto::AdminOp::kCancel);
  m.mode = SIGTERM;
  coloc::proto::set_string(m.job, job.c_str());
  coloc::cli::Answer a = coloc::cli::admin_request(d.socket(), m, 5000);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  json answer = json::parse(a.text);
  CHECK(answer["slurm"] == true);
  REQUIRE(answer["signalled"].size() == 1);
  CHECK(answer["signalled"][0]["pid"].get<int>() > 0);
  ProcResult r = p.wait(20s);
  CHECK(!r.timed_out);
  CHECK_MESSAGE(r.signal == SIGTERM, describe(r));
}

}  // TEST_SUITE
