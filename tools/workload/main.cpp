// coloc-train — a training-job emulator for the CUDA driver API. See tools/workload/README.md and
// `coloc-train --help`.
//
//   coloc-train --model NAME [--batch N] [--iters N] [--seq N | --image N --classes N] [--dtype T] ...
//   coloc-train --model-file SPEC.json ...
//   coloc-train --trace FILE [--time-scale X] [--loops N] [--size-scale X]
//   coloc-train --gpu-util PCT --iter-ms MS [--kernel-us US] [--iters N | --duration S]
//   coloc-train --lucid MODEL/DATASET/BATCH[/amp] [--lucid-dir DIR] ...
//   coloc-train --pattern async [--kernels K] [--streams 1|2] [--sync-every N] [--step-ms MS] [--iters N | --duration S]
//   (--gpu-util/--iter-ms or --lucid also combine with --model/--model-file: a duty cycle)
//
// Prints one JSON line on stdout at the end:
//   {"job":…,"status":"ok"|"oom"|"error","iters":…,"iter_ms_p50":…,"peak_bytes":…,"error":…, …}
// Exit codes: 0 ok, 1 a CUDA (or other) error, 2 bad input (one line on stderr, nothing run),
// 3 the driver returned CUDA_ERROR_OUT_OF_MEMORY.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "caching_allocator.h"
#include "data_check.h"
#include "coloc/size.h"
#include "duty.h"
#include "errors.h"
#include "gpu.h"
#include "lucid.h"
#include "pattern.h"
#include "../../estimator/model.h"
#include "../../estimator/model_spec.h"
#include "trace.h"
#include "trainer.h"

using namespace coloc::workload;
using namespace coloc::est;
// ordered: the result line keeps the field order the issue gives (job, status, iters, ...).
using json = nlohmann::ordered_json;

