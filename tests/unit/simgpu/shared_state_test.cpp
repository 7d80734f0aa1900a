// The state all simgpu processes share: capacity accounting, reclaiming dead processes, the
// robust mutex, engine turns, and the file's configuration check. Other processes are played by
// fork children that do as little as possible.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <tuple>

#include "tests/support/proc.h"
#include "tools/simgpu/os.h"
#include "tools/simgpu/shared_state.h"

using coloc::test::TempDir;
using coloc::test::wait_until;
using simgpu::SharedState;
using namespace std::chrono_literals;

namespace {
constexpr uint64_t GiB = 1ull << 30;

std::unique_ptr<SharedState> open_state(const std::string& dir, std::vector<simgpu::DeviceSpec> devices) {
  std::string error;
  simgpu::OpenFailure why;
  auto s = SharedState::open(dir, devices, &error, &why);
  REQUIRE_MESSAGE(s, error);
  return s;
}

// Reads the shared books under their mutex, as simgpu itself does.
template <class F>
auto locked(SharedState& s, F f) {
  pthread_mutex_lock(&s.layout()->mutex);
  auto v = f(*s.layout());
  pthread_mutex_unlock(&s.layout()->mutex);
  return v;
}
int owner(SharedState& s) {
  return locked(s, [](simgpu::shm::Layout& l) { return l.devices[0].owner; });
}

// Runs `f` in a fork child that then exits at once (_exit, no cleanup): a process that dies.
// Waits for it to finish and reaps it.
template <class F>
void in_dying_child(F f) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    f();
    _exit(0);
  }
  int status;
  REQUIRE(waitpid(pid, &status, 0) == pid);
}
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("shared state: created with private modes; charges stop at capacity") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto s = open_state(dir, {{"A", 8 * GiB}, {"B", 4 * GiB}});
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(stat((dir + "/state").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  CHECK(s->charge(0, 5 * GiB));
  CHECK_FALSE(s->charge(0, 3 * GiB + 1));
  CHECK(s->charge(0, 3 * GiB));
  CHECK_FALSE(s->charge(0, 1));
  CHECK(s->charge(1, 4 * GiB));  // devices are separate
  CHECK(s->meminfo(0).used == 8 * GiB);
  CHECK(s->meminfo(0).capacity == 8 * GiB);
  s->uncharge(0, 5 * GiB);
  CHECK(s->meminfo(0).used == 3 * GiB);
  CHECK(s->charged_by_me(0) == 3 * GiB);
  s->uncharge(0, 100 * GiB);  // never below what this process charged
  CHECK(s->meminfo(0).used == 0);
  CHECK(s->meminfo(1).used == 4 * GiB);
  s->release_process();
  CHECK(s->meminfo(1).used == 0);
  CHECK_FALSE(s->charge(0, 1));  // released: charges nothing more
}

TEST_CASE("shared state: an observer (the simulated NVML) takes no slot, sees every charge, and keeps the owner's") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto owner = open_state(dir, {{"A", 8 * GiB}});
  REQUIRE(owner->charge(0, 3 * GiB));
  std::string error;
  simgpu::OpenFailure why;
  // The same process opens the state again to observe it, as a program using CUDA and NVML does.
  auto observer = SharedState::open(dir, {{"A", 8 * GiB}}, &error, &why, /*claim=*/false);
  REQUIRE_MESSAGE(observer, error);
  CHECK(observer->process_slot() == -1);
  CHECK(observer->meminfo(0).used == 3 * GiB);
  CHECK(owner->charged_by_me(0) == 3 * GiB);  // a claiming open would have reclaimed the owner's slot
  CHECK_FALSE(observer->charge(0, 1));
  CHECK(observer->add_context(0) == -1);
  owner->uncharge(0, 1 * GiB);
  CHECK(observer->meminfo(0).used == 2 * GiB);
  observer.reset();
  CHECK(owner->meminfo(0).used == 2 * GiB);  // closing the observer gives nothing back
}

