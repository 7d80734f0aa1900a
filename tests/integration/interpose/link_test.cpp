// Tests of how libcoloc.so is linked: what it needs at run time (readelf -d), exactly which symbols
// it exports (readelf --dyn-syms, nm -D), and the newest glibc symbol version it requires (it must
// load in older containers; the figure is recorded in docs/performance.md).
#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <string>

#include "interpose/hook_table.h"
#include "tests/support/proc.h"

using namespace coloc::test;

namespace {

std::string lib() { return build_path("lib/libcoloc.so"); }

std::string tool(const std::vector<std::string>& argv) {
  ProcResult r = run(argv, Env());
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  return r.out;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::set<std::string> manifest() {
  std::set<std::string> names;
  for (unsigned i = 0; i < coloc::interpose::kHookCount; ++i) names.insert(coloc::interpose::kFnName[i]);
  return names;
}

// "2.17" -> 2017 (major * 1000 + minor).
int version_number(const std::string& v) {
  size_t dot = v.find('.');
  int major = std::stoi(v.substr(0, dot));
  int minor = dot == std::string::npos ? 0 : std::stoi(v.substr(dot + 1));
  return major * 1000 + minor;
}

}  // namespace

TEST_SUITE("interpose") {

TEST_CASE("libcoloc.so needs nothing but glibc at run time (readelf -d)") {
  std::string out = tool({"readelf", "-d", "-W", lib()});
  std::set<std::string> allowed = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6",
                                   "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"};
  if (!sanitizer().empty())  // sanitizer builds link the runtimes dynamically, as they must
    allowed.insert({"libasan.so.8", "libtsan.so.2", "libubsan.so.1", "libstdc++.so.6", "libgcc_s.so.1"});
  int needed = 0;
  for (const std::string& l : lines_of(out)) {
    size_t a = l.find("(NEEDED)");
    if (a != std::string::npos) {
      std::string name = l.substr(l.find('[') + 1, l.find(']') - l.find('[') - 1);
      CAPTURE(name);
      CHECK(allowed.count(name) == 1);
      ++needed;
    }
    CHECK(l.find("(RPATH)") == std::string::npos);
    CHECK(l.find("(RUNPATH)") == std::string::npos);
    CHECK(l.find("(TEXTREL)") == std::string::npos);
  }
  CHECK(needed >= 1);
  CHECK(out.find("Library soname: [libcoloc.so]") != std::string::npos);
}

TEST_CASE("libcoloc.so exports exactly the hooks of the manifest and dlsym in both glibc versions") {
  std::set<std::string> want = manifest();
  std::set<std::string> got;
  std::multiset<std::string> dlsym_versions;
  for (const std::string& l : lines_of(tool({"readelf", "--dyn-syms", "-W", lib()}))) {
    std::istringstream in(l);
    std::string num, value, size, type, bind, vis, ndx, name;
    if (!(in >> num >> value >> size >> type >> bind >> vis >> ndx >> name)) continue;
    if (num.back() != ':' || ndx == "UND" || ndx == "Ndx" || (bind != "GLOBAL" && bind != "WEAK")) continue;
    if (type == "OBJECT" && ndx == "ABS") continue;  // version definitions
    std::string base = name.substr(0, name.find('@'));
    if (base == "dlsym") {
      dlsym_versions.insert(name.substr(name.find('@')));
      continue;
    }
    CAPTURE(name);
    CHECK(type == "FUNC");
    got.insert(base);
  }
  CHECK(got == want);
#if defined(__x86_64__)
  CHECK(dlsym_versions == std::multiset<std::string>{"@GLIBC_2.2.5", "@@GLIBC_2.34"});
#elif defined(__aarch64__)
  CHECK(dlsym_versions == std::multiset<std::string>{"@GLIBC_2.17", "@@GLIBC_2.34"});
#endif
  // nm agrees: every defined dynamic text symbol is a hook or dlsym.
  std::set<std::string> nm_names;
  for (const std::string& l : lines_of(tool({"nm", "-D", "--defined-only", lib()}))) {
    std::istringstream in(l);
    std::string addr, kind, name;
    if (!(in >> addr >> kind >> name) || (kind != "T" && kind != "W")) continue;
    nm_names.insert(name.substr(0, name.find('@')));
  }
  want.insert("dlsym");
  CHECK(nm_names == want);
}

TEST_CASE("the newest glibc symbol version libcoloc.so requires is at most 2.35") {
  // Version needs (readelf -V, .gnu.version_r): "Name: GLIBC_2.17  Flags: none  Version: 5".
  std::string out = tool({"readelf", "-V", "-W", lib()});
  size_t needs = out.find(".gnu.version_r");
  REQUIRE(needs != std::string::npos);
  std::string newest = "0.0";
  for (const std::string& l : lines_of(out.substr(needs))) {
    size_t at = l.find("Name: GLIBC_");
    if (at == std::string::npos) continue;
    std::istringstream in(l.substr(at + 12));
    std::string v;
    in >> v;
    if (v.find_first_not_of("0123456789.") != std::string::npos) continue;  // GLIBC_PRIVATE
    if (version_number(v) > version_number(newest)) newest = v;
  }
  MESSAGE("libcoloc.so requires GLIBC_" << newest << " at most");
  CHECK(version_number(newest) <= version_number("2.35"));
  // Release builds bind to old symbol versions on purpose (interpose/glibc_compat.h): RHEL 8 and
  // Ubuntu 20.04 (glibc 2.28) must be able to load it. Sanitizer builds keep the default versions.
  if (sanitizer().empty()) CHECK(version_number(newest) <= version_number("2.28"));
  CHECK(out.find("GLIBC_PRIVATE") == std::string::npos);  // never private glibc symbols
}

}  // TEST_SUITE
