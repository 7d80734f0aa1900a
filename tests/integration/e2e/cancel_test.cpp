// `coloc cancel` and `coloc jobs --all` end to end (issue 28) on one simulated device: a running
// job gets SIGTERM and its report says who cancelled it; a waiting job leaves the queue at once; a
// job that ignores SIGTERM gets SIGKILL after the grace; another user may not cancel it (exit 5);
// a job that has ended cannot be cancelled (exit 4); the ended jobs list newest first; bad
// arguments get one line naming the option.
#include <sys/stat.h>

#include "../daemon/as_user.h"
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The id colocd gave job `name` (coloc run's NAME-xxxxxx), once it shows.
std::string id_of(const Node& n, const std::string& name) {
  json j;
  REQUIRE(wait_until([&] {
    j = n.job(name);
    return !j.is_null();
  }));
  return j["job"].get<std::string>();
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("coloc cancel: a running job gets SIGTERM and ends, its report names who cancelled it, and a second cancel exits 4") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto p = n.run({"--job", "train"}, {cuprobe(), "init", "ctx", "0", "touch", n.file("up"), "hold-file", n.file("never")});
  REQUIRE(reached(*p, n.file("up")));
  const std::string id = id_of(n, "train");
  ProcResult c = n.cli({"cancel", id, "--json"});
  REQUIRE_MESSAGE(c.exit_code == 0, describe(c));
  json a = json::parse(c.out);
  CHECK(a["signal"] == SIGTERM);
  CHECK(a["grace_ms"] == 10000);
  CHECK(a["left_queue"] == false);
  // coloc run (the anchor) and the CUDA process, that one first: it runs until told, so the signal
  // reaches it; the anchor may end on the forwarded signal before its own (`ended`).
  REQUIRE(a["signalled"].size() == 2);
  CHECK(a["signalled"][0]["anchor"] == false);
  CHECK(!a["signalled"][0].contains("ended"));
  CHECK(a["signalled"][1]["anchor"] == true);
  ProcResult r = p->wait(20s);
  CHECK(!r.timed_out);
  CHECK(r.exit_code != 0);
  json rep = n.report(id);
  REQUIRE(rep["cancelled"].is_object());
  CHECK(rep["cancelled"]["by"] == "root");
  CHECK(rep["cancelled"]["signal"] == SIGTERM);
  // The report file shows a moment before the writer's index has it: until then the job is
  // simply not known (exit 4 either way).
  ProcResult again;
  CHECK_MESSAGE(wait_until([&] {
    again = n.cli({"cancel", id});
    return again.err.find("has ended") != std::string::npos;
  }), describe(again));
  CHECK_MESSAGE(again.exit_code == 4, describe(again));
  ProcResult none = n.cli({"cancel", "no-such-job"});
  CHECK_MESSAGE(none.exit_code == 4, describe(none));
}

TEST_CASE("coloc cancel: a job waiting for admission leaves the queue at once, and the job behind it is admitted") {
  if (simulated_only()) return;
  Node n("16GiB");  // 15.68 GiB usable
  auto big = n.run({"--job", "big", "--mem", "12GiB"},
                   {cuprobe(), "init", "ctx", "0", "touch", n.file("big-up"), "hold-file", n.file("big-go")});
  REQUIRE(reached(*big, n.file("big-up")));
  auto waiting = n.run({"--job", "waiting", "--mem", "8GiB"}, {cuprobe(), "init", "ctx", "0"});
  REQUIRE(n.wait_state("waiting", "admission-pending"));
  // Without a known footprint it is never backfilled: it waits behind `waiting` though it fits.
  auto behind = n.run({"--job", "behind"},
                      {cuprobe(), "init", "ctx", "0", "touch", n.file("behind-up"), "hold-file", n.file("behind-go")});
  REQUIRE(n.wait_state("behind", "admission-pending"));
  CHECK(n.job("behind")["queue"]["reason"] == "Queue");
  ProcResult c = n.cli({"cancel", id_of(n, "waiting"), "--json"});
  REQUIRE_MESSAGE(c.exit_code == 0, describe(c));
  CHECK(json::parse(c.out)["left_queue"] == true);
  // With `waiting` gone from the queue, `behind` is first in line, and fits.
  REQUIRE_MESSAGE(reached(*behind, n.file("behind-up")), n.status_text());
  ProcResult w = waiting->wait(20s);
  CHECK(w.exit_code != 0);
  write_file(n.file("big-go"), "");
  write_file(n.file("behind-go"), "");
  finish(*big);
  finish(*behind);
}

TEST_CASE("coloc cancel: a job that ignores SIGTERM gets SIGKILL after the grace") {
  if (simulated_only()) return;
  Node n("16GiB");
  const std::string script = "trap '' TERM; exec " + cuprobe() + " init ctx 0 touch " + n.file("up") + " hold-file " +
                             n.file("never");
  auto p = n.run({"--job", "stubborn"}, {"/bin/sh", "-c", script});
  REQUIRE(reached(*p, n.file("up")));
  const std::string id = id_of(n, "stubborn");
  ProcResult c = n.cli({"cancel", id, "--grace", "1s"});
  REQUIRE_MESSAGE(c.exit_code == 0, describe(c));
  CHECK_MESSAGE(c.out.find("SIGKILL to those still running after 1.0 s") != std::string::npos, c.out);
  ProcResult r = p->wait(30s);
  CHECK(!r.timed_out);
  json rep = n.report(id);
  INFO(rep["processes"].dump());
  bool killed = false;
  for (const json& proc : rep["processes"]) killed |= proc["signal"] == SIGKILL;
  CHECK(killed);
}

TEST_CASE("coloc cancel: another user may not cancel a job (exit 5); bad arguments name the option and change nothing") {
  if (simulated_only()) return;
  Who nobody_user;
  if (!nobody(&nobody_user)) return;
  Node n("16GiB");
  ::chmod(n.file("").c_str(), 0755);  // nobody reaches the socket
  ::chmod(n.file("run").c_str(), 0755);
  auto p = n.run({"--job", "mine"}, {cuprobe(), "init", "ctx", "0", "touch", n.file("up"), "hold-file", n.file("go")});
  REQUIRE(reached(*p, n.file("up")));
  const std::string id = id_of(n, "mine");
  Env env;
  env.set("COLOC_SOCKET", n.socket());
  ProcResult other = run_as(nobody_user, {build_path("bin/coloc"), "cancel", id}, env);
  CHECK_MESSAGE(other.exit_code == 5, describe(other));
  CHECK_MESSAGE(other.err.find("only root or the admin group may cancel other users' jobs") != std::string::npos, other.err);
  for (const auto& [args, option] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"cancel", id, "--grace", "-1"}, "--grace '-1'"},
           {{"cancel", id, "--grace", "2h"}, "--grace '2h': at most 1h"},
           {{"cancel", id, "--signal", "FOO"}, "--signal 'FOO'"},
           {{"jobs", "--all", "--since", "yesterday"}, "--since 'yesterday'"},
           {{"jobs", "--since", "2d"}, "--since and --user go with --all"}}) {
    ProcResult bad = n.cli(args);
    CHECK_MESSAGE(bad.exit_code == 2, describe(bad));
    CHECK_MESSAGE(bad.err.find(option) != std::string::npos, bad.err);
  }
  CHECK(n.job("mine")["state"] == "running");  // none of it touched the job
  write_file(n.file("go"), "");
  finish(*p);
}

