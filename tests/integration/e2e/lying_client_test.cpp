// End-to-end: a client that attaches honestly and then lies about the device's free memory in
// DriverOom reports, again and again — "nothing is free" (so that colocd would refuse everyone
// else) or "everything is free" (so that it would over-grant). With NVML colocd only takes the
// report as a prompt to read the device; without it, one user's figures count only as far as
// that user can show (daemon/broker/outside.h). Fellow jobs' admission and growth, and what
// `coloc status` shows, stay right either way.
#include <sys/stat.h>

#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// Whether colocd_client `p` has printed event `ev` so far.
bool has_event(const Proc& p, const std::string& ev) {
  for (const json& l : lines(p.out_so_far()))
    if (l.value("event", "") == ev) return true;
  return false;
}

struct Lie {
  const char* name;
  const char* free;  // the DriverOom's physical_free
};

void lying_client_case(bool nvml, const Lie& lie) {
  CAPTURE(nvml);
  CAPTURE(lie.name);
  Node n("16GiB", {}, false);
  if (!nvml) n.set_daemon_prefix({"env", "-u", "LD_LIBRARY_PATH"});  // colocd finds no NVML
  n.start_daemon();
  REQUIRE((n.log().find("NVML is not available") == std::string::npos) == nvml);
  // Memory used outside coloc: 4 GiB (+ its 512 MiB context) held by a process not under coloc.
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "4GiB", "o", "touch", n.file("o.up"), "hold-file",
                               n.file("o.go")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("o.up")));
  // An honest job holds 1 GiB (+ context) of its 4 GiB.
  auto honest = n.run({"--job", "honest", "--mem", "4GiB"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("h.up"), "hold-file",
                       n.file("h.go")});
  REQUIRE(reached(*honest, n.file("h.up")));
  const std::string uuid = n.status()["devices"][0]["uuid"];
  const uint64_t before = n.status()["devices"][0]["outside"];  // what colocd knew before the liar came
  // The liar, another user: a job of 2 GiB on the same device, then 3000 DriverOom reports, 1 ms
  // apart. (Its own user's figures are its own to spoil: one user is one voice.)
  std::string dir = n.socket().substr(0, n.socket().rfind('/'));
  ::chmod(dir.substr(0, dir.rfind('/')).c_str(), 0755);
  ::chmod(dir.c_str(), 0755);
  auto liar = std::make_unique<Proc>(
      std::vector<std::string>{build_path("tests/bin/colocd_client"), "--socket", n.socket(), "--as-user", "nobody",
                               "--job", "liar", "--mem", "2GiB", "attach:" + uuid + ":16GiB:256MiB",
                               std::string("oom-flood:0:64MiB:") + lie.free + ":3000:1", "hold"},
      Env());
  REQUIRE_MESSAGE(wait_until([&] { return has_event(*liar, "flooding") || !liar->running(); }, 20s),
                  liar->err_so_far());
  REQUIRE(liar->running());
  REQUIRE(wait_until([&] { return n.status()["devices"][0]["driver_ooms"].get<uint64_t>() >= 20; }, 20s));
  const uint64_t real_outside = 4 * GiB + kContext;
  json dev = n.status()["devices"][0];
  if (nvml) {
    CHECK(dev["outside"] == real_outside);  // the device's own figure, whatever the liar says
  } else if (std::string(lie.name) == "nothing free") {
    // It claims 14.5 GiB outside; it can show at most what its job holds unused: its 2 GiB
    // reservation (nothing in use) and the 64 MiB request.
    CHECK(dev["outside"].get<uint64_t>() <= before + 2 * GiB + 64 * MiB);
  } else {
    CHECK(dev["outside"].get<uint64_t>() >= before);  // what the honest job showed is not wiped out
    CHECK(before > 0);
  }
  // A fellow job that fits what is really left is admitted and grows, while the lies go on:
  // 16 GiB - 2% headroom - 4 (honest) - 2 (liar) - 4.5 (outside) = 5.2 GiB.
  auto fellow = n.run({"--job", "fellow", "--mem", "4GiB"},
                      {cuprobe(), "init", "ctx", "0", "alloc", "3GiB", "b"}, {{"COLOC_WAIT_TIMEOUT", "20s"}});
  ProcResult fr = finish(*fellow, 30s);
  CHECK(step(fr.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(n.report("fellow")["devices"][0]["wait_admission_s"].get<double>() < 5.0);
  // Its context costs what its ledger says: the memory used outside coloc is not taken for its
  // driver overhead (its context footprint's baseline is what the device showed, not the liar's).
  CHECK(n.report("fellow")["devices"][0]["driver_overhead"] == 0);
  // One that would not fit what is really left waits (it is never over-granted on a false "free").
  auto big = n.run({"--job", "big", "--mem", "8GiB", "--on-full", "fail"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "7GiB", "c"});
  ProcResult br = big->wait(30s);
  INFO(describe(br));
  CHECK(step(br.out, "ctx")["rc_name"] != "CUDA_SUCCESS");  // refused at admission, device full
  if (nvml) CHECK(n.status()["devices"][0]["outside"] == real_outside);
  CHECK(has_event(*liar, "flooding"));
  CHECK_FALSE(has_event(*liar, "flood-done"));  // all of it happened while the liar was lying
  for (const char* f : {"o.go", "h.go"}) write_file(n.file(f), "");
  finish(*outside);
  finish(*honest);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: a client lying 'nothing is free' in DriverOom reports cannot make colocd refuse others (with and without NVML)") {
  if (simulated_only()) return;
  for (bool nvml : {true, false}) lying_client_case(nvml, {"nothing free", "0"});
}

TEST_CASE("e2e: a client lying 'everything is free' in DriverOom reports cannot make colocd over-grant (with and without NVML)") {
  if (simulated_only()) return;
  for (bool nvml : {true, false}) lying_client_case(nvml, {"all free", "16GiB"});
}

}  // TEST_SUITE

