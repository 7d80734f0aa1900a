// Live Slurm: a single-node cluster (cluster.sh: munged, slurmctld, slurmd in a temporary
// directory; gpu:1 and shard:8 on the node) whose jobs run coloc-train on simgpu, without coloc
// and with the SPANK plugin (tools/slurm/, spank_coloc.so) pointed at a colocd of the test's own.
//
// The clusters are started once per test binary (lazily, by the first test that needs one) and
// stopped at exit: one without a plugin, one with spank_coloc.so (required=1, mem_per_shard=2GiB)
// and its colocd on a 16 GiB simgpu device. Each test uses fresh Slurm job ids and names. The
// colocd-down test starts clusters of its own (another plugstack.conf).
//
// Skipped (with a message) where Slurm cannot run: sanitizer builds, no root, Slurm not installed
// (a failure under CI=true); see slurm_skip(). The plugin's tests skip while tools/slurm/ is not in
// the tree, and fail when it is but the plugin is not built.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "../e2e/e2e.h"
#include "slurm_cluster.h"

using namespace coloc::test;
using namespace coloc::test::slurm;
using coloc::test::e2e::GiB;
using nlohmann::json;

namespace {

// ---- the model jobs -------------------------------------------------------------------------------
// GPT-2 medium, batch 1, fp32 + Adam on simgpu: 5.3 GiB of weights, gradients and optimizer state,
// a 10.8 GiB peak (with the CUDA context) in every iteration. Two at once overflow a 16 GiB device
// within their first iteration; one alone fits in 12 GiB.
const std::vector<std::string> kGpt2Medium = {"--model", "gpt2-medium", "--batch", "1"};
// BERT base: 2.5 GiB at its peak.
const std::vector<std::string> kBertBase = {"--model", "bert-base", "--batch", "1"};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

/// coloc-train ARGS as a shell command.
std::string train(const std::vector<std::string>& model, const std::string& more) {
  return coloc::test::e2e::coloc_train() + " " + join(model) + " " + more;
}

/// A shell prelude that makes `n` batch jobs start their work together: each marks itself in
/// `dir`, then waits (30 s at most) until `n` have. Slurm starts batch jobs on its scheduler's
/// 1-second tick, so two jobs submitted together may start up to a second apart.
std::string barrier(const std::string& dir, int n) {
  return "mkdir -p " + dir + "; touch " + dir + "/$SLURM_JOB_ID; i=0; while [ $(ls " + dir + " | wc -l) -lt " +
         std::to_string(n) + " ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; ";
}

/// A shell loop that waits (60 s at most) for `path` to exist.
std::string await_file(const std::string& path) {
  return "i=0; while [ ! -e " + path + " ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done; ";
}

/// The last JSON object line of `out` (coloc-train's result), or null.
json result_of(const std::string& out) {
  ProcResult r;
  r.out = out;
  return r.last_json();
}

std::string job_text(const SlurmCluster& c, const BatchJob& b) {
  return "job " + std::to_string(b.id) + ": " + c.job(b.id).raw + "\nstdout:\n" + b.out() + "\nstderr:\n" + b.err();
}

// ---- the shared clusters --------------------------------------------------------------------------

/// Where the plugin is: PREFIX/lib/coloc/spank_coloc.so, installed by `make -f mk/install.mk
/// install` into a temporary prefix (the layout sites get: libcoloc.so beside it, coloc in
/// ../../bin, the plugin's defaults).
struct Plugin {
  std::string so;   ///< "" when there is none to use
  std::string why;  ///< why not
};

class Shared {
 public:
  ~Shared() {
    // Clusters first (their jobs use the node's colocd), then the node.
    coloc_.reset();
    plain_.reset();
    node_.reset();
    prefix_.reset();
  }

  /// The cluster without a plugin.
  SlurmCluster& plain() {
    if (!plain_) {
      REQUIRE_MESSAGE(plain_error_.empty(), plain_error_);
      plain_error_ = "the plain cluster did not start (see the first test that failed)";
      plain_ = std::make_unique<SlurmCluster>("", "slurm-plain");
      plain_error_.clear();
      MESSAGE("plain cluster up in ", plain_->start_seconds(), " s: ", plain_->dir());
    }
    return *plain_;
  }

  /// The plugin to load, installed once into a temporary prefix.
  const Plugin& plugin() {
    if (plugin_checked_) return plugin_;
    plugin_checked_ = true;
    const std::string built = build_path("lib/spank_coloc.so");
    if (!file_exists(built)) {
      plugin_.why = built + " is not built: Slurm's headers are missing (Debian: libslurm-dev; mk/deps.sh installs "
                            "it under CI=true or COLOC_WITH_SLURM=1)";
      return plugin_;
    }
    prefix_ = std::make_unique<TempDir>("coloc-slurm-prefix");
    std::string build = build_path("");
    while (build.size() > 1 && build.back() == '/') build.pop_back();
    Env e;
    for (const char* v : {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}) e.unset(v);
    ProcResult in = run({"make", "--no-print-directory", "-C", source_path(""), "-f", "mk/install.mk", "install",
                         "BUILD=" + build, "PREFIX=" + *prefix_ / "usr", "SYSCONFDIR=" + *prefix_ / "etc"},
                        e, 60s);
    const std::string installed = *prefix_ / "usr/lib/coloc/spank_coloc.so";
    if (in.exit_code != 0 || !file_exists(installed)) {
      plugin_.why = "make -f mk/install.mk install did not install " + installed + ":\n" + describe(in);
      return plugin_;
    }
    // A site's prefix is readable by every user: the anchor and the tasks of a job that is not
    // root's exec coloc and preload libcoloc.so from it (mkdtemp made the directory 0700).
    ::chmod(prefix_->path().c_str(), 0755);
    plugin_.so = installed;
    return plugin_;
  }