namespace {

enum Exit { kOk = 0, kError = 1, kBadInput = 2, kOom = 3 };

struct Options {
  std::string model, model_file, trace, job;
  int64_t batch = 1, iters = 10, seq = 0, loops = 1, device = 0;
  int64_t image = 0, classes = 0;  // convolutional presets: input side and classifier outputs
  std::string dtype = "fp32", optimizer = "adam";
  double tflops = 400, time_scale = 1, size_scale = 1;
  bool progress = false, list_models = false;
  // Duty cycle (duty.h): --gpu-util/--iter-ms, or both from --lucid.
  double gpu_util = 0, iter_ms = 0, kernel_us = 500, duration_s = 0;
  std::string lucid, lucid_dir, host_model = "serial";
  bool duty = false;  // a duty cycle was asked for (set by validate)
  std::string pattern;  // --pattern: "async" (pattern.h)
  AsyncPattern async;
  int64_t check_data_mib = 0;  // --check-data: MiB of patterned memory checked every iteration (data_check.h)
};

// The memory a model-less duty-cycle job holds for its whole run (one cuMemAlloc).
constexpr uint64_t kDutyJobBytes = 64ULL << 20;

// What a run produced, whatever way it ended.
struct Outcome {
  std::string status = "ok";
  std::string error;
  LoopStats loop;
  uint64_t peak_bytes = 0;
  json extra = json::object();
};

std::string gib(uint64_t bytes) {
  char buf[32];
  return coloc::format_size(bytes, buf, sizeof buf);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Checks that options of the other mode were not given.
void only_for(const CLI::App& app, const char* mode, std::initializer_list<const char*> flags) {
  for (const char* f : flags)
    if (app.count(f)) throw InputError(std::string(f) + " applies only to " + mode);
}

// Checks everything but the files (trace, spec, Lucid data), which main() reads next. Sets o.duty.
void validate(Options& o, const CLI::App& app) {
  const bool pattern_opts = app.count("--kernels") || app.count("--streams") || app.count("--sync-every") ||
                            app.count("--step-ms") || app.count("--seed");
  if (!app.count("--pattern")) {
    if (pattern_opts) throw InputError("--kernels, --streams, --sync-every, --step-ms and --seed apply only to --pattern async");
  } else {
    if (o.pattern != "async") throw InputError("unknown --pattern '" + o.pattern + "' (async)");
    if (!o.model.empty() || !o.model_file.empty() || !o.trace.empty() || app.count("--gpu-util") || app.count("--iter-ms") ||
        app.count("--lucid"))
      throw InputError("--pattern async launches its own kernels: it does not combine with --model, --model-file, --trace or a duty cycle");
    only_for(app, "--model and --model-file", {"--batch", "--seq", "--dtype", "--optimizer", "--tflops"});
    only_for(app, "--model", {"--image", "--classes"});
    only_for(app, "--trace", {"--time-scale", "--loops", "--size-scale"});
    only_for(app, "a duty cycle", {"--kernel-us", "--host-model", "--lucid-dir"});
    if (o.device < 0 || o.device > INT32_MAX) throw InputError("--device must be a device ordinal (0, 1, ...)");
    if (std::string why = check_async(o.async); !why.empty()) throw InputError(why);
    if (app.count("--check-data")) throw InputError("--check-data applies only to --model, --model-file or a duty cycle");
    if (o.iters < 1) throw InputError("--iters must be at least 1 (got " + std::to_string(o.iters) + ")");
    if (app.count("--duration")) {
      if (app.count("--iters")) throw InputError("give --iters or --duration, not both");
      if (!std::isfinite(o.duration_s) || !(o.duration_s > 0) || o.duration_s > kMaxDurationS)
        throw InputError("--duration must be a positive number of seconds, at most 86400");
    }
    return;
  }
  if (app.count("--check-data")) {
    if (!o.trace.empty()) throw InputError("--check-data applies only to --model, --model-file or a duty cycle");
    if (o.check_data_mib < 1 || o.check_data_mib > 65536) throw InputError("--check-data must be from 1 to 65536 MiB");
  }
  const bool duty_opts = app.count("--gpu-util") || app.count("--iter-ms");
  o.duty = duty_opts || app.count("--lucid");
  const int modes = !o.model.empty() + !o.model_file.empty() + !o.trace.empty();
  if (modes > 1 || (modes == 0 && !o.duty))
    throw InputError("give exactly one of --model, --model-file and --trace, or a duty cycle (--gpu-util and --iter-ms, or --lucid) (see --help)");
  if (o.device < 0 || o.device > INT32_MAX) throw InputError("--device must be a device ordinal (0, 1, ...)");
  if (app.count("--lucid-dir") && !app.count("--lucid")) throw InputError("--lucid-dir applies only with --lucid");
  if (o.duty) {
    if (!o.trace.empty()) throw InputError("a duty cycle (--gpu-util, --iter-ms, --lucid) applies only to --model, --model-file or no model");
    if (app.count("--lucid") && duty_opts) throw InputError("--lucid sets --gpu-util and --iter-ms: give one or the other");
    if (!app.count("--lucid")) {
      if (!app.count("--gpu-util") || !app.count("--iter-ms")) throw InputError("--gpu-util and --iter-ms go together");
      if (std::string why = check_duty(o.gpu_util, o.iter_ms); !why.empty()) throw InputError(why);
    }
    if (!parse_host_model(o.host_model)) throw InputError("unknown --host-model '" + o.host_model + "' (serial or overlap)");
    if (modes == 1 && app.count("--tflops"))
      throw InputError("--tflops does not apply with a duty cycle: the model's kernels are scaled to fill --gpu-util of --iter-ms");
  }
  if (app.count("--host-model") && !o.duty) throw InputError("--host-model applies only to a duty cycle (--gpu-util, --iter-ms, --lucid)");
  if (app.count("--kernel-us")) {
    if (!o.duty || modes == 1) throw InputError("--kernel-us applies only to a duty cycle without a model");
    if (!std::isfinite(o.kernel_us) || o.kernel_us < kMinKernelUs || o.kernel_us > kMaxKernelUs)
      throw InputError("--kernel-us must be from 10 to 1000000 microseconds");
  }
  if (app.count("--duration")) {
    if (!o.trace.empty()) throw InputError("--duration applies only to --model, --model-file or a duty cycle (--trace runs --loops)");
    if (app.count("--iters")) throw InputError("give --iters or --duration, not both");
    if (!std::isfinite(o.duration_s) || !(o.duration_s > 0) || o.duration_s > kMaxDurationS)
      throw InputError("--duration must be a positive number of seconds, at most 86400");
  }
  if (modes == 0) {  // a duty cycle of plain kernels
    only_for(app, "--model and --model-file", {"--batch", "--seq", "--dtype", "--optimizer", "--tflops"});
    only_for(app, "--model", {"--image", "--classes"});
    only_for(app, "--trace", {"--time-scale", "--loops", "--size-scale"});
    if (o.iters < 1) throw InputError("--iters must be at least 1 (got " + std::to_string(o.iters) + ")");
  } else if (o.trace.empty()) {
    only_for(app, "--trace", {"--time-scale", "--loops", "--size-scale"});
    if (o.batch < 1) throw InputError("--batch must be at least 1 (got " + std::to_string(o.batch) + ")");
    if (o.iters < 1) throw InputError("--iters must be at least 1 (got " + std::to_string(o.iters) + ")");
    if (app.count("--seq") && o.seq < 1) throw InputError("--seq must be at least 1 (got " + std::to_string(o.seq) + ")");
    if (!o.model_file.empty()) only_for(app, "convolutional presets (--model)", {"--image", "--classes"});
    if (app.count("--image") && o.image < 1) throw InputError("--image must be at least 1 (got " + std::to_string(o.image) + ")");
    if (app.count("--classes") && o.classes < 1)
      throw InputError("--classes must be at least 1 (got " + std::to_string(o.classes) + ")");
    if (!(o.tflops > 0) || !std::isfinite(o.tflops)) throw InputError("--tflops must be a positive number");
    if (!parse_dtype(o.dtype)) throw InputError("unknown --dtype '" + o.dtype + "' (fp32, bf16 or fp16)");
    if (!parse_optimizer(o.optimizer))
      throw InputError("unknown --optimizer '" + o.optimizer + "' (sgd, sgd-momentum, adam or adamw)");
  } else {
    only_for(app, "--model and --model-file", {"--batch", "--iters", "--seq", "--dtype", "--optimizer", "--tflops"});
    only_for(app, "--model", {"--image", "--classes"});
    if (o.loops < 1) throw InputError("--loops must be at least 1 (got " + std::to_string(o.loops) + ")");
    if (!(o.time_scale >= 0) || !std::isfinite(o.time_scale)) throw InputError("--time-scale must not be negative");
    if (o.time_scale > 1e6) throw InputError("--time-scale must be at most 10^6");
    if (!(o.size_scale > 0) || !std::isfinite(o.size_scale))
      throw InputError(o.size_scale < 0 ? "--size-scale must not be negative" : "--size-scale must be positive");
  }
}

// `total` 0: a --duration run (no count known).
void progress_line(const Options& o, const std::string& job, size_t iter, size_t total, double ms, const std::string& mem) {
  if (!o.progress) return;
  const std::string of = total ? "/" + std::to_string(total) : "";
  std::fprintf(stderr, "coloc-train[%s]: iter %zu%s %.3f ms %s\n", job.c_str(), iter, of.c_str(), ms, mem.c_str());
  std::fflush(stderr);
}

// The loop of a model or duty-cycle run: --iters or --duration, and the duty cycle's host wait.
LoopPlan loop_plan(const Options& o, const Duty& duty) {
  LoopPlan p;
  if (o.duration_s > 0) p.duration_ns = uint64_t(std::llround(o.duration_s * 1e9));
  else p.iters = o.iters;
  if (o.duty) {
    p.host = *parse_host_model(o.host_model);
    // overlap: the host works the whole period beside the device (duty.h).
    p.host_ns = p.host == HostModel::overlap ? duty.iter_ns() : duty.host_ns();
  }
  return p;
}

size_t plan_total(const LoopPlan& p) { return p.duration_ns ? 0 : size_t(p.iters); }

// The duty cycle's fields of the result line.
void duty_extras(const Options& o, const Duty& duty, json& extra) {
  if (!o.duty) return;
  if (!o.lucid.empty()) extra["lucid"] = o.lucid;
  extra["gpu_util"] = duty.gpu_util;
  extra["iter_ms"] = std::round(duty.iter_ms * 1000) / 1000;
  extra["device_ms"] = std::round(double(duty.device_ns()) / 1e3) / 1000;
  extra["host_ms"] = std::round(double(duty.host_ns()) / 1e3) / 1000;
  extra["host_model"] = o.host_model;
}

// Runs `body`, turning driver and other errors into the outcome's status.
template <class F>
void guarded(Outcome& out, F&& body) {
  try {
    body();
  } catch (const CudaError& e) {
    out.status = e.out_of_memory() ? "oom" : "error";
    out.error = e.what();
  } catch (const std::exception& e) {
    out.status = "error";
    out.error = e.what();
  }
}

// --check-data's results; a mismatch makes the run an error.
void report_check(const std::optional<DataCheck>& check, Outcome& out) {
  if (!check) return;
  out.extra["data_check"] = {{"bytes", check->bytes()}, {"checks", check->checks()},
                             {"mismatches", check->mismatches()}, {"digest", check->digest()}};
  if (check->mismatches() && out.status == "ok") {
    out.status = "error";
    out.error = "--check-data: " + std::to_string(check->mismatches()) + " words of device memory were not what was written";
  }
}

void run_model(const Options& o, const Model& model, const Duty& duty, const std::string& job, Outcome& out) {
  // A duty cycle scales every kernel so that the step's kernels fill gpu_util% of iter_ms.
  const double tflops = o.duty ? tflops_for_step(model, duty.device_ns()) : o.tflops;
  const TrainOptions topts{*parse_dtype(o.dtype), *parse_optimizer(o.optimizer), tflops};
  duty_extras(o, duty, out.extra);
  out.extra["model"] = model.name;
  out.extra["params"] = model.param_count();
  out.extra["batch"] = o.batch;
  out.extra["dtype"] = o.dtype;
  out.extra["optimizer"] = optimizer_name(topts.optimizer);
  std::optional<Gpu> gpu;
  std::optional<CachingAllocator> alloc;  // declared after gpu: destroyed before it
  std::optional<Trainer> trainer;
  std::optional<DataCheck> check;  // after gpu: destroyed before it
  guarded(out, [&] {
    gpu.emplace(int(o.device));
    out.extra["device"] = gpu->ordinal();
    out.extra["device_name"] = gpu->name();
    out.extra["device_total_bytes"] = gpu->total_bytes();
    alloc.emplace(*gpu);
    trainer.emplace(model, topts, *alloc, *gpu);
    trainer->setup();
    if (o.check_data_mib) check.emplace(*gpu, uint64_t(o.check_data_mib) << 20);
    MonotonicClock clock;
    const LoopPlan plan = loop_plan(o, duty);
    uint64_t iteration = 0;
    run_loop(clock, plan, [&] {
      trainer->launch_step();
      if (check) check->launch(iteration);
    }, [&] {
      gpu->synchronize();
      if (check) check->verify(iteration);
      ++iteration;
    }, [&](size_t i, double ms) {
      progress_line(o, job, i, plan_total(plan), ms,
                    "reserved " + gib(alloc->stats().reserved_bytes) + ", peak allocated " +
                        gib(alloc->stats().peak_allocated_bytes));
    }, out.loop);
  });
  if (alloc) {
    const AllocatorStats& s = alloc->stats();
    out.peak_bytes = s.peak_reserved_bytes;
    out.extra["peak_allocated_bytes"] = s.peak_allocated_bytes;
    out.extra["segments_allocated"] = s.device_allocs;
    out.extra["cache_flushes"] = s.cache_flushes;
  }
  if (trainer) {
    out.extra["static_bytes"] = trainer->static_bytes();
    out.extra["kernels"] = trainer->kernels();
  }
  report_check(check, out);
}

void run_trace(const Options& o, const Trace& trace, const std::string& job, Outcome& out) {
  out.extra["trace"] = trace.source;
  out.extra["time_scale"] = o.time_scale;
  out.extra["size_scale"] = o.size_scale;
  std::optional<Gpu> gpu;
  std::optional<TraceReplayer> replay;  // declared after gpu: destroyed before it
  guarded(out, [&] {
    gpu.emplace(int(o.device));
    out.extra["device"] = gpu->ordinal();
    out.extra["device_name"] = gpu->name();
    out.extra["device_total_bytes"] = gpu->total_bytes();
    replay.emplace(trace, *gpu, o.size_scale, o.time_scale);
    SteadyPacer pacer;
    replay->restore_preexisting();
    MonotonicClock clock;
    run_loop(clock, LoopPlan{o.loops, 0, 0}, [&] { replay->run_loop(pacer); }, [] {}, [&](size_t i, double ms) {
      progress_line(o, job, i, size_t(o.loops), ms, "live " + gib(replay->live_bytes()) + ", peak " + gib(replay->peak_bytes()));
    }, out.loop);
    replay->release_all();
  });
  if (replay) {
    out.peak_bytes = replay->peak_bytes();
    out.extra["segments_allocated"] = replay->device_allocs();
  }
}

// A duty cycle of plain coloc_spin kernels: one fixed allocation, then each iteration launches
// device_ms of kernels of about --kernel-us, synchronizes and waits host_ms on the host.
void run_duty(const Options& o, const Duty& duty, const std::string& job, Outcome& out) {
  duty_extras(o, duty, out.extra);
  const std::vector<uint64_t> kernels = split_kernels(duty.device_ns(), uint64_t(std::llround(o.kernel_us * 1000)));
  out.extra["kernel_us"] = o.kernel_us;
  std::optional<Gpu> gpu;
  std::optional<DataCheck> check;  // after gpu: destroyed before it
  CUdeviceptr mem = 0;
  uint64_t launched = 0;
  guarded(out, [&] {
    gpu.emplace(int(o.device));
    out.extra["device"] = gpu->ordinal();
    out.extra["device_name"] = gpu->name();
    out.extra["device_total_bytes"] = gpu->total_bytes();
    mem = gpu->allocate(kDutyJobBytes);
    out.peak_bytes = kDutyJobBytes;
    if (o.check_data_mib) check.emplace(*gpu, uint64_t(o.check_data_mib) << 20);
    MonotonicClock clock;
    const LoopPlan plan = loop_plan(o, duty);
    uint64_t iteration = 0;
    run_loop(clock, plan, [&] {
      for (uint64_t ns : kernels) gpu->spin(ns), ++launched;
      if (check) check->launch(iteration);
    }, [&] {
      gpu->synchronize();
      if (check) check->verify(iteration);
      ++iteration;
    }, [&](size_t i, double ms) { progress_line(o, job, i, plan_total(plan), ms, ""); }, out.loop);
    gpu->release(mem);
    mem = 0;
  });
  out.extra["kernels"] = launched;
  report_check(check, out);
  if (mem) {
    try {
      gpu->release(mem);
    } catch (...) {
      // After an error: the process exit returns the memory anyway.
    }
  }
}

// The asynchronous pattern (pattern.h): K kernels of mixed durations per iteration on one or two
// streams, a synchronize every --sync-every iterations; one fixed allocation, as a duty cycle has.
void run_pattern(const Options& o, const std::string& job, Outcome& out) {
  const std::vector<PatternKernel> iteration = async_iteration(o.async);
  out.extra["pattern"] = o.pattern;
  out.extra["kernels_per_iter"] = o.async.kernels;
  out.extra["streams"] = o.async.streams;
  out.extra["sync_every"] = o.async.sync_every;
  out.extra["step_ms"] = o.async.step_ms;
  out.extra["seed"] = o.async.seed;
  json mix = json::object();
  for (unsigned c = 0; c < 3; ++c) {
    uint64_t n = 0, ns = 0, lo = UINT64_MAX, hi = 0;
    for (const PatternKernel& k : iteration)
      if (k.cls == c) ++n, ns += k.ns, lo = std::min(lo, k.ns), hi = std::max(hi, k.ns);
    mix[kKernelMix[c].name] = {{"kernels", n}, {"ms", std::round(double(ns) / 1e3) / 1000},
                               {"min_us", n ? json(std::round(double(lo) / 10) / 100) : json(nullptr)},
                               {"max_us", n ? json(std::round(double(hi) / 10) / 100) : json(nullptr)}};
  }
  out.extra["mix"] = mix;
  std::optional<Gpu> gpu;
  CUdeviceptr mem = 0;
  guarded(out, [&] {
    gpu.emplace(int(o.device));
    out.extra["device"] = gpu->ordinal();
    out.extra["device_name"] = gpu->name();
    out.extra["device_total_bytes"] = gpu->total_bytes();
    mem = gpu->allocate(kDutyJobBytes);
    out.peak_bytes = kDutyJobBytes;
    MonotonicClock clock;
    const LoopPlan plan = loop_plan(o, Duty{});
    run_async_loop(clock, plan, o.async, iteration, *gpu,
                   [&](size_t i, double ms) { progress_line(o, job, i, plan_total(plan), ms, ""); }, out.loop);
    gpu->release(mem);
    mem = 0;
  });
  out.extra["kernels"] = uint64_t(out.loop.iter_ms.size()) * uint64_t(o.async.kernels);
  if (mem) {
    try {
      gpu->release(mem);
    } catch (...) {
      // After an error: the process exit returns the memory anyway.
    }
  }
}

std::string default_job() {
  if (const char* j = std::getenv("COLOC_JOB"); j && *j) return j;
  return "coloc-train-" + std::to_string(getpid());
}

std::string help_footer() {
  std::string presets;
  for (const Preset& p : coloc::workload::presets()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-18s %s\n", std::string(p.name).c_str(), std::string(p.source).c_str());
    presets += line;
  }
  return R"(
MODES
  --model NAME / --model-file SPEC.json
      Allocates weights, gradients and optimizer state once (bf16/fp16 also keep an fp32 master
      copy), then each iteration allocates every layer's saved activations in the forward pass and
      frees them in the backward pass, launching one spin kernel per layer and pass. A kernel runs
      for its layer's FLOPs at --tflops (forward 2 FLOPs per parameter per token plus attention,
      backward twice that: 6*N*tokens, Kaplan et al. 2020; CNNs: 2 FLOPs per conv multiply-add).
      Memory goes through a caching allocator with PyTorch's policy: blocks rounded to 512 B,
      requests <= 1 MiB carved from 2 MiB segments, requests under 10 MiB from 20 MiB segments,
      larger ones get their own segment rounded up to 2 MiB; freed blocks are cached and reused;
      on CUDA_ERROR_OUT_OF_MEMORY the cache is released and the allocation retried once.
      --seq applies to transformers (defaults: BERT 512, GPT-2 1024, Llama 2048); --image N (N x N
      RGB images) and --classes N to the convolutional presets (defaults: 224, inception-v3 and
      xception 299, unet-resnet34 512; 1000 classes, unet-resnet34 1).
      A model spec is JSON: {"name":..., "layers":[{"params":N, "activation_bytes":SIZE,
      "output_bytes":SIZE, "flops":X}, ...]} (per sample) or {"name":..., "transformer":
      {"base":PRESET, "layers":N, "hidden":N, "heads":N, ...}}; see tools/workload/README.md.
  --trace FILE
      Replays a recorded allocation trace (CSV: t_us,kind,event,size,stream,handle; see
      tools/workload/README.md) at segment level, straight to cuMemAlloc/cuMemFree: first the
      '# preexisting_segment' lines, then each segment alloc/free at its recorded time times
      --time-scale (2 = twice as slow, 0 = as fast as possible). --loops N replays N times, each
      loop ending back at the pre-existing state. --size-scale X multiplies every size, rounded up
      to a multiple of 2 MiB (scale 1 keeps sizes exact). Each loop counts as one iteration.
  --gpu-util PCT --iter-ms MS  (a duty cycle; alone, or with --model / --model-file)
      Each iteration launches PCT% of MS of kernels, synchronizes (as reading the loss does), then
      waits on the host for a fixed (100-PCT)% of MS (data loading, Python): alone, an iteration
      lasts MS; slowed on the device, it is slowed by that much. Without a model: coloc_spin
      kernels of about --kernel-us (default 500 us) and one 64 MiB allocation. With a model: its
      memory pattern, its kernels scaled to sum to PCT% of MS (--tflops does not apply).
      --host-model overlap instead does MS of host work from the iteration's start beside the
      kernels, then synchronizes: a slower device part costs nothing until it outlasts MS (a job
      whose GPU idles because its CPU side cannot feed it).
  --lucid MODEL/DATASET/BATCH[/amp]
      The duty cycle of a configuration Lucid measured alone on a real GPU (lucid-solo.csv in
      --lucid-dir, default $COLOC_LUCID_DIR or tools/workload/lucid): PCT = its gpu_util, MS =
      1000 x BATCH / speed (speed is samples/s). E.g. ResNet18/CIFAR-10/32 = 58.7% of 18.1 ms.
  --pattern async [--kernels K] [--streams 1|2] [--sync-every N] [--step-ms MS] [--seed N]
      The launch pattern of real training: each iteration queues a forward pass of ceil(K/3)
      kernels and a backward pass of the rest (each forward kernel in reverse, twice: input and
      weight gradients), asynchronously, and the host synchronizes only after every N iterations
      (default K 400, 1 stream, N 1). Durations are mixed: by count 80% short (10-50 us), 15%
      medium (100-400 us), 5% long GEMM-like (1-4 ms), drawn with --seed (default 1), then scaled
      so one iteration's kernels sum to MS (default 100 ms) -- an assumption, not measured data
      (tools/workload/README.md). --streams 2 puts the weight-gradient kernels on a second stream.
      An iteration's time is its synchronize group's wall time divided by N. A GPU-bound job of
      about S seconds alone: --pattern async --duration S (or --iters S*1000/MS).
  --duration SECONDS runs iterations until that much wall time passed (instead of --iters).

PRESETS
)" + presets + R"(
OUTPUT
  One JSON line on stdout at the end:
    {"job", "status": "ok"|"oom"|"error", "iters", "iter_ms_p50", "peak_bytes", "error", ...}
  iters: iterations (loops) completed; iter_ms_p50: median wall time of one iteration, measured.
  peak_bytes: the peak of bytes held from the driver through cuMemAlloc (allocator segments, or
  live trace segments) -- what the driver sees, not counting the CUDA context.
  Extra fields: pattern, kernels_per_iter, streams, sync_every, step_ms, seed, mix (per class:
  kernels, ms, min_us, max_us of one iteration) (--pattern); lucid, gpu_util, iter_ms, device_ms, host_ms, host_model, kernel_us (duty cycle), model,
  params, batch, dtype, optimizer, static_bytes, peak_allocated_bytes, kernels, trace,
  time_scale, size_scale, device, device_name, device_total_bytes, segments_allocated,
  cache_flushes; then duration_s, wall_ms, loop_ms (the iterations alone) and iters_per_s
  (iters / loop_ms: the speed to compare).
  --progress prints one line per iteration on stderr. The job name is --job, else $COLOC_JOB,
  else coloc-train-<pid>.

EXIT STATUS
  0 ok; 1 a CUDA error other than out-of-memory (its name is in "error") or another failure;
  2 bad input (one line on stderr, nothing is run); 3 the driver returned CUDA_ERROR_OUT_OF_MEMORY.
)";
}

