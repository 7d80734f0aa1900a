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
  CHECK(o.log_level == LogLevel::debug);
  CHECK(std::string(o.job) == "train");
  CHECK(std::string(o.report) == "/tmp/r.%p.json");
  CHECK(o.context_bytes == 300000000ull);
  CHECK(kOptionSpecCount == 6);
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

TEST_CASE("options: long values are cut, never overflow") {
  std::string job(200, 'j');
  std::string report(600, 'r');
  Options o = read({"COLOC_JOB=" + job, "COLOC_REPORT=/" + report});
  CHECK(std::strlen(o.job) == sizeof o.job - 1);
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