  /// True (failed, with the reason) when there is no plugin to test.
  bool no_plugin() {
    const Plugin& p = plugin();
    if (!p.so.empty()) return false;
    FAIL_CHECK(p.why);
    return true;
  }

  /// The plugstack.conf line for the plugin (its coloc= and lib= are the installed defaults).
  std::string plugstack_line(const std::string& socket, bool required, const std::string& mem_per_shard = "2GiB") {
    return "optional " + plugin().so + " socket=" + socket + " required=" + (required ? "1" : "0") +
           " mem_per_shard=" + mem_per_shard + "\n";
  }

  /// colocd on a 16 GiB simgpu device, for the plugin's cluster. Its socket is reachable by every
  /// user, as /run/coloc's is (the node's directories are made traversable).
  coloc::test::e2e::Node& node() {
    if (!node_) {
      node_ = std::make_unique<coloc::test::e2e::Node>("16GiB");
      const std::filesystem::path run = std::filesystem::path(node_->socket()).parent_path();
      ::chmod(run.c_str(), 0711);
      ::chmod(run.parent_path().c_str(), 0711);
    }
    return *node_;
  }

  /// The cluster with the plugin (required=1, mem_per_shard=2GiB) and node()'s colocd.
  SlurmCluster& coloc() {
    if (!coloc_) {
      REQUIRE_MESSAGE(coloc_error_.empty(), coloc_error_);
      coloc_error_ = "the plugin's cluster did not start (see the first test that failed)";
      coloc::test::e2e::Node& n = node();
      coloc_ = std::make_unique<SlurmCluster>(plugstack_line(n.socket(), true), "slurm-coloc");
      coloc_error_.clear();
      MESSAGE("plugin cluster up in ", coloc_->start_seconds(), " s: ", coloc_->dir());
    }
    return *coloc_;
  }

  /// The environment of a job on the plugin's cluster: simgpu's device shared with colocd; no
  /// COLOC_* variable (the plugin sets what a job needs).
  Env job_env() {
    Env e = node().base_env();
    e.unset("COLOC_SOCKET");
    e.unset("COLOC_CONFIG");
    return e;
  }

 private:
  std::unique_ptr<SlurmCluster> plain_, coloc_;
  std::unique_ptr<coloc::test::e2e::Node> node_;
  std::unique_ptr<TempDir> prefix_;
  std::string plain_error_, coloc_error_;
  Plugin plugin_;
  bool plugin_checked_ = false;
};

Shared& shared() {
  static Shared s;
  return s;
}

/// `coloc report ID --json` once the job's report is complete (its last process left and its
/// anchor said goodbye), waiting up to `timeout`; null (with the last answer in `last`) on timeout.
json final_report(const coloc::test::e2e::Node& n, const std::string& id, std::string* last = nullptr,
                  std::chrono::milliseconds timeout = 30s) {
  json rep;
  std::string seen;
  wait_until([&] {
    ProcResult r = n.cli({"report", id, "--json"});
    seen = describe(r);
    if (r.exit_code != 0) return false;
    json j = json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.value("complete", false)) return false;
    rep = std::move(j);
    return true;
  }, timeout, 50ms);
  if (last) *last = seen;
  return rep;
}

/// The report files colocd wrote for job `id` (id.json, id.N.json, id-xxxxxx.json).
std::vector<std::string> report_files(const coloc::test::e2e::Node& n, const std::string& id) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(n.state() + "/reports", ec)) {
    std::string f = e.path().filename();
    if (f == id + ".json" || f.rfind(id + ".", 0) == 0 || f.rfind(id + "-", 0) == 0) out.push_back(f);
  }
  return out;
}

/// The total admission and memory wait of a report, over its devices.
double waited_s(const json& rep) {
  double s = 0;
  for (const json& d : rep.value("devices", json::array()))
    s += d.value("wait_admission_s", 0.0) + d.value("wait_memory_s", 0.0);
  return s;
}

/// "JOBID=<n>" printed by a step's command: the Slurm job id.
long printed_job_id(const std::string& out) {
  size_t at = out.find("JOBID=");
  if (at == std::string::npos) return 0;
  try {
    return std::stol(out.substr(at + 6));
  } catch (...) {
    return 0;
  }
}

}  // namespace

