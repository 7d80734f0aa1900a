// Priority is granted (protocol v8), seen from the user's side: `coloc run --priority high` as a
// user who may not have it runs as normal with exactly one warning, and hands the granted
// priority to the command (COLOC_PRIORITY), whose CUDA processes neither ask again nor warn; root
// and members of the high-priority group get high; a process under libcoloc.so alone that asks
// for high (COLOC_PRIORITY=high) warns once on stderr (a forked child says nothing more). And the priority
// policy: `coloc policy DEVICE priority [--target-slowdown N%]`, shown by coloc policy, status and
// --json, saved and restored (an older policies.json without a target loads with the default).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "../daemon/as_user.h"
#include "../daemon/colocd_fixture.h"
#include "cli_helpers.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

const std::string kDev1 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001";

/// The device entry of status for `uuid` (null when none).
json device_of(const Colocd& d, const std::string& uuid) {
  const json s = d.status();
  for (const json& dev : s["devices"])
    if (dev["uuid"] == uuid) return dev;
  return nullptr;
}

/// The job of `jobs` (coloc jobs --json) whose id starts with `name` + "-", or null.
json job_named(const json& jobs, const std::string& name) {
  for (const json& j : jobs["jobs"])
    if (j["job"].get<std::string>().rfind(name + "-", 0) == 0) return j;
  return nullptr;
}

/// Whether `text` has the line `line`.
bool has_line(const std::string& text, const std::string& line) {
  return text.rfind(line + "\n", 0) == 0 || text.find("\n" + line + "\n") != std::string::npos;
}

/// The line of `text` that holds `needle` ("" when none).
std::string line_with(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  size_t start = text.rfind('\n', at);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, text.find('\n', at) - start);
}

/// A place every user may write: the command's files and its simgpu state.
struct Scratch {
  TempDir dir{"coloc-priority"};
  Scratch() { ::chmod(dir.path().c_str(), 0777); }
  std::string operator/(const std::string& rel) const { return dir / rel; }
};

/// `coloc run --sim --priority P --job NAME -- sh -c '...'`: the command records its environment,
/// runs a CUDA process (cuprobe: registers, makes a context) and records `coloc jobs --json`.
std::vector<std::string> run_args(const Scratch& s, const std::string& priority, const std::string& name) {
  const std::string script = "env > " + s / (name + ".env") + " && " + build_path("tests/bin/cuprobe") +
                             " init ctx > " + s / (name + ".probe") + " && " + build_path("bin/coloc") +
                             " jobs --json > " + s / (name + ".jobs");
  return {build_path("bin/coloc"), "run", "--sim", "--priority", priority, "--job", name, "--", "/bin/sh", "-c", script};
}

Env run_env(const Colocd& d, const Scratch& s) {
  Env e = d.env();
  e.set("SIMGPU_STATE_DIR", s / "simgpu").set("SIMGPU_DEVICES", "16GiB");
  return e;
}

bool coloc_built() {
  if (file_exists(build_path("lib/libcoloc.so")) && file_exists(build_path("tests/bin/cuprobe"))) return true;
  MESSAGE("skipped: libcoloc.so or cuprobe is not built");
  return false;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc run --priority high as a user: runs as normal, one warning, and the command's processes do not ask again") {
  Who user;
  if (!nobody(&user) || !coloc_built() || real_driver()) return;
  auto groups = spare_groups();
  if (groups.empty()) return;
  Colocd d({"--admin-group", groups[0].first, "--high-priority-group", groups[1].first});
  Scratch s;
  ProcResult r = run_as(user, run_args(s, "high", "hp"), run_env(d, s));
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  // Exactly one warning, naming who may have high and what the job runs as.
  CHECK_MESSAGE(count_of(r.err, "coloc: warning: priority high is for root and the groups " + groups[0].first + " and " +
                                    groups[1].first + "; job hp-") == 1,
                r.err);
  CHECK_MESSAGE(count_of(r.err, " runs as normal") == 1, r.err);
  CHECK_MESSAGE(count_of(r.err, "priority high is for") == 1, r.err);  // libcoloc.so said nothing more
  CHECK(r.out.find("priority") == std::string::npos);                  // never on stdout
  // The command got the granted priority, and its CUDA process registered with it.
  const std::string env = read_file(s / "hp.env");
  CHECK_MESSAGE(has_line(env, "COLOC_PRIORITY=normal"), env);
  CHECK(env.find("COLOC_PRIORITY=high") == std::string::npos);
  CHECK_MESSAGE(line_with(read_file(s / "hp.probe"), "\"step\":\"ctx\"").find("\"rc\":0,") != std::string::npos,
                read_file(s / "hp.probe"));
  json job = job_named(json::parse(read_file(s / "hp.jobs")), "hp");
  REQUIRE(job.is_object());
  CHECK(job["priority"] == "normal");
  CHECK(job["uid"] == user.uid);
  // colocd logged the one request for high: the anchor's (the CUDA process asked for normal).
  CHECK_MESSAGE(count_of(d.log(), "asked for priority high") == 1, d.log());

  // A lower priority is anyone's: no warning.
  r = run_as(user, run_args(s, "best-effort", "be"), run_env(d, s));
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.err.find("warning") == std::string::npos);
  CHECK(has_line(read_file(s / "be.env"), "COLOC_PRIORITY=best-effort"));
  CHECK(job_named(json::parse(read_file(s / "be.jobs")), "be")["priority"] == "best-effort");
}

