// End-to-end: jobs without `--mem` (issue 12). A job's own iteration pattern gives its online
// prediction (estimator/online.h, made in its process, read by colocd from its stats page), which
// becomes its reservation once stable; its run is kept in colocd's history (daemon/history), and a
// rerun of the same command by the same user is admitted on it before it allocates anything. So
// two growing jobs that run each other out of memory without history run one after the other with
// it. Precedence: --mem over history over online. One user's history never sets another's
// reservation, and the history survives a colocd SIGKILL and restart.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "../daemon/as_user.h"
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// The report's one device.
json device_of(const json& report) {
  REQUIRE(report["devices"].size() == 1);
  return report["devices"][0];
}

/// A replay of the ctx128 trace scaled to peak at about 10 GiB (61.1 GB x 0.175 plus rounding),
/// two loops: its pre-existing segments first (most of the peak), then each step's activations.
std::vector<std::string> growing_job() {
  return {coloc_train(), "--trace", trace("transformer-lm-ctx128-fullstep.csv"), "--size-scale", "0.175", "--loops", "2"};
}

/// Waits until colocd's history has loaded and knows at least `n` fingerprints.
bool history_knows(const Node& node, size_t n) {
  return wait_until([&] {
    ProcResult r = node.cli({"history", "--json"});
    if (r.exit_code != 0) return false;
    json h = json::parse(r.out, nullptr, false);
    return !h.is_discarded() && h.value("loaded", false) && h["fingerprints"].size() >= n;
  }, 20s, 20ms);
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("estimate: a job without --mem is reserved on its online prediction, within 2% of its peak") {
  if (simulated_only()) return;
  Node node("40GiB");
  struct Case {
    const char* name;
    std::vector<std::string> cmd;
  };
  const std::vector<Case> cases = {
      {"preset", {coloc_train(), "--model", "bert-base", "--batch", "4", "--iters", "300"}},
      {"trace", {coloc_train(), "--trace", trace("transformer-lm-ctx256-fullstep.csv"), "--size-scale", "0.5",
                 "--loops", "5", "--time-scale", "0.3"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto p = node.run({"--job", c.name}, c.cmd);
    finish(*p);
    const json d = device_of(node.report(c.name));
    INFO(d.dump());
    REQUIRE(d["predicted_peak"].is_number());
    const double peak = d["peak"].get<double>(), predicted = d["predicted_peak"].get<double>();
    CHECK(predicted >= 0.99 * peak);
    CHECK(predicted <= 1.02 * peak);
    // It became stable; at the very end the job's teardown (frees) may break the period.
    CHECK(d["prediction"]["stable_s"].is_number());
    CHECK((d["prediction"]["state"] == "stable" || d["prediction"]["state"] == "changing"));
    CHECK(d["prediction"]["period_ms"].get<double>() > 0);
    // Its reservation came from it (no --mem, no history yet: a first run).
    CHECK(d["reservation_source"] == "online");
    CHECK(d["reservation"].get<double>() == predicted);
  }
  // The SVG draws the prediction.
  ProcResult svg = node.cli({"report", node.report("trace")["job"], "--svg", node.file("t.svg")});
  REQUIRE(svg.exit_code == 0);
  CHECK(read_file(node.file("t.svg")).find("predicted peak") != std::string::npos);
}

TEST_CASE("estimate: two growing jobs that deadlock without history run one after the other with it") {
  if (simulated_only()) return;
  Node node("16GiB");
  // Without history: both start together, both grow into each other; at least one is held back
  // (waits for memory) or failed as the deadlock's victim.
  {
    auto a = node.run({"--job", "fresh-a"}, growing_job());
    auto b = node.run({"--job", "fresh-b"}, growing_job());
    ProcResult ra = a->wait(60s), rb = b->wait(60s);
    const json da = device_of(node.report("fresh-a")), db = device_of(node.report("fresh-b"));
    INFO(da.dump(), "\n", db.dump());
    const bool held = ra.exit_code != 0 || rb.exit_code != 0 || da["wait_memory_s"].get<double>() > 0 ||
                      db["wait_memory_s"].get<double>() > 0;
    CHECK(held);
    CHECK(da["reservation_source"] != "history");
    CHECK(db["reservation_source"] != "history");
  }
  REQUIRE(history_knows(node, 1));
  // With it: the same command (coloc's own options aside) is admitted on its known footprint, so
  // the second waits to be admitted until the first is done, and neither fails.
  auto a = node.run({"--job", "known-a"}, growing_job());
  REQUIRE(node.wait_state("known-a", "running"));
  auto b = node.run({"--job", "known-b"}, growing_job());
  finish(*a);
  finish(*b);
  const json da = device_of(node.report("known-a")), db = device_of(node.report("known-b"));
  INFO(da.dump(), "\n", db.dump());
  CHECK(da["reservation_source"] == "history");
  CHECK(db["reservation_source"] == "history");
  CHECK(da["reservation"].get<double>() >= da["peak"].get<double>());
  CHECK(db["wait_admission_s"].get<double>() > 0);
  CHECK(da["failures"] == 0);
  CHECK(db["failures"] == 0);
}

TEST_CASE("estimate: --mem over history over online") {
  if (simulated_only()) return;
  Node node("40GiB");
  const std::vector<std::string> cmd = {coloc_train(), "--model", "bert-base", "--batch", "4", "--iters", "200"};
  finish(*node.run({"--job", "learn"}, cmd));
  REQUIRE(history_knows(node, 1));
  // History, although the job's own prediction is stable again by its end.
  finish(*node.run({"--job", "hist"}, cmd));
  const json h = device_of(node.report("hist"));
  INFO(h.dump());
  CHECK(h["reservation_source"] == "history");
  CHECK(h["prediction"]["stable_s"].is_number());
  // Its estimate is a high percentile plus a margin: above its peak, not just its last value.
  CHECK(h["reservation"].get<double>() > h["peak"].get<double>());
  // --mem, over both.
  finish(*node.run({"--job", "mem", "--mem", "9GiB"}, cmd), 60s);
  const json m = device_of(node.report("mem"));
  INFO(m.dump());
  CHECK(m["reservation_source"] == "mem");
  CHECK(m["reservation"] == 9ull << 30);
  // coloc's own options are not part of the fingerprint: all three runs are one.
  REQUIRE(history_knows(node, 1));
  const json one = json::parse(node.cli({"history", "--json"}).out)["fingerprints"];
  REQUIRE(one.size() == 1);
  CHECK(one[0]["runs"] == 3);
  CHECK(one[0]["fingerprint"] == m["fingerprint"]);
  // A variable that changes a footprint makes another fingerprint: no history for it yet.
  finish(*node.run({"--job", "conf"}, cmd, {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}}));
  const json c = device_of(node.report("conf"));
  CHECK(c["reservation_source"] != "history");
  REQUIRE(history_knows(node, 2));
}

TEST_CASE("estimate: coloc status shows a running job's prediction") {
  if (simulated_only()) return;
  Node node("40GiB");
  auto p = node.run({"--job", "live"}, {coloc_train(), "--model", "bert-base", "--batch", "4", "--duration", "3"});
  REQUIRE(node.wait_state("live", "running"));
  json dev;
  REQUIRE(wait_until([&] {
    json j = node.job("live");
    if (j.is_null() || j["devices"].empty()) return false;
    dev = j["devices"][0];
    return dev["predicted_peak"].is_number() && dev["reservation_source"] == "online";
  }, 20s, 20ms));
  CHECK(dev["predicted_peak"].get<double>() >= 0.99 * dev["in_use"].get<double>());
  ProcResult st = node.cli({"status"});
  REQUIRE(st.exit_code == 0);
  CHECK_MESSAGE(st.out.find("PREDICTED") != std::string::npos, st.out);
  ProcResult wide = node.cli({"status", "--wide"});
  CHECK_MESSAGE(wide.out.find("(online)") != std::string::npos, wide.out);
  finish(*p);
}

TEST_CASE("estimate: one user's history never sets another user's reservation") {
  if (simulated_only()) return;
  Who nobody_user;
  if (!nobody(&nobody_user)) return;
  Node node("40GiB");
  const std::vector<std::string> cmd = {coloc_train(), "--model", "bert-base", "--batch", "4", "--iters", "100"};
  finish(*node.run({"--job", "root-job"}, cmd));
  REQUIRE(history_knows(node, 1));
  // The same command as nobody, on the same simulated device (its state files handed to nobody:
  // simgpu keeps them private to a user; root reaches them anyway): no history of its own, so
  // no history reservation.
  ::chmod(node.file("").c_str(), 0755);
  ::chmod(node.file("run").c_str(), 0755);
  std::error_code ec;
  ::chown(node.file("simgpu").c_str(), nobody_user.uid, nobody_user.gid);
  for (const auto& e : std::filesystem::recursive_directory_iterator(node.file("simgpu"), ec))
    ::chown(e.path().c_str(), nobody_user.uid, nobody_user.gid);
  const Env env = node.base_env();
  std::vector<std::string> argv = {build_path("bin/coloc"), "run", "--sim", "--job", "other", "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  ProcResult r = run_as(nobody_user, argv, env, 60s);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json d = device_of(node.report("other"));
  CHECK(d["reservation_source"] != "history");
  // Two fingerprints now, the same command on the same device model: only the user differs.
  REQUIRE(history_knows(node, 2));
  const std::string listing = node.cli({"history", "--json"}).out;
  INFO(listing);
  const json prints = json::parse(listing)["fingerprints"];
  std::map<int, json> by_uid;
  for (const json& f : prints) by_uid[f["uid"].get<int>()] = f;
  REQUIRE(by_uid.count(0));
  REQUIRE(by_uid.count(int(nobody_user.uid)));
  CHECK(by_uid[0]["model"] == by_uid[int(nobody_user.uid)]["model"]);
  CHECK(by_uid[0]["fingerprint"] != by_uid[int(nobody_user.uid)]["fingerprint"]);
  // And nobody's listing hides root's command line.
  ProcResult l = run_as(nobody_user, {build_path("bin/coloc"), "history", "--json"}, env);
  REQUIRE(l.exit_code == 0);
  const json theirs = json::parse(l.out)["fingerprints"];
  for (const json& f : theirs)
    if (f["uid"] == 0) CHECK(f["command"].is_null());
}

TEST_CASE("estimate: the history survives a colocd SIGKILL and restart") {
  if (simulated_only()) return;
  Node node("40GiB");
  const std::vector<std::string> cmd = {coloc_train(), "--model", "bert-base", "--batch", "2", "--iters", "100"};
  finish(*node.run({"--job", "before"}, cmd));
  REQUIRE(history_knows(node, 1));
  node.kill_daemon();
  node.start_daemon();
  REQUIRE(history_knows(node, 1));
  finish(*node.run({"--job", "after"}, cmd));
  const json d = device_of(node.report("after"));
  INFO(d.dump());
  CHECK(d["reservation_source"] == "history");
}

TEST_CASE("estimate: a job running across a colocd SIGKILL keeps its history reservation, and its run is recorded") {
  if (simulated_only()) return;
  Node node("40GiB");
  // The same command twice (one fingerprint): the first run teaches colocd its footprint, the
  // second runs long enough to span the restart.
  const std::vector<std::string> cmd = {coloc_train(), "--model", "bert-base", "--batch", "2", "--duration", "4"};
  finish(*node.run({"--job", "learn"}, cmd));
  REQUIRE(history_knows(node, 1));
  auto p = node.run({"--job", "across"}, cmd);
  REQUIRE(node.wait_state("across", "running"));
  // Its state is saved (a job's first save comes after its first second).
  REQUIRE(wait_until([&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(node.state() + "/jobs", ec))
      if (e.path().extension() == ".json" &&  // not a save in progress (X.json.tmp), not saved yet
          read_file(e.path()).find("\"reservations\"") != std::string::npos)
        return true;
    return false;
  }, 20s, 20ms));
  node.kill_daemon();
  node.start_daemon();
  finish(*p, 60s);
  const json d = device_of(node.report("across"));
  INFO(d.dump());
  CHECK(d["reservation_source"] == "history");
  // Its run joined the learning one under the one fingerprint.
  const std::string listing = node.cli({"history", "--json"}).out;
  INFO(listing);
  const json prints = json::parse(listing)["fingerprints"];
  REQUIRE(prints.size() == 1);
  CHECK(prints[0]["runs"] == 2);
  CHECK(prints[0]["fingerprint"] == d["fingerprint"]);  // the report names it
}

}  // TEST_SUITE
