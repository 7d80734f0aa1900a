// The CLI's pure parts: `coloc run`'s plan, the tables, and the SVG plot.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <set>

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
      "oom_events": [{"t_s": 70.0, "reason": "own-limit", "admission": false, "request": 23622320128, "in_use": 19327352832}],
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

TEST_CASE("coloc run: the anchor registers the job's settings as its processes will") {
  Install in;
  RunOptions o;
  o.mem = "20GiB";
  o.priority = "best-effort";
  o.on_full = "fail";
  o.job = "train";
  o.command = {"bash", "-c", "a; b"};
  RunPlan p;
  std::string err;
  std::map<std::string, std::string> env = {{"COLOC_WAIT_TIMEOUT", "1.5s"}};
  REQUIRE_MESSAGE(plan_run(o, env, in.dir / "bin", "a1b2c3", &p, &err), err);
  CHECK(p.limit == 20ull << 30);
  CHECK(p.priority == coloc::proto::Priority::kBestEffort);
  CHECK(p.on_full == coloc::proto::OnFull::kFail);
  CHECK(p.wait_timeout_ns == 1'500'000'000ull);
  o.mem.clear();
  o.priority.clear();
  o.on_full.clear();
  REQUIRE(plan_run(o, {}, in.dir / "bin", "a1b2c3", &p, &err));
  CHECK(p.limit == coloc::proto::kNoLimit);
  CHECK(p.priority == coloc::proto::Priority::kNormal);
  CHECK(p.on_full == coloc::proto::OnFull::kWait);
  CHECK(p.wait_timeout_ns == 0);
  // COLOC_WAIT_TIMEOUT as libcoloc.so reads it; anything else is the daemon's default (0).
  CHECK(parse_wait_timeout("250ms") == 250'000'000ull);
  CHECK(parse_wait_timeout(" 2m ") == 120'000'000'000ull);
  CHECK(parse_wait_timeout("3") == 3'000'000'000ull);
  CHECK(parse_wait_timeout("10us") == 10'000ull);
  CHECK(parse_wait_timeout("2d") == 2ull * 86400 * 1'000'000'000);  // days too (issue 28)
  for (const char* bad : {"", "soon", "5 s", "-3s", "5w"}) {
    CAPTURE(bad);
    CHECK(parse_wait_timeout(bad) == 0);
  }
  // What coloc run says goodbye with, and what the report records.
  CHECK(exit_code_of(7 << 8) == 7);    // exited 7
  CHECK(exit_code_of(SIGINT) == 130);  // killed by SIGINT
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
  // The OOM event's REQUEST is the request alone: the report's request is what the job would have
  // held (18 GiB in use + 4 GiB asked).
  size_t row = r.find("own-limit ");
  REQUIRE(row != std::string::npos);
  std::string line = r.substr(row, r.find('\n', row) - row);
  CHECK_MESSAGE(line.find(" 4.00 GiB ") != std::string::npos, line);
  CHECK(r.find("22.00 GiB") == std::string::npos);
  CHECK(r.find("other reports") == std::string::npos);  // only one report of the id
  CHECK(r.find("Cancelled") == std::string::npos);
  json cancelled = sample_report();
  cancelled["cancelled"] = {{"by", "alice"}, {"uid", 1000}, {"signal", 15}, {"at", "2026-12-07T05:00:00Z"}};
  const std::string rc = report_table(cancelled);
  CHECK_MESSAGE(rc.find("Cancelled by alice at 2026-12-07T05:00:00Z (coloc cancel, SIGTERM)") != std::string::npos, rc);
  json several = sample_report();
  several["report_name"] = "train-a1b2c3.3";
  several["other_reports"] = json::array({"train-a1b2c3", "train-a1b2c3.2"});
  std::string rs = report_table(several);
  CHECK_MESSAGE(rs.find("This is report train-a1b2c3.3; other reports of this job id: train-a1b2c3 train-a1b2c3.2") !=
                    std::string::npos,
                rs);
  CHECK(oom_request_bytes(json{{"request", 4096}, {"in_use", 0}, {"admission", true}}) == 4096);
  // A report of an older colocd whose in-use caught up with the need while it waited: never "0 B".
  CHECK(oom_request_bytes(json{{"request", 3ull << 30}, {"in_use", 3ull << 30}}) == 3ull << 30);
}

TEST_CASE("tables: coloc jobs shows a device's lower limit (COLOC_MEM_LIMIT_<n>) and the driver overhead") {
  // A job of 6 GiB whose limit on one device is 2 GiB (the admitting process's COLOC_MEM_LIMIT_0),
  // with 1.5 GiB of driver overhead there: its line must not read as 6 GiB of room with 1 GiB in use.
  json jobs = json::parse(R"({"jobs": [
    {"job": "capped-x", "user": "alice", "priority": "normal", "state": "running", "limit": 6442450944,
     "in_use": 1073741824, "peak": 1073741824, "granted": 1073741824, "driver_overhead": 1610612736, "pids": [42],
     "devices": [{"uuid": "GPU-33df1ceb-9c75-ec2a-e488-1b3da1e7984e", "limit": 2147483648},
                 {"uuid": "GPU-44aa0000-0000-0000-0000-000000000000", "limit": 6442450944}]},
    {"job": "free-y", "user": "bob", "priority": "normal", "state": "running", "limit": null,
     "in_use": 0, "peak": 0, "granted": 0, "pids": [43],
     "devices": [{"uuid": "GPU-55bb0000-0000-0000-0000-000000000000", "limit": 1073741824}]}]})");
  std::string t = jobs_table(jobs);
  CHECK_MESSAGE(t.find("DRIVER OVERHEAD") != std::string::npos, t);
  CHECK_MESSAGE(t.find("1.50 GiB") != std::string::npos, t);
  CHECK_MESSAGE(t.find("6.00 GiB (2.00 GiB on GPU-33df1ceb...)") != std::string::npos, t);
  CHECK_MESSAGE(t.find("on GPU-44aa") == std::string::npos, t);  // the job's own limit there: nothing to add
  CHECK_MESSAGE(t.find("none (1.00 GiB on GPU-55bb0000...)") != std::string::npos, t);
}

TEST_CASE("tables: a waiting job's reason, position and estimated start in status, jobs and its sentence") {
  const int64_t now = 1'800'000'000;  // the CLI's clock, Unix s
  json resources = json::parse(R"({"reason": "Resources", "position": 1, "behind": null, "behind_user": null,
    "missing": 12455405158, "held_by": [{"job": "train", "user": "alice", "bytes": 21474836480}],
    "asks": 75161927680, "asks_source": "mem", "estimated_start_s": 840.0, "estimated_start_ms": 1800000840000})");
  json queue = json::parse(R"({"reason": "Queue", "position": 2, "behind": "finetune", "behind_user": "bob",
    "missing": null, "held_by": null, "asks": 2147483648, "asks_source": "history",
    "estimated_start_s": null, "estimated_start_ms": null})");
  CHECK(queue_reason_text(resources) == "Resources");
  CHECK(queue_reason_text(queue) == "Queue(finetune)");
  CHECK(queue_reason_text(json()) == "-");
  CHECK(queue_start_text(queue, now) == "unknown");
  CHECK(queue_start_text(json(), now) == "-");
  const std::string at = queue_start_text(resources, now);  // local time: only its shape is fixed
  CHECK_MESSAGE(at.size() == 6, at);
  CHECK(at[0] == '~');
  CHECK(at[3] == ':');
  json far = resources;
  far["estimated_start_ms"] = (now + 2 * 86400) * 1000;
  far["estimated_start_s"] = 2.0 * 86400;
  CHECK(queue_start_text(far, now).size() == 13);  // "~Dec 07 14:32"
  json soon = resources;
  soon["estimated_start_s"] = 0.2;
  CHECK(queue_start_text(soon, now) == "now");
  const std::string s1 = queue_sentence(resources, now);
  CHECK_MESSAGE(s1.find("#1 in line: Resources: 11.60 GiB missing, held by train (20.00 GiB); asks 70.00 GiB (--mem); "
                        "starts ~") == 0,
                s1);
  const std::string s2 = queue_sentence(queue, now);
  CHECK_MESSAGE(s2 == "#2 in line: Queue: behind finetune, first in line; asks 2.00 GiB (its earlier runs); starts unknown",
                s2);
  json jobs = json::parse(R"({"jobs": [{"job": "nb", "user": "alice", "priority": "best-effort", "state": "admission-pending",
    "limit": 2147483648, "in_use": 0, "peak": 0, "granted": 0, "pids": [], "devices": []}]})");
  jobs["jobs"][0]["queue"] = queue;
  const std::string t = jobs_table(jobs);
  CHECK_MESSAGE(t.find("REASON") != std::string::npos, t);
  CHECK_MESSAGE(t.find("Queue(finetune)") != std::string::npos, t);
  CHECK_MESSAGE(t.find("unknown") != std::string::npos, t);
}

