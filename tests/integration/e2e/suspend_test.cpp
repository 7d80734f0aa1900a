// Suspension end to end (issue 29): colocd suspends a best-effort job to host memory through the
// checkpoint helper when a high job waits for memory (preempt), the high job is admitted once the
// suspension is done, and the suspended job is restored when the high job ends and finishes with
// its device data intact (coloc-train --check-data, the digest of a run never suspended); the
// preflight keeps a job that used managed memory from ever being locked; `coloc suspend` and
// `coloc resume` by hand, and their errors.
#include <doctest/doctest.h>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// A best-effort coloc-train job with `mib` MiB of patterned memory checked every iteration, long
/// enough (~10 s) for a high job to arrive while it runs.
std::vector<std::string> train(int mib, int iters = 200) {
  return {build_path("bin/coloc-train"), "--gpu-util", "30", "--iter-ms", "50", "--iters", std::to_string(iters),
          "--check-data", std::to_string(mib), "--progress"};
}

/// The last JSON line a command printed (coloc-train's outcome).
json outcome(const ProcResult& r) {
  json last = nullptr;
  for (const json& l : lines(r.out)) last = l;
  return last;
}

/// Where `needle` first appears in colocd's log (npos when it does not).
size_t log_at(const Node& n, const std::string& needle) { return n.log().find(needle); }

std::string ckpt_state(const Node& n, long pid) {
  ProcResult r = run({build_path("bin/coloc-ckpt"), "--json", "state", std::to_string(pid)}, n.base_env(), 20s);
  json j = json::parse(r.out, nullptr, false);
  return j.is_object() && !j["processes"].empty() ? j["processes"][0].value("state", std::string("?")) : r.out;
}

}  // namespace

