// End-to-end: one `coloc run` is one job, however many processes its command runs one after the
// other (`bash -c "step 1; step 2"`). coloc run registers with colocd as the job's anchor before it
// starts the command, so the job id, its limit and priority (and a `coloc set` change), and its
// reservation on the device live as long as coloc run does: between the steps no other job is
// admitted into the reservation, and the one report records the command's exit status. Also:
// signals sent to coloc run reach the command, and `coloc report ID.N` / `ID.json` name one report.
#include <filesystem>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The file names in the node's reports directory that belong to job `id`.
std::vector<std::string> report_files(const Node& n, const std::string& id) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(n.state() + "/reports", ec)) {
    std::string f = e.path().filename();
    if (f.rfind(id, 0) == 0) out.push_back(f);
  }
  return out;
}

/// The job id coloc run announced on stderr ("coloc: job NAME-xxxxxx (...").
std::string announced_id(Proc& p) {
  std::string id;
  wait_until([&] {
    std::string err = p.err_so_far();
    size_t at = err.find("coloc: job ");
    if (at == std::string::npos) return false;
    size_t end = err.find(' ', at + 11);
    if (end == std::string::npos) return false;
    id = err.substr(at + 11, end - at - 11);
    return true;
  }, 20s, 5ms);
  return id;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: a multi-step coloc run is one job: its id, a coloc set, its reservation and its exit status last across the steps") {
  if (simulated_only()) return;
  Node n("16GiB");
  // Step 1 holds 1 GiB until told to go on; between the steps the command waits for another file
  // (no process of the job has a context then); step 2 allocates; then the command exits 7.
  const std::string script =
      cuprobe() + " init ctx 0 alloc 1GiB a touch " + n.file("s1-ready") + " hold-file " + n.file("s1-go") +
      "; touch " + n.file("between") + "; while [ ! -e " + n.file("s2-go") + " ]; do sleep 0.01; done; " + cuprobe() +
      " init ctx 0 alloc 2GiB b; exit 7";
  auto job = n.run({"--mem", "10GiB", "--job", "MS"}, {"bash", "-c", script});
  const std::string id = announced_id(*job);
  REQUIRE_MESSAGE(id.rfind("MS-", 0) == 0, job->err_so_far());
  REQUIRE(reached(*job, n.file("s1-ready")));

  // The admin lowers the job's limit (and priority) during step 1.
  ProcResult set = n.cli({"set", id, "--mem", "9GiB", "--priority", "best-effort"});
  REQUIRE_MESSAGE(set.exit_code == 0, describe(set));

  // Another job that needs more than is left waits for admission.
  auto other = n.run({"--mem", "8GiB", "--job", "other"}, {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "x"});
  REQUIRE_MESSAGE(n.wait_state("other", "admission-pending"), n.status_text(), n.log());

  // Step 1 ends. Once colocd has seen it go (nothing granted to the job any more; without an
  // anchor the job would be gone), the job is still there with its reservation, and the other
  // job still waits.
  write_file(n.file("s1-go"), "");
  REQUIRE(reached(*job, n.file("between")));
  REQUIRE_MESSAGE(wait_until([&] {
    json j = n.job(id);
    return j.is_null() || j["granted"] == 0;
  }, 20s, 5ms), n.status_text());
  json s = n.status();
  json mine = n.job(id);
  REQUIRE_MESSAGE(!mine.is_null(), s.dump(1));
  CHECK(mine["job"] == id);
  CHECK(mine["limit"] == 9 * GiB);
  CHECK(mine["priority"] == "best-effort");
  CHECK(mine["reserved"] == 9 * GiB);
  CHECK(mine["pids"].size() == 0);  // coloc run, the anchor, is not one of its processes
  CHECK(s["devices"][0]["committed"] == 9 * GiB);
  CHECK(n.job("other")["state"] == "admission-pending");

  // Step 2: the same job, with the admin's limit and priority, admitted into its reservation.
  write_file(n.file("s2-go"), "");
  ProcResult r = job->wait(60s);
  INFO(describe(r));
  CHECK(r.exit_code == 7);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK(n.log().find("registered as job " + std::to_string(::getuid()) + ":" + id +
                     " (limit 9216.0 MiB, priority best-effort") != std::string::npos);
  finish(*other);

  json rep = n.report(id);
  CHECK(rep["job"] == id);
  CHECK(rep["exit_status"] == 7);
  CHECK(rep["limit"] == 9 * GiB);
  CHECK(rep["processes"].size() == 2);  // both steps' cuprobes
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["peak"] == 2 * GiB + kContext);
  std::vector<std::string> files = report_files(n, id);
  CHECK_MESSAGE(files.size() == 1, files.size());
  ProcResult shown = n.cli({"report", id});
  CHECK(shown.exit_code == 0);
  CHECK(shown.out.find("exit status 7") != std::string::npos);
  // The other job was admitted only after this one ended.
  json orep = n.report("other");
  CHECK(orep["devices"][0]["wait_admission_s"].get<double>() > 0);
}