TEST_SUITE("slurm") {

TEST_CASE("slurm: without coloc, two sbatch jobs on shards overflow the device and one dies of out-of-memory") {
  // Each alone fits (a 10.8 GiB peak on 16 GiB); started together, they run out of memory.
  if (slurm_skip()) return;
  SlurmCluster& c = shared().plain();
  TempDir gpu("coloc-slurm-gpu");
  Env e;
  e.simgpu(gpu, "16GiB");
  const std::string name = unique_name("nocoloc");
  const std::string script =
      barrier(c.file(name), 2) + "exec " + train(kGpt2Medium, "--duration 1.5 --job $SLURM_JOB_ID");
  BatchJob a = c.sbatch({"--gres=shard:4", "-J", name, "--wrap", script}, e);
  BatchJob b = c.sbatch({"--gres=shard:4", "-J", name, "--wrap", script}, e);
  REQUIRE_MESSAGE(a.id > 0, describe(a.submit));
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo ja = c.wait_job_done(a.id, 60s), jb = c.wait_job_done(b.id, 60s);
  REQUIRE_MESSAGE(ja.done(), job_text(c, a), c.logs());
  REQUIRE_MESSAGE(jb.done(), job_text(c, b), c.logs());

  int ooms = 0, oks = 0;
  for (const auto& [job, info] : {std::pair{&a, &ja}, std::pair{&b, &jb}}) {
    json res = result_of(job->out());
    INFO(job_text(c, *job));
    REQUIRE(res.is_object());
    if (res["status"] == "oom") {
      ++ooms;
      CHECK(res["error"].get<std::string>().find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
      CHECK(job->err().find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
      CHECK(info->state == "FAILED");
      CHECK(info->exit_code != 0);
    } else if (res["status"] == "ok") {
      ++oks;
      CHECK(info->state == "COMPLETED");
    }
  }
  // At least one dies (both may, when both are at the edge of the device at once); neither ends
  // any other way.
  CHECK_MESSAGE(ooms >= 1, job_text(c, a), "\n", job_text(c, b));
  CHECK_MESSAGE(ooms + oks == 2, job_text(c, a), "\n", job_text(c, b));
}

TEST_CASE("slurm+coloc: srun --coloc-mem runs the step under coloc (report slurm-<jobid>), its limit holds, and shards size a job without --coloc-mem") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();

  // Fits in its limit: completes, under coloc, with the options it was given.
  ProcResult fits = c.srun({"--gres=shard:1", "--coloc-mem=13GiB", "--coloc-priority=best-effort", "bash", "-c",
                            "echo JOBID=$SLURM_JOB_ID; exec " + train(kGpt2Medium, "--iters 3")},
                           e, 60s);
  REQUIRE_MESSAGE(fits.exit_code == 0, describe(fits), c.logs());
  const long id = printed_job_id(fits.out);
  REQUIRE(id > 0);
  json res = fits.last_json();
  CHECK_MESSAGE(res["status"] == "ok", describe(fits));
  std::string seen;
  json rep = final_report(n, "slurm-" + std::to_string(id), &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["job"] == "slurm-" + std::to_string(id));
  CHECK(rep["limit"] == 13 * GiB);
  CHECK(rep["priority"] == "best-effort");
  CHECK(rep["exit_status"] == 0);
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["peak"].get<uint64_t>() > 10 * GiB);
  CHECK(rep["devices"][0]["peak"].get<uint64_t>() <= 13 * GiB);

  // Beyond its limit (the device alone has room for it): coloc fails the allocation that crosses
  // the limit, and the job dies of out-of-memory at 4 GiB.
  ProcResult over = c.srun({"--gres=shard:1", "--coloc-mem=4GiB", "bash", "-c",
                            "echo JOBID=$SLURM_JOB_ID; exec " + train(kGpt2Medium, "--iters 3")},
                           e, 60s);
  CHECK_MESSAGE(over.exit_code != 0, describe(over));
  json ores = over.last_json();
  CHECK_MESSAGE(ores["status"] == "oom", describe(over));
  CHECK_MESSAGE(over.err.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos, describe(over));
  CHECK_MESSAGE(over.err.find("out of memory (own limit)") != std::string::npos, describe(over));  // libcoloc.so's
  const long oid = printed_job_id(over.out);
  REQUIRE(oid > 0);
  json orep = final_report(n, "slurm-" + std::to_string(oid), &seen);
  REQUIRE_MESSAGE(orep.is_object(), seen, "\n", n.log());
  CHECK(orep["limit"] == 4 * GiB);
  REQUIRE(orep["devices"].size() == 1);
  CHECK(orep["devices"][0]["peak"].get<uint64_t>() <= 4 * GiB);
  CHECK(orep["exit_status"] != 0);

  // No --coloc-mem: the limit is the job's shards at mem_per_shard (3 x 2 GiB).
  ProcResult shards = c.srun({"--gres=shard:3", "bash", "-c",
                              "echo JOBID=$SLURM_JOB_ID; exec " + train(kBertBase, "--iters 2")},
                             e, 60s);
  REQUIRE_MESSAGE(shards.exit_code == 0, describe(shards));
  const long sid = printed_job_id(shards.out);
  REQUIRE(sid > 0);
  json srep = final_report(n, "slurm-" + std::to_string(sid), &seen);
  REQUIRE_MESSAGE(srep.is_object(), seen, "\n", n.log());
  CHECK(srep["limit"] == 6 * GiB);
}

TEST_CASE("slurm+coloc: two sbatch jobs on shards that overflow the device both complete; one waited for the other") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  const std::string name = unique_name("overflow");
  const std::string script =
      barrier(c.file(name), 2) + "exec " + train(kGpt2Medium, "--duration 1.5 --job $SLURM_JOB_ID");
  BatchJob a = c.sbatch({"--gres=shard:4", "--coloc-mem=12GiB", "-J", name, "--wrap", script}, e);
  BatchJob b = c.sbatch({"--gres=shard:4", "--coloc-mem=12GiB", "-J", name, "--wrap", script}, e);
  REQUIRE_MESSAGE(a.id > 0, describe(a.submit));
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo ja = c.wait_job_done(a.id, 60s), jb = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(ja.state == "COMPLETED", job_text(c, a));
  CHECK_MESSAGE(jb.state == "COMPLETED", job_text(c, b));
  CHECK_MESSAGE(result_of(a.out())["status"] == "ok", job_text(c, a));
  CHECK_MESSAGE(result_of(b.out())["status"] == "ok", job_text(c, b));

  std::string seen;
  json ra = final_report(n, "slurm-" + std::to_string(a.id), &seen);
  REQUIRE_MESSAGE(ra.is_object(), seen, "\n", n.log());
  json rb = final_report(n, "slurm-" + std::to_string(b.id), &seen);
  REQUIRE_MESSAGE(rb.is_object(), seen, "\n", n.log());
  CHECK(ra["limit"] == 12 * GiB);
  CHECK(rb["limit"] == 12 * GiB);
  // coloc-train ran in the batch step itself.
  for (const json* r : {&ra, &rb}) {
    REQUIRE_MESSAGE((*r)["processes"].size() == 1, r->dump(1));
    CHECK((*r)["processes"][0]["step"] == "batch");
  }
  // Exactly one of them waited for admission (12 + 12 GiB do not fit in 16).
  const double wa = waited_s(ra), wb = waited_s(rb);
  CHECK_MESSAGE(((wa > 0) != (wb > 0)), "waits ", wa, " and ", wb, "\n", ra.dump(1), "\n", rb.dump(1));
  CHECK(std::max(wa, wb) > 0.5);  // the other ran 1.5 s first
}