TEST_CASE("coloc run: notes for a rewritten job name and for a limit below one CUDA context") {
  Install in;
  RunOptions o;
  o.socket = "/s";
  o.command = {"/opt/bin/my train!"};
  RunPlan p;
  std::string err;
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].find("job name my_train_-abcdef") != std::string::npos);
  CHECK(p.notes[0].find("'my train!'") != std::string::npos);
  o.command = {"/opt/bin/train.py"};  // a name that fits: nothing to say
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  CHECK(p.notes.empty());
  o.command = {std::string(50, 'a')};  // cut to 40 characters
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].find("job name " + std::string(40, 'a') + "-abcdef") != std::string::npos);
  o.command = {"train"};
  o.mem = "100MiB";
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  REQUIRE(p.notes.size() == 1);
  CHECK(p.notes[0].find("--mem 100.00 MiB is less than one CUDA context") != std::string::npos);
  CHECK(p.notes[0].find("a CUDA context alone takes a few hundred MiB on real GPUs") != std::string::npos);
  REQUIRE(plan_run(o, {{"COLOC_CONTEXT_BYTES", "64MiB"}}, in.dir / "bin", "abcdef", &p, &err));
  CHECK(p.notes.empty());  // the context is counted smaller: 100 MiB holds one
  o.mem = "1GiB";
  REQUIRE(plan_run(o, {}, in.dir / "bin", "abcdef", &p, &err));
  CHECK(p.notes.empty());
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