TEST_SUITE("e2e") {

TEST_CASE("e2e: a client lying about a device's capacity changes nothing with NVML, and cannot raise it without") {
  if (simulated_only()) return;
  for (bool nvml : {true, false}) {
    CAPTURE(nvml);
    Node n("16GiB", {}, false);
    if (!nvml) n.set_daemon_prefix({"env", "-u", "LD_LIBRARY_PATH"});
    n.start_daemon();
    std::string dir = n.socket().substr(0, n.socket().rfind('/'));
    ::chmod(dir.substr(0, dir.rfind('/')).c_str(), 0755);
    ::chmod(dir.c_str(), 0755);
    // The device's UUID, from an honest job that comes and goes.
    auto probe = n.run({"--job", "probe"}, {cuprobe(), "init", "ctx", "0", "touch", n.file("p.up"), "hold-file", n.file("p.go")});
    REQUIRE(reached(*probe, n.file("p.up")));
    const std::string uuid = n.status()["devices"][0]["uuid"];
    if (!nvml) {
      // Without NVML the honest job's word stands while it is attached: a bigger claim does not raise it.
      auto liar = std::make_unique<Proc>(
          std::vector<std::string>{build_path("tests/bin/colocd_client"), "--socket", n.socket(), "--as-user", "nobody",
                                   "--job", "big-liar", "attach:" + uuid + ":1TiB:0", "hold"},
          Env());
      REQUIRE(wait_until([&] { return has_event(*liar, "holding") || !liar->running(); }, 20s));
      CHECK(n.status()["devices"][0]["capacity"] == 16 * GiB);
      liar->kill(SIGKILL);
      liar->wait(10s);
    }
    write_file(n.file("p.go"), "");
    finish(*probe);
    REQUIRE(wait_until([&] { return n.status()["jobs"].empty(); }, 20s));
    // Now the liar comes first, to a device nobody holds.
    auto liar = std::make_unique<Proc>(
        std::vector<std::string>{build_path("tests/bin/colocd_client"), "--socket", n.socket(), "--as-user", "nobody",
                                 "--job", "liar", "attach:" + uuid + ":1TiB:0", "hold"},
        Env());
    REQUIRE(wait_until([&] { return has_event(*liar, "holding") || !liar->running(); }, 20s));
    const uint64_t shown = n.status()["devices"][0]["capacity"];
    if (nvml) CHECK(shown == 16 * GiB);  // the device's own figure
    // Two honest jobs of 12 GiB cannot both be admitted on a 16 GiB device.
    auto a = n.run({"--job", "a", "--mem", "12GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "11GiB", "x", "touch",
                                                      n.file("a.up"), "hold-file", n.file("a.go")});
    REQUIRE(reached(*a, n.file("a.up"), 30s));
    CHECK(n.status()["devices"][0]["capacity"] == 16 * GiB);  // the honest job's word lowered the claim
    auto b = n.run({"--job", "b", "--mem", "12GiB", "--on-full", "fail"}, {cuprobe(), "init", "ctx", "0", "alloc", "11GiB", "y"});
    ProcResult br = b->wait(30s);
    INFO(describe(br));
    CHECK(step(br.out, "ctx")["rc_name"] == "CUDA_ERROR_OUT_OF_MEMORY");  // refused at admission, not over-granted
    CHECK(br.err.find("driver ran out of memory") == std::string::npos);
    write_file(n.file("a.go"), "");
    finish(*a);
    liar->kill(SIGKILL);
  }
}

TEST_CASE("e2e: a client's stream of refused or meaningless requests is logged a few times, not once each") {
  if (simulated_only()) return;
  Node n("16GiB");
  std::string dir = n.socket().substr(0, n.socket().rfind('/'));
  ::chmod(dir.substr(0, dir.rfind('/')).c_str(), 0755);
  ::chmod(dir.c_str(), 0755);
  const size_t before = n.log_size();
  std::vector<std::string> argv = {build_path("tests/bin/colocd_client"), "--socket", n.socket(), "--as-user", "nobody",
                                   "--job", "noisy", "--on-full", "fail", "attach:7:16GiB:64MiB"};
  for (int i = 0; i < 3000; ++i) argv.push_back("shrink:9:1");           // a slot it never attached
  for (int i = 0; i < 2000; ++i) argv.push_back("alloc:0:1000TiB");      // refused: device full
  for (int i = 0; i < 2000; ++i) argv.push_back("oom:9:1GiB:0");         // a slot it never attached
  argv.push_back("status");
  ProcResult r = run(argv, Env(), 120s);
  INFO(describe(r).substr(0, 4000));
  CHECK(r.exit_code == 0);
  const size_t logged = n.log_size() - before;
  CHECK_MESSAGE(logged < 100 * 1024, logged, " bytes logged for 7,000 requests");
  CHECK(n.status()["daemon"]["connections"]["log_lines_suppressed"].get<uint64_t>() > 6000);
}

}  // TEST_SUITE