TEST_CASE("slurm+coloc: a batch job's two srun steps are one coloc job with one reservation, and one report lists both steps") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  const std::string name = unique_name("steps");
  const std::string between = c.file(name + ".between"), go = c.file(name + ".go");
  const std::string script = "srun " + train(kBertBase, "--iters 2") + " || exit 10; touch " + between + "; " +
                             await_file(go) + "srun " + train(kBertBase, "--iters 2") + " || exit 11";
  BatchJob b = c.sbatch({"--gres=shard:2", "--coloc-mem=6GiB", "-J", name, "--wrap", script}, e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  const std::string id = "slurm-" + std::to_string(b.id);

  // Between the steps: the job is there with its reservation, and no process.
  const bool reached_between = wait_until([&] { return file_exists(between) || c.job(b.id).done(); }, 60s, 20ms);
  REQUIRE_MESSAGE((reached_between && file_exists(between)), job_text(c, b));
  REQUIRE_MESSAGE(wait_until([&] {
    json j = n.job(id);
    return !j.is_null() && j["pids"].empty();
  }, 20s, 10ms), n.status_text());
  json mine = n.job(id);
  CHECK(mine["job"] == id);
  CHECK(mine["limit"] == 6 * GiB);
  CHECK(mine["reserved"] == 6 * GiB);

  write_file(go, "");
  JobInfo j = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(j.state == "COMPLETED", job_text(c, b));

  std::string seen;
  json rep = final_report(n, id, &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["job"] == id);
  CHECK(rep["limit"] == 6 * GiB);
  REQUIRE_MESSAGE(rep["processes"].size() == 2, rep.dump(1));
  std::set<std::string> steps;
  for (const json& p : rep["processes"]) {
    REQUIRE_MESSAGE(p.contains("step"), p.dump());
    steps.insert(p["step"].is_string() ? p["step"].get<std::string>() : p["step"].dump());
  }
  const std::set<std::string> both = {"0", "1"};
  CHECK_MESSAGE(steps == both, rep["processes"].dump());
  const std::vector<std::string> files = report_files(n, id);
  CHECK_MESSAGE(files.size() == 1, files.size());
}

