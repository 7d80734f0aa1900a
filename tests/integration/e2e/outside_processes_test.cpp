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

TEST_CASE("e2e: a GPU used only outside coloc, by no coloc job ever, is in coloc status with its processes, in nvidia-smi's order") {
  if (simulated_only()) return;
  Node n("8GiB,16GiB");
  // Before anything runs, NVML's two devices are listed, idle, with nothing committed.
  json s;
  REQUIRE_MESSAGE(wait_until([&] { return (s = n.status())["devices"].size() == 2; }, 20s, 20ms), s.dump(1));
  for (const json& d : s["devices"]) {
    INFO(d.dump());
    CHECK(d["index_from"] == "nvml");
    CHECK(d["idle"] == true);
    CHECK(d["committed"] == 0);
    CHECK(d["jobs"].empty());
    CHECK(d["capacity"] == (d["index"] == 0 ? 8 * GiB : 16 * GiB));
    CHECK(d["headroom"].get<uint64_t>() > 0);
  }
  // A process without libcoloc.so takes 3 GiB of device 1; no coloc job runs at all.
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "1", "alloc", "3GiB", "o", "touch", n.file("taken"), "hold-file",
                               n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  json dev;
  REQUIRE_MESSAGE(wait_until([&] {
    const json st = n.status();  // held: a range-for over a temporary's member dangles
    for (const json& d : st["devices"])
      if (d["index"] == 1 && d["outside_processes"].is_array() && !d["outside_processes"].empty()) {
        dev = d;
        return true;
      }
    return false;
  }, 20s, 20ms), n.cli({"status", "--json"}).out, "\n", n.log());
  REQUIRE(dev["outside_processes"].size() == 1);
  CHECK(dev["outside_processes"][0]["pid"] == outside->pid());
  CHECK(dev["outside_processes"][0]["used_bytes"] == 3 * GiB + kContext);
  CHECK(dev["outside"] == 3 * GiB + kContext);  // all that is used there is outside coloc
  CHECK(dev["available"] == dev["capacity"].get<uint64_t>() - dev["headroom"].get<uint64_t>() - (3 * GiB + kContext));
  // The table lists device 0 before device 1, and the process under device 1.
  ProcResult text = n.cli({"status"});
  REQUIRE(text.exit_code == 0);
  const size_t first = text.out.find("\n0  GPU-"), second = text.out.find("\n1  GPU-"),
               proc = text.out.find(std::to_string(outside->pid()) + "  ");
  INFO(text.out);
  CHECK(first != std::string::npos);
  CHECK(second != std::string::npos);
  CHECK(first < second);
  CHECK(proc != std::string::npos);
  CHECK(second < proc);
  write_file(n.file("release"), "");
  CHECK(outside->wait(20s).exit_code == 0);
}

}  // TEST_SUITE
