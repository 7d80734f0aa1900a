// coloc pause / coloc resume against colocd (real processes, real sockets), seen on the clients'
// control pages: a pause closes the launch gate of every process of the job on every device and
// wakes nobody else's; resume opens them; who may pause and resume; a pause outlives a colocd
// restart; a client of protocol v5 (pages without gates) is served ungated and shown as such.
// What a closed gate does to a real CUDA job's launches: tests/integration/e2e/pause_test.cpp.
#include <doctest/doctest.h>

#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "coloc/pages.h"
#include "colocd_fixture.h"

using namespace coloc::test;
using coloc::proto::AdminOp;
using coloc::proto::AdminStatus;
using nlohmann::json;

namespace {

constexpr uint32_t kRun = uint32_t(coloc::pages::GateState::kRun);
constexpr uint32_t kPaused = uint32_t(coloc::pages::GateState::kPaused);

/// The n-th (0-based) "status" line of a client, or null.
json status_line(const Proc& p, size_t n) {
  auto all = events_of(p, "status");
  return n < all.size() ? all[n] : json();
}

/// The answer's JSON (the request must have succeeded).
json ok_json(const coloc::cli::Answer& a) {
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  return json::parse(a.text);
}

}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("colocd: pause closes every gate of the job's processes and only theirs; resume opens them") {
  Colocd d;
  const std::string go1 = d.dir() / "go1", go2 = d.dir() / "go2";
  auto a = d.client({"--job", "pj", "attach:1:10GiB:1GiB,2:10GiB:1GiB", "status", "hold-file:" + go1, "status",
                     "hold-file:" + go2, "status", "goodbye:0", "exit:0"});
  auto b = d.client({"--job", "pj", "attach:1:10GiB:1GiB", "hold-file:" + go1, "status", "hold-file:" + go2, "status",
                     "goodbye:0", "exit:0"});
  auto other = d.client({"--job", "other", "attach:1:10GiB:1GiB", "hold-file:" + go1, "status", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "status") && has_event(*b, "attach") && has_event(*other, "attach"); }));
  json before = status_line(*a, 0);
  CHECK(before["gate"] == kRun);
  REQUIRE(before["slots"].size() == 2);

  json paused = ok_json(d.ask(AdminOp::kPause, "pj"));
  CHECK(paused["compute_state"] == "paused");
  CHECK(paused["paused_by"] == "admin");  // the test runs as root
  CHECK(paused["was"].is_null());
  CHECK(d.job("pj")["compute_state"] == "paused");
  CHECK(d.job("pj")["state"] == "running");  // the memory state keeps its meaning
  CHECK(d.job("other")["compute_state"] == "running");

  write_file(go1, "");
  REQUIRE(wait_until([&] { return !status_line(*a, 1).is_null() && has_event(*b, "status") && has_event(*other, "status"); }));
  json during = status_line(*a, 1);
  CHECK(during["gate"] == kPaused);
  for (const json& s : during["slots"]) {  // both devices
    CHECK(s["gate"] == kPaused);
    CHECK(s["gate_seq"].get<uint32_t>() > 0);  // bumped: the waiters were woken
  }
  CHECK(status_line(*b, 0)["gate"] == kPaused);  // every process of the job
  CHECK(status_line(*other, 0)["gate"] == kRun);  // and no other job's
  CHECK(status_line(*other, 0)["slots"][0]["gate_seq"] == 0);

  json resumed = ok_json(d.ask(AdminOp::kResume, "pj"));
  CHECK(resumed["compute_state"] == "running");
  CHECK(resumed["was"] == "admin");
  CHECK(ok_json(d.ask(AdminOp::kResume, "pj"))["was"].is_null());  // not paused: nothing changes
  write_file(go2, "");
  for (Proc* p : {a.get(), b.get(), other.get()}) {
    ProcResult r = p->wait(10s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
  }
  json after = status_line(*a, 2);
  CHECK(after["gate"] == kRun);
  for (const json& s : after["slots"]) CHECK(s["gate"] == kRun);
  CHECK(status_line(*b, 1)["gate"] == kRun);
}

TEST_CASE("colocd: pause and resume of a job that does not exist, or without a job, are refused") {
  Colocd d;
  CHECK(d.ask(AdminOp::kPause, "nosuchjob").status == AdminStatus::kNotFound);
  CHECK(d.ask(AdminOp::kResume, "nosuchjob").status == AdminStatus::kNotFound);
  // No job name: malformed (the daemon drops the request; the CLI never sends it).
  auto a = d.ask(AdminOp::kPause, "");
  CHECK(a.kind != coloc::cli::Answer::Kind::kOk);
  CHECK(d.running());
}