namespace {
/// (x, y) of every <text> element of `cls` in an SVG document.
std::vector<std::pair<std::string, std::string>> text_positions(const std::string& svg, const std::string& cls) {
  std::vector<std::pair<std::string, std::string>> v;
  for (size_t at = 0; (at = svg.find("<text ", at)) != std::string::npos; ++at) {
    size_t end = svg.find('>', at);
    std::string tag = svg.substr(at, end - at);
    if (tag.find("class='" + cls + "'") == std::string::npos) continue;
    auto attr = [&](const std::string& k) {
      size_t a = tag.find(" " + k + "='") + k.size() + 3;
      return tag.substr(a, tag.find('\'', a) - a);
    };
    v.emplace_back(attr("x"), attr("y"));
  }
  return v;
}
}  // namespace

TEST_CASE("svg: labels that would collide are moved or dropped; counts read as words; no limit, no limit legend") {
  json r = sample_report();
  json& d = r["devices"][0];
  // The limit a hair under the capacity, and four refusals at the same moment and use: their labels
  // would all sit on one spot, and the limit's on the capacity's.
  d["limit"] = 85899345920.0 - 100 * 1048576.0;
  json ev = d["oom_events"][0];
  for (int i = 0; i < 3; ++i) d["oom_events"].push_back(ev);
  d["allocations"] = 1;
  std::string svg = render_svg(r);
  for (const char* cls : {"lbl", "oom"}) {
    auto pos = text_positions(svg, cls);
    std::set<std::pair<std::string, std::string>> distinct(pos.begin(), pos.end());
    CAPTURE(cls);
    CHECK(distinct.size() == pos.size());
  }
  auto ooms = text_positions(svg, "oom");
  CHECK(ooms.size() >= 2);  // moved above and below the marker ...
  CHECK(ooms.size() <= 4);  // ... or dropped when no place is left
  CHECK(svg.find("1 allocation,") != std::string::npos);
  CHECK(svg.find("1 allocations") == std::string::npos);
  CHECK(svg.find(">job limit</text>") != std::string::npos);

  d["limit"] = nullptr;  // no limit: nothing in the legend about one
  svg = render_svg(r);
  CHECK(svg.find("job limit") == std::string::npos);
  CHECK(svg.find("(no limit)") != std::string::npos);
}

