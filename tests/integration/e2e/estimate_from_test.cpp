// End-to-end: a job's declared estimate (`coloc run --estimate-from MODEL --batch N`, which sets
// COLOC_MEM_ESTIMATE; libcoloc.so and coloc run's anchor send it in Register v10). A job without
// --mem and without history is reserved on it at admission, before it allocates anything, so a
// newcomer that does not fit beside it waits (and says why); its report says where its
// reservation came from; a job with history gets history's even when it declares an estimate; and
// coloc run refuses --estimate-from with --mem, its shape options without it, and a model or batch
// the estimator refuses (exit 2).
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

json device_of(const json& report) {
  REQUIRE(report["devices"].size() == 1);
  return report["devices"][0];
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

TEST_CASE("estimate-from: the job is reserved on its estimate before it allocates, and its report says so") {
  if (simulated_only()) return;
  Node node("40GiB");
  const std::string ready = node.file("ready"), go = node.file("go");
  auto p = node.run({"--job", "est", "--estimate-from", "bert-base", "--batch", "4"},
                    {cuprobe(), "init", "ctx", "0", "touch", ready, "hold-file", go, "alloc", "1GiB", "a"});
  REQUIRE(reached(*p, ready));
  const json j = node.job("est");
  REQUIRE(!j.is_null());
  INFO(j.dump());
  REQUIRE(j["estimate"].is_number());
  const uint64_t estimate = j["estimate"];
  CHECK(estimate > 2 * GiB);  // a BERT-base training step: weights, Adam's state, activations, context
  CHECK(j["limit"].is_null());  // not a limit
  const json dev = j["devices"][0];
  CHECK(dev["reservation_source"] == "estimate");
  CHECK(dev["reserved"] == estimate);
  CHECK(dev["in_use"].get<uint64_t>() <= kContext);  // nothing allocated yet but its context
  write_file(go, "");
  ProcResult r = finish(*p);
  CHECK_MESSAGE(r.err.find("coloc: note: estimate for bert-base batch 4: ") != std::string::npos, r.err);
  CHECK(r.err.find("coloc estimate --model bert-base --batch 4") != std::string::npos);
  const json rep = node.report("est");
  const json d = device_of(rep);
  INFO(d.dump());
  CHECK(d["reservation_source"] == "estimate");
  CHECK(d["reservation"] == estimate);
  ProcResult text = node.cli({"report", rep["job"]});
  REQUIRE(text.exit_code == 0);
  CHECK_MESSAGE(text.out.find("(from its estimate: coloc run --estimate-from") != std::string::npos, text.out);
}

TEST_CASE("estimate-from: COLOC_MEM_ESTIMATE alone holds a newcomer that does not fit beside it, and its wait says why") {
  if (simulated_only()) return;
  Node node("16GiB");
  const std::string ready_a = node.file("ready-a"), ready_b = node.file("ready-b"), go = node.file("go");
  auto env_of = [&](const std::string& job) {
    Env e = node.base_env();
    e.preload_coloc().set("COLOC_JOB", job).set("COLOC_MEM_ESTIMATE", "10GiB");
    return e;
  };
  Proc a({cuprobe(), "init", "ctx", "0", "touch", ready_a, "hold-file", go}, env_of("plain-a"));
  REQUIRE(reached(a, ready_a));
  json ja = node.job("plain-a");
  REQUIRE(!ja.is_null());
  CHECK(ja["estimate"] == 10 * GiB);
  CHECK(ja["devices"][0]["reservation_source"] == "estimate");
  CHECK(ja["devices"][0]["reserved"] == 10 * GiB);
  // 10 + 10 GiB > 16 GiB: b waits at its first context, before it allocates anything.
  Proc b({cuprobe(), "init", "ctx", "0", "touch", ready_b}, env_of("plain-b"));
  REQUIRE(node.wait_state("plain-b", "admission-pending"));
  REQUIRE(wait_until([&] { return b.err_so_far().find("has waited") != std::string::npos || !b.running(); }, 20s));
  const std::string err = b.err_so_far();
  CHECK_MESSAGE(err.find("it asks 10.00 GiB (its estimated footprint, COLOC_MEM_ESTIMATE / coloc run --estimate-from)") !=
                    std::string::npos,
                err);
  CHECK_FALSE(file_exists(ready_b));
  write_file(go, "");
  finish(a);
  finish(b);
  const json db = device_of(node.report("plain-b"));
  INFO(db.dump());
  CHECK(db["reservation_source"] == "estimate");
  CHECK(db["wait_admission_s"].get<double>() > 0);
}

TEST_CASE("estimate-from: a job with history gets history's reservation even when it declares an estimate") {
  if (simulated_only()) return;
  Node node("40GiB");
  // The same command each time (coloc's own options are not in the fingerprint).
  const std::vector<std::string> cmd = {cuprobe(), "init", "ctx", "0", "alloc", "3GiB", "a", "free", "a"};
  const std::vector<std::string> est = {"--estimate-from", "bert-base", "--batch", "4"};
  auto with = [&](const std::string& job) {
    std::vector<std::string> args = {"--job", job};
    args.insert(args.end(), est.begin(), est.end());
    return args;
  };
  finish(*node.run(with("first"), cmd));
  const json first = device_of(node.report("first"));
  INFO(first.dump());
  CHECK(first["reservation_source"] == "estimate");
  REQUIRE(history_knows(node, 1));
  finish(*node.run(with("again"), cmd));
  const json again = device_of(node.report("again"));
  INFO(again.dump());
  CHECK(again["reservation_source"] == "history");
  CHECK(again["reservation"] != first["reservation"]);
  CHECK(again["fingerprint"] == first["fingerprint"]);
}

TEST_CASE("estimate-from: coloc run's usage errors exit 2 and run nothing") {
  if (simulated_only()) return;
  Node node("16GiB", {}, false);  // no colocd needed: the options are refused first
  const std::string ran = node.file("ran");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--estimate-from", "bert-base", "--batch", "4", "--mem", "8GiB"}, "--mem already declares the job's footprint"},
      {{"--batch", "4"}, "--batch describes the run --estimate-from estimates"},
      {{"--estimate-from", "bert-base", "--dtype", "bf16"}, "--estimate-from needs --batch N"},
      {{"--estimate-from", "no-such-model", "--batch", "4"}, "--estimate-from 'no-such-model': unknown model"},
      {{"--estimate-from", "bert-base", "--batch", "0"}, "--batch '0': a whole number, at least 1"},
      {{"--estimate-from", "bert-base", "--batch", "4", "--optimizer", "lion"}, "--optimizer 'lion': unknown"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {build_path("bin/coloc"), "run", "--sim"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--", "touch", ran});
    ProcResult r = coloc::test::run(argv, node.base_env(), 20s);
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK_FALSE(file_exists(ran));
  }
}

}  // TEST_SUITE