TEST_CASE("coloc run --priority high: root and members of --high-priority-group run as high, without a warning") {
  Who user;
  if (!nobody(&user) || !coloc_built() || real_driver()) return;
  auto groups = spare_groups();
  if (groups.empty()) return;
  Colocd d({"--high-priority-group", groups[1].first});
  Scratch s;
  ProcResult r = run(run_args(s, "high", "rt"), run_env(d, s));  // as root
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.err.find("warning") == std::string::npos, r.err);
  CHECK(has_line(read_file(s / "rt.env"), "COLOC_PRIORITY=high"));
  CHECK(job_named(json::parse(read_file(s / "rt.jobs")), "rt")["priority"] == "high");

  Who member = user;
  member.groups = {groups[1].second};
  r = run_as(member, run_args(s, "high", "mb"), run_env(d, s));
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.err.find("warning") == std::string::npos, r.err);
  CHECK(has_line(read_file(s / "mb.env"), "COLOC_PRIORITY=high"));
  json job = job_named(json::parse(read_file(s / "mb.jobs")), "mb");
  CHECK(job["priority"] == "high");
  CHECK(job["uid"] == user.uid);
  CHECK(d.log().find("asked for priority high") == std::string::npos);

  // Without the group, with no admin group configured: the warning says root alone.
  Scratch t;
  r = run_as(user, run_args(t, "high", "nm"), run_env(d, t));
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(count_of(r.err, "coloc: warning: priority high is for root and the group " + groups[1].first + "; job nm-") == 1,
                r.err);
}

TEST_CASE("libcoloc.so asking COLOC_PRIORITY=high without coloc run: one warning on stderr, none from a forked child") {
  Who user;
  if (!nobody(&user) || !coloc_built() || real_driver()) return;
  Colocd d;
  Scratch s;
  Env e = d.env();
  e.simgpu(s.dir, "16GiB").preload_coloc().set("COLOC_PRIORITY", "high").set("COLOC_JOB", "hp-lib");
  ProcResult r = run_as(user, {build_path("tests/bin/cuprobe"), "init", "fork", "ctx"}, e);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  const std::string warning =
      "COLOC_PRIORITY=high: priority high is for root and the members of colocd's admin and high-priority groups; "
      "job hp-lib runs as normal";
  CHECK_MESSAGE(count_of(r.err, warning) == 1, r.err);
  CHECK_MESSAGE(count_of(r.err, "priority high is for") == 1, r.err);
  CHECK(r.out.find(warning) == std::string::npos);  // never on stdout
  // The process went on (its child too: the driver refuses a forked child, as CUDA does, and
  // nothing more is said).
  CHECK_MESSAGE(line_with(r.out, "\"step\":\"ctx\"").find("\"rc\":0,") != std::string::npos, r.out);
  CHECK_MESSAGE(r.out.find("\"child_exit\":0") != std::string::npos, r.out);
  CHECK(count_of(d.log(), "asked for priority high") >= 1);
  // Asked for normal: nothing said.
  e.set("COLOC_PRIORITY", "normal").set("COLOC_JOB", "n-lib");
  r = run_as(user, {build_path("tests/bin/cuprobe"), "init"}, e);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.err.find("priority high is for") == std::string::npos);
  // As root it is granted: nothing said either.
  e.set("COLOC_PRIORITY", "high").set("COLOC_JOB", "r-lib");
  r = run({build_path("tests/bin/cuprobe"), "init"}, e);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.err.find("priority high is for") == std::string::npos);
}

