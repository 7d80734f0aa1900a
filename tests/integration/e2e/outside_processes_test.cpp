// End-to-end: the processes that use a device without coloc, as colocd lists them from NVML's
// per-process list (simgpu's NVML sees every simulated process): pid, uid, user, command and
// device memory in `coloc status --json` and in `coloc status` (the command once colocd's worker
// has read it, "[comm]" until then); a coloc job beside them is not listed.
#include <pwd.h>
#include <unistd.h>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

std::string user_of(uid_t uid) {
  struct passwd* pw = ::getpwuid(uid);
  return pw ? pw->pw_name : std::to_string(uid);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: coloc status lists the processes outside coloc (pid, user, command, memory), not coloc's own") {
  if (simulated_only()) return;
  Node n("16GiB");
  // A process without libcoloc.so holds 2 GiB (and its context).
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "2GiB", "o", "touch", n.file("taken"), "hold-file",
                               n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  // A job under coloc beside it.
  auto job = n.run({"--job", "inside", "--mem", "4GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "b", "touch", n.file("admitted"), "hold-file",
                    n.file("release")});
  REQUIRE(reached(*job, n.file("admitted")));
  // colocd reads the list on its sampling timer: wait for the outside process to show.
  json dev;
  REQUIRE_MESSAGE(wait_until([&] {
    json s = n.status();
    if (s["devices"].empty()) return false;
    dev = s["devices"][0];
    return dev["outside_processes"].is_array() && !dev["outside_processes"].empty() && !n.job("inside").is_null() &&
           !n.job("inside")["pids"].empty();
  }, 20s, 20ms), n.cli({"status", "--json"}).out, "\n", n.log());
  // Its command line is read off colocd's loop (it shows "[comm]" meanwhile) and taken at a
  // later sampling: wait for it.
  REQUIRE_MESSAGE(wait_until([&] {
    json s = n.status();
    if (s["devices"].empty()) return false;
    dev = s["devices"][0];
    const json& op = dev["outside_processes"];
    return op.is_array() && op.size() == 1 && op[0]["command"].is_string() &&
           op[0]["command"].get<std::string>().find("cuprobe init ctx 0 alloc 2GiB") != std::string::npos;
  }, 20s, 20ms), n.cli({"status", "--json"}).out, "\n", n.log());
  const json procs = dev["outside_processes"];
  REQUIRE(procs.size() == 1);  // the coloc job's process is not one
  const json& p = procs[0];
  CHECK(p["pid"] == outside->pid());
  CHECK(p["uid"] == ::getuid());
  CHECK(p["user"] == user_of(::getuid()));
  CHECK(p["command"].get<std::string>().find("cuprobe init ctx 0 alloc 2GiB") != std::string::npos);
  CHECK(p["used_bytes"] == 2 * GiB + kContext);
  CHECK(dev["outside_processes_more"] == 0);
  const json inside = n.job("inside");  // held: a range-for over a temporary's member dangles
  for (const json& pid : inside["pids"]) CHECK(pid != p["pid"]);

  ProcResult text = n.cli({"status"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("1 process outside coloc:") != std::string::npos);
  CHECK(text.out.find(std::to_string(outside->pid()) + "  ") != std::string::npos);
  CHECK(text.out.find("2.50 GiB") != std::string::npos);

  // Once it ends, the list empties (the job still runs, so the device stays in status).
  outside->kill(SIGKILL);
  outside->wait(10s);
  CHECK_MESSAGE(wait_until([&] {
    json s = n.status();
    return !s["devices"].empty() && s["devices"][0]["outside_processes"].is_array() &&
           s["devices"][0]["outside_processes"].empty();
  }, 20s, 20ms), n.cli({"status", "--json"}).out);
  write_file(n.file("release"), "");
  finish(*job);
}

}  // TEST_SUITE