TEST_CASE("report: a job that ended while colocd was away shows both bounds of its end, and its duration as a range") {
  json r = sample_report();
  r["exit_status"] = nullptr;
  r["ended_while_daemon_away"] = true;
  r["duration_s"] = 1.18;
  r["end"] = "2026-01-01T00:00:01.180Z";
  r["ended_after"] = "2026-01-01T00:00:01.180Z";
  r["ended_before"] = "2026-01-01T00:00:04.100Z";
  r["duration_max_s"] = 4.1;
  r["devices"][0]["waits"][1]["across_restart"] = true;
  std::string t = report_table(r);
  CHECK_MESSAGE(t.find("ended while colocd was away, between 2026-01-01T00:00:01.180Z and 2026-01-01T00:00:04.100Z") !=
                    std::string::npos,
                t);
  CHECK(t.find("ran 1.2\u2013" "4.1 s") != std::string::npos);  // a range, not "ran 1.2 s"
  CHECK(t.find("ran 1.2 s") == std::string::npos);
  CHECK(t.find("exit status unknown") != std::string::npos);
  CHECK(t.find("granted (across a colocd restart)") != std::string::npos);

  TempDir tmp("coloc-svg-away");
  std::string svg = render_svg(r);
  coloc::test::write_file(tmp / "away.svg", svg);
  auto lint = coloc::test::run({"xmllint", "--noout", tmp / "away.svg"}, coloc::test::Env(), std::chrono::seconds(20));
  CHECK_MESSAGE(lint.exit_code == 0, coloc::test::describe(lint));
  CHECK(svg.find("1.18\u2013" "4.10 s · exit status unknown") != std::string::npos);
  CHECK(svg.find("ended while colocd was away, between 2026-01-01T00:00:01.180Z and 2026-01-01T00:00:04.100Z") !=
        std::string::npos);
  CHECK(svg.find("1.18 s · exit status unknown") == std::string::npos);

  // A report of an older colocd, without the bounds: what is known, no invented range.
  r.erase("ended_after");
  r.erase("ended_before");
  r.erase("duration_max_s");
  t = report_table(r);
  CHECK(t.find("ended while colocd was away, after 2026-01-01T00:00:01.180Z") != std::string::npos);
  CHECK(t.find("ran at least 1.2 s") != std::string::npos);
  CHECK(render_svg(r).find("at least 1.18 s") != std::string::npos);
  // A job that ended in front of colocd: as before.
  t = report_table(sample_report());
  CHECK(t.find("ran 1 min 40 s") != std::string::npos);
  CHECK(t.find("away") == std::string::npos);
  CHECK(render_svg(sample_report()).find("away") == std::string::npos);
  CHECK(duration_range_text(65, 130) == "1 min 05 s \u2013 2 min 10 s");
}

TEST_CASE("svg: axis steps are round numbers") {
  CHECK(nice_step(10, 5) == doctest::Approx(2));
  CHECK(nice_step(80, 6) == doctest::Approx(20));
  CHECK(nice_step(0.7, 7) == doctest::Approx(0.1));
  CHECK(nice_step(0, 5) == 1);
  CHECK(xml_escape("a<b>&\"'\x01") == "a&lt;b&gt;&amp;&quot;&apos; ");
}

}  // TEST_SUITE

TEST_CASE("coloc set: the reply's reservation changes, one line a device; status flags an over-committed device") {
  json reply = {{"job", "t-1"},
                {"limit", 20ull << 30},
                {"priority", "normal"},
                {"in_use", 3ull << 30},
                {"reservation_changes",
                 json::array({{{"uuid", "GPU-aaaaaaaa-0000"}, {"outcome", "raised"}, {"before", 8ull << 30},
                               {"after", 20ull << 30}, {"wanted", 20ull << 30}, {"available", 30ull << 30}},
                              {{"uuid", "GPU-bbbbbbbb-0000"}, {"outcome", "kept: does not fit now"},
                               {"before", 8ull << 30}, {"after", 8ull << 30}, {"wanted", 20ull << 30},
                               {"available", 5ull << 30}}})}};
  std::string t = set_text(reply);
  CHECK(t.find("job t-1: limit 20.00 GiB, priority normal, weight 1, in use 3.00 GiB") == 0);
  CHECK(t.find("reservation on GPU-aaaaaaaa...: raised from 8.00 GiB to 20.00 GiB") != std::string::npos);
  CHECK(t.find("kept: does not fit now (8.00 GiB; wanted 20.00 GiB, available 5.00 GiB)") != std::string::npos);
  reply.erase("reservation_changes");  // a priority-only change
  CHECK(set_text(reply).find("reservation") == std::string::npos);

  json dev = {{"uuid", "GPU-x"}, {"capacity", 40ull << 30}, {"headroom", 0}, {"outside", 0}, {"granted", 0},
              {"committed", 50ull << 30}, {"in_use", 0}, {"available", 0}, {"jobs", json::array()}};
  json status = {{"daemon", {{"pid", 1}}}, {"devices", json::array({dev})}};
  CHECK(status_table(status).find("over-committed") == std::string::npos);
  status["devices"][0]["over_committed"] = true;
  CHECK(status_table(status).find("over-committed: commitments exceed what is usable") != std::string::npos);
}

