// The processes outside coloc (daemon/device/outside_processes.h): untrusted /proc text made safe,
// colocd's own clients left out, the list bounded, read from a fake /proc; the command line read
// off the caller's thread, so a process whose cmdline blocks never stalls the loop.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "../../support/proc.h"
#include "broker_fixture.h"
#include "device/outside_processes.h"

using coloc::device::OutsideProcesses;
using coloc::device::ProcessMemory;
using coloc::device::read_cmdline;
using coloc::device::read_proc_info;
using coloc::device::sanitize_command;

namespace {

using namespace std::chrono_literals;

constexpr uint64_t GiB = 1ull << 30;

/// A fake /proc/PID with a status (Uid line), a stat (start time 1000 + pid), a cmdline and a comm.
void fake_proc(const coloc::test::TempDir& root, int pid, int uid, const std::string& cmdline, const std::string& comm = "x") {
  const std::string dir = root / std::to_string(pid);
  ::mkdir(dir.c_str(), 0755);
  std::string stat = std::to_string(pid) + " (" + comm + ") S";
  for (int field = 4; field < 22; ++field) stat += " 0";
  coloc::test::write_file(dir + "/stat", stat + " " + std::to_string(1000 + pid) + " 0 0\n");
  coloc::test::write_file(dir + "/status", "Name:\t" + comm + "\nUmask:\t0022\nUid:\t" + std::to_string(uid) + "\t" +
                                               std::to_string(uid) + "\t0\t0\n");
  coloc::test::write_file(dir + "/cmdline", cmdline);
  coloc::test::write_file(dir + "/comm", comm + "\n");
}

/// Lets the worker read every command line asked for, then lets `op` take them (as the daemon's
/// next sampling does).
void settle(OutsideProcesses& op, const coloc::broker::Uuid& dev, const std::vector<ProcessMemory>& procs,
            const std::set<int32_t>& coloc_pids = {}) {
  REQUIRE(op.wait_idle(10s));
  op.update(dev, procs, coloc_pids);
}

}  // namespace

TEST_CASE("outside processes: a command line is made safe to print and to put in JSON") {
  CHECK(sanitize_command(std::string("python\0train.py\0--lr\0" "0.1\0", 24)) == "python train.py --lr 0.1");
  // Terminal escapes, DEL, C1 controls, bidirectional overrides, invalid UTF-8: each a '?'.
  CHECK(sanitize_command("a\033[2Jb\x7f" "c") == "a?[2Jb?c");
  CHECK(sanitize_command("x\xc2\x9by") == "x?y");             // U+009B (CSI)
  CHECK(sanitize_command("evil\xe2\x80\xaegnp.exe") == "evil?gnp.exe");  // U+202E
  CHECK(sanitize_command("bad\xff\xfe utf8 \xc3") == "bad?? utf8 ?");
  CHECK(sanitize_command("\xe6\x97\xa5\xe6\x9c\xac") == "\xe6\x97\xa5\xe6\x9c\xac");  // valid UTF-8 stays
  CHECK(sanitize_command("\xc0\xaf") == "??");                // overlong '/'
  // Cut to the bound at a character boundary, "..." at the end.
  std::string long_cmd(500, 'a');
  std::string cut = sanitize_command(long_cmd, 20);
  CHECK(cut == std::string(17, 'a') + "...");
  std::string wide;
  for (int i = 0; i < 40; ++i) wide += "\xe6\x97\xa5";
  cut = sanitize_command(wide, 20);
  CHECK(cut.size() <= 20);
  CHECK(cut.substr(cut.size() - 3) == "...");
  CHECK(nlohmann::json(cut).dump().size() > 0);  // valid UTF-8: dump does not throw
}

