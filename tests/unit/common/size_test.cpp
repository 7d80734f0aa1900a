#include <doctest/doctest.h>

#include <string>

#include "coloc/size.h"

using coloc::parse_size;

TEST_SUITE("size") {
TEST_CASE("plain numbers are bytes") {
  CHECK(*parse_size("0").bytes == 0);
  CHECK(*parse_size("1073741824").bytes == 1073741824ULL);
  CHECK(*parse_size("100B").bytes == 100);
  CHECK(*parse_size(" 42 ").bytes == 42);
}

TEST_CASE("binary and decimal units") {
  CHECK(*parse_size("4G").bytes == 4ULL << 30);
  CHECK(*parse_size("4GiB").bytes == 4ULL << 30);
  CHECK(*parse_size("4gib").bytes == 4ULL << 30);
  CHECK(*parse_size("4GB").bytes == 4000000000ULL);
  CHECK(*parse_size("512 MiB").bytes == 512ULL << 20);
  CHECK(*parse_size("2K").bytes == 2048);
  CHECK(*parse_size("2KB").bytes == 2000);
  CHECK(*parse_size("1T").bytes == 1ULL << 40);
  CHECK(*parse_size("3TB").bytes == 3000000000000ULL);
}

TEST_CASE("decimals round down to whole bytes") {
  CHECK(*parse_size("1.5GiB").bytes == (3ULL << 30) / 2);
  CHECK(*parse_size("0.1KiB").bytes == 102);  // 102.4
  CHECK(*parse_size(".5M").bytes == 512ULL * 1024);
}

TEST_CASE("malformed sizes are errors with a reason") {
  for (const char* bad : {"", "   ", "-1", "-1GiB", "GiB", "1.5", "12XB", "1..5G", "abc", "1 G iB",
                          "99999999999999999999", "16777216TiB", "1e9"}) {
    CAPTURE(bad);
    auto r = parse_size(bad);
    CHECK_FALSE(r);
    CHECK(r.error != nullptr);
  }
}

TEST_CASE("largest representable size") {
  CHECK(*parse_size("18446744073709551615").bytes == UINT64_MAX);
  CHECK_FALSE(parse_size("18446744073709551616"));
}

TEST_CASE("format_size") {
  char buf[32];
  CHECK(std::string(coloc::format_size(0, buf, sizeof buf)) == "0 B");
  CHECK(std::string(coloc::format_size(1023, buf, sizeof buf)) == "1023 B");
  CHECK(std::string(coloc::format_size(1536, buf, sizeof buf)) == "1.50 KiB");
  CHECK(std::string(coloc::format_size(80ULL << 30, buf, sizeof buf)) == "80.00 GiB");
}
}
