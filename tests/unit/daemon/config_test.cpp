// colocd's settings (daemon/config/config.h): sizes, percentages, durations; the table of settings
// driving TOML, flags, --check-config's output and the docs; per-device policy tables; flags over
// the file over the defaults; the default path ($COLOC_CONFIG); the policy store's config layer.
#include <doctest/doctest.h>

#include <cstdlib>
#include <sstream>
#include <set>

#include "compute/policy_store.h"
#include "compute/scheduler.h"
#include "config/config.h"
#include "../../support/proc.h"

using namespace coloc::config;

namespace {

const std::string kUuid = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001";

/// Sets (or unsets, with nullptr) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// The TOML text of `s`'s value in `c` (quoted when it is a string).
std::string toml_value(const Setting& s, const Config& c) { return s.quoted ? "\"" + s.show(c) + "\"" : s.show(c); }

coloc::Result<CommandLine> parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"colocd"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(int(argv.size()), argv.data());
}

/// How many times `what` occurs in `text`.
size_t count_of_text(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

}  // namespace

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

TEST_CASE("config: durations, quanta, slowdowns, HOST:PORT") {
  CHECK(parse_duration("250ms", "d").value() == 250'000'000);
  CHECK(parse_duration("5s", "d").value() == 5'000'000'000);
  CHECK(parse_duration("2m", "d").value() == 120'000'000'000);
  CHECK(parse_duration("1.5", "d").value() == 1'500'000'000);
  CHECK(parse_duration("2d", "d").value() == 2ull * 86400 * 1'000'000'000);  // days (issue 28)
  CHECK(parse_duration("1h", "d").value() == 3600ull * 1'000'000'000);
  CHECK_FALSE(parse_duration("yesterday", "d").ok());
  CHECK_FALSE(parse_duration("soon", "d").ok());
  CHECK_FALSE(parse_duration("-3s", "d").ok());
  CHECK_FALSE(parse_duration("", "d").ok());
  CHECK(format_duration(300'000'000'000) == "300s");
  CHECK(format_duration(250'000'000) == "250ms");
  CHECK(format_bytes(64ull << 20) == "64MiB");
  CHECK(format_bytes(1000) == "1000");
  CHECK(parse_quantum("50ms", "q").value() == 50'000'000);
  CHECK_FALSE(parse_quantum("0.5ms", "q").ok());
  CHECK_FALSE(parse_quantum("2m", "q").ok());
  CHECK(parse_target_slowdown("10%", "t").value() == 10);
  CHECK(parse_target_slowdown("10", "t").value() == 10);
  CHECK_FALSE(parse_target_slowdown("51%", "t").ok());
  auto hp = parse_host_port("127.0.0.1:9479", "m");
  REQUIRE(hp.ok());
  CHECK(hp.value().first == "127.0.0.1");
  CHECK(hp.value().second == 9479);
  CHECK(parse_host_port("[::1]:9479", "m").value().first == "::1");
  CHECK(parse_host_port("node-1.example:80", "m").ok());
  CHECK(parse_host_port("127.0.0.1:0", "m").value().second == 0);  // any free port: status says which
  for (const char* bad : {"9479", "127.0.0.1", ":9479", "127.0.0.1:65536", "127.0.0.1:70000", "::1:9479", "a b:1", "h:x"})
    CHECK_MESSAGE(!parse_host_port(bad, "m").ok(), bad);
}

TEST_CASE("config: every key of the table round-trips through TOML and flags, and its default is documented as it is") {
  std::set<std::string> keys, flags;
  for (const Setting& s : settings()) {
    CAPTURE(s.key);
    CHECK(keys.insert(s.key).second);
    CHECK(flags.insert(s.flag).second);
    CHECK(find_setting(s.key) == &s);
    // The default as the table says it is the default as shown.
    Config dflt;
    CHECK(s.show(dflt) == s.default_text);
    // The example (not the default) parses from TOML and shows the same after a second trip.
    Config a;
    auto r = apply_toml(std::string(s.key) + " = " + s.example + "\n", "t.toml", a);
    REQUIRE_MESSAGE(r.ok(), r.error().message());
    CHECK(a.sources[s.key] == Source::kFile);
    CHECK(s.show(a) != s.default_text);
    Config b;
    REQUIRE(apply_toml(std::string(s.key) + " = " + toml_value(s, a) + "\n", "t.toml", b).ok());
    CHECK(s.show(b) == s.show(a));
    // The same value as a flag.
    auto f = load("", false, {{s.key, s.show(a)}});
    REQUIRE_MESSAGE(f.ok(), f.error().message());
    CHECK(s.show(f.value()) == s.show(a));
    CHECK(f.value().sources[s.key] == Source::kFlag);
    CHECK(changed(dflt, a).size() == 1);
  }
}

TEST_CASE("config: TOML settings, and errors that name the file, line and key") {
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
metrics_listen = "127.0.0.1:9479"
policy = "priority"
target_slowdown = 10
history = false
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
  CHECK(c.metrics_listen == "127.0.0.1:9479");
  CHECK(c.policy.mode == coloc::proto::PolicyMode::kPriority);
  CHECK(c.policy.target_pct == 10);
  CHECK_FALSE(c.history);

  // A bad file changes nothing, and says where.
  const Config before = c;
  auto e = apply_toml("\nheadroom = \"much\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("f.toml:2: headroom: 'much' is not a size") != std::string::npos);
  CHECK(changed(before, c).empty());
  e = apply_toml("headroom = \"1%\"\ncolour = \"blue\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:2: colour: unknown setting");
  CHECK(c.headroom.fraction == before.headroom.fraction);
  e = apply_toml("this is not toml", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("f.toml:1") != std::string::npos);
  e = apply_toml("max_per_user = 0\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message().find("f.toml:1: max_per_user: must be more than 0") != std::string::npos);
  e = apply_toml("metrics_listen = \"localhost\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message().find("f.toml:1: metrics_listen: 'localhost' is not HOST:PORT") != std::string::npos);
  // The queue's keys (issue 28).
  e = apply_toml("headroom = \"3%\"\nbackfill = \"maybe\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message() == "f.toml:2: backfill: 'maybe' is not one of easy, off");
  CHECK(changed(before, c).empty());
  e = apply_toml("admission_timeout = \"yesterday\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message().find("f.toml:1: admission_timeout:") != std::string::npos);
  e = apply_toml("admission_timeout = 0\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message().find("f.toml:1: admission_timeout: must be more than 0") != std::string::npos);
  CHECK(changed(before, c).empty());
  REQUIRE(apply_toml("backfill = \"off\"\nadmission_timeout = \"2h\"\n", "f.toml", c).ok());
  CHECK(c.backfill == coloc::broker::backfill::Mode::kOff);
  CHECK(c.admission_timeout == 7200ull * 1'000'000'000);
  // report_retention: an age and/or a count; each bad one names the key and changes nothing.
  const Config kept = c;
  for (const char* bad : {"\"30x\"", "\"0 reports\"", "\"30d, 40d\"", "\"5 reports, 6 reports\"", "\"30d,\"",
                          "\"-1d\"", "\"many reports\"", "\"3000\"", "\"30d 5000 reports\""}) {
    INFO(bad);
    e = apply_toml(std::string("report_retention = ") + bad + "\n", "f.toml", c);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().message().rfind("f.toml:1: report_retention: ", 0) == 0);
    CHECK(changed(kept, c).empty());
  }
  CHECK(c.report_retention.count == 10000);  // the default: the newest 10,000, any age
  CHECK(c.report_retention.age == 0);
  // A bare number is no age in seconds (a count was likely meant): the error says how to write each.
  e = apply_toml("report_retention = \"3000\"\n", "f.toml", c);
  CHECK_MESSAGE(e.error().message().find("without a unit: write \"3000 reports\" for a count, or \"3000d\"") !=
                    std::string::npos,
                e.error().message());
  e = apply_toml("report_retention = \"30d 5000 reports\"\n", "f.toml", c);
  CHECK_MESSAGE(e.error().message().find("separate an age and a count with a comma") != std::string::npos,
                e.error().message());
  REQUIRE(apply_toml("report_retention = \"1 report\"\n", "f.toml", c).ok());
  CHECK(c.report_retention.count == 1);
  REQUIRE(apply_toml("report_retention = \"30d, 5000 reports\"\n", "f.toml", c).ok());
  CHECK(c.report_retention.age == 30ull * 86400 * 1'000'000'000);
  CHECK(c.report_retention.count == 5000);
  CHECK(coloc::config::format_retention(c.report_retention) == "30d, 5000 reports");
  REQUIRE(apply_toml("report_retention = \"12h\"\n", "f.toml", c).ok());
  CHECK(c.report_retention.count == 0);
  CHECK(coloc::config::format_retention(c.report_retention) == "43200s");
  REQUIRE(apply_toml("report_retention = \"\"\n", "f.toml", c).ok());
  CHECK(c.report_retention == Config::Retention{0, 0});
}

TEST_CASE("config: an unknown key suggests the nearest one; a wrong type names the expected one") {
  Config c;
  auto e = apply_toml("headrom = \"5%\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:1: headrom: unknown setting (did you mean headroom?)");
  e = apply_toml("\n\nmax_conections_per_user = 5\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:3: max_conections_per_user: unknown setting (did you mean max_connections_per_user?)");
  CHECK(did_you_mean("device") == "devices");
  CHECK(did_you_mean("zzzzzz") == "");
  e = apply_toml("socket = 5\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:1: socket: expected a string, not an integer");
  e = apply_toml("[headroom]\nx = 1\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:1: headroom: expected a string or an integer, not a table");
  e = apply_toml("history = \"yes\"\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what == "f.toml:1: history: expected a boolean, not a string");
  e = apply_toml("max_connections_per_user = [1, 2]\n", "f.toml", c);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().what.find("not an array") != std::string::npos);
}

TEST_CASE("config: per-device policy tables") {
  Config c;
  auto r = apply_toml("policy = \"timeslice\"\n\n[devices.\"" + kUuid +
                          "\"]\npolicy = \"timeslice\"\nquantum = \"40ms\"\n"
                          "[devices.\"GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c002\"]\npolicy = \"priority\"\ntarget_slowdown = \"12%\"\n",
                      "d.toml", c);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  REQUIRE(c.devices.size() == 2);
  coloc::broker::Uuid u;
  REQUIRE(coloc::broker::Uuid::parse(kUuid, &u));
  CHECK(c.devices.at(u).settings.mode == coloc::proto::PolicyMode::kTimeslice);
  CHECK(c.devices.at(u).settings.quantum == 40'000'000);
  CHECK(c.devices.at(u).line == 3);
  const std::string shown = describe(c);
  CHECK(shown.find("[devices.\"" + kUuid + "\"]  # file, line 3\npolicy = \"timeslice\"\nquantum = \"40ms\"") != std::string::npos);
  CHECK(shown.find("target_slowdown = \"12%\"") != std::string::npos);

  struct Bad {
    std::string text, error;
  };
  for (const Bad& b : std::vector<Bad>{
           {"[devices.\"GPU-1\"]\npolicy = \"share\"\n", "d.toml:1: devices.\"GPU-1\": 'GPU-1' is not a device UUID"},
           {"[devices.\"" + kUuid + "\"]\nquantum = \"10ms\"\n", "policy is missing"},
           {"[devices.\"" + kUuid + "\"]\npolicy = \"fast\"\n", "d.toml:2: devices.\"" + kUuid + "\".policy: 'fast' is not share"},
           {"[devices.\"" + kUuid + "\"]\npolicy = \"share\"\nquantun = \"10ms\"\n", "(did you mean quantum?)"},
           {"[devices.\"" + kUuid + "\"]\npolicy = \"timeslice\"\nquantum = \"90s\"\n", "d.toml:3: devices.\"" + kUuid + "\".quantum"},
           {"devices = 5\n", "d.toml:1: devices: expected a table of devices"},
           {"[devices]\n\"" + kUuid + "\" = \"share\"\n", "expected a table (policy, quantum, target_slowdown), not a string"},
       }) {
    CAPTURE(b.text);
    Config d;
    auto e = apply_toml(b.text, "d.toml", d);
    REQUIRE_FALSE(e.ok());
    CHECK_MESSAGE(e.error().what.find(b.error) != std::string::npos, e.error().what);
    CHECK(d.devices.empty());
  }
}

TEST_CASE("config: flags override the file, the file overrides the defaults") {
  coloc::test::TempDir tmp("coloc-config");
  coloc::test::write_file(tmp / "c.toml", "headroom = \"3%\"\nsocket = \"/from/file.sock\"\nwait_timeout = \"1m\"\n");
  auto r = parse({"--config", tmp / "c.toml", "--socket", "/from/flag.sock", "--no-bpf"});
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  const Config& c = r.value().config;
  CHECK(c.socket == "/from/flag.sock");
  CHECK(c.sources.at("socket") == Source::kFlag);
  CHECK(c.headroom.fraction == doctest::Approx(0.03));
  CHECK(c.sources.at("headroom") == Source::kFile);
  CHECK(c.grant_step == 64ull << 20);
  CHECK(c.sources.at("grant_step") == Source::kDefault);
  CHECK(c.watcher == "pidfd");
  CHECK(c.sources.at("watcher") == Source::kFlag);
  CHECK(c.config_file == tmp / "c.toml");
  CHECK(c.config_required);
  // The flags are kept, to be applied again over the file on SIGHUP.
  CHECK(c.flags == FlagValues{{"socket", "/from/flag.sock"}, {"watcher", "pidfd"}});
  const std::string shown = describe(c);
  CHECK(shown.find("socket = \"/from/flag.sock\"") != std::string::npos);
  CHECK(shown.find("# flag\n") != std::string::npos);
  CHECK(shown.find("headroom = \"3%\"") != std::string::npos);
  CHECK(shown.find("grant_step = \"64MiB\"") != std::string::npos);

  auto b = parse({"--headroom", "x"});
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().what.find("--headroom") != std::string::npos);
  auto missing = parse({"--config", "/no/such/file.toml"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message().find("/no/such/file.toml") != std::string::npos);
  CHECK_FALSE(parse({"--frobnicate"}).ok());
  CHECK_FALSE(parse({"--config", tmp.path()}).ok());  // a directory
}

TEST_CASE("config: without --config, $COLOC_CONFIG (or /etc/coloc/colocd.toml) is read when it exists") {
  coloc::test::TempDir tmp("coloc-config");
  {
    ScopedEnv unset("COLOC_CONFIG", nullptr);
    CHECK(default_config_path() == "/etc/coloc/colocd.toml");
  }
  ScopedEnv env("COLOC_CONFIG", (tmp / "colocd.toml").c_str());
  auto none = parse({});  // no file there: the defaults
  REQUIRE_MESSAGE(none.ok(), none.error().message());
  CHECK(none.value().config.config_file.empty());
  CHECK(none.value().config.config_path == tmp / "colocd.toml");
  CHECK(describe(none.value().config).find("does not exist") != std::string::npos);
  coloc::test::write_file(tmp / "colocd.toml", "grant_step = \"32MiB\"\n");
  auto some = parse({});
  REQUIRE(some.ok());
  CHECK(some.value().config.grant_step == 32ull << 20);
  CHECK_FALSE(some.value().config.config_required);
  coloc::test::write_file(tmp / "colocd.toml", "grant_step = \"lots\"\n");
  auto bad = parse({});  // a file that is there must be right
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().what.find(tmp / "colocd.toml" + ":1: grant_step") != std::string::npos);
  ScopedEnv empty("COLOC_CONFIG", "");
  auto off = parse({});
  REQUIRE(off.ok());
  CHECK(off.value().config.config_path.empty());
}

TEST_CASE("config: a bad setting reads as a sentence, and a per-user cap of 0 is refused") {
  // Validation errors are not failed system calls: no ": Invalid argument" tacked on.
  auto b = parse({"--headroom", "lots"});
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message().find("Invalid argument") == std::string::npos);
  CHECK(b.error().message() == b.error().what);
  auto z = parse({"--max-per-user", "0"});
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().message().find("--max-per-user: must be more than 0") != std::string::npos);
  CHECK(*parse({"--max-per-user", "1GiB"}).value().config.max_per_user == 1ull << 30);
}

TEST_CASE("config: the policy store's config layer sits under what coloc policy stored") {
  using coloc::compute::PolicySettings;
  coloc::test::TempDir tmp("coloc-config");
  coloc::compute::PolicyStore store(tmp / "policies.json");
  coloc::compute::Scheduler sched;
  coloc::broker::Uuid a, b, c;
  REQUIRE(coloc::broker::Uuid::parse("GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001", &a));
  REQUIRE(coloc::broker::Uuid::parse("GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c002", &b));
  REQUIRE(coloc::broker::Uuid::parse("GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c003", &c));
  PolicySettings ts, pr;
  ts.mode = coloc::proto::PolicyMode::kTimeslice;
  ts.quantum = 40'000'000;
  pr.mode = coloc::proto::PolicyMode::kPriority;
  store.set(a, PolicySettings{});  // coloc policy a share
  store.set_configured(pr, {{a, ts}, {b, ts}});
  CHECK(store.for_device(a) == PolicySettings{});  // stored wins
  CHECK(store.for_device(b) == ts);                // configured device
  CHECK(store.for_device(c) == pr);                // configured default
  store.apply(sched);
  CHECK(sched.policy(b) == ts);
  CHECK(store.apply_new_device(c, sched));
  CHECK(sched.policy(c) == pr);
  CHECK_FALSE(store.apply_new_device(c, sched));
  // SIGHUP: the file's entry for a replaces the stored one; a configured default going away
  // brings c back to share.
  CHECK(store.erase(a));
  store.set_configured(std::nullopt, {{a, ts}});
  store.apply_all(sched, {a, b, c});
  CHECK(sched.policy(a) == ts);
  CHECK(sched.policy(b) == PolicySettings{});
  CHECK(sched.policy(c) == PolicySettings{});
  // The configured layer is never saved.
  REQUIRE(store.save().ok());
  coloc::compute::PolicyStore again(tmp / "policies.json");
  CHECK(again.load().empty());
  CHECK_FALSE(again.for_device(a).has_value());
}

TEST_CASE("config: docs/operations.md lists every key with its default, and no other") {
  const std::string doc = coloc::test::read_file(coloc::test::source_path("docs/operations.md"));
  const std::string table = markdown_table();
  CHECK_MESSAGE(doc.find(table) != std::string::npos,
                "docs/operations.md's Configuration section must hold this table (generated from config_table.cpp):\n"
                    << table);
  // No documented key that the table lacks: every "| `key` |" row of the section is a setting.
  const size_t from = doc.find("## Configuration"), to = doc.find("\n## ", from + 1);
  REQUIRE(from != std::string::npos);
  const std::string section = doc.substr(from, to == std::string::npos ? std::string::npos : to - from);
  size_t rows = 0;
  for (size_t p = 0; (p = section.find("\n| `", p)) != std::string::npos; ++p) {
    const size_t end = section.find('`', p + 4);
    const std::string key = section.substr(p + 4, end - p - 4);
    CHECK_MESSAGE(find_setting(key) != nullptr, "documented key '", key, "' is not a setting");
    ++rows;
  }
  CHECK(rows == settings().size());
}

TEST_CASE("config: deploy/colocd.toml, every key uncommented, parses") {
  const std::string path = coloc::test::source_path("deploy/colocd.toml");
  if (!coloc::test::file_exists(path)) return;  // not written yet
  std::string text, line;
  std::istringstream in(coloc::test::read_file(path));
  size_t keys = 0, devices = 0;
  bool in_device = false;
  while (std::getline(in, line)) {
    // "# [devices."UUID"]" starts an example device table; "# key = value", where key is a
    // setting (or, in a device table, a device's key), is uncommented.
    if (line.rfind("# [devices.", 0) == 0) {
      line = line.substr(2);
      in_device = true;
      ++devices;
    } else if (line.rfind("# ", 0) == 0) {
      const std::string rest = line.substr(2);
      const size_t eq = rest.find(" = ");
      const std::string key = eq == std::string::npos ? "" : rest.substr(0, eq);
      if (!key.empty() && (in_device ? key == "policy" || key == "quantum" || key == "target_slowdown" : find_setting(key) != nullptr)) {
        line = rest;
        ++keys;
      }
    }
    text += line + "\n";
  }
  Config c;
  auto r = apply_toml(text, path, c);
  CHECK_MESSAGE(r.ok(), r.error().message());
  CHECK(keys > 0);
  CHECK(c.devices.size() == devices);
}

TEST_CASE("config: an error quoting the file shows its control characters escaped") {
  // A key or value with an escape sequence went raw to the terminal (--check-config) and the log
  // (SIGHUP).
  coloc::test::TempDir tmp("coloc-config");
  coloc::test::write_file(tmp / "c.toml", "\"\\u001b[31mred\" = 1\n");
  auto key = coloc::config::load(tmp / "c.toml", true, {});
  REQUIRE_FALSE(key.ok());
  CHECK(key.error().what.find('\x1b') == std::string::npos);
  CHECK(key.error().what.find("\\u001b[31mred: unknown setting") != std::string::npos);
  coloc::test::write_file(tmp / "c.toml", "policy = \"a\\nb\\u0007\"\n");
  auto value = coloc::config::load(tmp / "c.toml", true, {});
  REQUIRE_FALSE(value.ok());
  CHECK(value.error().what.find('\n') == std::string::npos);
  CHECK(value.error().what.find("'a\\u000ab\\u0007' is not share") != std::string::npos);
}


TEST_CASE("config: --check-config shows a device's quantum only under timeslice, its target only under priority") {
  const std::string dev2 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c002", dev3 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c003";
  Config c;
  auto r = apply_toml("[devices.\"" + kUuid + "\"]\npolicy = \"priority\"\ntarget_slowdown = 10\n[devices.\"" + dev2 +
                          "\"]\npolicy = \"timeslice\"\nquantum = 0.25\n[devices.\"" + dev3 + "\"]\npolicy = \"share\"\n",
                      "d.toml", c);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  const std::string shown = describe(c);
  const std::string devices = shown.substr(shown.find("[devices."));
  CHECK_MESSAGE(devices.find("[devices.\"" + kUuid + "\"]  # file, line 1\npolicy = \"priority\"\ntarget_slowdown = \"10%\"\n\n") !=
                    std::string::npos,
                devices);
  CHECK_MESSAGE(devices.find("[devices.\"" + dev2 + "\"]  # file, line 4\npolicy = \"timeslice\"\nquantum = \"250ms\"\n\n") !=
                    std::string::npos,
                devices);
  CHECK_MESSAGE(devices.find("[devices.\"" + dev3 + "\"]  # file, line 7\npolicy = \"share\"\n") != std::string::npos, devices);
  CHECK(count_of_text(devices, "quantum") == 1);
  CHECK(count_of_text(devices, "target_slowdown") == 1);
  // What it prints reads back as the same tables.
  Config again;
  REQUIRE(apply_toml(devices, "d.toml", again).ok());
  REQUIRE(again.devices.size() == 3);
  for (const auto& [uuid, dp] : c.devices) CHECK(again.devices.at(uuid).settings == dp.settings);
}

TEST_CASE("config: a float duration is quoted as written, and the duration it read in a clean form") {
  // 0.0005 s is 500us: not whole milliseconds. It was echoed as '0.00050000000000000001'.
  for (const std::string& text : {std::string("quantum = 0.0005\n"),
                                   "[devices.\"" + kUuid + "\"]\npolicy = \"timeslice\"\nquantum = 0.0005\n"}) {
    CAPTURE(text);
    Config c;
    auto r = apply_toml(text, "q.toml", c);
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error().what.find("quantum: '0.0005' (500us) is not whole milliseconds from 1ms to 60s") !=
                      std::string::npos,
                  r.error().what);
    CHECK(r.error().what.find("00000") == std::string::npos);
  }
  // A float that is a whole number of milliseconds reads, and shows as one.
  Config c;
  REQUIRE(apply_toml("quantum = 0.1\nwait_timeout = 1.5\n", "q.toml", c).ok());
  CHECK(find_setting("quantum")->show(c) == "100ms");
  CHECK(find_setting("wait_timeout")->show(c) == "1500ms");
  // The text as given is not repeated in parentheses when it already says it plainly.
  auto plain = parse_quantum("1500us", "quantum");
  REQUIRE_FALSE(plain.ok());
  CHECK(plain.error().what == "quantum: '1500us' is not whole milliseconds from 1ms to 60s");
}

TEST_CASE("config: a group that does not exist is named by file:line: key, or by its flag; --check-config exits 2") {
  const std::string bad = "coloc-no-such-group-7f3a";
  coloc::test::TempDir tmp("coloc-config");
  coloc::test::write_file(tmp / "g.toml", "headroom = \"2%\"\n\nadmin_group = \"" + bad + "\"\n");
  auto file = load(tmp / "g.toml", true, {});
  REQUIRE(file.ok());
  CHECK(origin_of(file.value(), "admin_group") == tmp / "g.toml" + ":3: admin_group");
  CHECK(origin_of(file.value(), "high_priority_group") == "high_priority_group");
  auto e = check_groups(file.value());
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message() == tmp / "g.toml" + ":3: admin_group: no such group '" + bad + "'");
  // The flag wins over the file, and the error names it.
  auto flag = load(tmp / "g.toml", true, {{"admin_group", "root"}, {"high_priority_group", bad}});
  REQUIRE(flag.ok());
  CHECK(lookup_group(flag.value(), "admin_group").ok());
  e = check_groups(flag.value());
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message() == "--high-priority-group: no such group '" + bad + "'");
  // None named: fine.
  CHECK(check_groups(Config{}).ok());
  // A control character in the name is escaped in the message.
  coloc::test::write_file(tmp / "c.toml", "\nhigh_priority_group = \"x\\u001by\"\n");
  auto ctl = load(tmp / "c.toml", true, {});
  REQUIRE(ctl.ok());
  e = check_groups(ctl.value());
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message() == tmp / "c.toml" + ":2: high_priority_group: no such group 'x\\u001by'");

  // --check-config, in process: exit 2, the message on stderr, nothing on stdout.
  const std::string path = tmp / "g.toml";
  const char* argv[] = {"colocd", "--check-config", "--config", path.c_str()};
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  REQUIRE(out);
  REQUIRE(err);
  CHECK(check_config(4, argv, out, err) == 2);
  auto slurp = [](std::FILE* f) {
    std::string text;
    std::rewind(f);
    char buf[512];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    return text;
  };
  CHECK(slurp(out).empty());
  CHECK(slurp(err) == "colocd: " + path + ":3: admin_group: no such group '" + bad + "'\n");
}

}  // TEST_SUITE