TEST_CASE("outside processes: uid and command from /proc; colocd's clients left out; the largest first; bounded") {
  coloc::test::TempDir root("fake-proc");
  fake_proc(root, 100, 1000, std::string("python\0other.py\0", 16));
  fake_proc(root, 200, 0, "", "kworker");  // no command line: [comm]
  fake_proc(root, 300, 1001, std::string("coloc-job\0", 10));
  auto info = read_proc_info(100, root.path());
  REQUIRE(info.uid);
  CHECK(*info.uid == 1000);
  CHECK(!info.user.empty());  // the name, or "1000" where no user has that uid
  REQUIRE(read_proc_info(200, root.path()).uid);
  CHECK(read_proc_info(200, root.path()).user == "root");
  CHECK(info.command == "[x]");  // never the command line: that is read_cmdline's, off the loop
  REQUIRE(info.start_time);
  CHECK(read_cmdline(100, *info.start_time, root.path()) == std::optional<std::string>("python other.py"));
  CHECK(read_cmdline(100, *info.start_time + 1, root.path()) == std::nullopt);  // another process's
  CHECK(read_proc_info(200, root.path()).command == "[kworker]");
  CHECK(read_cmdline(200, *read_proc_info(200, root.path()).start_time, root.path()) == std::optional<std::string>(""));
  auto gone = read_proc_info(999, root.path());
  CHECK(!gone.uid);
  CHECK(gone.command.empty());
  CHECK(read_cmdline(999, 0, root.path()) == std::nullopt);

  OutsideProcesses op(root.path());
  coloc::broker::Uuid dev{};
  dev.bytes[0] = 1;
  CHECK(op.find(dev) == nullptr);  // never read: not known
  const std::vector<ProcessMemory> procs{{100, 2 * GiB}, {200, coloc::broker::kUnknown}, {300, 5 * GiB}, {400, 3 * GiB}};
  op.update(dev, procs, {300});
  const auto* list = op.find(dev);
  REQUIRE(list);
  REQUIRE(list->shown.size() == 3);
  CHECK(list->more == 0);
  CHECK(list->shown[0].pid == 400);  // 3 GiB (gone from /proc: no uid, no command)
  CHECK(!list->shown[0].info.uid);
  CHECK(list->shown[1].pid == 100);
  CHECK(list->shown[1].used == 2 * GiB);
  CHECK(*list->shown[1].info.uid == 1000);    // at once
  CHECK(list->shown[1].info.command == "[x]");  // until the worker has read its command line
  CHECK(list->shown[2].pid == 200);  // no figure: last
  // A later reading takes the worker's answers; a process without a command line keeps [comm].
  settle(op, dev, procs, {300});
  list = op.find(dev);
  REQUIRE(list);
  REQUIRE(list->shown.size() == 3);
  CHECK(list->shown[1].info.command == "python other.py");
  CHECK(list->shown[2].info.command == "[kworker]");
  // Over the bound: the largest kMaxPerDevice, and a count of the rest.
  std::vector<ProcessMemory> many;
  for (int pid = 1000; pid < 1100; ++pid) many.push_back({pid, uint64_t(pid) << 20});
  op.update(dev, many, {});
  list = op.find(dev);
  REQUIRE(list);
  CHECK(list->shown.size() == OutsideProcesses::kMaxPerDevice);
  CHECK(list->more == 100 - OutsideProcesses::kMaxPerDevice);
  CHECK(list->shown.front().pid == 1099);
  op.forget(dev);
  CHECK(op.find(dev) == nullptr);
}

TEST_CASE("outside processes: a reused pid is read again, never shown as the process it was") {
  // The driver lists pid 500 at two readings; between them alice's process ended and bob's took
  // its number. Before, the cache (by pid alone) went on showing bob's memory as alice's.
  coloc::test::TempDir root("fake-proc");
  auto stat = [&](int pid, const std::string& comm, uint64_t start) {
    std::string s = std::to_string(pid) + " (" + comm + ") S";
    for (int field = 4; field < 22; ++field) s += " " + std::to_string(field);
    coloc::test::write_file(root / (std::to_string(pid) + "/stat"), s + " " + std::to_string(start) + " 0 0\n");
  };
  fake_proc(root, 500, 1000, std::string("alice-train\0", 12));
  stat(500, "a) 1 2 (b", 111);  // a name with parentheses and spaces
  CHECK(coloc::device::read_start_time(500, root.path()) == std::optional<uint64_t>(111));
  OutsideProcesses op(root.path());
  coloc::broker::Uuid dev{};
  dev.bytes[0] = 1;
  op.update(dev, {{500, 2 * GiB}}, {});
  settle(op, dev, {{500, 2 * GiB}});
  REQUIRE(op.find(dev));
  REQUIRE(op.find(dev)->shown.size() == 1);
  CHECK(op.find(dev)->shown[0].info.command == "alice-train");
  CHECK(*op.find(dev)->shown[0].info.uid == 1000);
  op.update(dev, {{500, 2 * GiB}}, {});  // the same process: from the cache
  CHECK(op.find(dev)->shown[0].info.command == "alice-train");
  fake_proc(root, 500, 1001, std::string("bob-mine\0", 9), "bob");
  stat(500, "bob-mine", 222);
  op.update(dev, {{500, 3 * GiB}}, {});
  CHECK(op.find(dev)->shown[0].info.command == "[bob]");  // never alice's command line
  CHECK(*op.find(dev)->shown[0].info.uid == 1001);
  CHECK(op.find(dev)->shown[0].info.start_time == std::optional<uint64_t>(222));
  settle(op, dev, {{500, 3 * GiB}});
  CHECK(op.find(dev)->shown[0].info.command == "bob-mine");
  // Another device's list that shows the process gets its command line too.
  coloc::broker::Uuid dev2{};
  dev2.bytes[0] = 2;
  fake_proc(root, 501, 1001, std::string("bob-two\0", 8), "bob2");
  op.update(dev2, {{501, GiB}}, {});
  CHECK(op.find(dev2)->shown[0].info.command == "[bob2]");
  REQUIRE(op.wait_idle(10s));
  op.update(dev, {{500, 3 * GiB}, {501, GiB}}, {});
  CHECK(op.find(dev)->shown[1].info.command == "bob-two");
  CHECK(op.find(dev2)->shown[0].info.command == "bob-two");
}

