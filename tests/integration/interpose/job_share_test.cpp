// Without a daemon, a limit is the job's, not each process's (issue 9, item 4): processes of one
// job (same uid, same COLOC_JOB) share COLOC_MEM_LIMIT on each device through a shared-memory
// segment (interpose/job_share.h). Real processes on simgpu; no colocd.
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <random>
#include <algorithm>
#include <set>

#include "interpose.h"

using namespace coloc::test;
using namespace coloc::test::interpose;

namespace {

// A job name no other test (or earlier run) uses, so that no stale segment is shared.
std::string fresh_job(const char* tag) {
  static std::mt19937_64 rng(std::random_device{}());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%d-%016llx", tag, int(getpid()), (unsigned long long)rng());
  return buf;
}

/// The paths of job `job`'s segments in /dev/shm (one per device), named as interpose/job_share.cpp
/// names them: coloc-job.<uid>.<pid namespace>.<XXH64 of the job name>.<device UUID>.
std::vector<std::string> segments_of(const std::string& job) {
  char ns[64] = {};
  unsigned long long ns_id = 0;
  if (::readlink("/proc/self/ns/pid", ns, sizeof ns - 1) > 0) std::sscanf(ns, "pid:[%llu]", &ns_id);
  char prefix[128];
  std::snprintf(prefix, sizeof prefix, "coloc-job.%u.%llu.%016llx.", unsigned(getuid()), ns_id,
                (unsigned long long)XXH64(job.data(), job.size(), 0));
  std::vector<std::string> v;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path().string());
  return v;
}

bool reached(Proc& p, const std::string& path) {
  return wait_until([&] { return std::filesystem::exists(path) || !p.running(); }, 20s, 2ms) &&
         std::filesystem::exists(path);
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("without a daemon, two processes of one job share its limit; cuMemGetInfo shows the job's headroom") {
  Job job;
  job.limit("4GiB");
  job.env.set("COLOC_JOB", fresh_job("share"));
  const std::string ready = job.dir / "ready", go = job.dir / "go";
  Proc a({client(), "init", "ctx", "0", "alloc", "2GiB", "a", "touch", ready, "hold-file", go}, job.env);
  REQUIRE_MESSAGE(reached(a, ready), a.err_so_far());
  ProcResult b = job.run({client(), "init", "ctx", "0", "meminfo", "alloc", "2GiB", "b", "alloc", "1GiB", "c",
                          "meminfo"});
  auto ls = lines(b);
  // A holds 2 GiB and its context (256 MiB), and its share keeps at most 64 MiB of headroom.
  uint64_t free0 = step(ls, "meminfo", 0)["free"];
  CHECK(free0 <= 4 * GiB - 256 * MiB - (2 * GiB + 256 * MiB));
  CHECK(free0 >= 4 * GiB - 256 * MiB - (2 * GiB + 256 * MiB) - 64 * MiB);
  CHECK(step(ls, "meminfo", 0)["total"] == 4 * GiB);
  CHECK(step(ls, "alloc", 0)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // 2 GiB: past the job's limit
  CHECK(step(ls, "alloc", 1)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "meminfo", 1)["free"].get<uint64_t>() == free0 - GiB);
  CHECK(b.err.find("the limit is job-wide: the job's other processes hold") != std::string::npos);
  write_file(go, "");
  CHECK(a.wait().exit_code == 0);
}

TEST_CASE("without a daemon, two processes of one job allocating at the same instant never over-commit") {
  const int tries = 10;
  for (int t = 0; t < tries; ++t) {
    CAPTURE(t);
    Job job;
    job.limit("4GiB");
    job.env.set("COLOC_JOB", fresh_job("race"));
    const std::string go = job.dir / "go", release = job.dir / "release";
    std::string ready[2] = {job.dir / "r0", job.dir / "r1"}, done[2] = {job.dir / "d0", job.dir / "d1"};
    std::vector<std::unique_ptr<Proc>> ps;
    for (int i = 0; i < 2; ++i)  // each holds what it got until both have tried
      ps.push_back(std::make_unique<Proc>(
          std::vector<std::string>{client(), "init", "ctx", "0", "touch", ready[i], "hold-file", go, "alloc", "3GiB",
                                   "x", "touch", done[i], "hold-file", release},
          job.env));
    for (int i = 0; i < 2; ++i) REQUIRE_MESSAGE(reached(*ps[size_t(i)], ready[i]), ps[size_t(i)]->err_so_far());
    write_file(go, "");
    for (int i = 0; i < 2; ++i) REQUIRE_MESSAGE(reached(*ps[size_t(i)], done[i]), ps[size_t(i)]->err_so_far());
    write_file(release, "");
    int ok = 0, oom = 0;
    for (auto& p : ps) {
      ProcResult r = p->wait();
      REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
      std::string rc = step(lines(r), "alloc")["rc_name"];
      ok += rc == "CUDA_SUCCESS";
      oom += rc == "CUDA_ERROR_OUT_OF_MEMORY";
    }
    CHECK(ok == 1);
    CHECK(oom == 1);
  }
}

TEST_CASE("without a daemon, a SIGKILLed process's share goes back to its job") {
  Job job;
  job.limit("4GiB");
  const std::string name = fresh_job("killed");
  job.env.set("COLOC_JOB", name);
  const std::string ready = job.dir / "ready";
  Proc a({client(), "init", "ctx", "0", "alloc", "3GiB", "a", "touch", ready, "hold-file", job.dir / "never"}, job.env);
  REQUIRE_MESSAGE(reached(a, ready), a.err_so_far());
  REQUIRE(segments_of(name).size() == 1);  // the job's segment, which holds A's share
  a.kill(SIGKILL);
  a.wait();
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "3GiB", "b", "meminfo"}));
  CHECK(step(ls, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "meminfo")["free"] == 4 * GiB - 256 * MiB - 3 * GiB);  // nothing left of the dead one's share
  // The last process out removed the segment, the dead one's entry with it. (This job's segment
  // by name: not every segment of this user newer than the test's start by mtime, which counted
  // other jobs' segments made meanwhile, e.g. by a test run beside this one.)
  CHECK(segments_of(name).empty());
}