TEST_CASE("slurm+coloc: scancel of a running job releases its memory and files its report") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  const std::string name = unique_name("cancel");
  BatchJob b = c.sbatch({"--gres=shard:2", "--coloc-mem=6GiB", "-J", name, "--wrap",
                         "exec " + train(kBertBase, "--duration 120")},
                        e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  const std::string id = "slurm-" + std::to_string(b.id);
  REQUIRE_MESSAGE(wait_until([&] {
    json j = n.job(id);
    return !j.is_null() && !j["pids"].empty() && j["in_use"].get<uint64_t>() > 0;
  }, 30s, 20ms), job_text(c, b), "\n", n.status_text());

  REQUIRE(c.scancel(b.id));
  JobInfo j = c.wait_job_done(b.id, 30s);
  CHECK_MESSAGE(j.state == "CANCELLED", job_text(c, b));
  // colocd sees the job's process die and its anchor go: the memory is free again.
  CHECK_MESSAGE(wait_until([&] {
    json s = n.status();
    for (const json& job : s["jobs"])
      if (job["job"] == id) return false;
    const json& d = s["devices"][0];
    return d["committed"] == 0 && d["in_use"] == 0 && d["granted"] == 0;
  }, 30s, 20ms), n.status_text());
  std::string seen;
  json rep = final_report(n, id, &seen, 30s);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["job"] == id);
}

TEST_CASE("slurm+coloc: a bad --coloc-mem is refused at submission, by srun and by sbatch, with coloc's message and no job") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  Env e = shared().job_env();
  const std::string name = unique_name("badmem");
  ProcResult r = c.srun({"-J", name, "--coloc-mem=12X", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.out.find("ran") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("12X") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("coloc") != std::string::npos, describe(r));

  BatchJob b = c.sbatch({"-J", name, "--coloc-mem=12X", "--wrap", "echo ran"}, e);
  CHECK_MESSAGE(b.submit.exit_code != 0, describe(b.submit));
  CHECK(b.id == 0);
  CHECK_MESSAGE(b.submit.err.find("12X") != std::string::npos, describe(b.submit));
  CHECK_MESSAGE(b.submit.err.find("coloc") != std::string::npos, describe(b.submit));
  const std::vector<long> queued = c.jobs_named(name);
  CHECK_MESSAGE(queued.empty(), queued.size(), " job(s) named ", name);

  // A size without a unit is bytes: below one CUDA context it is refused, with the likely meaning.
  r = c.srun({"-J", name, "--coloc-mem=20", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.out.find("ran") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("did you mean 20G?") != std::string::npos, describe(r));
  CHECK(c.jobs_named(name).empty());
}

TEST_CASE("slurm+coloc: salloc takes the options, and SLURM_SPANK_ variables are the options too (checked alike)") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = c.env(shared().job_env());
  std::string seen;

  // salloc: the allocation's options reach its srun step.
  ProcResult a = run({"timeout", "60", "salloc", "--gres=shard:1", "--coloc-mem=7GiB", "--coloc-priority=best-effort",
                      "srun", "bash", "-c", "echo JOBID=$SLURM_JOB_ID; exec " + train(kBertBase, "--iters 2")},
                     e, 70s);
  REQUIRE_MESSAGE(a.exit_code == 0, describe(a), c.logs());
  const long aid = printed_job_id(a.out);
  REQUIRE(aid > 0);
  json arep = final_report(n, "slurm-" + std::to_string(aid), &seen);
  REQUIRE_MESSAGE(arep.is_object(), seen, "\n", n.log());
  CHECK(arep["limit"] == 7 * GiB);
  CHECK(arep["priority"] == "best-effort");

  // The variable Slurm reads for --coloc-mem (SLURM_SPANK_ + its name for the plugin's option).
  Env v = shared().job_env();
  v.set("SLURM_SPANK__SLURM_SPANK_OPTION_coloc_coloc_mem", "9GiB");
  ProcResult r = c.srun({"--gres=shard:1", "bash", "-c", "echo JOBID=$SLURM_JOB_ID; exec " + train(kBertBase, "--iters 2")},
                        v, 60s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r), c.logs());
  const long rid = printed_job_id(r.out);
  REQUIRE(rid > 0);
  json rrep = final_report(n, "slurm-" + std::to_string(rid), &seen);
  REQUIRE_MESSAGE(rrep.is_object(), seen, "\n", n.log());
  CHECK(rrep["limit"] == 9 * GiB);

  v.set("SLURM_SPANK__SLURM_SPANK_OPTION_coloc_coloc_mem", "9Q");
  r = c.srun({"bash", "-c", "echo ran"}, v, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.out.find("ran") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("coloc: --coloc-mem=9Q") != std::string::npos, describe(r));
}

TEST_CASE("slurm+coloc: an sbatch --wrap job's command is the wrapped one, so wrapped commands do not share a history") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  const std::string cmd = train(kBertBase, "--iters 2");
  BatchJob b = c.sbatch({"--coloc-mem=6GiB", "--wrap", cmd}, e);  // no -J: Slurm names it "wrap"
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(j.state == "COMPLETED", job_text(c, b));
  std::string seen;
  json rep = final_report(n, "slurm-" + std::to_string(b.id), &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["command"] == "sbatch --wrap " + cmd);
}