TEST_CASE("e2e: coloc run registers its anchor again after a colocd restart and the job keeps its reservation between steps") {
  if (simulated_only()) return;
  Node n("16GiB");
  const std::string script =
      cuprobe() + " init ctx 0 alloc 1GiB a touch " + n.file("s1-ready") + " hold-file " + n.file("s1-go") +
      "; touch " + n.file("between") + "; while [ ! -e " + n.file("s2-go") + " ]; do sleep 0.01; done; " + cuprobe() +
      " init ctx 0 alloc 2GiB b; exit 7";
  auto job = n.run({"--mem", "10GiB", "--job", "MR"}, {"bash", "-c", script});
  const std::string id = announced_id(*job);
  REQUIRE(reached(*job, n.file("s1-ready")));
  n.kill_daemon();
  n.start_daemon();
  // Both come back: the anchor (coloc run) and step 1's process.
  REQUIRE_MESSAGE(wait_until([&] {
    const std::string log = n.log();
    json j = n.job(id);
    return log.find("registered again (the job's anchor) as job") != std::string::npos && !j.is_null() &&
           j["pids"].size() == 1;
  }, 30s, 10ms), n.log());
  write_file(n.file("s1-go"), "");
  REQUIRE(reached(*job, n.file("between")));
  REQUIRE_MESSAGE(wait_until([&] {
    json j = n.job(id);
    return j.is_null() || j["granted"] == 0;
  }, 20s, 5ms), n.status_text());
  json mine = n.job(id);
  REQUIRE_MESSAGE(!mine.is_null(), n.status_text(), n.log());
  CHECK(mine["reserved"] == 10 * GiB);
  CHECK(n.status()["devices"][0]["committed"] == 10 * GiB);
  write_file(n.file("s2-go"), "");
  ProcResult r = job->wait(60s);
  INFO(describe(r));
  CHECK(r.exit_code == 7);
  json rep = n.report(id);
  CHECK(rep["exit_status"] == 7);
  CHECK(report_files(n, id).size() == 1);
}