TEST_CASE("shared state: a dead process's memory is reclaimed, zombie or reaped") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto s = open_state(dir, {{"A", 8 * GiB}});
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::string error;
    simgpu::OpenFailure why;
    auto mine = SharedState::open(dir, {{"A", 8 * GiB}}, &error, &why);
    char ok = mine && mine->charge(0, 6 * GiB) ? 1 : 0;
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    pause();  // killed by the parent, never cleans up
    _exit(0);
  }
  char ok = 0;
  REQUIRE(read(ready[0], &ok, 1) == 1);
  REQUIRE(ok == 1);
  CHECK(s->meminfo(0).used == 6 * GiB);
  CHECK_FALSE(s->charge(0, 3 * GiB));  // the child is alive: no room
  kill(pid, SIGKILL);
  // Not reaped yet: a zombie, which counts as dead.
  CHECK(wait_until([&] { return s->charge(0, 3 * GiB); }, 5s));
  CHECK(s->meminfo(0).used == 3 * GiB);
  int status;
  waitpid(pid, &status, 0);
  close(ready[0]);
  close(ready[1]);
}

TEST_CASE("shared state: a process dying inside the mutex leaves books the next one repairs") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto s = open_state(dir, {{"A", 8 * GiB}});
  REQUIRE(s->charge(0, 2 * GiB));
  simgpu::shm::Layout* l = s->layout();
  in_dying_child([&] {
    pthread_mutex_lock(&l->mutex);
    l->devices[0].used += 5 * GiB;  // half an update: no process slot carries these bytes
  });
  // The next locker gets EOWNERDEAD, rebuilds the sums from the process slots, and goes on.
  CHECK(s->meminfo(0).used == 2 * GiB);
  CHECK(s->charge(0, 6 * GiB));
  CHECK_FALSE(s->charge(0, 1));
}

// acquire_engine for a process that is never stopped: the device clock it carries on from.
uint64_t acquire(SharedState& s, int entry) {
  uint64_t clock = 0;
  std::vector<SharedState::Interval> credit;
  s.acquire_engine(0, entry, &clock, &credit);  // true: nobody here is ever stopped
  return clock;
}
bool yield(SharedState& s, int entry, uint64_t clock) {
  uint64_t resume;
  return s.yield_engine(0, entry, clock, &resume);
}

TEST_CASE("shared state: engine turns go round-robin among runnable contexts") {
  TempDir tmp("simgpu-state");
  auto s = open_state(tmp / "s", {{"A", 8 * GiB}});
  int a = s->add_context(0), b = s->add_context(0);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  acquire(*s, a);
  CHECK_FALSE(yield(*s, a, 100));  // nobody else wants it: keep going
  std::atomic<bool> b_owns{false};
  std::atomic<uint64_t> b_clock{0};
  std::thread t([&] {
    b_clock = acquire(*s, b);
    b_owns = true;
  });
  // b waits until a hands over at the end of its slice.
  CHECK(wait_until([&] { return locked(*s, [&](simgpu::shm::Layout& l) { return l.devices[0].contexts[b].runnable == 1; }); }, 5s));
  CHECK_FALSE(b_owns.load());
  CHECK(yield(*s, a, 200));
  t.join();
  CHECK(b_owns.load());
  CHECK(owner(*s) == b);
  CHECK(b_clock.load() == 200);  // b carries on from the device clock a left
  // a is still runnable: b's release hands the engine straight to a.
  s->release_engine(0, b, 300);
  CHECK(owner(*s) == a);
  CHECK(acquire(*s, a) == 300);
  s->release_engine(0, a, 400);
  CHECK(owner(*s) == simgpu::shm::kNone);
  s->remove_context(0, a);
  s->remove_context(0, b);
}