TEST_SUITE("cli") {

TEST_CASE("coloc run --wait-timeout: sets COLOC_WAIT_TIMEOUT over the environment's; a malformed one is refused") {
  Install in;
  RunOptions o;
  o.command = {"python", "train.py"};
  RunPlan p;
  std::string err;
  std::map<std::string, std::string> env = {{"COLOC_WAIT_TIMEOUT", "5m"}};
  o.wait_timeout = "30s";
  REQUIRE_MESSAGE(plan_run(o, env, in.dir / "bin", "a1b2c3", &p, &err), err);
  CHECK(p.env["COLOC_WAIT_TIMEOUT"] == "30s");
  CHECK(p.wait_timeout_ns == 30'000'000'000ull);
  o.wait_timeout = "soon";
  CHECK_FALSE(plan_run(o, env, in.dir / "bin", "a1b2c3", &p, &err));
  CHECK(err.find("--wait-timeout 'soon'") != std::string::npos);
  o.wait_timeout = "0";
  CHECK_FALSE(plan_run(o, env, in.dir / "bin", "a1b2c3", &p, &err));
}

TEST_CASE("coloc policy and weights: the tables, the weight and quantum grammar, the compute state") {
  // coloc policy: one line per device; colocd's numbering marked; unseen devices and the default said.
  json s = json::parse(R"({"daemon": {"pid": 1}, "devices": [], "policies": {
    "default": {"mode": "timeslice", "quantum_ms": 50},
    "devices": [
      {"index": 0, "index_from": "nvml", "uuid": "GPU-aa", "policy": {"mode": "timeslice", "quantum_ms": 50},
       "holder": "train-1", "seen": true},
      {"index": 3, "index_from": "colocd", "uuid": "GPU-bb", "policy": {"mode": "share", "quantum_ms": 100},
       "holder": null, "seen": true},
      {"index": null, "index_from": null, "uuid": "GPU-cc", "policy": {"mode": "share", "quantum_ms": 100},
       "holder": null, "seen": false}]}})");
  std::string t = policy_table(s);
  CHECK_MESSAGE(t.find("0      GPU-aa  timeslice  50 ms    train-1") != std::string::npos, t);
  CHECK_MESSAGE(t.find("3*     GPU-bb  share      -        -") != std::string::npos, t);
  CHECK_MESSAGE(t.find("-      GPU-cc  share") != std::string::npos, t);
  CHECK(t.find("* numbered by colocd") != std::string::npos);
  CHECK(t.find("- not seen since colocd started") != std::string::npos);
  CHECK(t.find("Devices colocd learns of later: timeslice, quantum 50 ms (coloc policy all)") != std::string::npos);
  CHECK(policy_table(json{{"daemon", json::object()}, {"devices", json::array()}}).empty());  // an older colocd
  // kPolicy's answer.
  json reply = json::parse(R"({"device": "all", "all": true, "default": {"mode": "share", "quantum_ms": 100},
    "devices": [{"index": 0, "index_from": "nvml", "uuid": "GPU-aa", "policy": {"mode": "share", "quantum_ms": 100},
                 "was": {"mode": "timeslice", "quantum_ms": 50}},
                {"index": 3, "index_from": "colocd", "uuid": "GPU-bb", "policy": {"mode": "share", "quantum_ms": 100},
                 "was": {"mode": "share", "quantum_ms": 100}}]})");
  std::string r = policy_set_text(reply);
  CHECK_MESSAGE(r.find("every device, and each device colocd learns of later: share\n") == 0, r);
  CHECK(r.find("device 0 GPU-aa: share (was timeslice, quantum 50 ms)") != std::string::npos);
  CHECK(r.find("device 3* GPU-bb: share (unchanged)") != std::string::npos);
  // The STATE column: the memory state, with the compute state when launches wait.
  CHECK(job_state_text(json{{"state", "running"}, {"compute_state", "waiting-quantum"}}) == "waiting-quantum");
  CHECK(job_state_text(json{{"state", "waiting"}, {"compute_state", "waiting-quantum"}}) == "waiting+quantum");
  CHECK(job_state_text(json{{"state", "running"}, {"compute_state", "paused"}}) == "paused");
  CHECK(job_state_text(json{{"state", "admission-pending"}, {"compute_state", "running"}}) == "admission-pending");
  CHECK(job_state_text(json{{"state", "running"}}) == "running");  // an older colocd
  // Weights: 1..100, whole numbers.
  uint32_t w = 0;
  std::string err;
  CHECK(parse_weight("1", &w, &err));
  CHECK(w == 1);
  CHECK(parse_weight("100", &w, &err));
  CHECK(w == 100);
  for (const char* bad : {"0", "101", "1000", "-1", "1.5", "", "two", " 3", "99999999999"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_weight(bad, &w, &err));
    CHECK(err.find("--weight") != std::string::npos);
  }
  // Quanta: the duration grammar of --wait-timeout, whole ms from 1 ms to 60 s.
  uint32_t ms = 0;
  CHECK(parse_quantum("100ms", &ms, &err));
  CHECK(ms == 100);
  CHECK(parse_quantum("1s", &ms, &err));
  CHECK(ms == 1000);
  CHECK(parse_quantum("1m", &ms, &err));
  CHECK(ms == 60000);
  CHECK(parse_quantum("0.25s", &ms, &err));
  CHECK(ms == 250);
  for (const char* bad : {"0", "0ms", "", "soon", "1.5ms", "500us", "61s", "2m", "100"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_quantum(bad, &ms, &err));
    CHECK(err.find("--quantum") != std::string::npos);
  }
  // coloc run --weight.
  Install in;
  RunOptions o;
  o.socket = "/s";
  o.command = {"/bin/true"};
  o.weight = "5";
  RunPlan p;
  REQUIRE(plan_run(o, {}, in.dir / "bin", "a1b2c3", &p, &err));
  CHECK(p.weight == 5);
  o.weight = "0";
  CHECK_FALSE(plan_run(o, {}, in.dir / "bin", "a1b2c3", &p, &err));
  CHECK(err.find("--weight 0") != std::string::npos);
}

}  // TEST_SUITE