TEST_CASE("without a daemon and without COLOC_JOB, a process names the job and its children share its limit") {
  Job job;
  job.limit("4GiB");
  job.env.unset("COLOC_JOB");
  const std::string ready = job.dir / "ready", go = job.dir / "go";
  // The shell is the first process (preloaded too): it names the job; both clients inherit it.
  std::string script = client() + " init ctx 0 alloc 3GiB a touch " + ready + " hold-file " + go + " & " + client() +
                       " init ctx 0 hold-file " + ready + " alloc 2GiB b; touch " + go + "; wait";
  ProcResult r = job.run({"/bin/sh", "-c", script});
  auto ls = lines(r);
  REQUIRE(ls.size() >= 4);
  int ok = 0, oom = 0;
  for (const json& l : ls)
    if (l["step"] == "alloc") {
      ok += l["rc_name"] == "CUDA_SUCCESS";
      oom += l["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY";
    }
  CHECK(ok == 1);  // the 3 GiB one
  CHECK(oom == 1);  // the 2 GiB one: past the job's 4 GiB
}

TEST_CASE("without a daemon, the last process out removes the segment even when another was SIGKILLed") {
  Job job;
  job.limit("4GiB");
  job.env.set("COLOC_JOB", fresh_job("lastout"));
  const std::string ready = job.dir / "ready", go = job.dir / "go";
  std::string prefix = "coloc-job." + std::to_string(getuid()) + ".";
  auto ours = [&] {
    std::vector<std::string> v;
    for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path().string());
    return v;
  };
  auto before = ours();
  Proc a({client(), "init", "ctx", "0", "alloc", "512MiB", "a", "touch", ready, "hold-file", job.dir / "never"}, job.env);
  REQUIRE_MESSAGE(reached(a, ready), a.err_so_far());
  std::string path;
  for (const std::string& p : ours())
    if (std::find(before.begin(), before.end(), p) == before.end()) path = p;
  REQUIRE_FALSE(path.empty());
  a.kill(SIGKILL);
  a.wait();
  // B fits beside A's share: it never has to reclaim it, but leaving it removes the file.
  auto ls = lines(job.run({client(), "init", "ctx", "0", "alloc", "512MiB", "b"}));
  CHECK(step(ls, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a job's segment is private to its user and removed when its last process leaves") {
  Job job;
  job.limit("1GiB");
  job.env.set("COLOC_JOB", fresh_job("private"));
  std::string prefix = "coloc-job." + std::to_string(getuid()) + ".";
  auto listing = [&] {
    std::set<std::string> names;
    for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) names.insert(e.path().string());
    return names;
  };
  const std::string ready = job.dir / "ready", go = job.dir / "go";
  auto before = listing();
  Proc a({client(), "init", "ctx", "0", "alloc", "100MiB", "a", "touch", ready, "hold-file", go}, job.env);
  REQUIRE_MESSAGE(reached(a, ready), a.err_so_far());
  std::vector<std::string> made;
  for (const std::string& n : listing())
    if (!before.count(n)) made.push_back(n);
  REQUIRE(made.size() == 1);
  const std::string path = made[0];
  CHECK((std::filesystem::status(path).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  write_file(go, "");
  CHECK(a.wait().exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(path));  // the last process removed it

  // A file in its place that is not a private segment of this user is never used (nor changed):
  // the limit stays per process, with a warning.
  write_file(path, "not a segment");
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                         std::filesystem::perms::group_read | std::filesystem::perms::others_read);
  ProcResult r = job.run({client(), "init", "ctx", "0", "alloc", "512MiB", "b", "alloc", "512MiB", "c"});
  auto ls = lines(r);
  CHECK(step(ls, "alloc", 0)["rc_name"] == "CUDA_SUCCESS");
  CHECK(step(ls, "alloc", 1)["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // still limited, per process
  CHECK(r.err.find("cannot be shared by the processes of job") != std::string::npos);
  CHECK(read_file(path) == "not a segment");
  std::filesystem::remove(path);
}

}  // TEST_SUITE
