// colocd's deployment pieces without a daemon: which inherited sockets the listener takes
// (check_listen_socket), the STATUS= rate limit (systemd::StatusThrottle), and the example config
// deploy/colocd.toml against the settings table (every key, commented out, with its default).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <regex>
#include <set>
#include <sstream>

#include "../../support/proc.h"
#include "config/config.h"
#include "engine/listener.h"
#include "engine/systemd.h"

using coloc::UniqueFd;
using coloc::engine::check_listen_socket;
using coloc::engine::systemd::StatusThrottle;

namespace {

UniqueFd unix_socket(int type, const std::string& path, bool listen_too) {
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  if (listen_too) REQUIRE(::listen(fd.get(), 16) == 0);
  return fd;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("check_listen_socket: only a listening AF_UNIX SOCK_SEQPACKET socket, else an error saying what it is") {
  coloc::test::TempDir dir("coloc-sd-unit");
  CHECK(check_listen_socket(unix_socket(SOCK_SEQPACKET, dir / "ok.sock", true).get()).ok());

  auto stream = check_listen_socket(unix_socket(SOCK_STREAM, dir / "stream.sock", true).get());
  REQUIRE_FALSE(stream.ok());
  CHECK(stream.error().what.find("SOCK_STREAM socket (ListenStream=)") != std::string::npos);
  CHECK(stream.error().what.find("use ListenSequentialPacket=") != std::string::npos);

  auto dgram = check_listen_socket(unix_socket(SOCK_DGRAM, dir / "dgram.sock", false).get());
  REQUIRE_FALSE(dgram.ok());
  CHECK(dgram.error().what.find("SOCK_DGRAM") != std::string::npos);

  auto idle = check_listen_socket(unix_socket(SOCK_SEQPACKET, dir / "idle.sock", false).get());
  REQUIRE_FALSE(idle.ok());
  CHECK(idle.error().what.find("not listening") != std::string::npos);

  UniqueFd inet(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto in = check_listen_socket(inet.get());
  REQUIRE_FALSE(in.ok());
  CHECK(in.error().what.find("not a Unix socket") != std::string::npos);

  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  UniqueFd r(p[0]), w(p[1]);
  auto pipe = check_listen_socket(r.get());
  REQUIRE_FALSE(pipe.ok());
  CHECK(pipe.error().what == "is not a socket");

  const int gone = ::dup(w.get());
  ::close(gone);
  auto closed = check_listen_socket(gone);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().what == "is not open");
}

TEST_CASE("StatusThrottle: a changed line at most once per interval, a held-back change at the next call") {
  constexpr coloc::broker::Nanos s = 1'000'000'000;
  StatusThrottle t(s);
  CHECK(t.due(0));
  CHECK(t.take(10, "serving 1 device, 0 jobs"));
  CHECK_FALSE(t.take(20, "serving 1 device, 0 jobs"));  // not due, and unchanged
  CHECK_FALSE(t.due(10 + s - 1));
  CHECK_FALSE(t.take(10 + s - 1, "serving 1 device, 1 job"));  // changed, but not due yet
  CHECK(t.due(10 + s));
  CHECK(t.take(10 + s, "serving 1 device, 1 job"));  // the held-back change, at the first call when due
  CHECK_FALSE(t.take(10 + 5 * s, "serving 1 device, 1 job"));  // unchanged: nothing
  t.sent(20 * s, "ready");  // READY=1's line counts
  CHECK_FALSE(t.take(20 * s + 1, "other"));
  CHECK(t.take(21 * s, "other"));
}

TEST_CASE("deploy/colocd.toml: every key of the settings table, commented out, with its default, and it parses") {
  const std::string text = coloc::test::read_file(coloc::test::source_path("deploy/colocd.toml"));
  // The top-level keys: "# key = value" lines before the first (commented) table.
  const std::string top = text.substr(0, text.find("\n# ["));
  std::string uncommented;
  std::set<std::string> keys;
  std::istringstream in(top);
  const std::regex line(R"(^# ([a-z_]+) = (.*)$)");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    CHECK_MESSAGE(keys.insert(m[1]).second, "key ", m[1], " twice");
    uncommented += std::string(m[1]) + " = " + std::string(m[2]) + "\n";
  }
  coloc::config::Config defaults, example;
  auto r = coloc::config::apply_toml(uncommented, "deploy/colocd.toml", example);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  for (const coloc::config::Setting& s : coloc::config::settings()) {
    CAPTURE(s.key);
    CHECK_MESSAGE(keys.count(s.key) == 1, "deploy/colocd.toml lacks '# ", s.key, " = ", s.default_text, "'");
    CHECK(s.show(example) == s.show(defaults));  // the default, not another value
    keys.erase(s.key);
  }
  CHECK_MESSAGE(keys.empty(), "deploy/colocd.toml has keys the table does not: ", *keys.begin());
  // The per-device table, uncommented, parses too.
  const std::string tables = text.substr(top.size());
  std::string dev;
  std::istringstream tin(tables);
  for (std::string l; std::getline(tin, l);)
    if (l.rfind("# [", 0) == 0 || std::regex_match(l, line)) dev += l.substr(2) + "\n";
  REQUIRE(dev.find("[devices.\"GPU-") != std::string::npos);
  coloc::config::Config with_device;
  auto rd = coloc::config::apply_toml(dev, "deploy/colocd.toml", with_device);
  CHECK_MESSAGE(rd.ok(), rd.error().message());
}

}  // TEST_SUITE