TEST_SUITE("e2e") {
TEST_CASE("preemption: a high job waiting for memory suspends a best-effort job, starts, and the job resumes intact") {
  if (simulated_only()) return;
  // 4 GiB: each best-effort job holds ~1.6 GiB (its context's 512 MiB and 1100 MiB of data); the
  // high job reserves 1.5 GiB, which fits only once one of them is off the device.
  Node n("4GiB", {"--preempt", "best-effort", "--preempt-min-run", "0s"});
  auto be1 = n.run({"--job", "be1", "--priority", "best-effort"}, train(1100));
  auto be2 = n.run({"--job", "be2", "--priority", "best-effort"}, train(1100));
  REQUIRE_MESSAGE(wait_until([&] {
    json a = n.job("be1"), b = n.job("be2");
    return !a.is_null() && !b.is_null() && a["in_use"].get<uint64_t>() >= 1100 * MiB &&
           b["in_use"].get<uint64_t>() >= 1100 * MiB;
  }, 60s), n.status_text());
  const std::string ready = n.file("high-ready"), go = n.file("high-go");
  auto high = n.run({"--job", "high", "--priority", "high", "--mem", "1500MiB"},
                    {client(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", ready, "hold-file", go});
  REQUIRE_MESSAGE(wait_until([&] { return file_exists(ready); }, 60s), n.log());
  // One best-effort job is suspended (the youngest: be2, unless be1 registered later), the other runs.
  json j1 = n.job("be1"), j2 = n.job("be2");
  const int suspended = (j1["state"] == "suspended") + (j2["state"] == "suspended");
  CHECK_MESSAGE(suspended == 1, n.status_text());
  const json& victim = j1["state"] == "suspended" ? j1 : j2;
  REQUIRE(victim["suspension"].is_object());
  CHECK(victim["suspension"]["by"] == "preempt");
  CHECK(victim["suspension"]["bytes"].get<uint64_t>() >= 1100 * MiB);
  CHECK(victim["granted"] == 0);  // its memory is off the device's books
  CHECK(ckpt_state(n, victim["pids"][0].get<long>()) == "checkpointed");
  // The order: the suspension was done before the high job was admitted.
  const size_t suspended_at = log_at(n, "suspended in"), admitted_at = log_at(n, "job 0:" + n.job("high")["job"].get<std::string>() + " admitted");
  CHECK_MESSAGE(suspended_at != std::string::npos, n.log());
  CHECK_MESSAGE(admitted_at != std::string::npos, n.log());
  CHECK_MESSAGE(suspended_at < admitted_at, n.log());
  // Its restore waits while the high job holds the room.
  CHECK(n.job(victim["job"].get<std::string>())["state"] == "suspended");

  write_file(go, "");
  ProcResult h = finish(*high);
  CHECK_MESSAGE(h.exit_code == 0, describe(h));
  ProcResult r1 = finish(*be1, 120s), r2 = finish(*be2, 120s);
  REQUIRE_MESSAGE(r1.exit_code == 0, describe(r1));
  REQUIRE_MESSAGE(r2.exit_code == 0, describe(r2));
  const json o1 = outcome(r1), o2 = outcome(r2);
  CHECK(o1["data_check"]["mismatches"] == 0);
  CHECK(o2["data_check"]["mismatches"] == 0);
  CHECK(o1["data_check"]["checks"] == 200);
  // The suspended job computed what the one never suspended did.
  CHECK(o1["data_check"]["digest"] == o2["data_check"]["digest"]);
  CHECK_MESSAGE(log_at(n, "restored in") != std::string::npos, n.log());
}

TEST_CASE("preemption: a job that used managed memory is not suspendable; another is chosen and it is never locked") {
  if (simulated_only()) return;
  Node n("4GiB", {"--preempt", "best-effort", "--preempt-min-run", "0s"});
  const std::string mready = n.file("m-ready"), mgo = n.file("m-go"), pready = n.file("p-ready"), pgo = n.file("p-go");
  auto managed = n.run({"--job", "mg", "--priority", "best-effort", "--mem", "1800MiB"},
                       {client(), "init", "ctx", "0", "managed", "64MiB", "m", "touch", mready, "hold-file", mgo});
  REQUIRE(wait_until([&] { return file_exists(mready); }, 60s));
  auto plain = n.run({"--job", "pl", "--priority", "best-effort", "--mem", "1800MiB"},
                     {client(), "init", "ctx", "0", "alloc", "256MiB", "a", "touch", pready, "hold-file", pgo});
  REQUIRE(wait_until([&] { return file_exists(pready); }, 60s));
  json mg = n.job("mg");
  CHECK(mg["suspendable"] == false);
  CHECK(mg["not_suspendable"].get<std::string>().find("managed memory") != std::string::npos);
  CHECK(n.job("pl")["suspendable"] == true);
  // By hand too: not suspended, and why (exit 1).
  ProcResult r = n.cli({"suspend", mg["job"].get<std::string>()});
  CHECK(r.exit_code == 1);
  CHECK_MESSAGE(r.out.find("managed memory") != std::string::npos, describe(r));

  const std::string hready = n.file("h-ready"), hgo = n.file("h-go");
  auto high = n.run({"--job", "high", "--priority", "high", "--mem", "1500MiB"},
                    {client(), "init", "ctx", "0", "touch", hready, "hold-file", hgo});
  REQUIRE_MESSAGE(wait_until([&] { return file_exists(hready); }, 60s), n.log());
  CHECK(n.job("pl")["state"] == "suspended");
  mg = n.job("mg");
  CHECK(mg["state"] == "running");
  CHECK(ckpt_state(n, mg["pids"][0].get<long>()) == "running");  // never locked
  CHECK_MESSAGE(n.log().find("is not suspendable: process " + std::to_string(mg["pids"][0].get<long>()) +
                             " used managed memory") != std::string::npos,
                n.log());
  write_file(hgo, "");
  CHECK(finish(*high).exit_code == 0);
  REQUIRE(n.wait_state("pl", "running", 60s));
  write_file(pgo, "");
  write_file(mgo, "");
  CHECK(finish(*plain).exit_code == 0);
  CHECK(finish(*managed).exit_code == 0);
}

TEST_CASE("coloc suspend and coloc resume: by hand, the job waits for coloc resume; errors say why") {
  if (simulated_only()) return;
  Node n("4GiB", {"--preempt", "off"});
  auto job = n.run({"--job", "hand", "--priority", "best-effort"}, train(256, 120));
  REQUIRE(wait_until([&] {
    json j = n.job("hand");
    return !j.is_null() && j["in_use"].get<uint64_t>() >= 256 * MiB;
  }, 60s));
  const std::string id = n.job("hand")["job"];
  ProcResult r = n.cli({"suspend", id});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r), n.log());
  CHECK(r.out.find("suspended") != std::string::npos);
  json j = n.job("hand");
  CHECK(j["state"] == "suspended");
  CHECK(j["suspension"]["by"] == "admin");  // root
  CHECK(j["suspension"]["restore_held"] == true);
  CHECK(j["in_use"] == 0);
  // A second suspend, an unknown job: clear errors, nothing changes.
  r = n.cli({"suspend", id});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("was already suspended") != std::string::npos);
  CHECK(n.cli({"suspend", "no-such-job"}).exit_code == 4);
  // The room is there, but a suspension by hand waits for coloc resume.
  CHECK(n.job("hand")["state"] == "suspended");
  r = n.cli({"resume", id, "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json a = json::parse(r.out);
  CHECK(a["ended"] == json::array({"suspension"}));
  REQUIRE(n.wait_state("hand", "running", 60s));
  ProcResult done = finish(*job, 120s);
  REQUIRE_MESSAGE(done.exit_code == 0, describe(done));
  CHECK(outcome(done)["data_check"]["mismatches"] == 0);
  CHECK(outcome(done)["data_check"]["checks"] == 120);
}
}