namespace {

/// A process outside coloc holds 6.5 GiB of a 16 GiB device; a job declaring 12 GiB must not be
/// admitted (16 - 2% headroom - 6.5 - the other job's context leaves 8.7 GiB). With `liar`, a job
/// under coloc that came first claims the whole device in its own stats page (as a second
/// preloaded library could): colocd must count its claim at most at what it holds (its grant, and
/// the driver's figure for its process), so the outside memory stays seen and `honest` waits and
/// is refused exactly as without the liar, instead of being admitted into memory that is not there.
void hidden_outside_case(bool liar) {
  CAPTURE(liar);
  Node n("16GiB");
  std::unique_ptr<Proc> l;
  if (liar) {
    l = n.run({"--job", "liar"}, {cuprobe(), "init", "ctx", "0", "forge-in-use", "16GiB", "touch", n.file("l.up"),
                                  "hold-file", n.file("l.go")});
    REQUIRE(reached(*l, n.file("l.up")));
    REQUIRE(step(l->out_so_far(), "forge-in-use")["rc_name"] == "CUDA_SUCCESS");
  } else {
    l = n.run({"--job", "other"}, {cuprobe(), "init", "ctx", "0", "touch", n.file("l.up"), "hold-file", n.file("l.go")});
    REQUIRE(reached(*l, n.file("l.up")));
  }
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "6GiB", "o", "touch", n.file("o.up"), "hold-file",
                               n.file("o.go")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("o.up")));
  const int outside_pid = step(outside->out_so_far(), "init")["pid"];
  // colocd has read the device since: its NVML process list names the outside process.
  REQUIRE_MESSAGE(wait_until([&] {
                    json d = n.status()["devices"][0];
                    if (!d["outside_processes"].is_array()) return false;
                    for (const json& p : d["outside_processes"])
                      if (p["pid"] == outside_pid) return true;
                    return false;
                  }, 20s),
                  n.status_text());
  const uint64_t real_outside = 6 * GiB + kContext;
  REQUIRE_MESSAGE(wait_until([&] { return n.status()["devices"][0]["outside"] == real_outside; }, 10s), n.status_text());
  auto honest = n.run({"--job", "honest", "--mem", "12GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "11GiB", "a"},
                      {{"COLOC_WAIT_TIMEOUT", "3s"}});
  REQUIRE(n.wait_state("honest", "admission-pending"));
  ProcResult r = honest->wait(30s);
  INFO(describe(r));
  CHECK(step(r.out, "ctx")["rc_name"] != "CUDA_SUCCESS");  // waited, then refused at admission
  CHECK(step(r.out, "alloc")["rc_name"] != "CUDA_SUCCESS");
  json dev = n.status()["devices"][0];
  CHECK(dev["driver_ooms"] == 0);  // no allocation failed in the driver inside a grant
  CHECK(dev["outside"] == real_outside);
  json j = n.job(liar ? "liar" : "other");
  REQUIRE(!j.is_null());
  CHECK(j["in_use"].get<uint64_t>() <= j["granted"].get<uint64_t>());  // its claim counts as far as it holds
  if (liar) {
    CHECK(j["overclaimed"].get<uint64_t>() >= 15 * GiB);  // named in status
    CHECK(n.log().find("claims") != std::string::npos);    // and in the log
    CHECK(n.status_text().find("liar") != std::string::npos);
  } else {
    CHECK(j["overclaimed"] == 0);
  }
  for (const char* f : {"o.go", "l.go"}) write_file(n.file(f), "");
  finish(*outside);
  finish(*l);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("e2e: a client claiming the whole device in its stats page cannot hide memory used outside coloc") {
  if (simulated_only()) return;
  for (bool liar : {false, true}) hidden_outside_case(liar);
}

}  // TEST_SUITE