TEST_CASE("colocd: owners pause and resume their own jobs; an admin's pause only an admin resumes") {
  struct passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || !nobody) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  Colocd d;
  auto root_job = d.client({"--job", "rootjob", "attach:1:10GiB:1GiB", "hold"});
  auto nobody_job = d.client({"--as-user", "nobody", "--job", "nobodyjob", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*root_job, "holding") && has_event(*nobody_job, "holding"); }));
  // Ask as nobody: the status (0 = ok, else 10 + AdminStatus).
  auto as_nobody = [&](AdminOp op, const std::string& job) {
    coloc::proto::AdminMsg m;
    std::memset(&m, 0, sizeof m);
    m.op = uint32_t(op);
    coloc::proto::set_string(m.job, job.c_str());
    return ask_as(d, nobody, m);
  };
  const uint32_t not_allowed = 10 + uint32_t(AdminStatus::kNotAllowed);
  CHECK(as_nobody(AdminOp::kPause, "rootjob") == not_allowed);  // not theirs
  CHECK(d.job("rootjob")["compute_state"] == "running");
  CHECK(as_nobody(AdminOp::kPause, "nobodyjob") == 0);  // their own
  CHECK(d.job("nobodyjob")["paused_by"] == "owner");
  CHECK(as_nobody(AdminOp::kResume, "nobodyjob") == 0);
  CHECK(d.job("nobodyjob")["compute_state"] == "running");
  // An admin pauses it: the owner cannot resume it, and pausing it again keeps it the admin's.
  ok_json(d.ask(AdminOp::kPause, "nobodyjob"));
  CHECK(as_nobody(AdminOp::kResume, "nobodyjob") == not_allowed);
  CHECK(as_nobody(AdminOp::kPause, "nobodyjob") == 0);
  CHECK(d.job("nobodyjob")["paused_by"] == "admin");
  CHECK(d.job("nobodyjob")["compute_state"] == "paused");
  json r = ok_json(d.ask(AdminOp::kResume, "nobodyjob"));
  CHECK(r["was"] == "admin");
  CHECK(d.job("nobodyjob")["compute_state"] == "running");
  root_job->kill(SIGKILL);
  nobody_job->kill(SIGKILL);
}

TEST_CASE("colocd restart: a paused job is still paused after colocd restarts, on the new pages too") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "pr", "--reconnect", "attach:1:10GiB:1GiB", "hold-file:" + go, "status", "goodbye:0",
                     "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "attach"); }));
  ok_json(d.ask(AdminOp::kPause, "pr"));
  // Saved at once (a pause outlives a daemon killed right after it).
  REQUIRE_MESSAGE(wait_until([&] {
                    json s = saved_job(d, "pr");
                    return !s.is_null() && s["paused"] == "admin";
                  }),
                  d.log());
  d.kill9();
  d.start();
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  CHECK(d.job("pr")["compute_state"] == "paused");
  write_file(go, "");
  ProcResult r = a->wait(10s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(event_of(*a, "status")["gate"] == kPaused);  // the restarted daemon's page
}

TEST_CASE("colocd: a pause holds when the job's only process drops its connection and registers again") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "pdrop", "attach:1:10GiB:1GiB", "hold-file:" + go, "rejoin", "status", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "attach"); }));
  ok_json(d.ask(AdminOp::kPause, "pdrop"));
  write_file(go, "");  // it hangs up (its job ends) and comes back as a new run of the same job
  REQUIRE(wait_until([&] { return has_event(*a, "reregistered"); }));
  ProcResult r = a->wait(10s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(event_of(*a, "status")["gate"] == kPaused);
}

TEST_CASE("colocd: a protocol v5 client has no gates: a pause leaves its page open, and status counts it ungated") {
  Colocd d;
  const std::string go = d.dir() / "go";
  auto old = d.client({"--proto", "5", "--job", "old", "attach:1:10GiB:1GiB", "hold-file:" + go, "status", "goodbye:0",
                       "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*old, "attach"); }));
  CHECK(event_of(*old, "registered")["layout"] == 3);
  CHECK(d.job("old")["ungated_processes"] == 1);
  ok_json(d.ask(AdminOp::kPause, "old"));
  write_file(go, "");
  ProcResult r = old->wait(10s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(event_of(*old, "status")["gate"] == kRun);
}
}
