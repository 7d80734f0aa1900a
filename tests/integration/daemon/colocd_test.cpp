// colocd with real processes and real sockets: admission, waiting, deaths (socket, pidfd, BPF),
// restart with re-registration, users, and bad input. The clients are colocd_client processes
// that speak the protocol exactly as a job's libcoloc.so does.
#include <doctest/doctest.h>

#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "coloc/wire.h"
#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

constexpr uint64_t GiB = 1ull << 30;

void wire_sleep_ms(int ms) { coloc::wire::sleep_ns(uint64_t(ms) * 1000000ull); }

/// True when BPF should work here: root on a kernel with BTF (then the BPF test must use it).
bool bpf_expected() { return ::geteuid() == 0 && file_exists("/sys/kernel/btf/vmlinux"); }

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd: admission holds a job that does not fit, then releases it when another exits") {
  Colocd d;
  auto a = d.client({"--job", "first", "--mem", "6GiB", "attach:1:10GiB:1GiB", "alloc:0:4GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  auto b = d.client({"--job", "second", "--mem", "6GiB", "attach:1:10GiB:1GiB", "alloc:0:5GiB", "goodbye:0", "exit:0"});
  bool pending = wait_until([&] { return !d.job("second").is_null() && d.job("second")["state"] == "admission-pending"; });
  REQUIRE_MESSAGE(pending, d.status_text(), "\n", b->out_so_far(), b->err_so_far(), d.log());
  CHECK_FALSE(has_event(*b, "attach"));  // held at its first context, before it allocates anything
  json dev = d.status()["devices"][0];
  CHECK(dev["committed"] == 6 * GiB);  // only the first job's reservation is held
  a->kill(SIGTERM);
  ProcResult rb = b->wait(20s);
  REQUIRE_MESSAGE(rb.exit_code == 0, describe(rb));
  json attach = event_of(*b, "attach");
  CHECK(attach["granted"] == true);
  CHECK(attach["waited_ns"].get<uint64_t>() > 0);
  CHECK(event_of(*b, "alloc")["ok"] == true);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/second.json"); }));
  json rep = d.report("second");
  CHECK(rep["exit_status"] == 0);
  CHECK(rep["devices"][0]["wait_admission_s"].get<double>() > 0);
  CHECK(rep["devices"][0]["peak"] == 5 * GiB);
}

TEST_CASE("colocd: growth waits, then succeeds when memory frees; own-limit fails at once") {
  Colocd d;
  auto hog = d.client({"--job", "hog", "attach:1:10GiB:1GiB", "alloc:0:7GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*hog, "holding"); }));
  // No limit, so no reservation: its growth competes for what is free, and waits.
  auto grower = d.client({"--job", "grower", "attach:1:10GiB:0", "alloc:0:3GiB", "exit:0"});
  REQUIRE(wait_until([&] { return !d.job("grower").is_null() && d.job("grower")["state"] == "waiting"; }));
  // The device is full and "grower" waits for memory, but past its own limit a job fails at once.
  // (High priority, so that its admission is not queued behind the waiting growth.)
  auto limited = d.client({"--job", "limited", "--mem", "2GiB", "--priority", "high", "attach:1:10GiB:0", "alloc:0:3GiB", "exit:0"});
  ProcResult rl = limited->wait(20s);
  REQUIRE_MESSAGE(rl.exit_code == 0, describe(rl));
  json refused = event_of(*limited, "alloc");
  CHECK(refused["ok"] == false);
  CHECK(refused["reason"] == "own-limit");
  CHECK(refused["waited_ns"] == 0);
  CHECK_FALSE(has_event(*grower, "alloc"));  // still waiting
  wire_sleep_ms(100);
  hog->kill(SIGKILL);  // its memory comes free: the waiting growth succeeds
  ProcResult rg = grower->wait(20s);
  REQUIRE_MESSAGE(rg.exit_code == 0, describe(rg));
  json grown = event_of(*grower, "alloc");
  CHECK(grown["ok"] == true);
  CHECK(grown["waited_ns"].get<uint64_t>() > 100'000'000);  // it waited for the hog to go
}

TEST_CASE("colocd: SIGKILL of a job releases its grants within a second") {
  Colocd d;
  auto a = d.client({"--job", "victim", "attach:1:10GiB:1GiB", "alloc:0:8GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  auto b = d.client({"--job", "waiter", "attach:1:10GiB:0", "alloc:0:6GiB", "exit:0"});
  REQUIRE(wait_until([&] { return !d.job("waiter").is_null() && d.job("waiter")["state"] == "waiting"; }));
  auto t0 = std::chrono::steady_clock::now();
  a->kill(SIGKILL);
  // The waiter's grant arrives as soon as the daemon notices the death.
  REQUIRE(wait_until([&] { return has_event(*b, "alloc"); }, 1s, 1ms));
  auto dt = std::chrono::steady_clock::now() - t0;
  MESSAGE("death to grant: ", std::chrono::duration<double, std::milli>(dt).count(), " ms");
  CHECK(event_of(*b, "alloc")["ok"] == true);
  CHECK(b->wait(10s).exit_code == 0);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/victim.json"); }));
  json rep = d.report("victim");
  CHECK(rep["exit_signal"] == SIGKILL);
}

TEST_CASE("colocd: a forked child holding the socket does not keep a dead parent in the books") {
  std::vector<std::string> modes = {"pidfd"};
  if (bpf_expected()) modes.push_back("bpf");
  for (const std::string& mode : modes) {
    CAPTURE(mode);
    Colocd d({"--watcher", mode});
    json daemon = d.status()["daemon"];
    CHECK(daemon["watcher"] == mode);  // only this source can notice: the socket stays open
    auto parent = d.client({"--job", "parent", "attach:1:10GiB:1GiB", "alloc:0:3GiB", "fork-hold", "sleep:200", "exit:7"});
    REQUIRE(wait_until([&] { return has_event(*parent, "forked"); }));
    pid_t child = event_of(*parent, "forked")["child"].get<pid_t>();
    CHECK(parent->wait(10s).exit_code == 7);
    // Waited for generously (a loaded sanitizer run may take over a second): the child holds the
    // socket until it is killed below, so only the watcher can take the parent out of the books,
    // and the report's noticed_by says it was this one.
    bool gone = wait_until([&] { return d.status()["jobs"].empty(); }, 20s, 2ms);
    CHECK_MESSAGE(gone, "the parent stayed in the books:\n", d.status_text(), "\n", d.log());
    json devs = d.status()["devices"];  // (idle now: it may have dropped out, NVML not knowing it)
    CHECK((devs.empty() || devs[0]["committed"] == 0));
    ::kill(child, SIGKILL);
    REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/parent.json"); }));
    json rep = d.report("parent");
    CHECK(rep["processes"][0]["noticed_by"] == mode);
    if (mode == "bpf") CHECK(rep["exit_status"] == 7);  // the BPF event carries the exit code
  }
}

TEST_CASE("colocd: the BPF watcher is used where available, and --no-bpf falls back to pidfds") {
  Colocd with_bpf;
  std::string w = with_bpf.status()["daemon"]["watcher"];
  if (bpf_expected()) CHECK(w == "bpf+pidfd");
  else CHECK(w.rfind("pidfd", 0) == 0);
  Colocd without({"--no-bpf"});
  CHECK(without.status()["daemon"]["watcher"] == "pidfd");
}

TEST_CASE("colocd: SIGKILL of the daemon with 3 running jobs, then a restart: the books match, the jobs finish") {
  Colocd d;
  std::vector<std::unique_ptr<Proc>> jobs;
  const std::vector<std::string> sizes = {"1GiB", "2GiB", "3GiB"};
  for (int i = 0; i < 3; ++i)
    jobs.push_back(d.client({"--job", "j" + std::to_string(i), "--mem", "4GiB", "--reconnect", "attach:1:20GiB:256MiB",
                             "alloc:0:" + sizes[i], "hold:4000", "alloc:0:512MiB", "free:0:1GiB", "goodbye:0", "exit:0"}));
  for (auto& j : jobs) REQUIRE(wait_until([&] { return has_event(*j, "holding"); }));
  auto books = [&] {
    std::map<std::string, std::pair<uint64_t, uint64_t>> m;  // job -> (granted, in use)
    json s = d.status();
    for (auto& j : s["jobs"]) m[j["job"]] = {j["granted"], j["in_use"]};
    return m;
  };
  auto before = books();
  REQUIRE(before.size() == 3);
  json dev_before = d.status()["devices"][0];
  // The daemon notes who is registered (at its next sample tick), so that after a restart it can
  // hold new requests until these processes are back.
  REQUIRE(wait_until([&] {
    std::string clients = read_file(d.state() + "/clients");
    return std::count(clients.begin(), clients.end(), '\n') == 3;
  }));
  d.kill9();
  d.start();
  for (auto& j : jobs) REQUIRE(wait_until([&] { return has_event(*j, "reregistered"); }));
  REQUIRE(wait_until([&] { return d.status()["jobs"].size() == 3 && !d.status()["daemon"]["holding_for_restart"]; }));
  CHECK(books() == before);  // no byte lost or double-counted
  json dev_after = d.status()["devices"][0];
  CHECK(dev_after["committed"] == dev_before["committed"]);
  CHECK(dev_after["in_use"] == dev_before["in_use"]);
  for (auto& j : jobs) {
    ProcResult r = j->wait(20s);
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
    CHECK(event_of(*j, "alloc")["ok"] == true);  // grew under the new daemon
  }
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }));
  for (int i = 0; i < 3; ++i) CHECK(d.report("j" + std::to_string(i))["exit_status"] == 0);
  CHECK(d.log().find("registered again") != std::string::npos);
}

TEST_CASE("colocd: a large admin answer comes in chunks and is reassembled") {
  Colocd d;
  std::vector<std::unique_ptr<Proc>> clients;
  for (int i = 0; i < 40; ++i)
    clients.push_back(d.client({"--job", "a-rather-long-job-name-to-fill-the-answer-" + std::to_string(i),
                                "attach:" + std::to_string(1 + i % 4) + ":80GiB:1GiB", "hold"}));
  for (auto& c : clients) REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  coloc::cli::Answer a = d.ask(coloc::proto::AdminOp::kStatus);
  REQUIRE(a.kind == coloc::cli::Answer::Kind::kOk);
  CHECK(a.text.size() > coloc::proto::kAdminChunk);  // two chunks or more
  json st = json::parse(a.text);
  CHECK(st["jobs"].size() == 40);
  // The clients' four devices (NVML does not list them: colocd numbers them itself); simgpu's own
  // device, which NVML lists, joins them once colocd has read it (its sampling timer).
  size_t theirs = 0;
  for (const json& dev : st["devices"]) theirs += dev["index_from"] == "colocd" && dev["jobs"].size() == 10;
  CHECK_MESSAGE(theirs == 4, st["devices"].dump(1));
}

TEST_CASE("colocd: the previous protocol version is accepted") {
  Colocd d;
  auto c = d.client({"--proto", "1", "--job", "old-client", "attach:1:10GiB:100MiB", "alloc:0:1GiB", "goodbye:3", "exit:3"});
  ProcResult r = c->wait(10s);
  REQUIRE_MESSAGE(r.exit_code == 3, describe(r));
  CHECK(event_of(*c, "registered")["daemon_version"] == coloc::proto::kVersion);
  CHECK(event_of(*c, "registered")["layout"] == 1);  // the pages it knows (pages.h)
  CHECK(event_of(*c, "registered")["stats_layout"] == 1);
  CHECK(event_of(*c, "alloc")["ok"] == true);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/old-client.json"); }));
  json rep = d.report("old-client");
  CHECK(rep["command"] == "(unknown: protocol v1 client)");
  CHECK(rep["exit_status"] == 3);
  CHECK(d.log().find("[protocol v1]") != std::string::npos);
}

TEST_CASE("colocd: each protocol version gets the page layout it knows (v3: 1, v4: 2, v5: 3, v6: 4)") {
  Colocd d;
  for (int v : {3, 4, 5, 6}) {
    CAPTURE(v);
    auto c = d.client({"--proto", std::to_string(v), "--job", "layout-" + std::to_string(v), "attach:1:10GiB:100MiB",
                       "alloc:0:1GiB", "goodbye:0", "exit:0"});
    ProcResult r = c->wait(10s);
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    CHECK(event_of(*c, "registered")["layout"] == v - 2);
    CHECK(event_of(*c, "registered")["stats_layout"] == v - 2);
    CHECK(event_of(*c, "alloc")["ok"] == true);
  }
}

TEST_CASE("colocd: malformed, truncated, oversized messages and unasked descriptors do not take it down") {
  Colocd d;
  auto hex = [](const void* p, size_t n) {
    std::string s;
    char b[3];
    for (size_t i = 0; i < n; ++i) {
      std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(p)[i]);
      s += b;
    }
    return s;
  };
  coloc::proto::GrowMsg g;
  std::memset(&g, 0, sizeof g);
  g.need = 1;
  unsigned char buf[sizeof g];
  coloc::proto::encode(g, 1, buf, sizeof buf);
  struct Case {
    const char* what;
    std::string bytes;
    std::string log;
  };
  std::string good = hex(buf, sizeof buf);
  std::string future = good;
  const uint16_t next = coloc::proto::kVersion + 1;  // a version this colocd does not speak yet
  future.replace(8, 4, hex(&next, sizeof next));
  std::vector<Case> cases = {
      {"garbage", "deadbeefdeadbeefdeadbeefdeadbeef", "bad magic"},
      {"truncated", good.substr(0, 20), "message too short"},
      {"size lies", good.substr(0, good.size() - 2), "header size differs"},
      {"future version", future,
       "protocol version " + std::to_string(next) + " is not supported: colocd speaks versions 1 to " +
           std::to_string(coloc::proto::kVersion)},
      {"oversized", std::string(2 * 40000, 'a'), "message larger than"},
      {"before register", good, "Grow before Register"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto p = d.client({"raw:" + c.bytes, "sleep:5000"});
    // The daemon answers with an Error (a reason) and closes; the client sees its socket close.
    REQUIRE(wait_until([&] { return d.log().find(c.log) != std::string::npos; }));
    p->kill(SIGKILL);
  }
  // A client that sends a descriptor: it is closed, and the client carries on.
  auto f = d.client({"--job", "fds", "attach:1:10GiB:0", "sendfd", "alloc:0:1GiB", "exit:0"});
  CHECK(f->wait(10s).exit_code == 0);
  CHECK(event_of(*f, "alloc")["ok"] == true);
  CHECK(d.log().find("sent 1 file descriptor(s) unasked: closed") != std::string::npos);
  // A version-9 client learns why before the daemon closes its connection.
  auto v = d.client({"raw:" + future, "recv", "exit:0"});
  CHECK(v->wait(10s).exit_code == 0);
  json got = event_of(*v, "received");
  CHECK(got["type"] == "Error");
  CHECK(got["text"].get<std::string>().find("versions 1 to " + std::to_string(coloc::proto::kVersion)) != std::string::npos);
  CHECK(d.running());
  CHECK(d.status()["jobs"].empty());
}

TEST_CASE("colocd: a job sees its grant and limit on the control page and cannot make it writable") {
  Colocd d;
  auto c = d.client({"--job", "pages", "--mem", "2GiB", "attach:1:10GiB:1GiB", "status", "tamper", "exit:0"});
  CHECK(c->wait(10s).exit_code == 0);
  json st = event_of(*c, "status");
  REQUIRE(st["slots"].size() == 1);
  CHECK(st["slots"][0]["grant"] == GiB);
  CHECK(st["slots"][0]["limit"] == 2 * GiB);
  json t = event_of(*c, "tamper");
  CHECK(t["mprotect_rc"] == -1);
  CHECK(t["errno"] == EACCES);
}

TEST_CASE("colocd: users: anyone registers their own processes; only root or the admin group changes others' jobs") {
  struct passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || !nobody) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  Colocd d;
  auto root_job = d.client({"--job", "rootjob", "--mem", "4GiB", "attach:1:10GiB:1GiB", "hold"});
  auto nobody_job = d.client({"--as-user", "nobody", "--job", "nobodyjob", "--mem", "4GiB", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*root_job, "holding") && has_event(*nobody_job, "holding"); }));
  json nj = d.job("nobodyjob");
  CHECK(nj["uid"] == nobody->pw_uid);  // from SO_PEERCRED, not from the message
  // An admin request from another uid: fork, drop to nobody, ask.
  auto ask_as_nobody = [&](const std::string& job, uint64_t mem) {
    coloc::proto::AdminMsg m;
    std::memset(&m, 0, sizeof m);
    m.op = uint32_t(coloc::proto::AdminOp::kSet);
    m.set_fields = coloc::proto::kSetMem;
    m.mem = mem;
    coloc::proto::set_string(m.job, job.c_str());
    return ask_as(d, nobody, m);
  };
  CHECK(ask_as_nobody("rootjob", 1 * GiB) == 10 + uint32_t(coloc::proto::AdminStatus::kNotAllowed));
  CHECK(d.job("rootjob")["limit"] == 4 * GiB);                 // unchanged
  CHECK(ask_as_nobody("nobodyjob", 8 * GiB) == 10 + uint32_t(coloc::proto::AdminStatus::kNotAllowed));  // cannot raise its own
  CHECK(ask_as_nobody("nobodyjob", 2 * GiB) == 0);             // may lower its own
  CHECK(d.job("nobodyjob")["limit"] == 2 * GiB);
  CHECK(ask_as_nobody("nosuchjob", 1 * GiB) == 10 + uint32_t(coloc::proto::AdminStatus::kNotFound));
  // Root may change anyone's job.
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(coloc::proto::AdminOp::kSet);
  m.set_fields = coloc::proto::kSetMem;
  m.mem = 3 * GiB;
  coloc::proto::set_string(m.job, "nobodyjob");
  CHECK(coloc::cli::admin_request(d.socket(), m).kind == coloc::cli::Answer::Kind::kOk);
  CHECK(d.job("nobodyjob")["limit"] == 3 * GiB);
}

