// colocd's config file on real processes (daemon/config/config.h, engine/server_reload.cpp):
// --check-config's output and exit status; SIGHUP applies what can change live (headroom, a
// device's policy from its [devices."UUID"] table over what `coloc policy` stored), logs what
// needs a restart (the socket, the grant step) and keeps it, keeps the flags over the file, and
// changes nothing for a broken file.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstring>

#include "colocd_fixture.h"
#include "config/config.h"

using namespace coloc::test;
using coloc::proto::AdminOp;
using coloc::proto::PolicyMode;
using nlohmann::json;

namespace {

const std::string kDev1 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001";
const std::string kDev2 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c002";
const std::string kNoSuchDev = "GPU-0b7c3a1e-6f2d-4c8b-a9e5-3d4f1a2b6c77";

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

/// The policy status shows for `uuid` in its "policies" list (null when not listed).
json policy_of(const Colocd& d, const std::string& uuid) {
  const json s = d.status();
  for (const json& dev : s["policies"]["devices"])
    if (dev["uuid"] == uuid) return dev["policy"];
  return nullptr;
}

json device_of(const Colocd& d, const std::string& uuid) {
  const json s = d.status();
  for (const json& dev : s["devices"])
    if (dev["uuid"] == uuid) return dev;
  return nullptr;
}

/// Sends SIGHUP and waits for the log line it causes (the n-th line starting `SIGHUP: `+`kind`).
void sighup(const Colocd& d, const std::string& kind) {
  const size_t before = count_of(d.log(), "SIGHUP: " + kind);
  const pid_t pid = d.status()["daemon"]["pid"].get<pid_t>();
  REQUIRE(::kill(pid, SIGHUP) == 0);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(d.log(), "SIGHUP: " + kind) > before; }, 20s),
                  "no 'SIGHUP: ", kind, "' line:\n", d.log());
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd --check-config: prints every key with its source and exits 0, or exits 2 naming file, line and key") {
  TempDir dir("colocd-check");
  Env env;
  env.set("COLOC_CONFIG", dir / "absent.toml");  // never the real /etc/coloc/colocd.toml
  write_file(dir / "good.toml", "headroom = \"4GiB\"\n\n[devices.\"" + kDev1 + "\"]\npolicy = \"timeslice\"\n");
  ProcResult ok = run({build_path("bin/colocd"), "--check-config", "--config", dir / "good.toml", "--grant-step", "32MiB"},
                      env, 20s);
  CHECK_MESSAGE(ok.exit_code == 0, describe(ok));
  for (const char* line : {"headroom = \"4GiB\"", "grant_step = \"32MiB\"", "socket = \"/run/coloc/colocd.sock\"",
                           "metrics_listen = \"\"", "policy = \"share\"", "[devices.\"GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001\"]"})
    CHECK_MESSAGE(ok.out.find(line) != std::string::npos, line, "\n", ok.out);
  // Where each came from, on its line.
  auto line_of = [&](const std::string& key) {
    const size_t p = ok.out.find("\n" + key + " = ");
    return p == std::string::npos ? std::string() : ok.out.substr(p + 1, ok.out.find('\n', p + 1) - p - 1);
  };
  CHECK(line_of("headroom").find("# file") != std::string::npos);
  CHECK(line_of("grant_step").find("# flag") != std::string::npos);
  CHECK(line_of("socket").find("# default") != std::string::npos);
  // Every key of the table is there.
  for (const coloc::config::Setting& s : coloc::config::settings()) CHECK_MESSAGE(!line_of(s.key).empty(), s.key);

  // No file at the default path: the defaults, exit 0.
  ProcResult none = run({build_path("bin/colocd"), "--check-config"}, env, 20s);
  CHECK(none.exit_code == 0);
  CHECK(none.out.find("absent.toml does not exist") != std::string::npos);
  // Errors: exit 2, naming the file, line and key.
  write_file(dir / "bad.toml", "headroom = \"2%\"\n\nwait_timout = \"5s\"\n");
  ProcResult bad = run({build_path("bin/colocd"), "--check-config", "--config", dir / "bad.toml"}, env, 20s);
  CHECK(bad.exit_code == 2);
  CHECK_MESSAGE(bad.err.find(dir / "bad.toml" + ":3: wait_timout: unknown setting (did you mean wait_timeout?)") !=
                    std::string::npos,
                bad.err);
  CHECK(bad.out.empty());
  ProcResult missing = run({build_path("bin/colocd"), "--check-config", "--config", dir / "nope.toml"}, env, 20s);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("nope.toml") != std::string::npos);
  write_file(dir / "group.toml", "admin_group = \"coloc-no-such-group-7f3a\"\n");
  ProcResult group = run({build_path("bin/colocd"), "--check-config", "--config", dir / "group.toml"}, env, 20s);
  CHECK(group.exit_code == 2);
  CHECK(group.err.find("admin_group: no such group") != std::string::npos);
  // A socket path longer than sockaddr_un holds (107 bytes): refused by --check-config, so that
  // colocd does not start, fail with exit 1 and restart in a loop.
  const std::string long_socket = "/tmp/" + std::string(110, 's') + ".sock";
  write_file(dir / "long.toml", "socket = \"" + long_socket + "\"\n");
  ProcResult longsock = run({build_path("bin/colocd"), "--check-config", "--config", dir / "long.toml"}, env, 20s);
  CHECK(longsock.exit_code == 2);
  CHECK_MESSAGE(longsock.err.find("too long for a Unix socket (at most 107)") != std::string::npos, longsock.err);
  ProcResult longflag = run({build_path("bin/colocd"), "--socket", long_socket, "--state-dir", dir / "state"}, env, 20s);
  CHECK(longflag.exit_code == 2);
  CHECK(longflag.err.find("--socket") != std::string::npos);
  // At start, the same error stops colocd with exit status 2.
  ProcResult start = run({build_path("bin/colocd"), "--config", dir / "bad.toml", "--socket", dir / "s.sock",
                          "--state-dir", dir / "state"},
                         env, 20s);
  CHECK(start.exit_code == 2);
  CHECK(start.err.find("bad.toml:3: wait_timout") != std::string::npos);
  CHECK_FALSE(file_exists(dir / "s.sock"));
}

