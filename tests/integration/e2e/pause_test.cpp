// coloc pause / coloc resume end to end: a real CUDA job (interpose_client under libcoloc.so on
// simgpu) whose job is paused waits inside its launch with its memory intact, and launches only
// after the resume (SIMGPU_TRACE: no kernel of it ran before); a SIGINT ends the wait (that
// launch proceeds, the handler runs); a colocd that dies while the gate is closed lets the job go
// on; the CLI's exit codes.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/syscall.h>

#include <cstdio>
#include <ctime>
#include <sstream>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The system call the main thread of `pid` is in (/proc/PID/syscall: its number), -1 when it
/// runs or cannot be read.
long main_thread_syscall(long pid) {
  std::string s = read_file("/proc/" + std::to_string(pid) + "/syscall");
  long nr = -1;
  if (std::sscanf(s.c_str(), "%ld", &nr) != 1) return -1;
  return nr;
}

/// True once the main thread of `pid` has been seen in a futex wait on three reads 150 ms apart
/// (the gate's waits are slices of 100 ms: a launch that went through would not be seen so).
bool waits_at_gate(long pid) {
  int seen = 0;
  return wait_until([&] {
    seen = main_thread_syscall(pid) == SYS_futex ? seen + 1 : 0;
    return seen >= 3;
  }, 20s, 150ms);
}

uint64_t mono_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

/// Start times (CLOCK_MONOTONIC ns) of the kernel slices of `pid` in a SIMGPU_TRACE file.
std::vector<uint64_t> slice_starts(const std::string& path, long pid) {
  std::istringstream in(read_file(path));
  std::string line;
  std::vector<uint64_t> out;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    long p;
    int dev;
    unsigned ctx, stream;
    unsigned long launch, start, end;
    char kernel[128];
    if (std::sscanf(line.c_str(), "%ld,%d,%u,%u,%lu,%127[^,],%lu,%lu", &p, &dev, &ctx, &stream, &launch, kernel, &start,
                    &end) == 8 &&
        p == pid)
      out.push_back(start);
  }
  return out;
}

/// The running job `name` of node `n` (coloc run's id) and its one process.
std::pair<std::string, long> job_and_pid(const Node& n, const std::string& name) {
  json j;
  REQUIRE(wait_until([&] {
    j = n.job(name);
    return !j.is_null() && j["pids"].size() == 1;
  }));
  return {j["job"].get<std::string>(), j["pids"][0].get<long>()};
}

}  // namespace

TEST_SUITE("e2e") {
TEST_CASE("coloc pause: a paused job's launches wait, its memory stays, and nothing runs until coloc resume") {
  if (simulated_only()) return;
  Node n;
  const std::string ready = n.file("ready"), go = n.file("go"), done = n.file("done"), trace = n.file("trace.csv");
  auto p = n.run({"--job", "pz"},
                 {client(), "init", "ctx", "0", "alloc", "256MiB", "a", "touch", ready, "hold-file", go, "launch", "3",
                  "touch", done, "meminfo"},
                 {{"SIMGPU_TRACE", trace}});
  REQUIRE(wait_until([&] { return file_exists(ready); }));
  auto [id, pid] = job_and_pid(n, "pz");
  const uint64_t in_use = n.job("pz")["in_use"].get<uint64_t>();
  CHECK(in_use >= 256 * MiB);

  ProcResult r = n.cli({"pause", id});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("paused") != std::string::npos);
  write_file(go, "");
  REQUIRE_MESSAGE(waits_at_gate(pid), n.log());
  CHECK_FALSE(file_exists(done));
  CHECK(slice_starts(trace, pid).empty());  // no kernel of it ran
  json j = n.job("pz");
  CHECK(j["compute_state"] == "paused");
  CHECK(j["in_use"] == in_use);  // its memory stays
  CHECK(n.cli({"status"}).out.find("paused") != std::string::npos);

  const uint64_t resumed_at = mono_ns();
  r = n.cli({"resume", id});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("resumed") != std::string::npos);
  ProcResult done_r = finish(*p);
  json launch = step(done_r.out, "launch");
  CHECK(launch["rc_name"] == "CUDA_SUCCESS");
  CHECK(launch["launched"] == 3);
  auto starts = slice_starts(trace, pid);
  CHECK(starts.size() >= 3);
  for (uint64_t s : starts) CHECK(s >= resumed_at);  // everything ran after the resume
  // The report: one launch waited, paused, for at least the three 150 ms looks of waits_at_gate.
  json dev = n.report("pz")["devices"][0];
  CHECK(dev["gate_waited_launches"]["pause"] == 1);
  CHECK(dev["gate_wait_s"]["pause"].get<double>() >= 0.3);
  CHECK(dev["gate_waited_launches"]["quantum"] == 0);
  ProcResult shown = n.cli({"report", id});
  CHECK(shown.out.find("Launches held at the gate") != std::string::npos);
}