TEST_CASE("coloc policy DEVICE priority: the target slowdown (default 5%), shown, saved, and kept across a restart") {
  Colocd d;
  auto c = d.client({"--job", "pj", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  json dev = device_of(d, kDev1);
  REQUIRE(dev.is_object());
  const std::string index = dev["index"].dump();

  ProcResult r = coloc_cli(d, {"policy", index, "priority"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find(kDev1 + ": priority, target slowdown 5% (was share)") != std::string::npos, r.out);
  CHECK(device_of(d, kDev1)["policy"] == json{{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 5}});

  r = coloc_cli(d, {"policy", index, "priority", "--target-slowdown", "10%", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json answer = json::parse(r.out);
  REQUIRE(answer["devices"].size() == 1);
  CHECK(answer["devices"][0]["policy"]["target_pct"] == 10);
  CHECK(answer["devices"][0]["was"]["target_pct"] == 5);

  r = coloc_cli(d, {"policy", kDev1, "priority", "--target-slowdown", "20"});  // a bare number is percent
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find("priority, target slowdown 20% (was priority, target slowdown 10%)") != std::string::npos, r.out);
  CHECK(device_of(d, kDev1)["policy"]["target_pct"] == 20);

  // Shown: coloc policy (a TARGET column), coloc status (the device's line), --json.
  r = coloc_cli(d, {"policy"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find("TARGET") != std::string::npos, r.out);
  const std::string row = line_with(r.out, kDev1);
  CHECK_MESSAGE(row.find("priority") != std::string::npos, r.out);
  // The target, then the controller's state (no job: idle).
  const bool ends_with_target = row.size() > 12 && row.substr(row.size() - 12) == "20%     idle";
  CHECK_MESSAGE(ends_with_target, r.out);
  r = coloc_cli(d, {"status"});
  CHECK_MESSAGE(r.out.find(kDev1 + "  priority, target slowdown 20%") != std::string::npos, r.out);
  json pol = json::parse(coloc_cli(d, {"policy", "--json"}).out);
  bool found = false;
  for (const json& p : pol["devices"])
    if (p["uuid"] == kDev1) found = p["policy"]["target_pct"] == 20;
  CHECK(found);
  CHECK(json::parse(read_file(d.state() + "/policies.json"))["devices"][kDev1] ==
        json{{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 20}});
  // Back to timeslice: no target shown there.
  r = coloc_cli(d, {"policy", index, "timeslice"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(device_of(d, kDev1)["policy"] == json{{"mode", "timeslice"}, {"quantum_ms", 100}});
  CHECK(coloc_cli(d, {"policy"}).out.find("TARGET") == std::string::npos);

  // all: the default, kept across a restart.
  r = coloc_cli(d, {"policy", "all", "priority", "--target-slowdown", "50%"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("every device, and each device colocd learns of later: priority, target slowdown 50%") != std::string::npos);
  c->kill(SIGKILL);
  d.kill9();
  d.start();
  CHECK(d.status()["policies"]["default"] == json{{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 50}});
}

TEST_CASE("policies.json: a priority entry without target_pct (an older file) loads with 5%; a bad target is kept aside") {
  Colocd d({}, false);
  REQUIRE(::mkdir(d.state().c_str(), 0755) == 0);
  write_file(d.state() + "/policies.json",
             R"({"format": 1, "default": null, "devices": {")" + kDev1 + R"(": {"mode": "priority", "quantum_ms": 100}}})");
  d.start();
  json s = d.status();
  json found;
  for (const json& p : s["policies"]["devices"])
    if (p["uuid"] == kDev1) found = p["policy"];
  CHECK(found == json{{"mode", "priority"}, {"quantum_ms", 100}, {"target_pct", 5}});
  d.stop();
  write_file(d.state() + "/policies.json",
             R"({"format": 1, "default": null, "devices": {")" + kDev1 + R"(": {"mode": "priority", "target_pct": 0}}})");
  d.start();
  CHECK_MESSAGE(d.log().find(kDev1 + ": target_pct is not an integer from 1 to 50") != std::string::npos, d.log());
  CHECK(file_exists(d.state() + "/policies.json.bad"));
  const json st = d.status();
  for (const json& p : st["policies"]["devices"]) CHECK(p["uuid"] != kDev1);  // nothing of it is used
}

}  // TEST_SUITE