TEST_CASE("colocd: a group that does not exist stops colocd at start with exit 2 (no restart loop), naming file:line: key or the flag") {
  TempDir dir("colocd-group");
  Env env;
  env.set("COLOC_CONFIG", dir / "absent.toml");
  const std::string bad = "coloc-no-such-group-7f3a";
  write_file(dir / "g.toml", "headroom = \"2%\"\nadmin_group = \"" + bad + "\"\n");
  ProcResult file = run({build_path("bin/colocd"), "--config", dir / "g.toml", "--socket", dir / "s.sock", "--state-dir",
                         dir / "state"},
                        env, 20s);
  CHECK_MESSAGE(file.exit_code == 2, describe(file));
  CHECK_MESSAGE(file.err.find(dir / "g.toml" + ":2: admin_group: no such group '" + bad + "'") != std::string::npos,
                describe(file));
  CHECK_FALSE(file_exists(dir / "s.sock"));
  // The flag (over the file's valid group): named as the flag.
  write_file(dir / "ok.toml", "high_priority_group = \"root\"\n");
  ProcResult flag = run({build_path("bin/colocd"), "--config", dir / "ok.toml", "--high-priority-group", bad, "--socket",
                         dir / "s.sock", "--state-dir", dir / "state"},
                        env, 20s);
  CHECK_MESSAGE(flag.exit_code == 2, describe(flag));
  CHECK_MESSAGE(flag.err.find("--high-priority-group: no such group '" + bad + "'") != std::string::npos, describe(flag));
  CHECK_FALSE(file_exists(dir / "s.sock"));
  // --check-config says the same, with file and line.
  ProcResult check = run({build_path("bin/colocd"), "--check-config", "--config", dir / "g.toml"}, env, 20s);
  CHECK(check.exit_code == 2);
  CHECK_MESSAGE(check.err.find(dir / "g.toml" + ":2: admin_group: no such group") != std::string::npos, describe(check));
}