TEST_CASE("e2e: a colocd restart between two steps of a coloc run keeps the job, its coloc set and its one report") {
  if (simulated_only()) return;
  Node n("16GiB");
  const std::string script =
      cuprobe() + " init ctx 0 alloc 1GiB a; touch " + n.file("between") + "; while [ ! -e " + n.file("s2-go") +
      " ]; do sleep 0.01; done; " + cuprobe() + " init ctx 0 alloc 2GiB b; exit 7";
  auto job = n.run({"--mem", "10GiB", "--job", "MB"}, {"bash", "-c", script});
  const std::string id = announced_id(*job);
  REQUIRE(reached(*job, n.file("between")));
  REQUIRE(n.cli({"set", id, "--mem", "9GiB"}).exit_code == 0);
  // colocd has seen step 1 go, and saved the job with its new limit (at the set).
  REQUIRE(wait_until([&] {
    json j = n.job(id);
    return !j.is_null() && j["granted"] == 0;
  }, 20s, 5ms));
  n.kill_daemon();
  n.start_daemon();
  REQUIRE_MESSAGE(wait_until([&] { return n.log().find("registered again (the job's anchor) as job") != std::string::npos; },
                             30s, 10ms),
                  n.log());
  write_file(n.file("s2-go"), "");
  ProcResult r = job->wait(60s);
  INFO(describe(r));
  CHECK(r.exit_code == 7);
  CHECK(step(r.out, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  json rep = n.report(id);
  CHECK(rep["exit_status"] == 7);
  CHECK(rep["limit"] == 9 * GiB);
  CHECK(rep["ended_while_daemon_away"] == false);
  CHECK(rep["processes"].size() == 2);
  CHECK(report_files(n, id).size() == 1);
}

TEST_CASE("e2e: a signal sent to coloc run reaches its command; coloc run ends as the command did") {
  if (simulated_only()) return;
  Node n("16GiB");
  // The command traps SIGINT and exits 42 from the trap; it says when the trap is set.
  const std::string script = "trap 'exit 42' INT; touch " + n.file("trap-set") + "; while :; do sleep 0.01; done";
  auto job = n.run({"--job", "sig"}, {"bash", "-c", script});
  const std::string id = announced_id(*job);
  REQUIRE(reached(*job, n.file("trap-set")));
  job->kill(SIGINT);
  ProcResult r = job->wait(30s);
  INFO(describe(r));
  CHECK(r.exit_code == 42);
  // No process of the job used CUDA: the job was only its anchor, and its report says so.
  json rep = n.report(id);
  CHECK(rep["exit_status"] == 42);
  CHECK(rep["processes"].size() == 0);

  // A command killed by a signal: coloc run ends by the same signal (as when it exec'd the
  // command), and the report says 128 + the signal.
  auto killed = n.run({"--job", "killed"}, {"bash", "-c", "kill -TERM $$"});
  const std::string killed_id = announced_id(*killed);
  ProcResult k = killed->wait(30s);
  INFO(describe(k));
  CHECK(k.signal == SIGTERM);
  CHECK(n.report(killed_id)["exit_status"] == 128 + SIGTERM);
}

TEST_CASE("e2e: coloc report names each report of a job id: ID, ID.2, ID.json, and says that others exist") {
  if (simulated_only()) return;
  Node n("16GiB");
  // The same job id twice (COLOC_JOB without coloc run's anchor, as a user's own launcher does).
  for (int i = 1; i <= 2; ++i) {
    Env e = n.base_env();
    e.preload_coloc();
    e.set("COLOC_JOB", "twice");
    ProcResult r = run({cuprobe(), "init", "ctx", "0", "alloc", std::to_string(i) + "GiB", "a", "exit", std::to_string(i)},
                       e, 60s);
    REQUIRE_MESSAGE(r.exit_code == i, describe(r));
    REQUIRE(wait_until([&] { return report_files(n, "twice").size() == size_t(i); }, 20s, 5ms));
  }
  ProcResult newest = n.cli({"report", "twice", "--json"});
  REQUIRE_MESSAGE(newest.exit_code == 0, describe(newest));
  json j = json::parse(newest.out);
  CHECK(j["exit_status"] == 2);
  CHECK(j["report_name"] == "twice.2");
  CHECK(j["other_reports"] == json::array({"twice"}));
  ProcResult table = n.cli({"report", "twice"});
  CHECK(table.out.find("other reports of this job id: twice") != std::string::npos);

  for (const char* name : {"twice.json", "twice.1"}) {
    CAPTURE(name);
    ProcResult first = n.cli({"report", name, "--json"});
    REQUIRE_MESSAGE(first.exit_code == 0, describe(first));
    CHECK(json::parse(first.out)["exit_status"] == 1);
  }
  for (const char* name : {"twice.2", "twice.2.json"}) {
    CAPTURE(name);
    ProcResult second = n.cli({"report", name, "--json"});
    REQUIRE_MESSAGE(second.exit_code == 0, describe(second));
    CHECK(json::parse(second.out)["exit_status"] == 2);
  }
  CHECK(n.cli({"report", "twice.3"}).exit_code == 4);
}

}  // TEST_SUITE
