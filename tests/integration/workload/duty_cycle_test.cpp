// coloc-train's duty cycles as real processes on simgpu: the device time and period of a job alone
// (from simgpu's kernel trace), a model's memory pattern with its kernels scaled, --lucid, the
// result line's speed fields, bad input, and contention between duty-cycle jobs on one device
// (orderings and ratios with margins, measured in the same test: robust on a loaded machine).
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
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

constexpr uint64_t MiB = 1ULL << 20;

Env sim(const TempDir& dir) {
  Env env;
  env.simgpu(dir, "16GiB").set("SIMGPU_CONTEXT_BYTES", "64MiB");
  return env;
}

std::vector<std::string> train(std::vector<std::string> args) {
  args.insert(args.begin(), build_path("bin/coloc-train"));
  return args;
}

// Device time in SIMGPU_TRACE (every slice's end - start), ns.
uint64_t traced_device_ns(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  uint64_t total = 0;
  while (std::getline(in, line)) {
    unsigned long start = 0, end = 0;
    const size_t c = line.rfind(',', line.rfind(',') - 1);  // start_ns,end_ns are the last two fields
    if (std::sscanf(line.c_str() + c + 1, "%lu,%lu", &start, &end) == 2 && end > start) total += end - start;
  }
  return total;
}

nlohmann::json ok_line(const ProcResult& r) {
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = r.last_json();
  REQUIRE(j.is_object());
  CHECK(j["status"] == "ok");
  return j;
}

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("a duty cycle alone: PCT% of MS on the device, period MS, speed in the result line") {
  TempDir dir("coloc-train");
  Env env = sim(dir);
  env.set("SIMGPU_TRACE", dir / "trace.csv");
  ProcResult r = run(train({"--gpu-util", "40", "--iter-ms", "20", "--iters", "15"}), env);
  nlohmann::json j = ok_line(r);
  CHECK(j["iters"] == 15);
  CHECK(j["gpu_util"] == 40.0);
  CHECK(j["iter_ms"] == 20.0);
  CHECK(j["device_ms"] == 8.0);
  CHECK(j["host_ms"] == 12.0);
  CHECK(j["kernel_us"] == 500.0);
  CHECK(j["kernels"] == 15 * 16);  // 8 ms in kernels of 0.5 ms
  CHECK(j["peak_bytes"] == 64 * MiB);
  // An iteration can be no shorter than its period (device part, then the full host wait).
  CHECK(j["iter_ms_p50"].get<double>() >= 20.0);
  CHECK(j["iter_ms_p50"].get<double>() < 35.0);
  // iters_per_s is iters over the loop's time, which is no longer than the whole run.
  const double loop_ms = j["loop_ms"].get<double>();
  CHECK(loop_ms >= 15 * 20.0);
  CHECK(loop_ms <= j["wall_ms"].get<double>());
  CHECK(j["iters_per_s"].get<double>() == doctest::Approx(15 / (loop_ms / 1000)).epsilon(0.01));
  CHECK(j["iters_per_s"].get<double>() <= 50.0);
  // The device was busy 15 x 8 ms (simgpu's device clock absorbs late host wake-ups up to 2 ms).
  if (!real_driver()) {
    const uint64_t busy = traced_device_ns(dir / "trace.csv");
    CHECK(busy >= 15 * 8'000'000ULL);
    CHECK(busy <= 15 * 10'000'000ULL);
  }
  // The field order of the result line is kept; the new fields come after it.
  const std::string out = r.out;
  CHECK(out.find("{\"job\":") == 0);
  CHECK(out.find("\"status\"") < out.find("\"iters\""));
  CHECK(out.find("\"error\"") < out.find("\"gpu_util\""));
  CHECK(out.find("\"wall_ms\"") < out.find("\"iters_per_s\""));
}

TEST_CASE("a model under a duty cycle keeps its memory pattern and fills PCT% of MS with its kernels") {
  TempDir dir("coloc-train");
  Env env = sim(dir);
  env.set("SIMGPU_TRACE", dir / "trace.csv");
  ProcResult r = run(train({"--model", "gpt2-small", "--seq", "64", "--gpu-util", "50", "--iter-ms", "30", "--iters", "4",
                            "--optimizer", "sgd"}),
                     env);
  nlohmann::json j = ok_line(r);
  const wl::Model m = wl::make_preset("gpt2-small", wl::RunShape{1, 64, wl::DType::fp32});
  CHECK(j["model"] == "gpt2-small");
  CHECK(j["kernels"] == 4 * 2 * m.layers.size());
  CHECK(j["device_ms"] == 15.0);
  // The same segments as without a duty cycle: the allocator policy over the same tensors.
  wl::test::FakeDevice dev;
  wl::test::FakeCompute gpu;
  wl::CachingAllocator alloc(dev);
  wl::Trainer t(m, wl::TrainOptions{wl::DType::fp32, wl::Optimizer::sgd, 400}, alloc, gpu);
  t.setup();
  for (int i = 0; i < 4; ++i) t.step();
  CHECK(j["peak_bytes"] == alloc.stats().peak_reserved_bytes);
  CHECK(j["iter_ms_p50"].get<double>() >= 30.0);
  if (!real_driver()) {
    const uint64_t busy = traced_device_ns(dir / "trace.csv");
    CHECK(busy >= 4 * 15'000'000ULL - 1000);  // per-kernel rounding: at most 1 ns each
    CHECK(busy <= 4 * 20'000'000ULL);
  }
}

