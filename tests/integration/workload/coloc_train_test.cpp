// coloc-train as a real process on simgpu: every preset, both recorded traces (with loops, size and
// time scaling), bad input, and two jobs overflowing one device -- the failure coloc exists to
// prevent.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "../../../tools/workload/caching_allocator.h"
#include "../../../estimator/model.h"
#include "../../../tools/workload/trainer.h"
#include "../../support/proc.h"
#include "../../unit/workload/fakes.h"

using namespace coloc::test;
namespace wl = coloc::workload;

namespace {

constexpr uint64_t GiB = 1ULL << 30;
constexpr uint64_t kTracePeak = 61111009280ULL;  // data README: both traces peak at 56.9 GiB

std::string trace_path(const char* name) { return source_path(std::string("tools/workload/traces/") + name); }
const char* const kTraces[] = {"transformer-lm-ctx128-fullstep.csv", "transformer-lm-ctx256-fullstep.csv"};

// A simulated device of `devices` in its own state directory; contexts cost 64 MiB.
Env sim(const TempDir& dir, const std::string& devices = "80GiB") {
  Env env;
  env.simgpu(dir, devices).set("SIMGPU_CONTEXT_BYTES", "64MiB");
  return env;
}

std::vector<std::string> train(std::vector<std::string> args) {
  args.insert(args.begin(), build_path("bin/coloc-train"));
  return args;
}

// Checks the fields every result line has.
void check_result_line(const nlohmann::json& j, const std::string& status) {
  REQUIRE(j.is_object());
  CHECK(j["status"] == status);
  CHECK(j["job"].is_string());
  CHECK(j["iters"].is_number_unsigned());
  CHECK(j["peak_bytes"].is_number_unsigned());
  CHECK(j.contains("iter_ms_p50"));
  CHECK(j.contains("error"));
  if (status == "ok") {
    CHECK(j["error"].is_null());
    CHECK(j["iter_ms_p50"].is_number());
  } else {
    CHECK(j["error"].is_string());
  }
}

// The non-empty lines of `text`.
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string l = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!l.empty()) out.push_back(l);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

// What the caching allocator would reserve at its peak for `model`, from the same policy on a fake
// device: the real run must show the driver exactly this.
uint64_t predicted_peak(const wl::Model& model, wl::DType dtype, wl::Optimizer opt, int iters) {
  wl::test::FakeDevice dev;
  wl::test::FakeCompute gpu;
  wl::CachingAllocator alloc(dev);
  wl::Trainer t(model, wl::TrainOptions{dtype, opt, 400}, alloc, gpu);
  t.setup();
  for (int i = 0; i < iters; ++i) t.step();
  return alloc.stats().peak_reserved_bytes;
}

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("every preset trains on simgpu and prints its result line") {
  struct Run {
    const char* model;
    const char* dtype;
    const char* optimizer;
    const char* seq;  // "" = not given (CNNs)
  };
  // Each preset once, covering every dtype and optimizer between them. Short sequences and a fast
  // --tflops keep kernels to microseconds.
  const Run runs[] = {{"resnet50", "fp32", "sgd-momentum", ""}, {"bert-base", "bf16", "adam", "128"},
                      {"bert-large", "fp16", "adamw", "64"},   {"gpt2-small", "fp32", "sgd", "128"},
                      {"gpt2-medium", "bf16", "adam", "64"},   {"gpt2-large", "fp32", "adam", "32"},
                      {"llama-1b", "bf16", "adam", "128"},
                      {"resnet18", "bf16", "adam", ""},        {"resnet34", "fp16", "sgd", ""},
                      {"vgg16", "fp32", "adamw", ""},          {"mobilenet-v2", "bf16", "sgd-momentum", ""},
                      {"mobilenet-v3-small", "fp32", "adam", ""}, {"efficientnet-b0", "fp16", "adam", ""},
                      {"inception-v3", "bf16", "sgd", ""},     {"xception", "fp32", "sgd-momentum", ""},
                      {"unet-resnet34", "bf16", "adamw", ""}};
  struct Running {
    std::unique_ptr<TempDir> dir;
    std::unique_ptr<Proc> proc;
  };
  std::vector<Running> procs;
  for (const Run& r : runs) {
    auto dir = std::make_unique<TempDir>("coloc-train");
    std::vector<std::string> args{"--model", r.model, "--batch", "2", "--iters", "2", "--dtype", r.dtype,
                                  "--optimizer", r.optimizer, "--tflops", "1e6", "--progress"};
    if (*r.seq) args.insert(args.end(), {"--seq", r.seq});
    Env env = sim(*dir);
    env.set("COLOC_JOB", std::string("job-") + r.model);
    auto proc = std::make_unique<Proc>(train(args), env);
    procs.push_back({std::move(dir), std::move(proc)});
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    const Run& r = runs[i];
    CAPTURE(r.model);
    ProcResult res = procs[i].proc->wait(60s);
    INFO(describe(res));
    REQUIRE(res.exit_code == 0);
    nlohmann::json j = res.last_json();
    check_result_line(j, "ok");
    CHECK(j["job"] == std::string("job-") + r.model);  // from COLOC_JOB
    CHECK(j["iters"] == 2);
    CHECK(j["model"] == r.model);
    CHECK(lines(res.err).size() == 2);  // --progress: one line per iteration
    // The driver saw exactly the segments the allocator policy predicts for this model.
    const wl::DType dtype = *wl::parse_dtype(r.dtype);
    const wl::Optimizer opt = *wl::parse_optimizer(r.optimizer);
    wl::Model m = wl::make_preset(r.model, wl::RunShape{2, *r.seq ? std::stoull(r.seq) : 0, dtype});
    CHECK(j["params"] == m.param_count());
    CHECK(j["static_bytes"] == m.param_count() * wl::static_bytes_per_param(dtype, opt));
    CHECK(j["peak_bytes"] == predicted_peak(m, dtype, opt, 2));
    CHECK(j["kernels"] == 2 * 2 * m.layers.size());
  }
}