TEST_CASE("tables: coloc history marks an estimate from failed runs only as a lower bound, and gives the typical run") {
  json h = json::parse(R"({"path": "/x/history.db", "loaded": true, "usable": true, "fingerprints": [
    {"fingerprint": "00000000000000aa", "uid": 1000, "user": "alice", "model": "H100", "command": "python a.py",
     "runs": 3, "p50": 8589934592, "p95": 8589934592, "estimate": 9019431322, "lower_bound": true, "run_ms": 0,
     "last_ended_ms": 1, "last_exit_status": 1, "last_end": "oom-limit",
     "failures": {"oom-limit": 2, "cancelled": 1}},
    {"fingerprint": "00000000000000bb", "uid": 1000, "user": "alice", "model": "H100", "command": "python b.py",
     "runs": 3, "p50": 1073741824, "p95": 1073741824, "estimate": 1127428915, "lower_bound": false, "run_ms": 754000,
     "last_ended_ms": 1, "last_exit_status": 0, "last_end": "clean"}]})");
  const std::string t = history_table(h, false);
  CHECK_MESSAGE(t.find("\u2265 8.40 GiB") != std::string::npos, t);
  CHECK_MESSAGE(t.find("\u2265 1.05 GiB") == std::string::npos, t);
  CHECK_MESSAGE(t.find("12 min 34 s") != std::string::npos, t);
  CHECK_MESSAGE(t.find("is a lower bound of what the job needs") != std::string::npos, t);
  // Which runs failed, and why.
  CHECK_MESSAGE(t.find("3: own limit x2, cancelled") != std::string::npos, t);
  CHECK_MESSAGE(t.find("FAILED") != std::string::npos, t);
}