int list_models() {
  std::printf("%-18s %14s  %s\n", "model", "parameters", "source");
  for (const Preset& p : coloc::workload::presets()) {
    Model m = make_preset(p.name, RunShape{});
    std::printf("%-18s %14llu  %s\n", std::string(p.name).c_str(), (unsigned long long)m.param_count(),
                std::string(p.source).c_str());
  }
  return kOk;
}

void one_line_error(const std::string& msg) {
  std::string line = msg;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "coloc-train: error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"coloc-train: emulates a training job's GPU memory and compute through the CUDA driver API"};
  app.footer(help_footer());
  app.get_formatter()->column_width(34);
  app.add_option("--model", o.model, "a preset model (see PRESETS, or --list-models)");
  app.add_option("--model-file", o.model_file, "a JSON model spec (see MODES)");
  app.add_option("--trace", o.trace, "replay a recorded allocation trace (CSV)");
  app.add_option("--batch", o.batch, "batch size: sequences or images (default 1)");
  app.add_option("--iters", o.iters, "training iterations (default 10)");
  app.add_option("--seq", o.seq, "sequence length in tokens, transformers only");
  app.add_option("--image", o.image, "image side in pixels, convolutional presets only");
  app.add_option("--classes", o.classes, "classifier outputs, convolutional presets only");
  app.add_option("--dtype", o.dtype, "fp32 | bf16 | fp16 (mixed precision) (default fp32)");
  app.add_option("--optimizer", o.optimizer, "sgd | sgd-momentum | adam | adamw (default adam)");
  app.add_option("--tflops", o.tflops, "device rate that turns FLOPs into kernel time, 10^12 FLOP/s (default 400)");
  app.add_option("--time-scale", o.time_scale, "trace time factor: 2 = twice as slow, 0 = no waiting (default 1)");
  app.add_option("--loops", o.loops, "trace replays, each from the pre-existing state (default 1)");
  app.add_option("--size-scale", o.size_scale, "multiply every trace size by X > 0 (default 1)");
  app.add_option("--device", o.device, "device ordinal, as CUDA_VISIBLE_DEVICES numbers them (default 0)");
  app.add_option("--job", o.job, "job name in the output (default $COLOC_JOB or coloc-train-<pid>)");
  app.add_option("--gpu-util", o.gpu_util, "duty cycle: percent of each iteration the device is busy, 1-100");
  app.add_option("--iter-ms", o.iter_ms, "duty cycle: an iteration's period alone, ms (0 < MS <= 60000)");
  app.add_option("--kernel-us", o.kernel_us, "duty cycle without a model: kernel length, us (default 500)");
  app.add_option("--lucid", o.lucid, "duty cycle of a Lucid configuration MODEL/DATASET/BATCH[/amp]");
  app.add_option("--lucid-dir", o.lucid_dir, "directory of lucid-solo.csv (default $COLOC_LUCID_DIR or tools/workload/lucid)");
  app.add_option("--host-model", o.host_model, "duty cycle: serial (host work after the sync) | overlap (beside the kernels) (default serial)");
  app.add_option("--duration", o.duration_s, "run iterations until SECONDS of wall time passed (instead of --iters)");
  app.add_option("--pattern", o.pattern, "async: the launch pattern of real training (see MODES)");
  app.add_option("--kernels", o.async.kernels, "--pattern async: kernels per iteration, 3-100000 (default 400)");
  app.add_option("--streams", o.async.streams, "--pattern async: 1 or 2 streams (default 1)");
  app.add_option("--sync-every", o.async.sync_every, "--pattern async: synchronize every N iterations, 1-10000 (default 1)");
  app.add_option("--step-ms", o.async.step_ms, "--pattern async: device time of one iteration, ms (default 100)");
  app.add_option("--seed", o.async.seed, "--pattern async: seed of the kernel durations (default 1)");
  app.add_option("--check-data", o.check_data_mib,
                 "MiB of device memory holding a known pattern, checked every iteration (data_check in the output)");
  app.add_flag("--progress", o.progress, "one line per iteration on stderr");
  app.add_flag("--list-models", o.list_models, "list the presets with their parameter counts and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kOk;
  } catch (const CLI::ParseError& e) {
    one_line_error(std::string(e.what()) + " (see --help)");
    return kBadInput;
  }
  if (o.list_models) return list_models();

  // Everything the user gave is checked before the device is touched.
  std::optional<Model> model;
  std::optional<Trace> trace;
  Duty duty;
  try {
    validate(o, app);
    if (!o.lucid.empty()) {
      const std::string dir = o.lucid_dir.empty() ? lucid::default_dir() : o.lucid_dir;
      duty = lucid::duty_of(lucid::lookup(lucid::load_solo(dir + "/lucid-solo.csv"), o.lucid));
      if (std::string why = check_duty(duty.gpu_util, duty.iter_ms); !why.empty())
        throw InputError("--lucid '" + o.lucid + "': " + why);
    } else if (o.duty) {
      duty = Duty{o.gpu_util, o.iter_ms};
    }
    if (!o.trace.empty()) {
      trace = load_trace(o.trace);
    } else if (!o.model.empty() || !o.model_file.empty()) {
      const RunShape shape{uint64_t(o.batch), app.count("--seq") ? uint64_t(o.seq) : 0, *parse_dtype(o.dtype),
                           uint64_t(o.image), uint64_t(o.classes)};
      model = o.model.empty() ? build_from_spec(load_model_spec(o.model_file), shape) : make_preset(o.model, shape);
    }
  } catch (const InputError& e) {
    one_line_error(e.what());
    return kBadInput;
  }

  const std::string job = o.job.empty() ? default_job() : o.job;
  Outcome out;
  auto t0 = std::chrono::steady_clock::now();
  if (!o.pattern.empty()) run_pattern(o, job, out);
  else if (model) run_model(o, *model, duty, job, out);
  else if (trace) run_trace(o, *trace, job, out);
  else run_duty(o, duty, job, out);

  const std::vector<double>& iter_ms = out.loop.iter_ms;
  json line = {{"job", job},
               {"status", out.status},
               {"iters", iter_ms.size()},
               {"iter_ms_p50", iter_ms.empty() ? json(nullptr) : json(std::round(median(iter_ms) * 1000) / 1000)},
               {"peak_bytes", out.peak_bytes},
               {"error", out.error.empty() ? json(nullptr) : json(out.error)}};
  line.update(out.extra);
  if (o.duration_s > 0) line["duration_s"] = o.duration_s;
  line["wall_ms"] = std::round(ms_since(t0) * 1000) / 1000;
  // The loop alone (setup and teardown left out): what speeds are compared on.
  line["loop_ms"] = std::round(double(out.loop.loop_ns) / 1e3) / 1000;
  line["iters_per_s"] = iter_ms.empty() ? json(nullptr) : json(std::round(out.loop.iters_per_s() * 1000) / 1000);
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  if (out.status == "ok") return kOk;
  one_line_error(out.error);
  return out.status == "oom" ? kOom : kError;
}