TEST_CASE("slurm+coloc: an srun inside a batch job preloads libcoloc.so exactly once") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  Env e = shared().job_env();
  // Submitted with another libcoloc.so preloaded (another install's, a `coloc run`'s): it goes,
  // since two copies would each count the job's memory. ld.so would say so if it stayed (no such file).
  e.set("LD_PRELOAD", "/nonexistent/other/libcoloc.so");
  const std::string name = unique_name("inner");
  BatchJob b = c.sbatch({"--gres=shard:1", "--coloc-mem=1GiB", "-J", name, "--wrap",
                         "echo \"OUTER=$LD_PRELOAD\"; srun bash -c 'echo \"INNER=$LD_PRELOAD\"'"},
                        e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  REQUIRE_MESSAGE(j.state == "COMPLETED", job_text(c, b));
  const std::string out = b.out();
  auto line = [&](const std::string& key) {
    size_t at = out.find(key + "=");
    if (at == std::string::npos) return std::string("(no " + key + " line)");
    size_t end = out.find('\n', at);
    return out.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  CHECK_MESSAGE(count_of(line("OUTER"), "libcoloc.so") == 1, line("OUTER"));
  CHECK_MESSAGE(count_of(line("INNER"), "libcoloc.so") == 1, line("INNER"));
  CHECK_MESSAGE(out.find("/nonexistent/") == std::string::npos, out);
  CHECK_MESSAGE(b.err().find("cannot be preloaded") == std::string::npos, job_text(c, b));
}

TEST_CASE("slurm+coloc: a job with no limit drops a COLOC_MEM_LIMIT it was submitted with") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  Env e = shared().job_env();
  e.set("COLOC_MEM_LIMIT", "1048576");  // from a `coloc run --mem 1MiB` shell, say
  e.set("COLOC_JOB", "mine");
  // No --coloc-mem and no shards: no limit.
  ProcResult r = c.srun({"bash", "-c", "echo \"LIMIT=$COLOC_MEM_LIMIT JOB=$COLOC_JOB\"; echo JOBID=$SLURM_JOB_ID"}, e, 30s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find("LIMIT= JOB=slurm-" + std::to_string(printed_job_id(r.out)) + "\n") != std::string::npos,
                describe(r));
}