TEST_CASE("cancel and jobs --all: signals and durations parse or say what is wrong; the texts say what happened") {
  int sig = 0;
  std::string error;
  CHECK((coloc::cli::parse_signal("TERM", &sig, &error) && sig == SIGTERM));
  CHECK((coloc::cli::parse_signal("sigint", &sig, &error) && sig == SIGINT));
  CHECK((coloc::cli::parse_signal("9", &sig, &error) && sig == SIGKILL));
  CHECK((coloc::cli::parse_signal("USR1", &sig, &error) && sig == SIGUSR1));
  for (const char* bad : {"", "FOO", "0", "65", "-9", "SIG"}) {
    INFO(bad);
    CHECK_FALSE(coloc::cli::parse_signal(bad, &sig, &error));
    CHECK(error.rfind("--signal '", 0) == 0);
  }
  uint64_t ns = 1;
  CHECK((coloc::cli::parse_duration_option("--grace", "0", &ns, &error) && ns == 0));
  CHECK((coloc::cli::parse_duration_option("--grace", "0.0s", &ns, &error) && ns == 0));
  CHECK((coloc::cli::parse_duration_option("--grace", "10s", &ns, &error) && ns == 10'000'000'000ull));
  CHECK((coloc::cli::parse_duration_option("--since", "2d", &ns, &error) && ns == 2ull * 86400 * 1'000'000'000));
  for (const char* bad : {"-1", "yesterday", "", "1x", "."}) {
    INFO(bad);
    CHECK_FALSE(coloc::cli::parse_duration_option("--since", bad, &ns, &error));
    CHECK(error.rfind("--since '", 0) == 0);
  }
  const std::string c = cancel_text(json::parse(
      R"({"job": "train-1a2b3c", "signal": 15, "grace_ms": 10000, "left_queue": true, "signalled": [{"pid": 1, "anchor": true}]})"));
  CHECK_MESSAGE(c == "job train-1a2b3c cancelled: it left the queue; SIGTERM sent to 1 process, SIGKILL to those still "
                     "running after 10.0 s\n", c);
  const std::string c2 = cancel_text(json::parse(
      R"({"job": "t-1", "signal": 15, "grace_ms": 0, "left_queue": false,
          "signalled": [{"pid": 2, "anchor": false}, {"pid": 1, "anchor": true, "ended": true}]})"));
  CHECK_MESSAGE(c2 == "job t-1 cancelled: SIGTERM sent to 1 process (1 more had just ended), SIGKILL to those still "
                      "running at once\n", c2);
  json ended = json::parse(R"({"indexed": true, "jobs": [
    {"job": "b-2", "report": "b-2", "uid": 0, "user": "root", "command": "python b.py", "start_unix_ms": 2000,
     "end_unix_ms": 3000, "exit_status": 143, "exit_signal": null, "peak": 1073741824, "waited_s": 12.5, "cancelled_by": "root"},
    {"job": "a-1", "report": "a-1", "uid": 1000, "user": "alice", "command": null, "start_unix_ms": 1000,
     "end_unix_ms": 2000, "exit_status": 0, "exit_signal": null, "peak": 0, "waited_s": 0, "cancelled_by": null}]})");
  const std::string t = ended_table(ended);
  CHECK_MESSAGE(t.find("143 (cancelled by root)") != std::string::npos, t);
  CHECK_MESSAGE(t.find("(hidden)") != std::string::npos, t);
  CHECK_MESSAGE(t.find("12.5 s") != std::string::npos, t);
  CHECK(t.find("b-2") < t.find("a-1"));
  // `--user`: a name of this machine or a uid; anything else is refused before colocd is asked.
  std::string why;
  CHECK(resolve_user("root", &why) == 0u);
  CHECK(resolve_user("1000", &why) == 1000u);
  for (const char* bad : {"no-such-user-here", "-1", "4294967295", "4294967296", ""}) {
    INFO(bad);
    CHECK(!resolve_user(bad, &why));
    CHECK(why.find("no such user") != std::string::npos);
  }
  // A hostile report's cells reach no terminal raw, nor stretch the table.
  json odd = json::parse(R"({"indexed": true, "jobs": [{"job": "x\u001b[2Jy", "user": "u\r\nv", "waited_s": null,
    "start_unix_ms": "soon", "cancelled_by": "\u001b]0;t\u0007"}]})");
  odd["jobs"][0]["user"] = odd["jobs"][0]["user"].get<std::string>() + std::string(5000, 'w');
  const std::string o = ended_table(odd);
  CHECK(o.find('\x1b') == std::string::npos);
  CHECK(o.find('\r') == std::string::npos);
  CHECK(o.size() < 400);
  CHECK(ended_table(json{{"indexed", false}, {"jobs", json::array()}}).find("still reading") != std::string::npos);
}
