// The CLI as installed (coloc in <prefix>/bin, libcoloc.so in <prefix>/lib/coloc, no simgpu
// beside it: make install leaves the test tools out): `coloc doctor --sim` and `coloc run --sim`
// say where simgpu is instead of "reinstall"; and `make install` into a prefix whose unit
// directory systemd does not search says so instead of advising systemctl.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>

#include "../e2e/e2e.h"

using namespace coloc::test;
using nlohmann::json;

TEST_SUITE("cli") {

TEST_CASE("installed coloc: --sim without simgpu beside it says where simgpu is (doctor and run)") {
  TempDir t("coloc-installed-cli");
  std::filesystem::create_directories(t / "usr/bin");
  std::filesystem::create_directories(t / "usr/lib/coloc");
  std::filesystem::copy_file(build_path("bin/coloc"), t / "usr/bin/coloc");
  std::filesystem::copy_file(build_path("lib/libcoloc.so"), t / "usr/lib/coloc/libcoloc.so");
  ::chmod((t / "usr/bin/coloc").c_str(), 0755);
  Env e;
  e.unset("LD_LIBRARY_PATH");
  e.set("COLOC_SOCKET", t / "none.sock");
  ProcResult r = run({t / "usr/bin/coloc", "doctor", "--sim", "--json"}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 1, describe(r));
  json doc = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(!doc.is_discarded(), describe(r));
  json driver;
  for (const json& c : doc["checks"])
    if (c["name"] == "driver") driver = c;
  REQUIRE(driver.is_object());
  CHECK(driver["status"] == "fail");
  const std::string fix = driver["fix"].get<std::string>();
  CHECK_MESSAGE(fix.find("reinstall") == std::string::npos, fix);
  CHECK_MESSAGE(fix.find("make install leaves the test tools out") != std::string::npos, fix);
  CHECK_MESSAGE(fix.find("build/bin/coloc doctor --sim") != std::string::npos, fix);

  ProcResult run_sim = run({t / "usr/bin/coloc", "run", "--sim", "--", "true"}, e, 30s);
  CHECK_MESSAGE(run_sim.exit_code == 2, describe(run_sim));
  CHECK_MESSAGE(run_sim.err.find("build/bin/coloc run --sim") != std::string::npos, describe(run_sim));
}

TEST_CASE("make install into a prefix systemd does not search: a note instead of systemctl advice") {
  TempDir t("coloc-install-note");
  std::string build = build_path("");
  while (build.size() > 1 && build.back() == '/') build.pop_back();
  Env e;
  for (const char* v : {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}) e.unset(v);
  auto make = [&](const std::string& target) {
    return run({"make", "--no-print-directory", "-C", source_path(""), "-f", "mk/install.mk", target, "BUILD=" + build,
                "PREFIX=" + t / "opt", "SYSCONFDIR=" + t / "etc"},
               e, 60s);
  };
  ProcResult in = make("install");
  REQUIRE_MESSAGE(in.exit_code == 0, describe(in));
  CHECK_MESSAGE(in.out.find("systemd does not look for units in " + t / "opt/lib/systemd/system") != std::string::npos,
                describe(in));
  CHECK_MESSAGE(in.out.find("systemctl daemon-reload") == std::string::npos, describe(in));
  ProcResult un = make("uninstall");
  CHECK_MESSAGE(un.exit_code == 0, describe(un));
}

}  // TEST_SUITE
