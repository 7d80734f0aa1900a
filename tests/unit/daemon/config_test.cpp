// colocd's settings: sizes, percentages, durations, TOML, flags over the file.
#include <doctest/doctest.h>

#include "config/config.h"
#include "../../support/proc.h"

using namespace coloc::config;

TEST_SUITE("daemon") {

TEST_CASE("config: headroom is a percentage or a size") {
  auto h = parse_headroom("5%", "--headroom");
  REQUIRE(h.ok());
  CHECK(h.value().fraction == doctest::Approx(0.05));
  CHECK_FALSE(h.value().bytes);
  h = parse_headroom("1.5GiB", "--headroom");
  REQUIRE(h.ok());
  CHECK(*h.value().bytes == 3ull << 29);
  auto bad = parse_headroom("lots", "--headroom");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().what.find("--headroom") != std::string::npos);
  CHECK_FALSE(parse_headroom("150%", "x").ok());
  CHECK_FALSE(parse_headroom("-1%", "x").ok());
}

TEST_CASE("config: durations") {
  CHECK(parse_duration("250ms", "d").value() == 250'000'000);
  CHECK(parse_duration("5s", "d").value() == 5'000'000'000);
  CHECK(parse_duration("2m", "d").value() == 120'000'000'000);
  CHECK(parse_duration("1.5", "d").value() == 1'500'000'000);
  CHECK_FALSE(parse_duration("soon", "d").ok());
  CHECK_FALSE(parse_duration("-3s", "d").ok());
  CHECK_FALSE(parse_duration("", "d").ok());
}

TEST_CASE("config: TOML settings, and errors that name the key") {
  Config c;
  auto r = apply_toml(R"(
socket = "/tmp/x.sock"
state_dir = "/tmp/state"
headroom = "4GiB"
max_per_user = "100GiB"
grant_step = 134217728
wait_timeout = "10s"
watcher = "pidfd"
admin_group = "gpuadmin"
)",
                      "colocd.toml", c);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(c.socket == "/tmp/x.sock");
  CHECK(*c.headroom.bytes == 4ull << 30);
  CHECK(*c.max_per_user == 100ull << 30);
  CHECK(c.grant_step == 128ull << 20);
  CHECK(c.wait_timeout == 10'000'000'000);
  CHECK(c.watcher == "pidfd");
  CHECK(c.admin_group == "gpuadmin");

  auto e = apply_toml("headroom = \"much\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("f.toml: headroom") != std::string::npos);
  e = apply_toml("colour = \"blue\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("unknown setting") != std::string::npos);
  e = apply_toml("socket = [1, 2]\n", "f.toml", c);
  CHECK_FALSE(e.ok());
  e = apply_toml("this is not toml", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("f.toml:1") != std::string::npos);
}

TEST_CASE("config: flags override the file") {
  coloc::test::TempDir tmp("coloc-config");
  coloc::test::write_file(tmp / "c.toml", "headroom = \"3%\"\nsocket = \"/from/file.sock\"\n");
  std::string file = tmp / "c.toml";
  const char* argv[] = {"colocd", "--config", file.c_str(), "--socket", "/from/flag.sock", "--no-bpf"};
  auto r = parse_command_line(6, argv);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r.value().config.socket == "/from/flag.sock");
  CHECK(r.value().config.headroom.fraction == doctest::Approx(0.03));
  CHECK(r.value().config.watcher == "pidfd");
  const char* bad[] = {"colocd", "--headroom", "x"};
  auto b = parse_command_line(3, bad);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().what.find("--headroom") != std::string::npos);
  const char* missing[] = {"colocd", "--config", "/no/such/file.toml"};
  CHECK_FALSE(parse_command_line(3, missing).ok());
  const char* unknown[] = {"colocd", "--frobnicate"};
  CHECK_FALSE(parse_command_line(2, unknown).ok());
}

TEST_CASE("config: a bad setting reads as a sentence, and a per-user cap of 0 is refused") {
  // Validation errors are not failed system calls: no ": Invalid argument" tacked on.
  const char* bad[] = {"colocd", "--headroom", "lots"};
  auto b = parse_command_line(3, bad);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message().find("Invalid argument") == std::string::npos);
  CHECK(b.error().message() == b.error().what);
  const char* zero[] = {"colocd", "--max-per-user", "0"};
  auto z = parse_command_line(3, zero);
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().message().find("--max-per-user: must be more than 0") != std::string::npos);
  Config c;
  auto t = apply_toml("max_per_user = 0\n", "f.toml", c);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message().find("f.toml: max_per_user: must be more than 0") != std::string::npos);
  const char* ok[] = {"colocd", "--max-per-user", "1GiB"};
  CHECK(*parse_command_line(3, ok).value().config.max_per_user == 1ull << 30);
}

}  // TEST_SUITE