TEST_CASE("both recorded traces replay to the known peak of 61,111,009,280 bytes") {
  TempDir d1("coloc-train"), d2("coloc-train");
  Proc p1(train({"--trace", trace_path(kTraces[0]), "--time-scale", "0", "--job", "t128"}), sim(d1));
  Proc p2(train({"--trace", trace_path(kTraces[1]), "--time-scale", "0", "--job", "t256"}), sim(d2));
  for (Proc* p : {&p1, &p2}) {
    ProcResult res = p->wait(60s);
    INFO(describe(res));
    REQUIRE(res.exit_code == 0);
    nlohmann::json j = res.last_json();
    check_result_line(j, "ok");
    CHECK(j["iters"] == 1);
    CHECK(j["peak_bytes"] == kTracePeak);
  }
}

TEST_CASE("--loops 3 reaches the same peak every loop") {
  TempDir dir("coloc-train");
  ProcResult res = run(train({"--trace", trace_path(kTraces[1]), "--time-scale", "0", "--loops", "3", "--progress"}), sim(dir));
  INFO(describe(res));
  REQUIRE(res.exit_code == 0);
  nlohmann::json j = res.last_json();
  check_result_line(j, "ok");
  CHECK(j["iters"] == 3);
  CHECK(j["peak_bytes"] == kTracePeak);
  // Each loop's progress line reports the same peak: every loop starts from the pre-existing state.
  auto progress = lines(res.err);
  REQUIRE(progress.size() == 3);
  for (const std::string& l : progress) CHECK(l.find("peak 56.91 GiB") != std::string::npos);
}

