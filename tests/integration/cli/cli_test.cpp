// The coloc CLI against a real colocd: status, jobs, set, report (with an SVG checked by
// parsing it), run, and its errors (unreachable daemon, unknown job, not allowed).
#include <doctest/doctest.h>

#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../daemon/colocd_fixture.h"
#include "cli_helpers.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

constexpr uint64_t GiB = 1ull << 30;

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc: a clear error and a non-zero exit when the daemon is unreachable") {
  TempDir tmp("coloc-cli");
  Env e;
  e.set("COLOC_SOCKET", tmp / "nobody-home.sock");
  for (auto cmd : std::vector<std::vector<std::string>>{{"status"}, {"jobs"}, {"report", "x"}, {"set", "x", "--mem", "1G"}}) {
    cmd.insert(cmd.begin(), build_path("bin/coloc"));
    ProcResult r = run(cmd, e, 20s);
    CHECK(r.exit_code == 3);
    CHECK(r.err.find("cannot reach colocd at " + tmp / "nobody-home.sock") != std::string::npos);
  }
  // --socket wins over the environment.
  ProcResult r = run({build_path("bin/coloc"), "status", "--socket", tmp / "other.sock"}, e, 20s);
  CHECK(r.err.find("other.sock") != std::string::npos);
}

TEST_CASE("coloc: status, jobs, set, and report of a running and of an ended job") {
  Colocd d;
  // The job holds at `go` (not for a fixed time: the CLI calls below take longer than that on a
  // loaded sanitizer run) until the test has looked at it running and lowered its limit.
  const std::string go = d.dir() / "go";
  auto c = d.client({"--job", "cli-job", "--mem", "4GiB", "attach:1:10GiB:1GiB", "alloc:0:2GiB", "hold-file:" + go,
                     "alloc:0:1GiB", "status", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*c, "alloc"); }));

  ProcResult st = coloc_cli(d, {"status"});
  REQUIRE_MESSAGE(st.exit_code == 0, describe(st));
  CHECK(st.out.find("cli-job") != std::string::npos);
  CHECK(st.out.find("GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001") != std::string::npos);
  CHECK(st.out.find("4.00 GiB") != std::string::npos);
  ProcResult sj = coloc_cli(d, {"status", "--json"});
  json sjj = json::parse(sj.out);
  CHECK(sjj["jobs"][0]["in_use"] == 2 * GiB);
  ProcResult jobs = coloc_cli(d, {"jobs", "--json"});
  CHECK(json::parse(jobs.out)["jobs"][0]["job"] == "cli-job");
  CHECK(coloc_cli(d, {"jobs"}).out.find("running") != std::string::npos);

  // Lower the limit below what it uses: nothing is killed; its next allocation fails.
  ProcResult set = coloc_cli(d, {"set", "cli-job", "--mem", "1GiB", "--priority", "best-effort"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));
  CHECK(set.out.find("limit 1.00 GiB") != std::string::npos);
  CHECK(set.out.find("best-effort") != std::string::npos);

  ProcResult live = coloc_cli(d, {"report", "cli-job", "--json"});
  REQUIRE(live.exit_code == 0);
  CHECK(json::parse(live.out)["complete"] == false);

  write_file(go, "");
  ProcResult rc = c->wait(20s);
  REQUIRE_MESSAGE(rc.exit_code == 0, describe(rc));
  auto allocs = events_of(*c, "alloc");
  REQUIRE(allocs.size() == 2);
  CHECK(allocs[1]["ok"] == false);
  CHECK(allocs[1]["reason"] == "own-limit");
  CHECK(event_of(*c, "status")["slots"][0]["limit"] == GiB);  // the control page shows the new limit

  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/cli-job.json"); }));
  TempDir tmp("coloc-cli");
  ProcResult rep = coloc_cli(d, {"report", "cli-job", "--svg", tmp / "plot.svg"});
  REQUIRE_MESSAGE(rep.exit_code == 0, describe(rep));
  CHECK(rep.out.find("exit status 0") != std::string::npos);
  CHECK(rep.out.find("own-limit") != std::string::npos);
  CHECK(rep.out.find("Plot written to") != std::string::npos);
  ProcResult lint = run({"xmllint", "--noout", tmp / "plot.svg"}, Env(), 20s);
  CHECK_MESSAGE(lint.exit_code == 0, describe(lint));
  std::string svg = read_file(tmp / "plot.svg");
  CHECK(svg.find("<svg xmlns='http://www.w3.org/2000/svg'") != std::string::npos);
  CHECK(svg.find("job limit 1.00 GiB") != std::string::npos);
  CHECK(svg.find("OOM: own-limit") != std::string::npos);
  json fin = json::parse(coloc_cli(d, {"report", "cli-job", "--json"}).out);
  CHECK(fin["complete"] == true);
  CHECK(fin["priority"] == "best-effort");
}

