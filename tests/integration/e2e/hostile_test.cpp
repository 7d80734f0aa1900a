// End-to-end: colocd against local users who are careless or hostile — a user who opens idle
// connections until colocd runs out of descriptors or reaches that user's cap, a connection that
// never says anything, an admin script that deletes the socket, and a colocd that is there but
// does not answer. Counts and sizes are asserted, never timings.
#include <sys/stat.h>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// A local user's connection flood (python3, as any user could write it): opens N connections to
/// the socket, holds them without a word, writes "<connected> <failed>" to READY, and holds them
/// until HOLD exists (polling for the file, as the test programs' hold-file steps do).
constexpr const char* kFlood = R"(import os, socket, sys, time
path, n, ready, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
held, failed = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    try:
        s.connect(path)
        held.append(s)
    except OSError:
        failed += 1
        s.close()
with open(ready + '.tmp', 'w') as f:
    f.write('%d %d' % (len(held), failed))
os.rename(ready + '.tmp', ready)
while not os.path.exists(hold):
    time.sleep(0.005)
)";

/// Starts a flood as user `uid` (65534 is nobody; root with 0), with the system python3. Its files
/// are in a directory any user may write.
std::unique_ptr<Proc> flood(const Node& n, int count, const std::string& tag, int uid = 65534) {
  ::mkdir(n.file("flood").c_str(), 0777);
  ::chmod(n.file("flood").c_str(), 0777);
  if (!file_exists(n.file("flood.py"))) write_file(n.file("flood.py"), kFlood);  // (once: others may be reading it)
  std::vector<std::string> argv;
  if (uid != 0)
    argv = {"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid), "--clear-groups"};
  for (const std::string& a : {std::string("/usr/bin/python3"), n.file("flood.py"), n.socket(), std::to_string(count),
                               n.file("flood/" + tag + ".ready"), n.file("flood/" + tag + ".hold")})
    argv.push_back(a);
  Env e;
  return std::make_unique<Proc>(argv, e);
}

/// The node's directory and socket reachable by other users (as /run/coloc is).
void open_to_all(const Node& n) {
  std::string dir = n.socket().substr(0, n.socket().rfind('/'));
  ::chmod(dir.substr(0, dir.rfind('/')).c_str(), 0755);
  ::chmod(dir.c_str(), 0755);
}

json connections(const Node& n) { return n.status()["daemon"]["connections"]; }

uint64_t held_by(const json& c, const std::string& uid) { return c["per_uid"].value(uid, uint64_t(0)); }

/// A job under coloc that registers, is admitted, allocates and ends well.
void job_runs(const Node& n, const std::string& name) {
  auto p = n.run({"--job", name, "--mem", "1GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "64MiB", "a"});
  ProcResult r = finish(*p, 60s);
  INFO(describe(r));
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(r.err.find("standalone") == std::string::npos);
  CHECK(n.report(name)["devices"][0]["allocations"] >= 1);
}

}  // namespace

TEST_SUITE("e2e") {

/// Sum over `uids` of the connections each holds.
uint64_t held_by_all(const json& c, const std::vector<int>& uids) {
  uint64_t n = 0;
  for (int u : uids) n += held_by(c, std::to_string(u));
  return n;
}

TEST_CASE("e2e: users flooding colocd up to its descriptor limit stall nothing: root's status and jobs go on") {
  if (simulated_only()) return;
  if (sanitizer() == "asan") {
    // UBSan's vptr check probes memory through a pipe(2); at the descriptor limit that fails and
    // it reports a false "invalid vptr" (and stops the daemon). The plain and TSan builds run it.
    MESSAGE("skipped under ASan+UBSan: its vptr check needs descriptors this test takes away");
    return;
  }
  // colocd with only 128 descriptors: one user may hold (128 - 64) / 4 = 16 connections, so eight
  // users together bring colocd to its limit. Their first messages never come (a long first-
  // message deadline keeps the flood in place while the test looks).
  Node n("16GiB", {"--hello-timeout", "10m"}, false);
  n.set_daemon_prefix({"prlimit", "--nofile=128:128", "--"});
  n.start_daemon();
  open_to_all(n);
  REQUIRE(n.log().find("RLIMIT_NOFILE): 128") != std::string::npos);
  REQUIRE(n.log().find("at most 16 connections per user") != std::string::npos);
  const size_t log_before = n.log_size();
  const std::vector<int> uids = {65534, 65533, 65532, 65531, 65530, 65529, 65528, 65527};
  std::vector<std::unique_ptr<Proc>> floods;
  for (int u : uids) floods.push_back(flood(n, 40, "a" + std::to_string(u), u));
  for (size_t i = 0; i < uids.size(); ++i)
    REQUIRE(wait_until([&] { return file_exists(n.file("flood/a" + std::to_string(uids[i]) + ".ready")) || !floods[i]->running(); }, 60s));
  // Every connection the floods made was taken (below the caps and the limit), closed at once (a
  // user at its cap, or colocd at its limit), or closed later to make room for root's requests.
  json c;
  auto accounted = [&](const json& k) {
    return held_by_all(k, uids) + k["refused_cap"].get<uint64_t>() + k["refused_fd_limit"].get<uint64_t>() +
           k["made_room"].get<uint64_t>();
  };
  std::string readies;
  for (int u : uids) readies += std::to_string(u) + ": " + read_file(n.file("flood/a" + std::to_string(u) + ".ready")) + "; ";
  REQUIRE_MESSAGE(wait_until([&] {
    c = connections(n);
    return accounted(c) >= 320;
  }, 30s, 20ms), c.dump(1), "\n", readies);
  CHECK(accounted(c) == 320);
  CHECK(c["refused_fd_limit"].get<uint64_t>() > 0);  // the limit was reached
  for (int u : uids) CHECK(held_by(c, std::to_string(u)) <= 16);
  // Root gets in (status answered above; a job registers, is admitted and finishes).
  job_runs(n, "root-job");
  ProcResult st = n.cli({"status"});
  CHECK_MESSAGE(st.exit_code == 0, describe(st));
  // A second wave: what is kept only fills the room root's job left; the rest is refused.
  const uint64_t before = accounted(connections(n)), held0 = held_by_all(connections(n), uids);
  std::vector<std::unique_ptr<Proc>> wave;
  for (int u : uids) wave.push_back(flood(n, 20, "b" + std::to_string(u), u));
  for (size_t i = 0; i < uids.size(); ++i)
    REQUIRE(wait_until([&] { return file_exists(n.file("flood/b" + std::to_string(uids[i]) + ".ready")) || !wave[i]->running(); }, 60s));
  REQUIRE(wait_until([&] {
    c = connections(n);
    return accounted(c) - before >= 160;
  }, 30s, 20ms));
  c = connections(n);
  CHECK(accounted(c) - before == 160);
  CHECK(held_by_all(c, uids) <= held0 + 8);  // the few descriptors root's job gave back
  // The log said so, a few times, not once per connection.
  const size_t logged = n.log_size() - log_before;
  CHECK_MESSAGE(logged < 100 * 1024, logged, " bytes logged");
  CHECK(n.log().find("descriptor limit") != std::string::npos);
  for (int u : uids) {
    write_file(n.file("flood/a" + std::to_string(u) + ".hold"), "");
    write_file(n.file("flood/b" + std::to_string(u) + ".hold"), "");
  }
  for (auto& p : floods) p->wait(10s);
  for (auto& p : wave) p->wait(10s);
}

TEST_CASE("e2e: registered connections of other users at the descriptor limit give way to root's job") {
  if (simulated_only()) return;
  if (sanitizer() == "asan") {
    MESSAGE("skipped under ASan+UBSan: its vptr check needs descriptors this test takes away");
    return;
  }
  // 96 descriptors: 8 per user; eight users each register 8 processes (colocd_client anchors
  // that hold), which takes every descriptor colocd has left.
  Node n("16GiB", {}, false);
  n.set_daemon_prefix({"prlimit", "--nofile=96:96", "--"});
  n.start_daemon();
  open_to_all(n);
  const std::vector<int> uids = {65534, 65533, 65532, 65531, 65530, 65529, 65528, 65527};
  std::vector<std::unique_ptr<Proc>> holders;
  for (int u : uids)
    for (int i = 0; i < 8; ++i)
      holders.push_back(std::make_unique<Proc>(
          std::vector<std::string>{"setpriv", "--reuid=" + std::to_string(u), "--regid=" + std::to_string(u),
                                   "--clear-groups", build_path("tests/bin/colocd_client"), "--socket", n.socket(),
                                   "--job", "hold-" + std::to_string(u) + "-" + std::to_string(i), "--reconnect", "hold"},
          Env()));
  // Each registered process costs colocd two descriptors (its socket and a pidfd), and a
  // registration makes sure of four first: about 30 of the 64 get in, the rest keep trying.
  json st;
  REQUIRE_MESSAGE(wait_until([&] {
    st = n.status()["daemon"];
    return st["clients"].get<uint64_t>() >= 28;
  }, 60s, 20ms), st.dump(1));
  // Root's job runs all the same: a registered connection of the user holding the most gives way.
  job_runs(n, "root-job");
  CHECK(connections(n)["made_room"].get<uint64_t>() >= 1);
  for (auto& h : holders) h->kill(SIGKILL);
}

TEST_CASE("e2e: a user is held to max_connections_per_user, registered or not; root is not") {
  if (simulated_only()) return;
  Node n("16GiB", {"--max-connections-per-user", "16", "--hello-timeout", "10m"});
  open_to_all(n);
  const size_t log_before = n.log_size();
  auto f = flood(n, 50, "a");
  REQUIRE(wait_until([&] { return file_exists(n.file("flood/a.ready")) || !f->running(); }, 60s));
  json c;
  REQUIRE_MESSAGE(wait_until([&] {
    c = connections(n);
    return c["refused_cap"].get<uint64_t>() >= 34;
  }, 30s, 20ms), c.dump(1));
  CHECK(held_by(c, "65534") == 16);
  CHECK(c["refused_cap"] == 34);
  // More of the same: refused, and the user's count stays at its cap.
  auto f2 = flood(n, 20, "b");
  REQUIRE(wait_until([&] { return file_exists(n.file("flood/b.ready")) || !f2->running(); }, 60s));
  REQUIRE(wait_until([&] { return connections(n)["refused_cap"].get<uint64_t>() >= 54; }, 30s, 20ms));
  c = connections(n);
  CHECK(held_by(c, "65534") == 16);
  CHECK(c["refused_cap"] == 54);
  // Root (exempt) is not capped: 40 of its connections at once are all kept.
  auto r = flood(n, 40, "r", 0);
  REQUIRE(wait_until([&] { return file_exists(n.file("flood/r.ready")) || !r->running(); }, 60s));
  CHECK(read_file(n.file("flood/r.ready")) == "40 0");
  REQUIRE(wait_until([&] { return held_by(connections(n), "0") >= 40; }, 30s, 20ms));
  job_runs(n, "root-job");
  CHECK(n.log_size() - log_before < 100 * 1024);
  for (const char* t : {"a", "b", "r"}) write_file(n.file(std::string("flood/") + t + ".hold"), "");
  f->wait(10s);
  f2->wait(10s);
  r->wait(10s);
  // Closed connections give the user its room back.
  REQUIRE(wait_until([&] { return held_by(connections(n), "65534") == 0; }, 30s, 20ms));
}

TEST_CASE("e2e: a connection that sends no first message is closed after --hello-timeout") {
  if (simulated_only()) return;
  Node n("16GiB", {"--hello-timeout", "200ms"});
  auto f = flood(n, 5, "a", 0);
  REQUIRE(wait_until([&] { return file_exists(n.file("flood/a.ready")) || !f->running(); }, 60s));
  CHECK(read_file(n.file("flood/a.ready")) == "5 0");
  json c;
  REQUIRE_MESSAGE(wait_until([&] {
    c = connections(n);
    return c["hello_timeouts"].get<uint64_t>() >= 5;
  }, 30s, 20ms), c.dump(1));
  CHECK(c["hello_timeouts"] == 5);
  CHECK(held_by(c, "0") <= 1);  // only the status request asking
  // A well-behaved job is not affected: its first message comes at once.
  job_runs(n, "quick");
  write_file(n.file("flood/a.hold"), "");
  f->wait(10s);
}

TEST_CASE("e2e: the socket deleted under a running colocd is bound again; a new job registers with the same colocd") {
  if (simulated_only()) return;
  Node n("16GiB");
  const pid_t daemon = n.daemon_pid();
  auto a = n.run({"--job", "before", "--mem", "1GiB"},
                 {cuprobe(), "init", "ctx", "0", "alloc", "64MiB", "a", "touch", n.file("a.up"), "hold-file",
                  n.file("a.go")});
  REQUIRE(reached(*a, n.file("a.up")));
  struct stat before {};
  REQUIRE(::stat(n.socket().c_str(), &before) == 0);
  const mode_t mode = before.st_mode & 07777;
  REQUIRE(::unlink(n.socket().c_str()) == 0);
  // colocd notices and binds the path again, with the same mode.
  struct stat after {};
  REQUIRE_MESSAGE(wait_until([&] { return ::stat(n.socket().c_str(), &after) == 0; }, 10s), n.log());
  CHECK(S_ISSOCK(after.st_mode));
  CHECK((after.st_mode & 07777) == mode);
  CHECK(after.st_ino != before.st_ino);
  job_runs(n, "after");
  json s = n.status();
  CHECK(s["daemon"]["pid"] == daemon);
  CHECK(s["daemon"]["connections"]["socket_rebinds"] == 1);
  CHECK(!n.job("before").is_null());  // the job that was running is still in the books
  CHECK(n.log().find("bound it again") != std::string::npos);
  write_file(n.file("a.go"), "");
  finish(*a);
}

TEST_CASE("e2e: a colocd that closes connections unanswered is waited for, never bypassed; CLI timeouts name the socket") {
  if (simulated_only()) return;
  Node n("16GiB", {}, false);
  // Before colocd starts, something holds its socket that accepts connections and closes them
  // without an answer (as a colocd at its connection cap does).
  const std::string fake = R"(import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
s.bind(sys.argv[1]); s.listen(64)
open(sys.argv[2], 'w').close()
while True:
    c, _ = s.accept()
    if len(sys.argv) > 3:
        held = globals().setdefault('held', []); held.append(c)
    else:
        c.close()
)";
  write_file(n.file("fake.py"), fake);
  auto closer = std::make_unique<Proc>(
      std::vector<std::string>{"/usr/bin/python3", n.file("fake.py"), n.socket(), n.file("fake.up")}, Env());
  // And another one that accepts and never answers, for the CLI's timeout.
  const std::string silent_socket = n.file("silent.sock");
  auto silent = std::make_unique<Proc>(
      std::vector<std::string>{"/usr/bin/python3", n.file("fake.py"), silent_socket, n.file("silent.up"), "hold"},
      Env());
  REQUIRE(wait_until([&] { return file_exists(n.file("fake.up")) && file_exists(n.file("silent.up")); }, 20s));
  // coloc status against the silent one: exit 3 after the timeout, naming the socket.
  Env ce;
  ce.set("COLOC_SOCKET", silent_socket);
  auto status = std::make_unique<Proc>(std::vector<std::string>{build_path("bin/coloc"), "status"}, ce);
  // And a CUDA process under libcoloc.so whose Register the silent one never answers.
  Env pe = n.base_env();
  pe.preload_coloc();
  pe.set("COLOC_SOCKET", silent_socket);
  pe.set("COLOC_JOB", "unanswered");
  pe.set("COLOC_WAIT_TIMEOUT", "120s");
  auto unanswered = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "touch", n.file("u.inited"), "ctx", "0", "alloc", "64MiB", "a"}, pe);
  // A job starts meanwhile: neither coloc run nor its CUDA process falls back to standalone.
  auto job = n.run({"--job", "patient", "--mem", "1GiB"},
                   {cuprobe(), "init", "touch", n.file("inited"), "ctx", "0", "alloc", "64MiB", "a"},
                   {{"COLOC_WAIT_TIMEOUT", "120s"}});
  REQUIRE_MESSAGE(reached(*job, n.file("inited")), job->err_so_far());
  REQUIRE(wait_until([&] { return job->err_so_far().find("registering in the background") != std::string::npos; }, 30s));
  CHECK(step(job->out_so_far(), "ctx").is_null());  // admission waits for colocd
  // The real colocd takes over the socket: the job registers, is admitted and finishes.
  closer->kill(SIGKILL);
  closer->wait(10s);
  n.start_daemon();
  ProcResult r = finish(*job, 90s);
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(r.err.find("standalone") == std::string::npos);
  CHECK(r.err.find("registered with colocd") != std::string::npos);
  CHECK(n.report("patient")["devices"][0]["allocations"] >= 1);
  ProcResult sr = status->wait(30s);
  CHECK(sr.exit_code == 3);
  CHECK(sr.err.find(silent_socket) != std::string::npos);
  CHECK(sr.err.find("did not answer within 10 s") != std::string::npos);
  // The process that got no answer: after 10 s it says so, keeps trying, and its context waits.
  REQUIRE_MESSAGE(wait_until([&] {
    return unanswered->err_so_far().find("did not answer the registration within 10 s") != std::string::npos;
  }, 40s), unanswered->err_so_far());
  // cuInit returns (the registration goes on in the background); under a sanitizer on a loaded
  // machine its return can come after the 10 s line, so it is awaited, not assumed.
  CHECK(wait_until([&] { return file_exists(n.file("u.inited")); }, 30s));
  CHECK(step(unanswered->out_so_far(), "ctx").is_null());  // admission waits for colocd
  // A real colocd takes the silent one's place: the process registers, is admitted, allocates.
  silent->kill(SIGKILL);
  silent->wait(10s);
  auto second = std::make_unique<Proc>(
      std::vector<std::string>{build_path("bin/colocd"), "--socket", silent_socket, "--state-dir", n.file("state2")},
      n.base_env());
  ProcResult ur = finish(*unanswered, 90s);
  CHECK(step(ur.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(ur.err.find("standalone") == std::string::npos);
  CHECK(ur.err.find("registered with colocd") != std::string::npos);
  second->kill(SIGTERM);
  second->wait(10s);
}

}  // TEST_SUITE
