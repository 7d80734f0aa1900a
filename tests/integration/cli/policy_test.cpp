// coloc policy, coloc set --weight, coloc run --weight and the status layout, against a real
// colocd: set, show and --json; who may set what (root, an owner, nobody); bad input exits 2 or 4
// with nothing changed; `coloc status` fits 100 columns.
#include <doctest/doctest.h>

#include <pwd.h>
#include <unistd.h>

#include <sstream>

#include "../daemon/colocd_fixture.h"
#include "cli_helpers.h"
#include "format.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

/// The device entry of status for `uuid` (null when none).
json device_of(const Colocd& d, const std::string& uuid) {
  const json s = d.status();  // (not a temporary's member in the loop: it would be gone)
  for (const json& dev : s["devices"])
    if (dev["uuid"] == uuid) return dev;
  return nullptr;
}

/// The widest line of `text`, in columns.
size_t widest(const std::string& text) {
  std::istringstream in(text);
  size_t w = 0;
  for (std::string line; std::getline(in, line);) w = std::max(w, coloc::cli::display_width(line));
  return w;
}

const std::string kDev1 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c001";
const std::string kDev2 = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c021";  // device 33: kDev1 has a unique prefix

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc policy: set by index, UUID or prefix; shown by coloc policy, --json and coloc status") {
  Colocd d;
  auto c = d.client({"--job", "train-67a2de", "attach:1:10GiB:1GiB,33:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  json dev1 = device_of(d, kDev1), dev2 = device_of(d, kDev2);
  REQUIRE(dev1.is_object());
  REQUIRE(dev1["index"].is_number());
  CHECK(dev1["policy"] == json{{"mode", "share"}, {"quantum_ms", 100}});
  CHECK(dev1["holder"].is_null());
  const std::string index1 = dev1["index"].dump(), index2 = dev2["index"].dump();
  CHECK(index1 != index2);

  ProcResult r = coloc_cli(d, {"policy"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("INDEX") != std::string::npos);
  CHECK(r.out.find(kDev1) != std::string::npos);
  CHECK(r.out.find("share") != std::string::npos);

  r = coloc_cli(d, {"policy", index1, "timeslice", "--quantum", "50ms"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find(kDev1 + ": timeslice, quantum 50 ms (was share)") != std::string::npos, r.out);
  CHECK(device_of(d, kDev1)["policy"] == json{{"mode", "timeslice"}, {"quantum_ms", 50}});
  CHECK(device_of(d, kDev2)["policy"]["mode"] == "share");  // only that one
  // By UUID (without "GPU-", any case), the default quantum.
  r = coloc_cli(d, {"policy", "C0C0C0C0-c0c0-c0c0-c0c0-c0c0c0c0c021", "timeslice"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(device_of(d, kDev2)["policy"] == json{{"mode", "timeslice"}, {"quantum_ms", 100}});
  // By a unique prefix.
  r = coloc_cli(d, {"policy", kDev1.substr(0, 39), "share", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json answer = json::parse(r.out);
  REQUIRE(answer["devices"].size() == 1);
  CHECK(answer["devices"][0]["uuid"] == kDev1);
  CHECK(answer["devices"][0]["was"]["mode"] == "timeslice");
  CHECK(answer["devices"][0]["policy"]["mode"] == "share");
  // A prefix of both: ambiguous, nothing changes (exit 4, as an unknown device).
  r = coloc_cli(d, {"policy", "GPU-c0c0c0c0", "timeslice"});
  CHECK(r.exit_code == 4);
  CHECK_MESSAGE(r.err.find("matches 2 devices") != std::string::npos, r.err);
  CHECK(device_of(d, kDev1)["policy"]["mode"] == "share");

  // coloc policy --json: every device colocd knows, with its index.
  r = coloc_cli(d, {"policy", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  json pol = json::parse(r.out);
  CHECK(pol["default"].is_null());
  bool seen1 = false, seen2 = false;
  for (const json& dev : pol["devices"]) {
    seen1 |= dev["uuid"] == kDev1 && dev["policy"]["mode"] == "share" && dev["index"].dump() == index1;
    seen2 |= dev["uuid"] == kDev2 && dev["policy"]["mode"] == "timeslice";
  }
  CHECK(seen1);
  CHECK(seen2);

  // Saved by UUID.
  json saved = json::parse(read_file(d.state() + "/policies.json"));
  CHECK(saved["devices"][kDev2] == json{{"mode", "timeslice"}, {"quantum_ms", 100}});

  // A weight, and status: the policy, the weight and the compute state.
  r = coloc_cli(d, {"set", "train-67a2de", "--weight", "3"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("weight 3") != std::string::npos);
  json job = d.job("train-67a2de");
  CHECK(job["weight"] == 3);
  CHECK(job["compute_state"] == "running");  // alone: its turn (or not contended)
  CHECK(job["state"] == "running");
  for (const json& jd : job["devices"]) {
    CHECK(jd.contains("gpu_share"));
    CHECK(jd["compute_state"].is_string());
  }
  ProcResult st = coloc_cli(d, {"status"});
  REQUIRE_MESSAGE(st.exit_code == 0, describe(st));
  // (a device NVML does not list, as the fake clients' are under simgpu, is numbered by colocd: "3*")
  const std::string shown2 = index2 + (dev2["index_from"] == "colocd" ? "*" : "");
  CHECK_MESSAGE(st.out.find(shown2 + "  " + kDev2 + "  timeslice, quantum 100 ms") != std::string::npos, st.out);
  CHECK(st.out.find("WEIGHT") != std::string::npos);
  CHECK(st.out.find("GPU SHARE") != std::string::npos);
  CHECK(st.out.find("DRIVER OVERHEAD") == std::string::npos);  // detail: --wide
  ProcResult wide = coloc_cli(d, {"status", "--wide"});
  CHECK(wide.out.find("DRIVER OVERHEAD") != std::string::npos);
  CHECK(wide.out.find("RESERVED") != std::string::npos);

  // "all": every device, and the default for those colocd learns of later.
  r = coloc_cli(d, {"policy", "all", "timeslice", "--quantum", "1s"});
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(r.out.find("every device, and each device colocd learns of later: timeslice, quantum 1000 ms") != std::string::npos);
  CHECK(device_of(d, kDev1)["policy"]["quantum_ms"] == 1000);
  CHECK(device_of(d, kDev2)["policy"]["quantum_ms"] == 1000);
  CHECK(d.status()["policies"]["default"] == json{{"mode", "timeslice"}, {"quantum_ms", 1000}});
  CHECK(coloc_cli(d, {"policy"}).out.find("Devices colocd learns of later: timeslice, quantum 1000 ms") != std::string::npos);
  saved = json::parse(read_file(d.state() + "/policies.json"));
  CHECK(saved["default"]["quantum_ms"] == 1000);
  CHECK(saved["devices"].empty());
  c->kill(SIGKILL);
}

TEST_CASE("coloc status fits 100 columns (the widest line measured), with every policy and state shown") {
  Colocd d;
  auto a = d.client({"--job", "notebook-2bfc50", "--mem", "40GiB", "attach:1:80GiB:1GiB", "alloc:0:2GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  auto b = d.client({"--job", "finetune-1ff708", "--priority", "best-effort", "attach:1:80GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*b, "holding"); }));
  auto w = d.client({"--job", "admission-wait1", "--mem", "70GiB", "attach:1:80GiB:1GiB", "hold"});  // does not fit
  REQUIRE(wait_until([&] { return d.job("admission-wait1").is_object(); }));
  ProcResult r = coloc_cli(d, {"policy", "all", "timeslice", "--quantum", "60000ms"});  // the widest policy text
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  ProcResult st = coloc_cli(d, {"status"});
  REQUIRE_MESSAGE(st.exit_code == 0, describe(st));
  CHECK_MESSAGE(widest(st.out) <= 100, st.out);
  CHECK(st.out.find("timeslice, quantum 60000 ms") != std::string::npos);
  CHECK(st.out.find("admission-pending") != std::string::npos);
  CHECK(st.out.find("best-effort") != std::string::npos);
  ProcResult pol = coloc_cli(d, {"policy"});
  CHECK_MESSAGE(widest(pol.out) <= 100, pol.out);
  // The table alone, fed the widest values a status can have: a paused job waiting for memory, a
  // job waiting for its quantum, a holder, a device numbered by colocd, an over-committed device.
  json s = json::parse(coloc_cli(d, {"status", "--json"}).out);
  for (json& dev : s["devices"]) {
    dev["holder"] = "notebook-2bfc50";
    dev["index"] = 12;
    dev["index_from"] = "colocd";
    dev["over_committed"] = true;
    dev["driver_ooms"] = 3;
    for (const char* k : {"capacity", "headroom", "outside", "committed", "in_use", "available"})
      dev[k] = 1000ull << 30;
    for (json& j : dev["jobs"]) {
      j["state"] = "waiting";
      j["compute_state"] = "waiting-quantum";
      j["weight"] = 100;
      j["gpu_share"] = 1.0;
      j["limit"] = 1000ull << 30;
      j["in_use"] = 1000ull << 30;
    }
  }
  s["daemon"]["holding_for_restart"] = true;
  s["daemon"]["uptime_s"] = 1e6;
  s["daemon"]["watcher"] = "bpf+pidfd";
  const std::string table = coloc::cli::status_table(s);
  CHECK_MESSAGE(widest(table) <= 100, table);
  CHECK(table.find("waiting+quantum") != std::string::npos);
  a->kill(SIGKILL);
  b->kill(SIGKILL);
  w->kill(SIGKILL);
}

TEST_CASE("coloc policy, set --weight, run --weight: bad input exits 2, an unknown device 4; nothing changes") {
  Colocd d;
  auto c = d.client({"--job", "wj", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  const std::string index = device_of(d, kDev1)["index"].dump();
  struct Bad {
    std::vector<std::string> args;
    int code;
    std::string message;
  };
  const std::string marker = d.dir() / "ran";
  for (const Bad& b : std::vector<Bad>{
           {{"policy", index, "fast"}, 2, "unknown mode 'fast'"},
           {{"policy", index, "timeslice", "--quantum", "0"}, 2, "--quantum '0'"},
           {{"policy", index, "timeslice", "--quantum", "0ms"}, 2, "--quantum '0ms'"},
           {{"policy", index, "timeslice", "--quantum", "1.5ms"}, 2, "whole milliseconds"},
           {{"policy", index, "timeslice", "--quantum", "2m"}, 2, "--quantum '2m'"},
           {{"policy", index, "timeslice", "--quantum", "soon"}, 2, "--quantum 'soon'"},
           {{"policy", index, "timeslice", "--quantum", ""}, 2, "--quantum ''"},
           {{"policy", index, "share", "--quantum", "100ms"}, 2, "--quantum goes with timeslice"},
           {{"policy", index, "priority", "--target-slowdown", "0"}, 2, "--target-slowdown 0: out of range"},
           {{"policy", index, "priority", "--target-slowdown", "51%"}, 2, "--target-slowdown 51%: out of range"},
           {{"policy", index, "priority", "--target-slowdown", "5.5%"}, 2, "--target-slowdown '5.5%'"},
           {{"policy", index, "priority", "--target-slowdown", "%"}, 2, "--target-slowdown '%'"},
           {{"policy", index, "priority", "--target-slowdown", "low"}, 2, "--target-slowdown 'low'"},
           {{"policy", index, "priority", "--target-slowdown", ""}, 2, "--target-slowdown ''"},
           {{"policy", index, "priority", "--quantum", "100ms"}, 2, "--quantum goes with timeslice (priority has no quanta)"},
           {{"policy", index, "timeslice", "--target-slowdown", "5%"}, 2, "--target-slowdown goes with priority (timeslice has no target)"},
           {{"policy", index, "share", "--target-slowdown", "5"}, 2, "--target-slowdown goes with priority (share has no target)"},
           {{"policy", "--target-slowdown", "5%"}, 2, "--target-slowdown goes with a device and the mode priority"},
           {{"policy", index}, 2, "give the device and the mode"},
           {{"policy", "--quantum", "100ms"}, 2, "--quantum goes with a device"},
           {{"policy", "a b", "share"}, 2, "is not a device"},
           {{"policy", "99", "timeslice"}, 4, "no device with index 99"},
           {{"policy", "GPU-ffff", "timeslice"}, 4, "no device 'GPU-ffff'"},
           {{"set", "wj", "--weight", "0"}, 2, "--weight 0: out of range"},
           {{"set", "wj", "--weight", "1000"}, 2, "--weight 1000: out of range"},
           {{"set", "wj", "--weight", "-1"}, 2, "--weight"},
           {{"set", "wj", "--weight", "two"}, 2, "--weight 'two'"},
           {{"set", "wj", "--weight", ""}, 2, "--weight ''"},
           {{"set", "nosuchjob", "--weight", "2"}, 4, "no running job 'nosuchjob'"},
           {{"run", "--weight", "0", "--", "/usr/bin/touch", marker}, 2, "--weight 0"},
           {{"run", "--weight", "101", "--", "/usr/bin/touch", marker}, 2, "--weight 101"},
       }) {
    std::string shown;
    for (const std::string& a : b.args) shown += "[" + a + "] ";
    CAPTURE(shown);
    ProcResult r = coloc_cli(d, b.args);
    CHECK(r.exit_code == b.code);
    CHECK_MESSAGE(r.err.find(b.message) != std::string::npos, r.err);
  }
  CHECK_FALSE(file_exists(marker));
  CHECK_FALSE(file_exists(d.state() + "/policies.json"));  // nothing was saved
  CHECK(device_of(d, kDev1)["policy"]["mode"] == "share");
  CHECK(d.job("wj")["weight"] == 1);
  ProcResult h = coloc_cli(d, {"policy", "--help"});
  CHECK(h.exit_code == 0);
  CHECK(h.out.find("timeslice") != std::string::npos);
  CHECK(h.out.find("--quantum") != std::string::npos);
  CHECK(h.out.find("--target-slowdown") != std::string::npos);
  CHECK(h.out.find("priority") != std::string::npos);
  CHECK(h.out.find("--socket PATH") != std::string::npos);
  for (const char* sub : {"set", "run"}) CHECK(coloc_cli(d, {sub, "--help"}).out.find("--weight") != std::string::npos);
  c->kill(SIGKILL);
}

TEST_CASE("coloc policy and weights as another user: policy and raising a weight need admin; lowering one's own is fine") {
  if (::geteuid() != 0 || !::getpwnam("nobody")) {
    MESSAGE("skipped: needs root and a 'nobody' user");
    return;
  }
  Colocd d;
  auto mine = d.client({"--as-user", "nobody", "--job", "theirs", "attach:1:10GiB:1GiB", "hold"});
  auto root = d.client({"--job", "rootjob", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*mine, "holding") && has_event(*root, "holding"); }));
  const std::string index = device_of(d, kDev1)["index"].dump();

  ProcResult r = coloc_as_nobody(d, {"policy", index, "timeslice"});
  CHECK(r.exit_code == 5);
  CHECK_MESSAGE(r.err.find("not allowed: only root or the admin group may set a device's compute policy") !=
                    std::string::npos,
                r.err);
  r = coloc_as_nobody(d, {"policy", "all", "share"});
  CHECK(r.exit_code == 5);
  CHECK(coloc_as_nobody(d, {"policy"}).exit_code == 0);  // reading is open to everyone
  CHECK(device_of(d, kDev1)["policy"]["mode"] == "share");
  CHECK_FALSE(file_exists(d.state() + "/policies.json"));

  // Raising one's own weight needs an admin; lowering it does not.
  r = coloc_as_nobody(d, {"set", "theirs", "--weight", "2"});
  CHECK(r.exit_code == 5);
  CHECK(r.err.find("may raise a job's weight") != std::string::npos);
  CHECK(d.job("theirs")["weight"] == 1);
  REQUIRE(coloc_cli(d, {"set", "theirs", "--weight", "5"}).exit_code == 0);  // root raises it
  r = coloc_as_nobody(d, {"set", "theirs", "--weight", "2"});
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(d.job("theirs")["weight"] == 2);
  CHECK(coloc_as_nobody(d, {"set", "theirs", "--weight", "3"}).exit_code == 5);  // back up: no
  CHECK(coloc_as_nobody(d, {"set", "theirs", "--weight", "2"}).exit_code == 0);  // the same: fine
  CHECK(d.job("theirs")["weight"] == 2);
  // Another user's job: not even lowering.
  CHECK(coloc_as_nobody(d, {"set", "rootjob", "--weight", "1"}).exit_code == 5);

  // coloc run --weight above 1 as a user: refused before the command runs.
  if (file_exists(build_path("lib/libcoloc.so"))) {
    const std::string marker = d.dir() / "ran-as-nobody";
    ::chmod(d.dir().path().c_str(), 0777);
    r = coloc_as_nobody(d, {"run", "--weight", "4", "--", "/usr/bin/touch", marker});
    CHECK(r.exit_code == 5);
    CHECK_MESSAGE(r.err.find("not allowed: --weight 4") != std::string::npos, r.err);
    CHECK(r.err.find("the command was not run") != std::string::npos);
    CHECK_FALSE(file_exists(marker));
    r = coloc_as_nobody(d, {"run", "--weight", "1", "--", "/usr/bin/touch", marker});  // the default: fine
    CHECK_MESSAGE(r.exit_code == 0, describe(r));
    CHECK(file_exists(marker));
    // As root: the job runs with its weight.
    const std::string seen = d.dir() / "weight-seen";
    r = coloc_cli(d, {"run", "--weight", "7", "--job", "heavy", "--", "/bin/sh", "-c",
                      build_path("bin/coloc") + " jobs --json > " + seen});
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    json jobs = json::parse(read_file(seen));
    bool found = false;
    for (const json& j : jobs["jobs"])
      if (j["job"].get<std::string>().rfind("heavy-", 0) == 0) found = j["weight"] == 7;
    CHECK(found);
  }
  mine->kill(SIGKILL);
  root->kill(SIGKILL);
}

}  // TEST_SUITE