TEST_CASE("outside processes: only a device's attached processes leave its list, not any registered one") {
  // A process that registers with colocd (as an anchor, or a job process on another device) and
  // uses a device outside coloc was hidden from that device's list of processes outside coloc.
  coloc::broker::test::Bench b;
  const auto anchor = b.add("hidden", coloc::broker::kNoLimit, coloc::proto::Priority::kNormal,
                            coloc::proto::OnFull::kWait, 1000, 0, true);  // pid 4242, no device
  const auto job = b.add("job");                                            // pid 4242 too
  b.attach(job, {{1, 10 * GiB, GiB}});
  REQUIRE(b.broker.devices().size() == 1);
  CHECK(b.broker.attached_pids(0) == std::set<int32_t>{4242});
  b.remove(job);
  CHECK(b.broker.attached_pids(0).empty());  // the anchor (pid 4242) attached nothing
  CHECK(b.broker.attached_pids(7).empty());
  (void)anchor;
}

// Two fake processes: 600 ("stuck"), whose cmdline is a FIFO (returned) that blocks a reader
// until a writer comes and goes, and 700 ("other"), whose cmdline reads at once.
std::string stuck_and_other(const coloc::test::TempDir& root) {
  fake_proc(root, 600, 1000, "", "stuck");
  fake_proc(root, 700, 1000, std::string("other\0", 6), "other");
  const std::string fifo = root / "600/cmdline";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  return fifo;
}

TEST_CASE("outside processes: a command line that blocks stalls neither update() nor the destructor") {
  // The kernel reads /proc/PID/cmdline under the process's mmap lock, which its owner can hold
  // (a FUSE-backed mapping that never answers). Here cmdline is a FIFO: opening and reading it
  // blocks until a writer comes and goes, as the lock would. Were it read on the caller's thread,
  // update() would wait for `peer` below to let go (20 s) and fail the time checks.
  coloc::test::TempDir root("fake-proc");
  const std::string fifo = stuck_and_other(root);

  // The peer holding the lock: once the worker has the FIFO open for reading (a non-blocking
  // open for writing succeeds only then), it holds it open without writing, so the read blocks,
  // until `release` (or 20 s, should the test fail first).
  std::mutex mu;
  std::condition_variable cv;
  bool reader_in = false, release = false;
  std::thread peer([&] {
    int fd = -1;
    coloc::test::wait_until([&] { return (fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0; }, 20s, 1ms);
    std::unique_lock lk(mu);
    reader_in = fd >= 0;
    cv.notify_all();
    cv.wait_for(lk, 20s, [&] { return release; });
    if (fd >= 0) ::close(fd);  // the worker's read ends (EOF)
  });

  auto op = std::make_unique<OutsideProcesses>(root.path());
  coloc::broker::Uuid dev{};
  dev.bytes[0] = 1;
  const std::vector<ProcessMemory> procs{{600, 2 * GiB}, {700, GiB}};
  auto t0 = std::chrono::steady_clock::now();
  op->update(dev, procs, {});
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  {
    std::unique_lock lk(mu);
    CHECK(cv.wait_for(lk, 20s, [&] { return reader_in; }));  // the worker is stuck in the FIFO
  }
  t0 = std::chrono::steady_clock::now();
  op->update(dev, procs, {});
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  const auto* list = op->find(dev);
  REQUIRE(list);
  REQUIRE(list->shown.size() == 2);
  CHECK(list->shown[0].info.command == "[stuck]");
  CHECK(*list->shown[0].info.uid == 1000);
  CHECK(list->shown[1].info.command == "[other]");  // behind the stuck one: delayed, not lost
  // Destroyed at once, the worker still stuck (it is left, detached).
  t0 = std::chrono::steady_clock::now();
  op.reset();
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  peer.join();
}

TEST_CASE("outside processes: a worker stuck on one process delays the others' commands, which come once it is free") {
  coloc::test::TempDir root("fake-proc");
  const std::string fifo = stuck_and_other(root);
  OutsideProcesses op(root.path());
  coloc::broker::Uuid dev{};
  dev.bytes[0] = 1;
  const std::vector<ProcessMemory> procs{{600, 2 * GiB}, {700, GiB}};
  op.update(dev, procs, {});
  // The worker is in the FIFO when a non-blocking open for writing succeeds.
  int fd = -1;
  REQUIRE(coloc::test::wait_until([&] { return (fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)) >= 0; },
                                  20s, 1ms));
  CHECK(::write(fd, "py\0stuck.py", 11) == 11);
  ::close(fd);  // the read ends
  settle(op, dev, procs);
  const auto* list = op.find(dev);
  REQUIRE(list);
  REQUIRE(list->shown.size() == 2);
  CHECK(list->shown[0].info.command == "py stuck.py");
  CHECK(list->shown[1].info.command == "other");
}