TEST_SUITE("e2e") {

TEST_CASE("e2e: a forged stats page is not believed when its job re-registers after a colocd restart") {
  if (simulated_only()) return;
  Node n("16GiB");
  // 10 GiB (+ context) used outside coloc.
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "o", "touch", n.file("o.up"), "hold-file",
                               n.file("o.go")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("o.up")));
  // A job limited to 1 GiB whose page claims 15 GiB; then colocd dies and comes back: the job's
  // re-registration carries the forged figure.
  auto liar = n.run({"--job", "liar", "--mem", "1GiB"}, {cuprobe(), "init", "ctx", "0", "forge-in-use", "15GiB", "touch",
                                                        n.file("l.up"), "hold-file", n.file("l.go")});
  REQUIRE(reached(*liar, n.file("l.up")));
  n.kill_daemon();
  n.start_daemon();
  REQUIRE_MESSAGE(wait_until([&] {
                    json j = n.job("liar");
                    return !j.is_null() && !j["devices"].empty() && j["devices"][0]["state"] == "running";
                  }, 30s),
                  n.status_text());
  // It holds its context (the driver's figure), and that is all colocd counts or grants it.
  json j = n.job("liar");
  CHECK(j["granted"].get<uint64_t>() <= 1 * GiB);
  CHECK(j["in_use"].get<uint64_t>() <= kContext);
  // So an honest 2 GiB job still fits next to it (16 - 0.32 - 10.5 - 1 = 4.2 GiB).
  auto honest = n.run({"--job", "honest", "--mem", "2GiB"}, {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a"},
                      {{"COLOC_WAIT_TIMEOUT", "20s"}});
  ProcResult r = finish(*honest, 60s);
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  CHECK(n.status()["devices"][0]["over_committed"] == false);
  for (const char* f : {"o.go", "l.go"}) write_file(n.file(f), "");
  finish(*outside);
  finish(*liar);
}

}  // TEST_SUITE
