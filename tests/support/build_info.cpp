// tests/support/build_info.cpp — what names the build the test binary belongs to: its directory,
// its sanitizer and that sanitizer's runtime. The one test file compiled once per build
// (tests/module.mk): under SAN=asan every other test object is the plain build's.
#include <string>

#include "proc.h"

namespace coloc::test {

std::string build_path(const std::string& rel) { return std::string(COLOC_BUILD_DIR) + "/" + rel; }
std::string sanitizer() { return COLOC_SAN; }
std::string sanitizer_runtime() { return COLOC_SAN_RUNTIME; }

}  // namespace coloc::test
