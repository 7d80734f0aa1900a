// coloc doctor against real states of a node: no colocd; simgpu found on the loader's path (and
// with --sim); all good (libcoloc.so reaches the driver without registering a job, colocd's
// version and protocol, NVML); a socket this user may not use (run as nobody).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "../daemon/as_user.h"
#include "../e2e/e2e.h"
#include "coloc/protocol.h"
#include "coloc/version.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

/// The check `name` of a `coloc doctor --json` answer (null when absent).
json check_of(const json& doc, const std::string& name) {
  for (const json& c : doc["checks"])
    if (c["name"] == name) return c;
  return nullptr;
}

json doctor_json(const ProcResult& r) {
  json j = json::parse(r.out, nullptr, false);
  REQUIRE_MESSAGE(!j.is_discarded(), describe(r));
  return j;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc doctor: no colocd fails the socket check (exit 1); the driver and libcoloc.so still check out") {
  TempDir tmp("coloc-doctor");
  Env e;
  e.simgpu(tmp, "16GiB");
  e.set("COLOC_SOCKET", tmp / "none.sock");
  ProcResult r = run({build_path("bin/coloc"), "doctor", "--sim", "--json"}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 1, describe(r));
  json doc = doctor_json(r);
  CHECK(doc["ok"] == false);
  CHECK(check_of(doc, "driver")["status"] == "ok");
  CHECK(check_of(doc, "driver")["details"]["simgpu"] == true);
  CHECK_MESSAGE(check_of(doc, "libcoloc")["status"] == "ok", doc.dump(1));
  CHECK_MESSAGE(check_of(doc, "checkpoint")["status"] == "ok", doc.dump(1));  // simgpu has the checkpoint API
  CHECK(check_of(doc, "checkpoint")["details"]["driver_version"] == 13000);
  CHECK(check_of(doc, "glibc")["status"] == "ok");
  CHECK(check_of(doc, "preload")["status"] == "ok");
  json socket = check_of(doc, "socket");
  CHECK(socket["status"] == "fail");
  CHECK(socket["summary"].get<std::string>().find("no socket at " + tmp / "none.sock") != std::string::npos);
  CHECK(socket["fix"].get<std::string>().find("start colocd") != std::string::npos);
  CHECK(check_of(doc, "colocd")["status"] == "fail");
  CHECK(check_of(doc, "nvml")["status"] == "warn");
  // The text: one line per check, the failing one says what to do.
  ProcResult t = run({build_path("bin/coloc"), "doctor", "--sim"}, e, 30s);
  CHECK(t.exit_code == 1);
  CHECK(count_of(t.out, "\n") == doc["checks"].size());
  CHECK(t.out.find("FAIL  socket     no socket at") != std::string::npos);
  CHECK(t.out.find("OK    libcoloc   libcoloc.so (") != std::string::npos);
}

TEST_CASE("coloc doctor: all good against colocd on simgpu, and libcoloc.so's check registers no job") {
  e2e::Node n("16GiB");
  Env e = n.base_env();
  // simgpu on the loader's path without --sim: it works, with a warning that it is simulated.
  ProcResult plain = run({build_path("bin/coloc"), "doctor", "--json"}, e, 30s);
  CHECK_MESSAGE(plain.exit_code == 0, describe(plain));
  json doc = doctor_json(plain);
  if (!real_driver()) {
    CHECK(check_of(doc, "driver")["status"] == "warn");
    CHECK(check_of(doc, "driver")["fix"].get<std::string>().find("simulated") != std::string::npos);
  }
  // --sim: simgpu is what was asked for.
  ProcResult r = run({build_path("bin/coloc"), "doctor", "--sim", "--json"}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  doc = doctor_json(r);
  CHECK(doc["ok"] == true);
  for (const char* name : {"driver", "checkpoint", "libcoloc", "glibc", "preload", "socket", "colocd", "nvml"})
    CHECK_MESSAGE(check_of(doc, name)["status"] == "ok", name, ": ", check_of(doc, name).dump());
  // BPF depends on the machine (root, BTF): either outcome is a known one.
  const json watch = check_of(doc, "exit-watch");
  CHECK((watch["status"] == "ok" || watch["status"] == "warn"));
  CHECK(watch["summary"].get<std::string>().find("not checked") == std::string::npos);
  const json colocd = check_of(doc, "colocd");
  CHECK(colocd["details"]["version"] == coloc::kReleaseVersion);
  CHECK(colocd["details"]["protocol"] == coloc::proto::kVersion);
  CHECK(colocd["details"]["pid"] == n.daemon_pid());
  const json lib = check_of(doc, "libcoloc");
  CHECK(lib["details"]["resolver"].get<std::string>().find("libcoloc.so") != std::string::npos);
  CHECK(lib["details"]["version"].get<int>() > 0);
  // Nothing registered: no job, no client (cuDriverGetVersion before cuInit).
  json s = n.status();
  CHECK(s["jobs"].empty());
  CHECK(s["daemon"]["clients"] == 0);
}

TEST_CASE("coloc doctor: a socket this user may not connect to fails, with what to do") {
  Who who;
  if (!nobody(&who)) return;
  e2e::Node n("16GiB");
  // The way to the socket is open to every user; the socket itself only to root.
  const std::string node_dir = n.file("x").substr(0, n.file("x").rfind('/'));
  ::chmod(node_dir.c_str(), 0755);
  ::chmod((node_dir + "/run").c_str(), 0755);
  REQUIRE(::chmod(n.socket().c_str(), 0600) == 0);
  Env e = n.base_env();
  ProcResult r = run_as(who, {build_path("bin/coloc"), "doctor", "--sim", "--json"}, e);
  CHECK_MESSAGE(r.exit_code == 1, describe(r));
  json doc = doctor_json(r);
  const json socket = check_of(doc, "socket");
  CHECK(socket["status"] == "fail");
  CHECK(socket["summary"].get<std::string>().find("uid " + std::to_string(who.uid) + " may not connect") !=
        std::string::npos);
  CHECK(socket["summary"].get<std::string>().find("mode 0600") != std::string::npos);
  CHECK(socket["fix"].get<std::string>().find("SocketMode=0666") != std::string::npos);
  // The rest still checks out for that user.
  CHECK(check_of(doc, "driver")["status"] == "ok");
  CHECK(check_of(doc, "libcoloc")["status"] == "ok");
}

}  // TEST_SUITE
