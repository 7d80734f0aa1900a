// coloc history and coloc history forget against a real colocd: an empty history; runs written
// into <state-dir>/history.db before colocd starts (through the store itself) listed, as a table
// and --json, with another user's command hidden; forget exits 4 for an unknown fingerprint and 5
// for another user's (root may), and what is forgotten stays forgotten across a restart.
#include <doctest/doctest.h>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../daemon/colocd_fixture.h"
#include "cli_helpers.h"
#include "history/history_store.h"

using namespace coloc::test;
using coloc::history::Fingerprint;
using coloc::history::HistoryStore;
using coloc::history::RunEnd;
using coloc::history::RunRecord;
using nlohmann::json;

namespace {

constexpr uint64_t GiB = 1ull << 30;

RunRecord run_of(const Fingerprint& fp, const std::string& command, uint64_t peak, int64_t ended, RunEnd end = RunEnd::kClean) {
  RunRecord r;
  r.fp = fp;
  r.command = command;
  r.ended_wall_ms = ended;
  r.duration_ms = 1000;
  r.exit_status = end == RunEnd::kClean ? 0 : 137;
  r.end = end;
  r.peak = peak;
  return r;
}

/// The entry of `fp` in a `coloc history --json` answer, or null.
json entry_of(const json& list, const std::string& fp) {
  for (const json& f : list["fingerprints"])
    if (f["fingerprint"] == fp) return f;
  return nullptr;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc history: an empty history; forget of an unknown fingerprint exits 4, --all exits 0") {
  Colocd d;
  ProcResult r = coloc_cli(d, {"history", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json j = json::parse(r.out);
  CHECK(j["fingerprints"] == json::array());
  CHECK(j["usable"] == true);
  CHECK(j["path"] == d.state() + "/history.db");
  REQUIRE(wait_until([&] { return json::parse(coloc_cli(d, {"history", "--json"}).out)["loaded"] == true; }));
  r = coloc_cli(d, {"history"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find("No run history") != std::string::npos, r.out);

  r = coloc_cli(d, {"history", "forget", "0123456789abcdef"});
  CHECK_MESSAGE(r.exit_code == 4, describe(r));
  CHECK(r.err.find("0123456789abcdef") != std::string::npos);
  r = coloc_cli(d, {"history", "forget", "--all"});
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  // Usage: neither or both, and something that is no fingerprint.
  CHECK(coloc_cli(d, {"history", "forget"}).exit_code == 2);
  CHECK(coloc_cli(d, {"history", "forget", "0123456789abcdef", "--all"}).exit_code == 2);
  CHECK(coloc_cli(d, {"history", "forget", "not-hex"}).exit_code == 2);
  r = coloc_cli(d, {"history", "forget", "--help"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("4 no such fingerprint") != std::string::npos);
  CHECK(r.out.find("5 another user's") != std::string::npos);
  CHECK(d.running());
}

TEST_CASE("coloc history: runs from history.db listed; another user's command hidden; forget is the owner's or root's") {
  struct passwd* pw = ::getpwnam("nobody");
  if (::geteuid() != 0 || !pw) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  Colocd d({}, false);
  ::mkdir(d.state().c_str(), 0755);
  const Fingerprint roots{0, 0x1111, 0x2222, "NVIDIA H100 80GB HBM3"};
  const Fingerprint nobodys{uint32_t(pw->pw_uid), 0x3333, 0x2222, "NVIDIA H100 80GB HBM3"};
  {
    HistoryStore s(d.state() + "/history.db");
    s.record(run_of(roots, "python secret_train.py --key=abc", 20 * GiB, 1000));
    s.record(run_of(roots, "python secret_train.py --key=abc", 22 * GiB, 2000));
    s.record(run_of(nobodys, "python mine.py", 5 * GiB, 3000));
    s.record(run_of(nobodys, "python mine.py", 7 * GiB, 4000, RunEnd::kOom));
    s.wait_idle();
    REQUIRE(s.usable());
  }
  d.start();
  REQUIRE(wait_until([&] { return json::parse(coloc_cli(d, {"history", "--json"}).out)["loaded"] == true; }));

  // Root sees both commands, newest first.
  ProcResult r = coloc_cli(d, {"history", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json j = json::parse(r.out);
  REQUIRE(j["fingerprints"].size() == 2);
  CHECK(j["fingerprints"][0]["fingerprint"] == nobodys.id());
  const json mine = entry_of(j, nobodys.id()), root = entry_of(j, roots.id());
  CHECK(root["command"] == "python secret_train.py --key=abc");
  CHECK(root["runs"] == 2);
  CHECK(root["p50"] == 20 * GiB);
  CHECK(root["p95"] == 22 * GiB);
  CHECK(root["estimate"].get<uint64_t>() > 22 * GiB);
  CHECK(root["user"] == "root");
  CHECK(mine["command"] == "python mine.py");
  CHECK(mine["last_end"] == "oom");
  CHECK(mine["uid"] == pw->pw_uid);
  r = coloc_cli(d, {"history"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("FINGERPRINT") != std::string::npos);
  CHECK(r.out.find("ESTIMATE") != std::string::npos);
  CHECK(r.out.find(roots.id()) != std::string::npos);
  CHECK(r.out.find("secret_train.py") != std::string::npos);
  CHECK(r.out.find("20.00 GiB") != std::string::npos);

  // nobody sees its own command, not root's.
  r = coloc_as_nobody(d, {"history", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  j = json::parse(r.out);
  CHECK(entry_of(j, roots.id())["command"].is_null());
  CHECK(entry_of(j, nobodys.id())["command"] == "python mine.py");
  r = coloc_as_nobody(d, {"history"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("secret_train.py") == std::string::npos);
  CHECK(r.out.find("(hidden)") != std::string::npos);
  CHECK(r.out.find("python mine.py") != std::string::npos);

  // nobody may not forget root's (5), may forget its own; --all takes only its own.
  r = coloc_as_nobody(d, {"history", "forget", roots.id()});
  CHECK_MESSAGE(r.exit_code == 5, describe(r));
  r = coloc_as_nobody(d, {"history", "forget", "--all"});
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("Forgot 1 fingerprint") != std::string::npos);
  r = coloc_as_nobody(d, {"history", "forget", nobodys.id()});
  CHECK_MESSAGE(r.exit_code == 4, describe(r));  // gone now
  j = json::parse(coloc_cli(d, {"history", "--json"}).out);
  REQUIRE(j["fingerprints"].size() == 1);
  CHECK(j["fingerprints"][0]["fingerprint"] == roots.id());

  // Forgotten on disk too: still so after a restart; root may forget anyone's.
  d.stop();
  d.start();
  REQUIRE(wait_until([&] { return json::parse(coloc_cli(d, {"history", "--json"}).out)["loaded"] == true; }));
  j = json::parse(coloc_cli(d, {"history", "--json"}).out);
  REQUIRE(j["fingerprints"].size() == 1);
  CHECK(j["fingerprints"][0]["fingerprint"] == roots.id());
  r = coloc_cli(d, {"history", "forget", roots.id(), "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(json::parse(r.out)["forgotten"] == 1);
  CHECK(json::parse(coloc_cli(d, {"history", "--json"}).out)["fingerprints"].empty());
}

TEST_CASE("coloc history: a corrupt history.db leaves colocd serving, history off and said so") {
  Colocd d({}, false);
  ::mkdir(d.state().c_str(), 0755);
  write_file(d.state() + "/history.db", std::string(8192, 'x'));
  d.start();
  REQUIRE(wait_until([&] { return json::parse(coloc_cli(d, {"history", "--json"}).out)["loaded"] == true; }));
  ProcResult r = coloc_cli(d, {"history", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json j = json::parse(r.out);
  CHECK(j["usable"] == false);
  CHECK(j["fingerprints"].empty());
  r = coloc_cli(d, {"history"});
  CHECK(r.exit_code == 0);
  CHECK_MESSAGE(r.out.find("Run history is off") != std::string::npos, r.out);
  CHECK(coloc_cli(d, {"history", "forget", "--all"}).exit_code == 0);
  CHECK(coloc_cli(d, {"status", "--json"}).exit_code == 0);  // everything else goes on
  const std::string log = d.log();
  size_t said = 0;
  for (size_t at = log.find("run history is off"); at != std::string::npos; at = log.find("run history is off", at + 1)) ++said;
  CHECK_MESSAGE(said == 1, log);
  CHECK(read_file(d.state() + "/history.db") == std::string(8192, 'x'));
}

}  // TEST_SUITE