TEST_CASE("colocd SIGHUP: live keys change, restart keys are logged and kept, flags still win, a broken file changes nothing") {
  TempDir cfgdir("colocd-reload");
  const std::string file = cfgdir / "colocd.toml";
  write_file(file, "headroom = \"2%\"\nhello_timeout = \"3s\"\n[devices.\"" + kDev2 + "\"]\npolicy = \"timeslice\"\nquantum = \"30ms\"\n");
  // --hello-timeout as a flag: the file's hello_timeout never applies, before or after a reload.
  Colocd d({"--config", file, "--hello-timeout", "7s"});
  auto c = d.client({"--job", "cfg", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  CHECK(device_of(d, kDev1)["headroom"] == json((10ull << 30) / 50));
  // The file's device table applies at start (the state directory holds nothing for it).
  CHECK(policy_of(d, kDev2) == json{{"mode", "timeslice"}, {"quantum_ms", 30}});
  const json at_start = policy_of(d, kDev1);
  CHECK((at_start.is_null() || at_start["mode"] == "share"));
  // `coloc policy` sets one; it holds until the file says otherwise on SIGHUP.
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(AdminOp::kPolicy);
  m.mode = uint8_t(PolicyMode::kPriority);
  coloc::proto::set_string(m.job, kDev1.c_str());
  auto a = coloc::cli::admin_request(d.socket(), m, 5000);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  CHECK(policy_of(d, kDev1)["mode"] == "priority");

  write_file(file, "headroom = \"1GiB\"\nhello_timeout = \"3s\"\ngrant_step = \"128MiB\"\nmax_connections_per_user = 64\n\n[devices.\"" + kDev1 +
                       "\"]\npolicy = \"timeslice\"\nquantum = \"40ms\"\n\n[devices.\"" + kNoSuchDev +
                       "\"]\npolicy = \"share\"\n");
  sighup(d, "reloaded");
  CHECK(device_of(d, kDev1)["headroom"] == json(1ull << 30));
  CHECK(policy_of(d, kDev1) == json{{"mode", "timeslice"}, {"quantum_ms", 40}});
  CHECK(d.status()["daemon"]["connections"]["max_per_user"] == 64);
  const json dev2 = policy_of(d, kDev2);  // its table is gone: it shares again
  CHECK((dev2.is_null() || dev2["mode"] == "share"));
  const std::string log = d.log();
  CHECK_MESSAGE(log.find("grant_step changed ('64MiB' -> '128MiB'): needs a restart; keeping '64MiB'") != std::string::npos, log);
  CHECK(log.find("devices.\"" + kNoSuchDev + "\": no device has this UUID now") != std::string::npos);
  CHECK(log.find("hello_timeout") == std::string::npos);  // the flag wins: nothing changed
  CHECK(log.find("headroom 2% -> 1GiB") != std::string::npos);
  // The stored policy was replaced: the file's holds across a restart too.
  CHECK(read_file(d.state() + "/policies.json").find(kDev1) == std::string::npos);

  // A broken file: one line says why, and nothing changes.
  write_file(file, "headroom = \"3GiB\"\n[devices.\"" + kDev1 + "\"]\npolicy = \"share\"\nquantum = \"lots\"\n");
  sighup(d, "keeping the running configuration");
  CHECK(d.log().find("colocd.toml:4: devices.\"" + kDev1 + "\".quantum: 'lots' is not a duration") != std::string::npos);
  CHECK(device_of(d, kDev1)["headroom"] == json(1ull << 30));
  CHECK(policy_of(d, kDev1) == json{{"mode", "timeslice"}, {"quantum_ms", 40}});
  CHECK(d.running());
}

TEST_CASE("colocd SIGHUP: a changed socket path is logged as needing a restart and ignored") {
  TempDir dir("colocd-reload-sock");
  const std::string file = dir / "colocd.toml";
  const std::string sock = dir / "a.sock";
  write_file(file, "socket = \"" + sock + "\"\nstate_dir = \"" + dir / "state" + "\"\n");
  Env env;
  env.simgpu(dir);
  Proc p({build_path("bin/colocd"), "--config", file, "--log-level", "info"}, env);
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(AdminOp::kStatus);
  auto up = [&] { return coloc::cli::admin_request(sock, m, 5000).kind == coloc::cli::Answer::Kind::kOk; };
  REQUIRE_MESSAGE(wait_until([&] { return up() || !p.running(); }, 20s), p.err_so_far());
  REQUIRE(p.running());
  write_file(file, "socket = \"" + dir / "b.sock" + "\"\nstate_dir = \"" + dir / "state" + "\"\n");
  p.kill(SIGHUP);
  REQUIRE_MESSAGE(wait_until([&] { return p.err_so_far().find("SIGHUP: reloaded") != std::string::npos; }, 20s),
                  p.err_so_far());
  CHECK_MESSAGE(p.err_so_far().find("socket changed ('" + sock + "' -> '" + dir / "b.sock" + "'): needs a restart") !=
                    std::string::npos,
                p.err_so_far());
  CHECK(up());
  CHECK_FALSE(file_exists(dir / "b.sock"));
}

}  // TEST_SUITE
