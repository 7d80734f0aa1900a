// The CLI's pure parts: `coloc run`'s plan, the tables, and the SVG plot.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "../../support/proc.h"
#include "format.h"
#include "run_plan.h"
#include "svg_plot.h"

using namespace coloc::cli;
using nlohmann::json;
using coloc::test::TempDir;

namespace {

/// A fake install: <tmp>/bin (coloc), <tmp>/lib/libcoloc.so, <tmp>/sim/libcuda.so.1.
struct Install {
  TempDir dir{"coloc-install"};
  Install() {
    ::mkdir((dir / "bin").c_str(), 0755);
    ::mkdir((dir / "lib").c_str(), 0755);
    ::mkdir((dir / "sim").c_str(), 0755);
    coloc::test::write_file(dir / "lib/libcoloc.so", "");
    coloc::test::write_file(dir / "sim/libcuda.so.1", "");
  }
};

json sample_report() {
  return json::parse(R"({
    "job": "train-<a&b>", "uid": 1000, "user": "alice", "command": "python train.py --tag \"x<y\"",
    "priority": "high", "complete": true, "start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:01:40.000Z",
    "duration_s": 100.0, "exit_status": 0, "exit_signal": null, "processes": [],
    "devices": [{
      "uuid": "GPU-00000000-0000-0000-0000-000000000001", "capacity": 85899345920, "limit": 21474836480,
      "reservation": 21474836480, "peak": 19327352832, "allocations": 120, "frees": 100, "failures": 2,
      "kernel_launches": 5000, "wait_memory_s": 12.5, "wait_admission_s": 3.0, "driver_ooms": 0,
      "waits": [{"kind": "admission", "start_s": 0.0, "end_s": 3.0, "outcome": "granted"},
                {"kind": "memory", "start_s": 40.0, "end_s": 52.5, "outcome": "granted"}],
      "oom_events": [{"t_s": 70.0, "reason": "own-limit", "admission": false, "request": 4294967296, "in_use": 19327352832}],
      "timeline": {"t_s": [3.0, 10.0, 40.0, 52.5, 80.0, 100.0],
                   "bytes": [1073741824, 8589934592, 12884901888, 19327352832, 10737418240, 0]}
    }]
  })");
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc run: the environment of the job") {
  Install in;
  RunOptions o;
  o.mem = "20GiB";
  o.priority = "high";
  o.on_full = "fail";
  o.job = "train";
  o.socket = "/tmp/x.sock";
  o.command = {"python", "train.py"};
  RunPlan p;
  std::string err;
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin"}, {"LD_PRELOAD", "/other.so"}, {"COLOC_MEM_LIMIT", "old"}};
  REQUIRE_MESSAGE(plan_run(o, env, in.dir / "bin", "a1b2c3", &p, &err), err);
  CHECK(p.job_id == "train-a1b2c3");
  CHECK(p.env["COLOC_JOB"] == "train-a1b2c3");
  CHECK(p.env["COLOC_MEM_LIMIT"] == std::to_string(20ull << 30));
  CHECK(p.env["COLOC_PRIORITY"] == "high");
  CHECK(p.env["COLOC_ON_FULL"] == "fail");
  CHECK(p.env["COLOC_SOCKET"] == "/tmp/x.sock");
  CHECK(p.env["PATH"] == "/usr/bin");
  const std::string lib = in.dir / "bin/../lib/libcoloc.so";
  CHECK(p.env["LD_PRELOAD"].find(lib) != std::string::npos);
  CHECK(p.env["LD_PRELOAD"].find("/other.so") != std::string::npos);  // kept, after ours
  CHECK(p.env.count("LD_LIBRARY_PATH") == 0);
  CHECK(p.argv == std::vector<std::string>{"python", "train.py"});

  o.sim = true;
  o.mem.clear();
  REQUIRE(plan_run(o, env, in.dir / "bin", "000000", &p, &err));
  CHECK(p.env["LD_LIBRARY_PATH"] == in.dir / "bin/../sim");
  CHECK(p.env.count("COLOC_MEM_LIMIT") == 0);  // no limit: an inherited one is not passed on
}

TEST_CASE("coloc run: the job name comes from the command, and bad options are named") {
  Install in;
  RunOptions o;
  o.socket = "/s";
  o.command = {"/opt/bin/my train!"};
  RunPlan p;
  std::string err;
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  CHECK(p.job_id == "my_train_-abcdef");
  auto refused = [&](RunOptions x, const std::string& needle) {
    std::string e;
    RunPlan q;
    CHECK_FALSE(plan_run(x, {}, in.dir / "bin", "abcdef", &q, &e));
    CHECK_MESSAGE(e.find(needle) != std::string::npos, e);
  };
  RunOptions bad = o;
  bad.mem = "lots";
  refused(bad, "--mem 'lots'");
  bad = o;
  bad.priority = "urgent";
  refused(bad, "--priority");
  bad = o;
  bad.on_full = "explode";
  refused(bad, "--on-full");
  bad = o;
  bad.job = "a/b";
  refused(bad, "--job");
  bad = o;
  bad.command.clear();
  refused(bad, "nothing to run");
  TempDir empty("coloc-empty");
  std::string e;
  RunPlan q;
  CHECK_FALSE(plan_run(o, {}, empty.path(), "abcdef", &q, &e));
  CHECK(e.find("cannot find libcoloc.so") != std::string::npos);
  CHECK(random_suffix().size() == 6);
}