TEST_CASE("coloc: unknown jobs and bad arguments") {
  Colocd d;
  ProcResult r = coloc_cli(d, {"set", "no-such-job", "--mem", "1GiB"});
  CHECK(r.exit_code == 4);
  CHECK(r.err.find("no running job 'no-such-job'") != std::string::npos);
  r = coloc_cli(d, {"report", "no-such-job"});
  CHECK(r.exit_code == 4);
  r = coloc_cli(d, {"set", "x", "--mem", "lots"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--mem 'lots'") != std::string::npos);
  r = coloc_cli(d, {"set", "x"});
  CHECK(r.exit_code == 2);
  r = coloc_cli(d, {"set", "x", "--priority", "urgent"});
  CHECK(r.exit_code == 2);
  r = coloc_cli(d, {"bogus"});
  CHECK(r.exit_code == 2);
  r = coloc_cli(d, {"report", "a b"});
  CHECK(r.exit_code == 2);
  r = coloc_cli(d, {"report", "no-such-job", "--svg", ""});  // an empty file name is an error, not ignored
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--svg needs a file name") != std::string::npos);
  // Every empty option value is a usage error naming the option, never "as if not given" (`run
  // --mem ''` would run with no limit and no reservation): for every command alike.
  struct Empty {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string marker = d.dir() / "ran";
  const std::vector<std::string> cmd = {"--", "/usr/bin/touch", marker};
  auto with_cmd = [&](std::vector<std::string> a) {
    a.insert(a.end(), cmd.begin(), cmd.end());
    return a;
  };
  for (const Empty& e : std::vector<Empty>{
           {with_cmd({"run", "--mem", ""}), "coloc: --mem '': empty size"},
           {with_cmd({"run", "--mem", "2GiB", "--priority", ""}), "coloc: --priority '': empty priority"},
           {with_cmd({"run", "--on-full", ""}), "coloc: --on-full '': empty value"},
           {with_cmd({"run", "--job", ""}), "coloc: --job '': empty job name"},
           {with_cmd({"run", "--mem", "1GiB", "--job="}), "--job"},  // (CLI11: "1 required TEXT missing")
           {with_cmd({"run", "--socket", ""}), "coloc: --socket '': empty path"},
           {{"set", "x", "--mem", ""}, "coloc: --mem '': empty size"},
           // 2^64-1 bytes is the protocol's no-limit marker: refused, as 2^64 is (it ran with no limit).
           {with_cmd({"run", "--mem", "18446744073709551615"}), "no-limit marker"},
           {with_cmd({"run", "--mem", "18446744073709551616"}), "size too large"},
           {{"set", "x", "--mem", "18446744073709551615"}, "no-limit marker"},
           {{"set", "x", "--priority", ""}, "coloc: --priority '': empty priority"},
           {{"status", "--socket", ""}, "coloc: --socket '': empty path"},
           {{"report", "x", "--svg", ""}, "coloc: --svg '': empty file name"},
       }) {
    std::string shown;
    for (const std::string& a : e.args) shown += "[" + a + "] ";
    CAPTURE(shown);
    ProcResult er = coloc_cli(d, e.args);
    CHECK(er.exit_code == 2);
    CHECK_MESSAGE(er.err.find(e.message) != std::string::npos, er.err);
  }
  CHECK_FALSE(file_exists(marker));  // none of the `coloc run`s ran its command
  // The command's own arguments reach it verbatim: empty ones, and ones that look like lists.
  if (file_exists(build_path("lib/libcoloc.so"))) {
    r = coloc_cli(d, {"run", "--", "/usr/bin/printf", "<%s>", "", "[1,2]", "[]", "[x]", "--mem", "--"});
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
    CHECK(r.out == "<><[1,2]><[]><[x]><--mem><-->");
  }
  // Every subcommand's help says its exit codes (once) and the socket option.
  for (std::vector<std::string> sub : std::vector<std::vector<std::string>>{
           {"run"}, {"status"}, {"jobs"}, {"report"}, {"set"}, {"pause"}, {"resume"}, {"policy"}, {"history"},
           {"history", "forget"}, {"estimate"}, {"doctor"}, {"top"}, {"anchor"}}) {
    CAPTURE(sub);
    sub.push_back("--help");
    ProcResult h = coloc_cli(d, sub);
    CHECK(h.exit_code == 0);
    CHECK(h.out.find("Usage") != std::string::npos);
    const size_t exit_line = h.out.find("Exit codes:");
    CHECK_MESSAGE(exit_line != std::string::npos, h.out);
    CHECK(h.out.find("Exit codes:", exit_line + 1) == std::string::npos);
    if (sub[0] != "estimate") CHECK(h.out.find("--socket") != std::string::npos);  // (estimate needs no colocd)
  }
  CHECK(coloc_cli(d, {"history", "--help"}).out.find("2 usage") != std::string::npos);  // history forget's 2 and 4 too
}

TEST_CASE("coloc: another user may not change a job, nor read its report") {
  if (::geteuid() != 0 || !::getpwnam("nobody")) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  Colocd d;
  auto c = d.client({"--job", "mine", "--mem", "4GiB", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  ProcResult r = coloc_as_nobody(d, {"set", "mine", "--mem", "1GiB"});
  CHECK(r.exit_code == 5);
  CHECK(r.err.find("not allowed") != std::string::npos);
  r = coloc_as_nobody(d, {"report", "mine"});
  CHECK(r.exit_code == 5);
  r = coloc_as_nobody(d, {"status"});  // reading the books is open to everyone
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("mine") != std::string::npos);
  CHECK(d.job("mine")["limit"] == 4 * GiB);
}

TEST_CASE("coloc run: sets the environment and execs the command") {
  Colocd d;
  if (!file_exists(build_path("lib/libcoloc.so"))) {
    MESSAGE("skipped: build/lib/libcoloc.so is not built");
    return;
  }
  ProcResult r = coloc_cli(d, {"run", "--mem", "2GiB", "--priority", "high", "--job", "envcheck", "--", "/usr/bin/env"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("COLOC_MEM_LIMIT=2147483648") != std::string::npos);
  CHECK(r.out.find("COLOC_PRIORITY=high") != std::string::npos);
  CHECK(r.out.find("COLOC_ON_FULL=wait") != std::string::npos);
  CHECK(r.out.find("COLOC_JOB=envcheck-") != std::string::npos);
  CHECK(r.out.find("COLOC_SOCKET=" + d.socket()) != std::string::npos);
  CHECK(r.out.find("libcoloc.so") != std::string::npos);
  // A job name made from a command whose name does not fit: a note names the one used.
  TempDir dir("coloc-cli-run");
  std::string odd = dir / "my env!";
  REQUIRE(::symlink("/usr/bin/env", odd.c_str()) == 0);
  ProcResult renamed = coloc_cli(d, {"run", "--", odd});
  REQUIRE_MESSAGE(renamed.exit_code == 0, describe(renamed));
  size_t at = renamed.out.find("COLOC_JOB=my_env_-");
  REQUIRE(at != std::string::npos);
  std::string id = renamed.out.substr(at + 10, renamed.out.find('\n', at) - at - 10);
  CHECK_MESSAGE(renamed.err.find("coloc: note: job name " + id + " (the command's name 'my env!'") != std::string::npos,
                renamed.err);
  CHECK(r.err.find("note") == std::string::npos);  // --job envcheck: nothing rewritten
  // The job id (with its random suffix) is said once, so it can be typed into coloc report; a
  // rewritten name's note names it instead.
  {
    size_t j = r.out.find("COLOC_JOB=envcheck-");
    std::string rid = r.out.substr(j + 10, r.out.find('\n', j) - j - 10);
    CHECK_MESSAGE(r.err.find("coloc: job " + rid + " (coloc status shows it; coloc report " + rid) != std::string::npos,
                  r.err);
    CHECK(renamed.err.find("coloc: job ") == std::string::npos);
  }
  // A limit below one CUDA context: said before the job starts.
  ProcResult small = coloc_cli(d, {"run", "--mem", "100MiB", "--", "/bin/true"});
  CHECK(small.exit_code == 0);
  CHECK(small.err.find("--mem 100.00 MiB is less than one CUDA context") != std::string::npos);
  CHECK(small.err.find("a CUDA context alone takes a few hundred MiB on real GPUs") != std::string::npos);
  ProcResult missing = coloc_cli(d, {"run", "--", "/no/such/program"});
  CHECK(missing.exit_code == 127);
  CHECK(missing.err.find("cannot run /no/such/program") != std::string::npos);
}

}  // TEST_SUITE

TEST_SUITE("cli") {

TEST_CASE("coloc report NAME without coloc run's suffix shows the newest job of that name; --help of a subcommand names --socket") {
  Colocd d;
  // Two runs of "nightly": the second is the newest (its report file is written later).
  ProcResult first = coloc_cli(d, {"run", "--job", "nightly", "--", "/bin/true"});
  REQUIRE_MESSAGE(first.exit_code == 0, describe(first));
  REQUIRE(wait_until([&] { return !d.status()["jobs"].size(); }, 10s));
  auto id_of = [](const ProcResult& r) {
    size_t at = r.err.find("coloc: job ");
    REQUIRE(at != std::string::npos);
    return r.err.substr(at + 11, r.err.find(' ', at + 11) - at - 11);
  };
  // (A command that uses no CUDA registers only coloc run's anchor: the job still gets a report.)
  const std::string id1 = id_of(first);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/" + id1 + ".json"); }, 10s));
  ProcResult second = coloc_cli(d, {"run", "--job", "nightly", "--", "/bin/true"});
  REQUIRE(second.exit_code == 0);
  const std::string id2 = id_of(second);
  REQUIRE(id1 != id2);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/" + id2 + ".json"); }, 10s));
  ProcResult by_name = coloc_cli(d, {"report", "nightly", "--json"});
  REQUIRE_MESSAGE(by_name.exit_code == 0, describe(by_name));
  CHECK(nlohmann::json::parse(by_name.out)["job"] == id2);
  ProcResult none = coloc_cli(d, {"report", "nosuchname"});
  CHECK(none.exit_code == 4);
  for (const char* sub : {"run", "status", "jobs", "report", "set"}) {
    ProcResult h = coloc_cli(d, {sub, "--help"});
    CHECK(h.out.find("--socket PATH") != std::string::npos);
  }
}

TEST_CASE("coloc run without a colocd says the job runs on its environment's limits, not that coloc status shows it") {
  Env e;
  e.set("COLOC_SOCKET", "/nonexistent/colocd.sock");
  ProcResult r = run({build_path("bin/coloc"), "run", "--job", "alone", "--", "/bin/true"}, e);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("coloc status shows it") == std::string::npos);
  CHECK(r.err.find("no colocd at /nonexistent/colocd.sock") != std::string::npos);
}

}  // TEST_SUITE