TEST_CASE("shared state: a waiter takes the engine over from an owner that died") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto s = open_state(dir, {{"A", 8 * GiB}});
  in_dying_child([&] {
    std::string error;
    simgpu::OpenFailure why;
    auto mine = SharedState::open(dir, {{"A", 8 * GiB}}, &error, &why);
    if (!mine) _exit(1);
    int e = mine->add_context(0);
    acquire(*mine, e);
    _exit(0);  // dies owning the engine
  });
  REQUIRE(owner(*s) != simgpu::shm::kNone);
  int mine = s->add_context(0);
  std::atomic<bool> owns{false};
  std::thread t([&] {
    acquire(*s, mine);
    owns = true;
  });
  CHECK(wait_until([&] { return owns.load(); }, 5s));
  t.join();
  CHECK(owner(*s) == mine);
}

TEST_CASE("shared state: a stopped owner loses the engine after its slice; its turns are then run by proxy") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto s = open_state(dir, {{"A", 8 * GiB}});
  s->set_timeslice_ns(2'000'000);
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::string error;
    simgpu::OpenFailure why;
    auto mine = SharedState::open(dir, {{"A", 8 * GiB}}, &error, &why);
    if (!mine) _exit(1);
    int e = mine->add_context(0);
    mine->add_queued_ns(0, e, 100'000'000);  // 100 ms of kernels queued
    acquire(*mine, e);
    const uint64_t now = simgpu::now_ns();
    if (!mine->begin_slice(0, e, now + 1'000'000, 1'000'000)) _exit(2);  // a 1 ms slice begun
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    raise(SIGSTOP);  // stopped owning the engine
    _exit(0);
  }
  close(ready[1]);
  char c;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  int status;
  REQUIRE(waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
  const int theirs = owner(*s);
  REQUIRE(theirs != simgpu::shm::kNone);
  const uint64_t busy_until = locked(*s, [](simgpu::shm::Layout& l) { return l.devices[0].busy_until; });
  // A waiter takes the engine over (it checks the owner every 20 ms), after the owner's slice.
  int mine = s->add_context(0);
  uint64_t clock = 0;
  std::vector<SharedState::Interval> credit;
  CHECK(s->acquire_engine(0, mine, &clock, &credit));
  CHECK(credit.empty());
  CHECK(owner(*s) == mine);
  CHECK(clock >= busy_until);
  // At the end of its slice the stopped entry gets its turn: 2 ms on the device timeline, run for
  // it, and the waiter carries on after it.
  uint64_t resume = 0;
  CHECK_FALSE(s->yield_engine(0, mine, clock + 2'000'000, &resume));
  CHECK(resume == clock + 4'000'000);
  auto proxy = locked(*s, [&](simgpu::shm::Layout& l) {
    std::vector<std::pair<uint64_t, uint64_t>> v;
    for (const auto& p : l.devices[0].proxy)
      if (p.entry == theirs) v.emplace_back(p.start_ns, p.end_ns);
    return std::make_tuple(v, l.devices[0].contexts[theirs].proxy_ns, l.devices[0].contexts[theirs].stopped);
  });
  REQUIRE(std::get<0>(proxy).size() == 1);
  CHECK(std::get<0>(proxy)[0] == std::make_pair(clock + 2'000'000, clock + 4'000'000));
  CHECK(std::get<1>(proxy) == 2'000'000);
  CHECK(std::get<2>(proxy) == 1);
  kill(child, SIGKILL);
  REQUIRE(waitpid(child, &status, 0) == child);
}

TEST_CASE("shared state: another device configuration is refused while in use, re-created after") {
  TempDir tmp("simgpu-state");
  const std::string dir = tmp / "s";
  auto first = open_state(dir, {{"A", 8 * GiB}});
  std::string error;
  simgpu::OpenFailure why;
  auto second = SharedState::open(dir, {{"A", 16 * GiB}}, &error, &why);
  CHECK_FALSE(second);
  CHECK(why == simgpu::OpenFailure::mismatch);
  CHECK(error.find("in use") != std::string::npos);
  CHECK(error.find("A:8589934592B") != std::string::npos);
  CHECK(error.find("A:17179869184B") != std::string::npos);
  first.reset();  // nobody holds it now
  auto third = open_state(dir, {{"A", 16 * GiB}});
  CHECK(third->meminfo(0).capacity == 16 * GiB);
}
}