TEST_CASE("coloc jobs --all: the jobs that ended, newest first, with their exit and peak; --user and --since filter them") {
  if (simulated_only()) return;
  Node n("16GiB");
  std::vector<std::string> ids;
  for (const char* name : {"first", "second", "third"}) {
    auto p = n.run({"--job", name}, {cuprobe(), "init", "ctx", "0", "alloc", "256MiB"});
    finish(*p);
    ids.push_back(n.report(name)["job"].get<std::string>());
  }
  json all;
  REQUIRE(wait_until([&] {
    ProcResult r = n.cli({"jobs", "--all", "--json"});
    all = json::parse(r.out, nullptr, false);
    return r.exit_code == 0 && all.is_object() && all["jobs"].size() == 3;
  }));
  CHECK(all["jobs"][0]["job"] == ids[2]);
  CHECK(all["jobs"][1]["job"] == ids[1]);
  CHECK(all["jobs"][2]["job"] == ids[0]);
  for (const json& j : all["jobs"]) {
    CHECK(j["user"] == "root");
    CHECK(j["exit_status"] == 0);
    CHECK(j["peak"].get<uint64_t>() >= 256 * MiB);
    CHECK(j["command"].get<std::string>().find("cuprobe") != std::string::npos);
  }
  CHECK(json::parse(n.cli({"jobs", "--all", "--json", "--user", "nobody"}).out)["jobs"].empty());
  CHECK(json::parse(n.cli({"jobs", "--all", "--json", "--user", "0", "--since", "1h"}).out)["jobs"].size() == 3);
  ProcResult table = n.cli({"jobs", "--all"});
  CHECK(table.exit_code == 0);
  CHECK_MESSAGE(table.out.find("WAITED") != std::string::npos, table.out);
  CHECK_MESSAGE(table.out.find(ids[0]) != std::string::npos, table.out);
}

}  // TEST_SUITE