TEST_CASE("--lucid takes the duty cycle from lucid-solo.csv; --lucid-dir reads another copy") {
  TempDir dir("coloc-train");
  ProcResult r = run(train({"--lucid", "ResNet18/CIFAR-10/32", "--iters", "3"}), sim(dir));
  nlohmann::json j = ok_line(r);
  CHECK(j["lucid"] == "ResNet18/CIFAR-10/32");
  CHECK(j["gpu_util"] == 58.667);
  CHECK(j["iter_ms"] == 18.142);  // 1000 x 32 / 1763.905 samples/s
  CHECK(j["iters"] == 3);

  write_file(dir / "lucid-solo.csv", "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label\n"
                                     "Toy,Set,10,1,1000,25,1,100,0\n");
  ProcResult r2 = run(train({"--lucid", "toy/set/10/amp", "--lucid-dir", dir.path(), "--iters", "2"}), sim(dir));
  nlohmann::json j2 = ok_line(r2);
  CHECK(j2["gpu_util"] == 25.0);
  CHECK(j2["iter_ms"] == 10.0);
  CHECK(j2["device_ms"] == 2.5);
}

TEST_CASE("duty-cycle bad input: one line on stderr, exit 2, nothing on stdout") {
  TempDir dir("coloc-train");
  write_file(dir / "t.csv", "t_us,kind,event,size,stream,handle\n0,segment,alloc,2097152,0,1\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<std::string> duty{"--gpu-util", "40", "--iter-ms", "20"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = duty;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Case cases[] = {
      {{"--gpu-util", "0", "--iter-ms", "20"}, "--gpu-util must be a percentage from 1 to 100"},
      {{"--gpu-util", "100.5", "--iter-ms", "20"}, "--gpu-util must be a percentage from 1 to 100"},
      {{"--gpu-util", "abc", "--iter-ms", "20"}, "--gpu-util"},
      {{"--gpu-util", "40"}, "--gpu-util and --iter-ms go together"},
      {{"--model", "gpt2-small", "--iter-ms", "20"}, "--gpu-util and --iter-ms go together"},
      {{"--gpu-util", "40", "--iter-ms", "0"}, "--iter-ms must be a positive number"},
      {{"--gpu-util", "40", "--iter-ms", "60001"}, "--iter-ms must be at most 60000"},
      {with({"--iters", "5", "--duration", "1"}), "give --iters or --duration, not both"},
      {with({"--duration", "0"}), "--duration must be a positive number of seconds"},
      {with({"--duration", "100000"}), "--duration must be a positive number of seconds, at most 86400"},
      {with({"--kernel-us", "5"}), "--kernel-us must be from 10 to 1000000"},
      {with({"--model", "gpt2-small", "--kernel-us", "100"}), "--kernel-us applies only to a duty cycle without a model"},
      {{"--model", "gpt2-small", "--kernel-us", "100"}, "--kernel-us applies only to a duty cycle without a model"},
      {with({"--model", "gpt2-small", "--tflops", "10"}), "--tflops does not apply with a duty cycle"},
      {with({"--batch", "4"}), "--batch applies only to --model and --model-file"},
      {with({"--host-model", "parallel"}), "unknown --host-model 'parallel' (serial or overlap)"},
      {{"--model", "gpt2-small", "--host-model", "overlap"}, "--host-model applies only to a duty cycle"},
      {with({"--trace", dir / "t.csv"}), "applies only to --model, --model-file or no model"},
      {{"--trace", dir / "t.csv", "--duration", "1"}, "--duration applies only to"},
      {{"--lucid", "ResNet18/CIFAR-10/48"}, "no such configuration in lucid-solo.csv"},
      {{"--lucid", "ResNet18"}, "expected MODEL/DATASET/BATCH[/amp]"},
      {{"--lucid", "ResNet18/CIFAR-10/32", "--gpu-util", "40"}, "--lucid sets --gpu-util and --iter-ms"},
      {{"--lucid", "ResNet18/CIFAR-10/32", "--lucid-dir", dir / "none"}, "lucid-solo.csv: cannot read the Lucid data"},
      {{"--model", "gpt2-small", "--lucid-dir", dir.path()}, "--lucid-dir applies only with --lucid"},
      {{"--model", "gpt2-small", "--duration", "1", "--iters", "2"}, "give --iters or --duration, not both"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    ProcResult res = run(train(c.args), sim(dir));
    INFO(describe(res));
    CHECK(res.exit_code == 2);
    CHECK(res.out.empty());
    std::vector<std::string> err;
    for (size_t s = 0, nl; s < res.err.size(); s = nl + 1) {
      nl = res.err.find('\n', s);
      if (nl == std::string::npos) nl = res.err.size();
      if (nl > s) err.push_back(res.err.substr(s, nl - s));
    }
    REQUIRE(err.size() == 1);
    CHECK(err[0].rfind("coloc-train: error: ", 0) == 0);
    CHECK(err[0].find(c.message) != std::string::npos);
  }
}

TEST_CASE("contention: a duty-cycle job next to a GPU-hungry one slows down; two light ones hardly do; overlapped host work hides it") {
  // Over equal wall time (--duration), each job's speed with company against the same job alone,
  // all measured now (so a slow machine slows both sides). Four devices, six jobs at once; each
  // simgpu process mostly sleeps, so they do not compete for the CPU much.
  //   A     40% of 20 ms: 8 ms on the device, 12 ms on the host.
  //   hog   100% of 20 ms: always on the device.
  //   light 10% of 20 ms.
  // Expected with simgpu's round-robin slices: A next to the hog gets about half the device while
  // its 8 ms run, so its device part takes ~16 ms: speed ~20/28 = 0.71 of alone. Two light jobs
  // meet on the device in few iterations and then wait at most a slice: ~0.95. A with
  // --host-model overlap does its 20 ms of host work beside its kernels: their ~16 ms next to the
  // hog still fit, so it keeps nearly all its speed.
  if (real_driver()) {
    MESSAGE("skipped: the margins are simgpu's round-robin slices, not a real GPU's scheduling");
    return;
  }
  const std::vector<std::string> a{"--gpu-util", "40", "--iter-ms", "20", "--duration", "1.5"};
  const std::vector<std::string> hog{"--gpu-util", "100", "--iter-ms", "20", "--duration", "1.5"};
  const std::vector<std::string> light{"--gpu-util", "10", "--iter-ms", "20", "--duration", "1.5"};
  std::vector<std::string> a_overlap = a;
  a_overlap.insert(a_overlap.end(), {"--host-model", "overlap"});
  TempDir d_solo_a("coloc-train"), d_solo_light("coloc-train"), d_mix("coloc-train"), d_light("coloc-train");
  TempDir d_solo_ov("coloc-train"), d_mix_ov("coloc-train");
  Proc solo_a(train(a), sim(d_solo_a)), solo_light(train(light), sim(d_solo_light));
  Proc mix_a(train(a), sim(d_mix)), mix_hog(train(hog), sim(d_mix));
  Proc light1(train(light), sim(d_light)), light2(train(light), sim(d_light));
  Proc solo_ov(train(a_overlap), sim(d_solo_ov));
  Proc mix_ov(train(a_overlap), sim(d_mix_ov)), mix_ov_hog(train(hog), sim(d_mix_ov));
  auto speed = [](Proc& p) {
    ProcResult r = p.wait(60s);
    nlohmann::json j = ok_line(r);
    CHECK(j["duration_s"] == 1.5);
    CHECK(j["loop_ms"].get<double>() >= 1500.0);  // iterations start until the time has passed
    return j["iters_per_s"].get<double>();
  };
  const double s_a = speed(solo_a), s_light = speed(solo_light);
  const double m_a = speed(mix_a), m_hog = speed(mix_hog);
  const double l1 = speed(light1), l2 = speed(light2);
  const double s_ov = speed(solo_ov), m_ov = speed(mix_ov);
  speed(mix_ov_hog);
  INFO("overlap: A alone " << s_ov << ", A + hog " << m_ov);
  INFO("alone: A " << s_a << ", light " << s_light << " it/s; A + hog: " << m_a << ", " << m_hog << "; light + light: " << l1
                   << ", " << l2);
  // Alone, a job runs at most at its period's pace, and not far below it.
  CHECK(s_a <= 50.0);
  CHECK(s_a > 35.0);
  CHECK(s_light <= 50.0);
  // Next to the hog, A loses a good part of its speed, and the hog is kept below its pace alone.
  CHECK(m_a / s_a < 0.88);
  CHECK(m_a / s_a > 0.45);
  CHECK(m_hog < 0.9 * 50.0);
  // Two light jobs lose little, and clearly less than A next to the hog.
  for (double l : {l1, l2}) {
    CHECK(l / s_light > 0.85);
    CHECK(l / s_light > m_a / s_a + 0.08);
  }
  // Overlapped host work: the same pace alone, and far less lost next to the hog.
  CHECK(s_ov <= 50.0);
  CHECK(s_ov > 35.0);
  CHECK(m_ov / s_ov > 0.85);
  CHECK(m_ov / s_ov > m_a / s_a + 0.08);
}
}