TEST_CASE("slurm+coloc: --coloc=off runs the step without coloc") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  Env e = shared().job_env();
  ProcResult r = c.srun({"--coloc=off", "bash", "-c", "echo \"PRELOAD=$LD_PRELOAD\"; echo \"JOB=$COLOC_JOB\""}, e, 30s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  CHECK_MESSAGE(r.out.find("libcoloc.so") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.out.find("JOB=\n") != std::string::npos, describe(r));

  // An srun --coloc=off in a batch script under coloc: its tasks inherit the batch step's
  // environment (libcoloc.so preloaded, COLOC_JOB, ...), and lose it; the user's own preload stays.
  const std::string name = unique_name("inneroff");
  BatchJob b = c.sbatch({"-J", name, "--coloc-mem=1GiB", "--wrap",
                         "export LD_PRELOAD=\"$LD_PRELOAD:libm.so.6\"; echo \"OUTER=$LD_PRELOAD JOB=$COLOC_JOB\"; "
                         "srun --coloc=off bash -c 'echo \"INNER=$LD_PRELOAD JOB=$COLOC_JOB LIMIT=$COLOC_MEM_LIMIT\"'"},
                        e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  REQUIRE_MESSAGE(j.state == "COMPLETED", job_text(c, b));
  const std::string out = b.out();
  CHECK_MESSAGE(out.find("OUTER=" + shared().plugin().so.substr(0, shared().plugin().so.rfind('/')) +
                         "/libcoloc.so:libm.so.6 JOB=slurm-" + std::to_string(b.id)) != std::string::npos,
                job_text(c, b));
  CHECK_MESSAGE(out.find("INNER=libm.so.6 JOB= LIMIT=\n") != std::string::npos, job_text(c, b));
}

TEST_CASE("slurm+coloc: with PrologFlags=contain a job's coloc job has its options (the extern step, which sees none, does not anchor it)") {
  if (slurm_skip() || shared().no_plugin()) return;
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  SlurmCluster c(shared().plugstack_line(n.socket(), true), "slurm-contain", "PrologFlags=contain");
  const std::string name = unique_name("contain");
  BatchJob b = c.sbatch({"--gres=shard:2", "--coloc-mem=5GiB", "--coloc-priority=best-effort", "-J", name, "--wrap",
                         "exec " + train(kBertBase, "--iters 2")},
                        e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(j.state == "COMPLETED", job_text(c, b), c.logs());
  std::string seen;
  json rep = final_report(n, "slurm-" + std::to_string(b.id), &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK_MESSAGE(rep["limit"] == 5 * GiB, rep.dump(1));
  CHECK(rep["priority"] == "best-effort");
  CHECK(rep["command"] == "sbatch " + name);
  // The process joined a job of its own limit (not one an option-less anchor made first).
  CHECK_MESSAGE(b.err().find("is lower than the limit of job") == std::string::npos, job_text(c, b));
}

TEST_CASE("slurm+coloc: a job array's tasks are coloc jobs slurm-<arrayjobid>_<taskid>") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  // A job name longer than 255 characters: the report's command is still "sbatch NAME" (cut).
  const std::string name = unique_name("array") + std::string(300, 'n');
  BatchJob b = c.sbatch({"--array=1-2", "--coloc-mem=1GiB", "-J", name, "--wrap", "echo \"JOB=$COLOC_JOB\""}, e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  for (const char* task : {"1", "2"}) {
    const std::string id = "slurm-" + std::to_string(b.id) + "_" + task;
    std::string seen;
    json rep = final_report(n, id, &seen, 60s);
    REQUIRE_MESSAGE(rep.is_object(), id, ": ", seen, "\n", c.logs());
    CHECK(rep["job"] == id);
    CHECK(rep["limit"] == 1 * GiB);
    CHECK(rep["exit_status"] == 0);
    CHECK_MESSAGE(rep["command"].get<std::string>().rfind("sbatch " + name.substr(0, 40), 0) == 0, rep.dump(1));
  }
}

TEST_CASE("slurm+coloc: a job of a user other than root: its anchor and processes are that user's, a refused priority is lowered once, and the report names the user") {
  if (slurm_skip() || shared().no_plugin()) return;
  SlurmCluster& c = shared().coloc();
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  // nobody: the job's cwd and output must be reachable by it (--chdir=/; srun's output comes back
  // through srun), and srun, which takes on the user after the allocation, needs munge's socket in
  // the cluster's directory (0700: made traversable). The task reads colocd's status while the
  // step, and so its anchor, runs.
  ::chmod(c.dir().c_str(), 0711);
  // simgpu's shared device state (colocd made it, as root) is opened by every CUDA process.
  const std::filesystem::path sim = std::filesystem::path(n.socket()).parent_path().parent_path() / "simgpu";
  ::chmod(sim.c_str(), 01777);
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(sim, ec)) ::chmod(f.path().c_str(), 0666);
  const std::string status = build_path("bin/coloc") + " --socket " + n.socket() + " status --json";
  ProcResult r = c.srun({"--uid=65534", "--gid=65534", "--chdir=/", "--gres=shard:2", "--coloc-mem=4GiB",
                         "--coloc-priority=high", "bash", "-c",
                         "echo JOBID=$SLURM_JOB_ID; echo UID=$(id -u) PRIO=$COLOC_PRIORITY; " +
                             train(kBertBase, "--iters 2") + " >/dev/null || exit 9; " + status},
                        e, 30s);
  REQUIRE_MESSAGE(r.exit_code == 0, describe(r), c.logs());
  const long id = printed_job_id(r.out);
  REQUIRE(id > 0);
  const std::string job = "slurm-" + std::to_string(id);
  CHECK_MESSAGE(r.out.find("UID=65534 PRIO=normal\n") != std::string::npos, describe(r));
  // The lowered priority is said once, by the plugin (not again by each process that asks).
  CHECK_MESSAGE(count_of(r.err, "priority high is for root") == 1, describe(r));
  const size_t brace = r.out.find('{');
  REQUIRE_MESSAGE(brace != std::string::npos, describe(r));
  json s = json::parse(r.out.substr(brace), nullptr, false);
  REQUIRE_MESSAGE(!s.is_discarded(), describe(r));
  json mine;
  for (const json& j : s["jobs"])
    if (j["job"] == job) mine = j;
  REQUIRE_MESSAGE(mine.is_object(), describe(r));
  CHECK(mine["uid"] == 65534);
  CHECK(mine["priority"] == "normal");
  CHECK(mine["limit"] == 4 * GiB);

  std::string seen;
  json rep = final_report(n, job, &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["uid"] == 65534);
  CHECK(rep["priority"] == "normal");
  CHECK(rep["exit_status"] == 0);
  // coloc-train, as nobody, joined the anchor's job.
  REQUIRE_MESSAGE(rep["processes"].size() == 1, rep.dump(1));
  CHECK(rep["processes"][0]["step"] == "0");
  REQUIRE(rep["devices"].size() == 1);
  CHECK(rep["devices"][0]["peak"].get<uint64_t>() > 0);
}

TEST_CASE("slurm+coloc: colocd down: required=0 runs the step with a warning, required=1 refuses it and says why") {
  if (slurm_skip() || shared().no_plugin()) return;
  TempDir nowhere("coloc-slurm-nodaemon");
  const std::string socket = nowhere / "colocd.sock";  // nobody listens
  Env e = shared().job_env();
  // One cluster of its own; plugstack.conf rewritten between the halves (read afresh by every srun,
  // sbatch and slurmstepd).
  SlurmCluster c(shared().plugstack_line(socket, false), "slurm-nodaemon");

  ProcResult r = c.srun({"--coloc-mem=1GiB", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 0, describe(r), c.logs());
  CHECK_MESSAGE(r.out.find("ran") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("coloc: warning:") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("colocd") != std::string::npos, describe(r));

  c.set_plugstack(shared().plugstack_line(socket, true));
  r = c.srun({"--coloc-mem=1GiB", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.out.find("ran") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("colocd is required") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find(socket) != std::string::npos, describe(r));

  BatchJob b = c.sbatch({"--coloc-mem=1GiB", "--wrap", "echo ran"}, e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(j.state == "FAILED", job_text(c, b));
  CHECK_MESSAGE(b.out().find("ran") == std::string::npos, job_text(c, b));
  CHECK_MESSAGE(b.err().find("colocd is required") != std::string::npos, job_text(c, b), c.logs());

  // A step with a GPU (a shard here) is refused without an option too; a CPU-only step (no GPU
  // GRES, no --coloc-* option) is not coloc's to refuse, and runs without a word.
  r = c.srun({"--gres=shard:1", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.err.find("colocd is required") != std::string::npos, describe(r));
  r = c.srun({"bash", "-c", "echo ran; echo \"PRELOAD=$LD_PRELOAD\""}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 0, describe(r), c.logs());
  CHECK_MESSAGE(r.out.find("ran") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("coloc") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.out.find("libcoloc.so") != std::string::npos, describe(r));  // should it start CUDA after all

  // A malformed plugstack.conf argument with required=1 fails closed for GPU steps, and names it.
  c.set_plugstack("optional " + shared().plugin().so + " socket=" + socket + " required=1 mem_per_shard=2X\n");
  r = c.srun({"--gres=shard:1", "bash", "-c", "echo ran"}, e, 30s);
  CHECK_MESSAGE(r.exit_code != 0, describe(r));
  CHECK_MESSAGE(r.out.find("ran") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("mem_per_shard=2X") != std::string::npos, describe(r));

  // lib= that is not there: no preload (no ld.so errors in every task), a warning; refused with
  // required=1.
  c.set_plugstack("optional " + shared().plugin().so + " socket=" + socket + " required=0 lib=" + (nowhere / "libcoloc.so") + "\n");
  r = c.srun({"--gres=shard:1", "bash", "-c", "echo ran; echo \"PRELOAD=$LD_PRELOAD\""}, e, 30s);
  CHECK_MESSAGE(r.exit_code == 0, describe(r), c.logs());
  CHECK_MESSAGE(r.out.find("ran") != std::string::npos, describe(r));
  CHECK_MESSAGE(r.out.find("libcoloc.so") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("ld.so") == std::string::npos, describe(r));
  CHECK_MESSAGE(r.err.find("no libcoloc.so at") != std::string::npos, describe(r));
}

}  // TEST_SUITE

TEST_SUITE("slurm") {

TEST_CASE("slurm: without the plugin, deploy/slurm/taskprolog.sh makes each task a process of coloc job slurm-<jobid> with its step and its shards' limit") {
  if (slurm_skip() || shared().no_plugin()) return;
  coloc::test::e2e::Node& n = shared().node();
  Env e = shared().job_env();
  // The script as a site edits it: the installed libcoloc.so, the node's socket, 2 GiB per shard.
  TempDir t("coloc-slurm-taskprolog");
  std::string script = read_file(source_path("deploy/slurm/taskprolog.sh"));
  auto set = [&](const std::string& key, const std::string& value) {
    const size_t at = script.find("\n" + key + "=");
    REQUIRE_MESSAGE(at != std::string::npos, key, " is not a setting of taskprolog.sh");
    const size_t end = script.find('\n', at + 1);
    script.replace(at + 1, end - at - 1, key + "=" + value);
  };
  const std::string so = shared().plugin().so;
  set("LIB", so.substr(0, so.rfind('/')) + "/libcoloc.so");
  set("SOCKET", n.socket());
  set("MEM_PER_SHARD", std::to_string(2 * GiB));
  const std::string prolog = t / "taskprolog.sh";
  write_file(prolog, script);
  REQUIRE(::chmod(prolog.c_str(), 0755) == 0);
  REQUIRE(::chmod(t.path().c_str(), 0755) == 0);
  SlurmCluster c("", "slurm-taskprolog", "TaskProlog=" + prolog);

  const std::string name = unique_name("taskprolog");
  const std::string wrap = "echo \"B:$COLOC_JOB:$COLOC_STEP:$COLOC_MEM_LIMIT:$LD_PRELOAD\"; "
                           "srun bash -c 'echo \"S:$COLOC_STEP\"'; exec " + train(kBertBase, "--iters 2");
  // A user's own setting of the script's names changes nothing (they are not read from the environment).
  e.set("MEM_PER_SHARD", std::to_string(1000 * GiB));
  BatchJob b = c.sbatch({"--gres=shard:2", "-J", name, "--wrap", wrap}, e);
  REQUIRE_MESSAGE(b.id > 0, describe(b.submit));
  JobInfo j = c.wait_job_done(b.id, 60s);
  CHECK_MESSAGE(j.state == "COMPLETED", job_text(c, b), c.logs());
  const std::string id = "slurm-" + std::to_string(b.id);
  CHECK_MESSAGE(b.out().find("B:" + id + ":batch:" + std::to_string(4 * GiB) + ":" + so.substr(0, so.rfind('/')) +
                             "/libcoloc.so\n") != std::string::npos,
                job_text(c, b));
  CHECK_MESSAGE(b.out().find("S:0\n") != std::string::npos, job_text(c, b));
  std::string seen;
  json rep = final_report(n, id, &seen);
  REQUIRE_MESSAGE(rep.is_object(), seen, "\n", n.log());
  CHECK(rep["limit"] == 4 * GiB);
  REQUIRE_MESSAGE(rep["processes"].size() == 1, rep.dump(1));
  CHECK(rep["processes"][0]["step"] == "batch");
}

}  // TEST_SUITE