TEST_CASE("--size-scale 0.25 scales the peak; --time-scale paces the replay") {
  TempDir d1("coloc-train"), d2("coloc-train");
  // Every size × 0.25, rounded up to 2 MiB. Expected value computed independently from the CSV
  // (data README's replay rule, same rounding): 16,481,517,568 bytes, within 2 MiB per live
  // segment of 0.25 × the unscaled peak.
  Proc scaled(train({"--trace", trace_path(kTraces[0]), "--time-scale", "0", "--size-scale", "0.25"}), sim(d1));
  // 0.05 × the 562,977 µs the ctx128 trace lasts: a loop cannot take less than 28.1 ms.
  Proc paced(train({"--trace", trace_path(kTraces[0]), "--time-scale", "0.05"}), sim(d2));
  ProcResult rs = scaled.wait(60s), rp = paced.wait(60s);
  {
    INFO(describe(rs));
    REQUIRE(rs.exit_code == 0);
    nlohmann::json j = rs.last_json();
    check_result_line(j, "ok");
    CHECK(j["peak_bytes"] == 16481517568ULL);
    CHECK(j["peak_bytes"].get<uint64_t>() >= kTracePeak / 4);
  }
  {
    INFO(describe(rp));
    REQUIRE(rp.exit_code == 0);
    nlohmann::json j = rp.last_json();
    check_result_line(j, "ok");
    CHECK(j["peak_bytes"] == kTracePeak);
    CHECK(j["iter_ms_p50"].get<double>() >= 0.05 * 562.977);
  }
}

TEST_CASE("bad input: one line on stderr, exit 2, nothing on stdout") {
  TempDir dir("coloc-train");
  const std::string header = "t_us,kind,event,size,stream,handle\n";
  write_file(dir / "negative.csv", header + "0,segment,alloc,2097152,0,1\n5,segment,alloc,-4096,0,2\n");
  write_file(dir / "garbled.csv", header + "0,segment,alloc,2097152,0,1\n1,segment,alloc\n");
  write_file(dir / "unknown-free.csv", "# preexisting_segment,2097152,1\n" + header + "0,segment,free,2097152,0,9\n");
  write_file(dir / "spec.json", R"({"layers": [{"params": -3}]})");
  struct Case {
    std::vector<std::string> args;
    std::string message;  // expected in the one line
  };
  const Case cases[] = {
      {{"--model", "gpt-7"}, "unknown model 'gpt-7'"},
      {{"--trace", dir / "negative.csv"}, "negative.csv:3: negative size '-4096'"},
      {{"--trace", dir / "garbled.csv"}, "garbled.csv:3: expected 6 fields"},
      {{"--trace", dir / "unknown-free.csv"}, "unknown-free.csv:3: free of segment handle 9, which is neither live nor pre-existing"},
      {{"--trace", dir / "missing.csv"}, "cannot read the trace"},
      {{"--trace", trace_path(kTraces[0]), "--size-scale", "-1"}, "--size-scale must not be negative"},
      {{"--trace", trace_path(kTraces[0]), "--loops", "0"}, "--loops must be at least 1"},
      {{"--model-file", dir / "spec.json"}, "spec.json: layers[0].params: must not be negative"},
      {{"--model", "gpt2-small", "--batch", "0"}, "--batch must be at least 1"},
      {{"--model", "gpt2-small", "--seq", "4096"}, "longer than its 1024 learned positions"},
      {{"--model", "resnet50", "--seq", "128"}, "--seq applies only to transformer models"},
      {{"--model", "inception-v3", "--image", "64"}, "--image 64 is too small for this network (at least 75)"},
      {{"--model", "resnet18", "--classes", "0"}, "--classes must be at least 1"},
      {{"--model", "gpt2-small", "--image", "224"}, "--image and --classes apply only to convolutional models"},
      {{"--model-file", dir / "spec.json", "--classes", "10"}, "--classes applies only to convolutional presets"},
      {{"--trace", trace_path(kTraces[0]), "--image", "64"}, "--image applies only to --model"},
      {{"--model", "gpt2-small", "--dtype", "fp8"}, "unknown --dtype 'fp8'"},
      {{"--model", "gpt2-small", "--loops", "2"}, "--loops applies only to --trace"},
      {{"--model", "gpt2-small", "--trace", trace_path(kTraces[0])}, "exactly one of"},
      {{}, "exactly one of"},
      {{"--model", "gpt2-small", "--frobnicate"}, "--frobnicate"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    ProcResult res = run(train(c.args), sim(dir));
    INFO(describe(res));
    CHECK(res.exit_code == 2);
    CHECK(res.out.empty());
    auto err = lines(res.err);
    REQUIRE(err.size() == 1);
    CHECK(err[0].rfind("coloc-train: error: ", 0) == 0);
    CHECK(err[0].find(c.message) != std::string::npos);
  }
}

TEST_CASE("without any CUDA library: --help, --list-models and bad input work; a run says the driver is missing") {
  if (real_driver()) {
    MESSAGE("skipped: the real driver is installed here");
    return;
  }
  // No LD_LIBRARY_PATH to simgpu, and no driver on this machine: libcuda.so.1 cannot be found.
  Env env;
  env.unset("LD_LIBRARY_PATH");
  ProcResult help = run(train({"--help"}), env);
  INFO(describe(help));
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("Usage") != std::string::npos);
  CHECK(help.err.empty());
  ProcResult list = run(train({"--list-models"}), env);
  CHECK(list.exit_code == 0);
  CHECK(list.out.find("gpt2-small") != std::string::npos);
  ProcResult bad = run(train({"--model", "gpt-7"}), env);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("unknown model 'gpt-7'") != std::string::npos);
  ProcResult none = run(train({"--model", "gpt2-small", "--iters", "1"}), env);
  INFO(describe(none));
  CHECK(none.exit_code == 1);
  nlohmann::json j = none.last_json();
  check_result_line(j, "error");
  CHECK(j["error"].get<std::string>().find("cannot load the CUDA driver (libcuda.so.1)") != std::string::npos);
  CHECK(none.err.find("LD_LIBRARY_PATH=build/sim") != std::string::npos);
}