TEST_CASE("tables: status, jobs and report show what matters") {
  json status = json::parse(R"({
    "daemon": {"pid": 7, "protocol": 2, "watcher": "bpf+pidfd", "policy": "priority-fifo", "uptime_s": 65, "holding_for_restart": false},
    "devices": [{"uuid": "GPU-1", "capacity": 85899345920, "headroom": 1717986918, "outside": 0, "granted": 1073741824,
                 "committed": 21474836480, "in_use": 1073741824, "available": 62706522010, "driver_ooms": 0,
                 "jobs": [{"job": "train-x", "user": "alice", "priority": "high", "state": "waiting", "limit": null,
                           "reserved": 0, "in_use": 1073741824, "peak": 2147483648, "granted": 1073741824}]}],
    "jobs": [{"job": "train-x", "user": "alice", "priority": "high", "state": "waiting", "limit": null, "in_use": 1073741824,
              "peak": 2147483648, "granted": 1073741824, "devices": [{"uuid": "GPU-1"}], "pids": [42]}]})");
  std::string t = status_table(status);
  CHECK(t.find("80.00 GiB") != std::string::npos);
  CHECK(t.find("train-x") != std::string::npos);
  CHECK(t.find("waiting") != std::string::npos);
  CHECK(t.find("1 min 05 s") != std::string::npos);
  std::string j = jobs_table(json{{"jobs", status["jobs"]}});
  CHECK(j.find("none") != std::string::npos);  // no limit
  CHECK(j.find("42") != std::string::npos);
  CHECK(jobs_table(json{{"jobs", json::array()}}) == "No jobs.\n");
  std::string r = report_table(sample_report());
  CHECK(r.find("exit status 0") != std::string::npos);
  CHECK(r.find("own-limit") != std::string::npos);
  CHECK(r.find("+40.00 s") != std::string::npos);
  CHECK(r.find("12.5 s") != std::string::npos);
}

TEST_CASE("svg: a valid SVG document, checked by parsing it, with every element a reader needs") {
  TempDir tmp("coloc-svg");
  std::string svg = render_svg(sample_report());
  coloc::test::write_file(tmp / "r.svg", svg);
  auto lint = coloc::test::run({"xmllint", "--noout", tmp / "r.svg"}, coloc::test::Env(), std::chrono::seconds(20));
  CHECK_MESSAGE(lint.exit_code == 0, coloc::test::describe(lint));
  auto root = coloc::test::run({"xmllint", "--xpath", "name(/*)", tmp / "r.svg"}, coloc::test::Env(), std::chrono::seconds(20));
  CHECK(root.out.find("svg") != std::string::npos);
  auto count = [&](const std::string& xpath) {
    auto r = coloc::test::run({"xmllint", "--xpath", xpath, tmp / "r.svg"}, coloc::test::Env(), std::chrono::seconds(20));
    return std::atoi(r.out.c_str());
  };
  CHECK(count("count(//*[local-name()='path'])") >= 3);  // the curve, its fill, the OOM marker
  CHECK(svg.find("job limit 20.00 GiB") != std::string::npos);
  CHECK(svg.find("device capacity 80.00 GiB") != std::string::npos);
  CHECK(svg.find("device memory (GiB)") != std::string::npos);
  CHECK(svg.find("time since the job started (s)") != std::string::npos);
  CHECK(svg.find("OOM: own-limit") != std::string::npos);
  CHECK(svg.find("waiting for memory") != std::string::npos);
  CHECK(svg.find("peak 18.00 GiB") != std::string::npos);
  CHECK(svg.find("train-&lt;a&amp;b&gt;") != std::string::npos);  // escaped, not raw
  CHECK(svg.find("<a&b>") == std::string::npos);
  // A report with nothing in it is still a valid picture.
  coloc::test::write_file(tmp / "empty.svg", render_svg(json::object()));
  CHECK(coloc::test::run({"xmllint", "--noout", tmp / "empty.svg"}, coloc::test::Env(), std::chrono::seconds(20)).exit_code == 0);
}

TEST_CASE("svg: axis steps are round numbers") {
  CHECK(nice_step(10, 5) == doctest::Approx(2));
  CHECK(nice_step(80, 6) == doctest::Approx(20));
  CHECK(nice_step(0.7, 7) == doctest::Approx(0.1));
  CHECK(nice_step(0, 5) == 1);
  CHECK(xml_escape("a<b>&\"'\x01") == "a&lt;b&gt;&amp;&quot;&apos; ");
}

}  // TEST_SUITE