TEST_CASE("colocd: a driver OOM inside a grant is counted; the client's figure counts only as far as the job can show it") {
  Colocd d;  // (simgpu's NVML does not know the fake client's device: the client's figures are all there is)
  auto c = d.client({"--job", "oomy", "--mem", "6GiB", "attach:1:10GiB:1GiB", "alloc:0:2GiB", "oom:0:1GiB:512MiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  REQUIRE(wait_until([&] { return d.status()["devices"][0]["driver_ooms"] == 1; }));
  // "512 MiB free" claims 10 - 0.5 - 2 = 7.5 GiB used outside coloc; the job holds 4 GiB of its
  // 6 GiB reservation unused: that is the most its failure can show.
  CHECK(d.status()["devices"][0]["outside"] == 4 * GiB);
  c->kill(SIGTERM);
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/oomy.json"); }));
  CHECK(d.report("oomy")["devices"][0]["driver_ooms"] == 1);
}

TEST_CASE("colocd: reports are never overwritten, and the socket and state get deliberate modes") {
  Colocd d;
  for (int i = 0; i < 2; ++i) {
    auto c = d.client({"--job", "same:name", "attach:1:10GiB:0", "alloc:0:1GiB", "goodbye:0", "exit:0"});
    CHECK(c->wait(10s).exit_code == 0);
    REQUIRE(wait_until([&, i] { return file_exists(d.state() + (i == 0 ? "/reports/same_name.json" : "/reports/same_name.2.json")); }));
  }
  struct stat st;
  REQUIRE(::stat(d.socket().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0666);
  REQUIRE(::stat((d.state() + "/reports").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0750);
  REQUIRE(::stat((d.state() + "/reports/same_name.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("colocd: refuses to start twice on one state directory or socket, and names bad settings") {
  Colocd d;
  ProcResult twice = run({build_path("bin/colocd"), "--socket", d.dir() / "other.sock", "--state-dir", d.state()}, Env(), 10s);
  CHECK(twice.exit_code == 1);
  CHECK(twice.err.find("another colocd is using the state directory") != std::string::npos);
  ProcResult same_socket = run({build_path("bin/colocd"), "--socket", d.socket(), "--state-dir", d.dir() / "s2"}, Env(), 10s);
  CHECK(same_socket.exit_code == 1);
  CHECK(same_socket.err.find("another colocd is listening") != std::string::npos);
  ProcResult bad = run({build_path("bin/colocd"), "--headroom", "lots"}, Env(), 10s);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--headroom") != std::string::npos);
  write_file(d.dir() / "bad.toml", "headroom = 5\nwat = 1\n");
  ProcResult cfg = run({build_path("bin/colocd"), "--config", d.dir() / "bad.toml"}, Env(), 10s);
  CHECK(cfg.exit_code == 2);
  CHECK(cfg.err.find("wat: unknown setting") != std::string::npos);
  ProcResult help = run({build_path("bin/colocd"), "--help"}, Env(), 10s);
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("--max-per-user") != std::string::npos);
  CHECK(d.running());
}

}  // TEST_SUITE

TEST_SUITE("daemon") {

TEST_CASE("colocd: a Goodbye's exit status stands when the exit is noticed before the hang-up (pidfd watcher)") {
  // With the pidfd watcher colocd cannot read a non-child's exit status: the Goodbye is the only
  // word on it. A forked child keeps the socket open, so the exit is noticed first (no hang-up
  // yet): that event, which knows no status, must not erase the Goodbye's.
  Colocd d({"--watcher", "pidfd"});
  auto c = d.client({"--job", "bye", "attach:1:20GiB:64MiB", "fork-hold", "goodbye:7", "exit:7"});
  ProcResult r = c->wait(20s);
  REQUIRE_MESSAGE(r.exit_code == 7, describe(r));
  const int child = event_of(*c, "forked")["child"];
  REQUIRE(wait_until([&] { return file_exists(d.state() + "/reports/bye.json"); }));
  json rep = d.report("bye");
  ::kill(child, SIGKILL);
  CHECK(rep["exit_status"] == 7);
  CHECK(rep["processes"][0]["exit_code"] == 7);
}

}  // TEST_SUITE
