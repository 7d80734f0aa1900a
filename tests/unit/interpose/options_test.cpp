// Unit tests of the interposer's options (interpose/options.h) and logger (interpose/log.h).
#include "interpose/options.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "interpose/log.h"

using namespace coloc::interpose;

namespace {

// Reads options from KEY=VALUE strings.
Options read(std::vector<std::string> vars, int pid = 4242) {
  std::vector<char*> env;
  for (auto& v : vars) env.push_back(v.data());
  env.push_back(nullptr);
  Options o;
  read_options(env.data(), pid, &o);
  return o;
}

bool has_error(const Options& o, const char* needle) {
  for (int i = 0; i < o.n_errors; ++i)
    if (std::strstr(o.errors[i], needle)) return true;
  return false;
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("options: defaults") {
  Options o = read({"PATH=/bin", "HOME=/root"});
  CHECK(o.mem_limit == kNoLimit);
  CHECK(limit_for_ordinal(o, 0) == kNoLimit);
  CHECK(o.log_level == LogLevel::warn);
  CHECK(o.context_bytes == 512ull << 20);
  CHECK(o.report[0] == '\0');
  CHECK(o.n_errors == 0);
  CHECK(std::string(o.job).ends_with("-4242"));  // <command>-<pid>
}

TEST_CASE("options: every variable of the table") {
  Options o = read({"COLOC_MEM_LIMIT=20GiB", "COLOC_MEM_LIMIT_1=1.5G", "COLOC_LOG_LEVEL=debug", "COLOC_JOB=train",
                    "COLOC_REPORT=/tmp/r.%p.json", "COLOC_CONTEXT_BYTES=300MB", "COLOC_UNRELATED=x"});
  CHECK(o.n_errors == 0);
  CHECK(o.mem_limit == 20ull << 30);
  CHECK(limit_for_ordinal(o, 0) == 20ull << 30);
  CHECK(limit_for_ordinal(o, 1) == 3ull << 29);
  CHECK(limit_for_ordinal(o, 2) == 20ull << 30);
  // Under a daemon only COLOC_MEM_LIMIT_<n> stays a local cap (COLOC_MEM_LIMIT is the request).
  CHECK(device_cap_for_ordinal(o, 0) == kNoLimit);
  CHECK(device_cap_for_ordinal(o, 1) == 3ull << 29);
  CHECK(device_cap_for_ordinal(o, -1) == kNoLimit);
  CHECK(o.log_level == LogLevel::debug);
  CHECK(std::string(o.job) == "train");
  CHECK(std::string(o.report) == "/tmp/r.%p.json");
  CHECK(o.context_bytes == 300000000ull);
  CHECK(kOptionSpecCount == 13);
  CHECK(o.job_set);
}

TEST_CASE("options: the daemon's variables") {
  Options d = read({"PATH=/bin"});
  CHECK(d.socket[0] == '\0');
  CHECK(d.priority == coloc::proto::Priority::kNormal);
  CHECK(d.on_full == coloc::proto::OnFull::kWait);
  CHECK(d.wait_timeout_ns == 0);  // the daemon's default
  CHECK_FALSE(d.require_daemon);
  CHECK_FALSE(d.job_set);

  Options o = read({"COLOC_SOCKET=/tmp/c.sock", "COLOC_PRIORITY=best-effort", "COLOC_ON_FULL=fail",
                    "COLOC_WAIT_TIMEOUT=2m", "COLOC_REQUIRE_DAEMON=1"});
  CHECK(o.n_errors == 0);
  CHECK(std::string(o.socket) == "/tmp/c.sock");
  CHECK(o.priority == coloc::proto::Priority::kBestEffort);
  CHECK(o.on_full == coloc::proto::OnFull::kFail);
  CHECK(o.wait_timeout_ns == 120ull * 1000000000ull);
  CHECK(o.require_daemon);

  Options bad = read({"COLOC_SOCKET=/" + std::string(200, 's'), "COLOC_PRIORITY=urgent", "COLOC_ON_FULL=panic",
                      "COLOC_WAIT_TIMEOUT=soon", "COLOC_REQUIRE_DAEMON=maybe"});
  CHECK(bad.n_errors == 5);
  CHECK(bad.socket[0] == '\0');
  CHECK(bad.priority == coloc::proto::Priority::kNormal);
  CHECK(bad.on_full == coloc::proto::OnFull::kWait);
  CHECK(bad.wait_timeout_ns == 0);
  CHECK_FALSE(bad.require_daemon);
  CHECK(has_error(bad, "COLOC_PRIORITY=\"urgent\": not one of high, normal, best-effort; using normal"));
  CHECK(has_error(bad, "COLOC_ON_FULL=\"panic\""));
  CHECK(has_error(bad, "COLOC_WAIT_TIMEOUT=\"soon\""));
  CHECK(has_error(bad, "COLOC_REQUIRE_DAEMON=\"maybe\""));
  CHECK(has_error(bad, "too long for a Unix socket"));
  CHECK(read({"COLOC_WAIT_TIMEOUT=0"}).n_errors == 1);  // a zero timeout is not a timeout
}

TEST_CASE("options: durations") {
  uint64_t ns = 0;
  CHECK(parse_duration("250ms", &ns) == nullptr);
  CHECK(ns == 250000000ull);
  CHECK(parse_duration("5s", &ns) == nullptr);
  CHECK(ns == 5000000000ull);
  CHECK(parse_duration("1.5s", &ns) == nullptr);
  CHECK(ns == 1500000000ull);
  CHECK(parse_duration("300", &ns) == nullptr);  // plain seconds
  CHECK(ns == 300000000000ull);
  CHECK(parse_duration(" 2m ", &ns) == nullptr);
  CHECK(ns == 120000000000ull);
  CHECK(parse_duration("1h", &ns) == nullptr);
  CHECK(ns == 3600000000000ull);
  CHECK(parse_duration("10us", &ns) == nullptr);
  CHECK(ns == 10000ull);
  CHECK(parse_duration("7ns", &ns) == nullptr);
  CHECK(ns == 7ull);
  CHECK(parse_duration("2d", &ns) == nullptr);  // days (issue 28)
  CHECK(ns == 2ull * 86400 * 1000000000ull);
  CHECK(parse_duration("", &ns) != nullptr);
  CHECK(parse_duration("ms", &ns) != nullptr);
  CHECK(parse_duration("-1s", &ns) != nullptr);
  CHECK(parse_duration("5 parsecs", &ns) != nullptr);
  CHECK(parse_duration("99999999999999999999s", &ns) != nullptr);
  CHECK(parse_duration("100000000000h", &ns) != nullptr);  // past 2^64 ns
}

TEST_CASE("options: a malformed value is one clear error and means no limit") {
  Options o = read({"COLOC_MEM_LIMIT=20 GiBs", "COLOC_MEM_LIMIT_0=-1", "COLOC_MEM_LIMIT_99=1G",
                    "COLOC_LOG_LEVEL=loud", "COLOC_CONTEXT_BYTES=lots", "COLOC_MEM_LIMIT_1=2GiB"});
  CHECK(o.mem_limit == kNoLimit);
  CHECK(limit_for_ordinal(o, 0) == kNoLimit);  // given but malformed: no limit, not the global one
  CHECK(limit_for_ordinal(o, 1) == 2ull << 30);
  CHECK(o.log_level == LogLevel::warn);
  CHECK(o.context_bytes == kDefaultContextBytes);
  CHECK(o.n_errors == 5);
  CHECK(has_error(o, "COLOC_MEM_LIMIT=\"20 GiBs\": unknown unit"));
  CHECK(has_error(o, "no limit applies"));
  CHECK(has_error(o, "COLOC_MEM_LIMIT_0=\"-1\": negative size"));
  CHECK(has_error(o, "COLOC_MEM_LIMIT_99: not a device ordinal"));
  CHECK(has_error(o, "COLOC_LOG_LEVEL=\"loud\""));
  CHECK(has_error(o, "COLOC_CONTEXT_BYTES=\"lots\""));
}

TEST_CASE("options: COLOC_MEM_ESTIMATE is a size, not a limit; a malformed one is one clear error and declares none") {
  Options o = read({"COLOC_MEM_ESTIMATE=6.5GiB"});
  CHECK(o.n_errors == 0);
  CHECK(o.mem_estimate == 13ull << 29);
  CHECK(o.mem_limit == kNoLimit);  // an estimate limits nothing
  CHECK(limit_for_ordinal(o, 0) == kNoLimit);
  CHECK(read({"PATH=/bin"}).mem_estimate == 0);
  for (const char* bad : {"COLOC_MEM_ESTIMATE=six gigs", "COLOC_MEM_ESTIMATE=0", "COLOC_MEM_ESTIMATE=-1G",
                          "COLOC_MEM_ESTIMATE=18446744073709551615", "COLOC_MEM_ESTIMATE="}) {
    CAPTURE(bad);
    Options m = read({bad});
    CHECK(m.mem_estimate == 0);
    CHECK(m.n_errors == 1);
    CHECK(has_error(m, "COLOC_MEM_ESTIMATE=\""));
    CHECK(has_error(m, "no estimate is declared"));
  }
}

TEST_CASE("options: COLOC_STEP is the process's step label; a malformed one is one clear error and is ignored") {
  CHECK(read({"PATH=/bin"}).step[0] == '\0');
  for (const char* good : {"batch", "extern", "0", "17", "interactive", "a.b_c-D9", "123456789012345"}) {
    CAPTURE(good);
    Options o = read({std::string("COLOC_STEP=") + good});
    CHECK(o.n_errors == 0);
    CHECK(std::string(o.step) == good);
  }
  CHECK(read({"COLOC_STEP="}).n_errors == 0);  // empty: no step, nothing to say
  CHECK(read({"COLOC_STEP="}).step[0] == '\0');
  for (const std::string& bad : {std::string("a b"), std::string(40, 'x'), std::string(16, '1'), std::string("0/1"),
                                 std::string("step\n"), std::string("caf\xc3\xa9")}) {
    CAPTURE(bad);
    Options m = read({"COLOC_STEP=" + bad, "COLOC_JOB=slurm-42"});
    CHECK(m.step[0] == '\0');
    CHECK(m.n_errors == 1);
    CHECK(has_error(m, "COLOC_STEP=\""));
    CHECK(has_error(m, "not a step label"));
    CHECK(has_error(m, "; ignored"));
    CHECK(std::string(m.job) == "slurm-42");  // the rest of the settings stand
  }
}

TEST_CASE("options: a limit of 2^64-1 bytes (the protocol's no-limit marker) is malformed, not a silent no limit") {
  Options o = read({"COLOC_MEM_LIMIT=18446744073709551615", "COLOC_MEM_LIMIT_2=18446744073709551615B",
                    "COLOC_MEM_LIMIT_3=18446744073709551614"});
  CHECK(o.mem_limit == kNoLimit);
  CHECK(limit_for_ordinal(o, 2) == kNoLimit);
  CHECK(limit_for_ordinal(o, 3) == UINT64_MAX - 1);  // one byte less is a (huge) limit
  CHECK(o.n_errors == 2);
  CHECK(has_error(o, "COLOC_MEM_LIMIT=\"18446744073709551615\": 2^64-1 bytes or more is the protocol's no-limit "
                     "marker, not a limit; no limit applies"));
  CHECK(has_error(o, "COLOC_MEM_LIMIT_2=\"18446744073709551615B\""));
  Options over = read({"COLOC_MEM_LIMIT=18446744073709551616"});  // past 2^64-1: the grammar refuses it
  CHECK(over.mem_limit == kNoLimit);
  CHECK(has_error(over, "size too large"));
}

TEST_CASE("options: long values are cut, never overflow") {
  std::string job(200, 'j');
  std::string report(600, 'r');
  Options o = read({"COLOC_JOB=" + job, "COLOC_REPORT=/" + report});
  CHECK(std::strlen(o.job) == sizeof o.job - 1);  // shortened with a hash (next test)
  CHECK(o.report[0] == '\0');
  CHECK(has_error(o, "path too long"));
}

TEST_CASE("log: the line format") {
  log_start(LogLevel::info, "train-7");
  char buf[256];
  int n = log_format(buf, sizeof buf, LogLevel::warn, 99, "limit %d", 5);
  CHECK(std::string(buf, size_t(n)) == "coloc[train-7 99]: warning: limit 5\n");
  // A line longer than the buffer is cut and still ends with a newline.
  n = log_format(buf, 32, LogLevel::error, 1, "%s", std::string(100, 'x').c_str());
  CHECK(n == 31);
  CHECK(buf[30] == '\n');
  CHECK(log_enabled(LogLevel::info));
  CHECK_FALSE(log_enabled(LogLevel::debug));
  log_stop();
  CHECK_FALSE(log_enabled(LogLevel::error));
}

TEST_CASE("log: the rate limiter lets one event per interval through and counts the rest") {
  RateLimit rl(1000);
  uint64_t held = 99;
  CHECK(rl.allow(5000, &held));
  CHECK(held == 0);
  CHECK_FALSE(rl.allow(5100, &held));
  CHECK_FALSE(rl.allow(5999, &held));
  CHECK(rl.allow(6000, &held));
  CHECK(held == 2);
  rl.reset();
  CHECK(rl.allow(6001, &held));
  CHECK(held == 0);
}

}  // TEST_SUITE

TEST_CASE("options: a zero COLOC_MEM_LIMIT is malformed (no limit), and COLOC_REQUIRE_DAEMON keeps the user's spelling") {
  for (const char* zero : {"COLOC_MEM_LIMIT=0", "COLOC_MEM_LIMIT=0GiB", "COLOC_MEM_LIMIT_1=0"}) {
    CAPTURE(zero);
    Options o = read({zero});
    CHECK(o.n_errors == 1);
    CHECK(has_error(o, "0 is not a limit"));
    CHECK(o.mem_limit == kNoLimit);
    CHECK(limit_for_ordinal(o, 1) == kNoLimit);
  }
  for (const char* yes : {"1", "yes", "true", "on"}) {
    CAPTURE(yes);
    Options o = read({std::string("COLOC_REQUIRE_DAEMON=") + yes});
    CHECK(o.n_errors == 0);
    CHECK(o.require_daemon);
    CHECK(std::string(o.require_daemon_text) == yes);
  }
  Options bad = read({"COLOC_REQUIRE_DAEMON=please"});
  CHECK_FALSE(bad.require_daemon);
  CHECK(has_error(bad, "not one of 1, 0, yes, no, true, false, on, off; not required"));
}

TEST_SUITE("interpose") {

TEST_CASE("options: a COLOC_JOB over 63 characters keeps its first 54 and a hash of the whole; two such names stay apart") {
  const std::string prefix(60, 'p');
  Options a = read({"COLOC_JOB=" + prefix + "-rank0-of-a-long-run"});
  Options b = read({"COLOC_JOB=" + prefix + "-rank1-of-a-long-run"});
  CHECK(std::strlen(a.job) == 63);
  CHECK(std::string(a.job).substr(0, 54) == prefix.substr(0, 54));
  CHECK(a.job[54] == '-');
  CHECK(std::string(a.job) != std::string(b.job));
  CHECK(a.job_given_length == prefix.size() + 20);
  Options same = read({"COLOC_JOB=" + prefix + "-rank0-of-a-long-run"});
  CHECK(std::string(same.job) == std::string(a.job));  // the same name gives the same id in every process
  Options fits = read({"COLOC_JOB=train-1"});
  CHECK(std::string(fits.job) == "train-1");
}

TEST_CASE("options: COLOC_CONTEXT_BYTES=0 is refused like COLOC_MEM_LIMIT=0") {
  Options o = read({"COLOC_CONTEXT_BYTES=0"});
  CHECK(o.context_bytes == kDefaultContextBytes);
  CHECK(has_error(o, "COLOC_CONTEXT_BYTES"));
  CHECK(has_error(o, "0 is not a context's cost"));
  Options ok = read({"COLOC_CONTEXT_BYTES=64MiB"});
  CHECK(ok.context_bytes == 64ull << 20);
  CHECK(ok.n_errors == 0);
}

}  // TEST_SUITE