TEST_CASE("coloc pause: every launch path waits at the gate: Ex, _ptsz, cooperative, and a graph captured while paused") {
  if (simulated_only()) return;
  Node n;
  const std::vector<std::string> paths = {"launch-ex", "launch-ptsz", "launch-coop", "graph-launch"};
  std::vector<std::string> script = {client(), "init", "ctx", "0", "touch", n.file("ready")};
  for (const std::string& p : paths)
    for (const std::string& w : {std::string("hold-file"), n.file("go-" + p), p, std::string("2"), std::string("touch"),
                                 n.file("done-" + p)})
      script.push_back(w);
  auto proc = n.run({"--job", "paths"}, script);
  REQUIRE(wait_until([&] { return file_exists(n.file("ready")); }));
  auto [id, pid] = job_and_pid(n, "paths");
  for (const std::string& p : paths) {
    CAPTURE(p);
    REQUIRE(n.cli({"pause", id}).exit_code == 0);
    write_file(n.file("go-" + p), "");
    // graph-launch captures first (a launch into a capturing stream passes the gate: it only
    // records), then its cuGraphLaunch waits.
    REQUIRE_MESSAGE(waits_at_gate(pid), n.log());
    CHECK_FALSE(file_exists(n.file("done-" + p)));
    REQUIRE(n.cli({"resume", id}).exit_code == 0);
    REQUIRE(wait_until([&] { return file_exists(n.file("done-" + p)); }));
  }
  ProcResult r = finish(*proc);
  for (const std::string& p : paths) {
    CAPTURE(p);
    json s = step(r.out, p);
    CHECK(s["rc_name"] == "CUDA_SUCCESS");  // the graph's capture was not invalidated, and it replayed
    CHECK(s["launched"] == 2);
  }
}

TEST_CASE("coloc pause: a SIGINT ends the wait at the gate: the launches proceed (until colocd changes the gate) and the handler runs") {
  if (simulated_only()) return;
  Node n;
  const std::string ready = n.file("ready"), go = n.file("go"), done = n.file("done");
  // Two launches: after the signal the process's launches pass the gate (its handler may need
  // the GPU to save and exit), not just the one that was waiting.
  auto p = n.run({"--job", "pint"},
                 {client(), "init", "ctx", "0", "catch-signals", "touch", ready, "hold-file", go, "launch", "2", "launch",
                  "1", "touch", done, "signals"});
  REQUIRE(wait_until([&] { return file_exists(ready); }));
  auto [id, pid] = job_and_pid(n, "pint");
  REQUIRE(n.cli({"pause", id}).exit_code == 0);
  write_file(go, "");
  REQUIRE_MESSAGE(waits_at_gate(pid), n.log());
  CHECK_FALSE(file_exists(done));
  ::kill(pid_t(pid), SIGINT);
  ProcResult r = finish(*p);
  CHECK(step(r.out, "launch")["launched"] == 2);
  CHECK(step(r.out, "launch", 1)["launched"] == 1);
  CHECK(step(r.out, "signals")["sigint"] == 1);  // delivered once, after the wait
  // The job ends once colocd has read its processes' hang-ups and the anchor's goodbye, which
  // coloc run sends without waiting for an answer: waited for, not read once.
  CHECK_MESSAGE(wait_until([&] { return n.job("pint").is_null(); }), n.status_text());
}

TEST_CASE("coloc pause: when colocd dies while a job waits at a closed gate, the job goes on") {
  if (simulated_only()) return;
  Node n;
  const std::string ready = n.file("ready"), go = n.file("go");
  auto p = n.run({"--job", "pdead"},
                 {client(), "init", "ctx", "0", "touch", ready, "hold-file", go, "launch", "3", "meminfo"});
  REQUIRE(wait_until([&] { return file_exists(ready); }));
  auto [id, pid] = job_and_pid(n, "pdead");
  REQUIRE(n.cli({"pause", id}).exit_code == 0);
  write_file(go, "");
  REQUIRE_MESSAGE(waits_at_gate(pid), n.log());
  n.kill_daemon();
  ProcResult r = finish(*p);
  CHECK(step(r.out, "launch")["launched"] == 3);
}

TEST_CASE("coloc pause and resume: usage, unknown jobs and an unreachable daemon have their exit codes") {
  if (simulated_only()) return;
  Node n;
  CHECK(n.cli({"pause"}).exit_code == 2);                 // no job
  CHECK(n.cli({"pause", "a", "b"}).exit_code == 2);       // two
  CHECK(n.cli({"resume", "bad job"}).exit_code == 2);     // not a job id
  CHECK(n.cli({"pause", "nosuchjob"}).exit_code == 4);
  CHECK(n.cli({"resume", "nosuchjob"}).exit_code == 4);
  ProcResult help = n.cli({"pause", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("resume") != std::string::npos);
  CHECK(n.cli({"--socket", n.file("nothing.sock"), "pause", "x"}).exit_code == 3);
}
}