TEST_CASE("a CUDA error other than out-of-memory exits 1 with the error's name") {
  TempDir dir("coloc-train");
  ProcResult res = run(train({"--model", "gpt2-small", "--seq", "64", "--iters", "1", "--device", "3"}), sim(dir, "80GiB"));
  INFO(describe(res));
  CHECK(res.exit_code == 1);
  nlohmann::json j = res.last_json();
  check_result_line(j, "error");
  CHECK(j["error"].get<std::string>().find("CUDA_ERROR_INVALID_DEVICE") != std::string::npos);
  CHECK(j["iters"] == 0);
}

TEST_CASE("two jobs that together overflow a 24 GiB device: at least one gets OOM (exit 3)") {
  // The failure coloc exists to prevent. GPT-2 large, Adam, fp32: 11.5 GiB of weights, gradients
  // and optimizer state plus activations; one job fits a 24 GiB device, two do not. Each holds its
  // static memory for its whole run (10 iterations of about 0.1 s at 20 TFLOP/s), so the two runs
  // overlap.
  auto args = [](const std::string& name, const std::string& iters) {
    return train({"--model", "gpt2-large", "--seq", "512", "--optimizer", "adam", "--tflops", "20", "--iters", iters,
                  "--job", name});
  };

  // Control: one job alone fits, and its footprint (context included) is more than half the device.
  {
    TempDir dir("coloc-train");
    ProcResult res = run(args("alone", "2"), sim(dir, "24GiB"));
    INFO(describe(res));
    REQUIRE(res.exit_code == 0);
    nlohmann::json j = res.last_json();
    if (j["device_total_bytes"] != 24 * GiB) {
      // COLOC_TEST_DRIVER=real: the device is not the 24 GiB one this test is sized for.
      MESSAGE("skipping the pair: the device has " << j["device_total_bytes"] << " bytes, not 24 GiB");
      return;
    }
    const uint64_t footprint = j["peak_bytes"].get<uint64_t>() + (64ULL << 20);
    CHECK(2 * footprint > 24 * GiB);
  }

  TempDir dir("coloc-train");
  Env env = sim(dir, "24GiB");
  Proc a(args("first", "10"), env), b(args("second", "10"), env);
  ProcResult ra = a.wait(120s), rb = b.wait(120s);
  INFO(describe(ra));
  INFO(describe(rb));
  int ooms = 0;
  for (const ProcResult* r : {&ra, &rb}) {
    CHECK((r->exit_code == 0 || r->exit_code == 3));
    if (r->exit_code != 3) continue;
    ++ooms;
    nlohmann::json j = r->last_json();
    check_result_line(j, "oom");
    CHECK(j["error"].get<std::string>().find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
  }
  CHECK(ooms >= 1);
}
}
