// coloc-train — a training-job emulator for the CUDA driver API. See tools/workload/README.md and
// `coloc-train --help`.
//
//   coloc-train --model NAME [--batch N] [--iters N] [--seq N] [--dtype T] [--optimizer O] ...
//   coloc-train --model-file SPEC.json ...
//   coloc-train --trace FILE [--time-scale X] [--loops N] [--size-scale X]
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
#include "coloc/size.h"
#include "errors.h"
#include "gpu.h"
#include "model.h"
#include "model_spec.h"
#include "trace.h"
#include "trainer.h"

using namespace coloc::workload;
// ordered: the result line keeps the field order the issue gives (job, status, iters, ...).
using json = nlohmann::ordered_json;

namespace {

enum Exit { kOk = 0, kError = 1, kBadInput = 2, kOom = 3 };

struct Options {
  std::string model, model_file, trace, job;
  int64_t batch = 1, iters = 10, seq = 0, loops = 1, device = 0;
  std::string dtype = "fp32", optimizer = "adam";
  double tflops = 400, time_scale = 1, size_scale = 1;
  bool progress = false, list_models = false;
};

// What a run produced, whatever way it ended.
struct Outcome {
  std::string status = "ok";
  std::string error;
  std::vector<double> iter_ms;
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

void validate(const Options& o, const CLI::App& app) {
  const int modes = !o.model.empty() + !o.model_file.empty() + !o.trace.empty();
  if (modes != 1) throw InputError("give exactly one of --model, --model-file and --trace (see --help)");
  if (o.device < 0 || o.device > INT32_MAX) throw InputError("--device must be a device ordinal (0, 1, ...)");
  if (o.trace.empty()) {
    only_for(app, "--trace", {"--time-scale", "--loops", "--size-scale"});
    if (o.batch < 1) throw InputError("--batch must be at least 1 (got " + std::to_string(o.batch) + ")");
    if (o.iters < 1) throw InputError("--iters must be at least 1 (got " + std::to_string(o.iters) + ")");
    if (app.count("--seq") && o.seq < 1) throw InputError("--seq must be at least 1 (got " + std::to_string(o.seq) + ")");
    if (!(o.tflops > 0) || !std::isfinite(o.tflops)) throw InputError("--tflops must be a positive number");
    if (!parse_dtype(o.dtype)) throw InputError("unknown --dtype '" + o.dtype + "' (fp32, bf16 or fp16)");
    if (!parse_optimizer(o.optimizer))
      throw InputError("unknown --optimizer '" + o.optimizer + "' (sgd, sgd-momentum, adam or adamw)");
  } else {
    only_for(app, "--model and --model-file", {"--batch", "--iters", "--seq", "--dtype", "--optimizer", "--tflops"});
    if (o.loops < 1) throw InputError("--loops must be at least 1 (got " + std::to_string(o.loops) + ")");
    if (!(o.time_scale >= 0) || !std::isfinite(o.time_scale)) throw InputError("--time-scale must not be negative");
    if (o.time_scale > 1e6) throw InputError("--time-scale must be at most 10^6");
    if (!(o.size_scale > 0) || !std::isfinite(o.size_scale))
      throw InputError(o.size_scale < 0 ? "--size-scale must not be negative" : "--size-scale must be positive");
  }
}

void progress_line(const Options& o, const std::string& job, size_t iter, size_t total, double ms, const std::string& mem) {
  if (!o.progress) return;
  std::fprintf(stderr, "coloc-train[%s]: iter %zu/%zu %.3f ms %s\n", job.c_str(), iter, total, ms, mem.c_str());
  std::fflush(stderr);
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

void run_model(const Options& o, const Model& model, const std::string& job, Outcome& out) {
  const TrainOptions topts{*parse_dtype(o.dtype), *parse_optimizer(o.optimizer), o.tflops};
  out.extra["model"] = model.name;
  out.extra["params"] = model.param_count();
  out.extra["batch"] = o.batch;
  out.extra["dtype"] = o.dtype;
  out.extra["optimizer"] = optimizer_name(topts.optimizer);
  std::optional<Gpu> gpu;
  std::optional<CachingAllocator> alloc;  // declared after gpu: destroyed before it
  std::optional<Trainer> trainer;
  guarded(out, [&] {
    gpu.emplace(int(o.device));
    out.extra["device"] = gpu->ordinal();
    out.extra["device_name"] = gpu->name();
    out.extra["device_total_bytes"] = gpu->total_bytes();
    alloc.emplace(*gpu);
    trainer.emplace(model, topts, *alloc, *gpu);
    trainer->setup();
    for (int64_t i = 0; i < o.iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      trainer->step();
      out.iter_ms.push_back(ms_since(t0));
      progress_line(o, job, size_t(i + 1), size_t(o.iters), out.iter_ms.back(),
                    "reserved " + gib(alloc->stats().reserved_bytes) + ", peak allocated " +
                        gib(alloc->stats().peak_allocated_bytes));
    }
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
    for (int64_t i = 0; i < o.loops; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      replay->run_loop(pacer);
      out.iter_ms.push_back(ms_since(t0));
      progress_line(o, job, size_t(i + 1), size_t(o.loops), out.iter_ms.back(),
                    "live " + gib(replay->live_bytes()) + ", peak " + gib(replay->peak_bytes()));
    }
    replay->release_all();
  });
  if (replay) {
    out.peak_bytes = replay->peak_bytes();
    out.extra["segments_allocated"] = replay->device_allocs();
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
    std::snprintf(line, sizeof line, "  %-12s %s\n", std::string(p.name).c_str(), std::string(p.source).c_str());
    presets += line;
  }
  return R"(
MODES
  --model NAME / --model-file SPEC.json
      Allocates weights, gradients and optimizer state once (bf16/fp16 also keep an fp32 master
      copy), then each iteration allocates every layer's saved activations in the forward pass and
      frees them in the backward pass, launching one spin kernel per layer and pass. A kernel runs
      for its layer's FLOPs at --tflops (forward 2 FLOPs per parameter per token plus attention,
      backward twice that: 6*N*tokens, Kaplan et al. 2020; ResNet: 2 FLOPs per conv multiply-add).
      Memory goes through a caching allocator with PyTorch's policy: blocks rounded to 512 B,
      requests <= 1 MiB carved from 2 MiB segments, requests under 10 MiB from 20 MiB segments,
      larger ones get their own segment rounded up to 2 MiB; freed blocks are cached and reused;
      on CUDA_ERROR_OUT_OF_MEMORY the cache is released and the allocation retried once.
      --seq applies to transformers (defaults: BERT 512, GPT-2 1024, Llama 2048).
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

PRESETS
)" + presets + R"(
OUTPUT
  One JSON line on stdout at the end:
    {"job", "status": "ok"|"oom"|"error", "iters", "iter_ms_p50", "peak_bytes", "error", ...}
  iters: iterations (loops) completed; iter_ms_p50: median wall time of one iteration, measured.
  peak_bytes: the peak of bytes held from the driver through cuMemAlloc (allocator segments, or
  live trace segments) -- what the driver sees, not counting the CUDA context.
  Extra fields: model, params, batch, dtype, optimizer, static_bytes, peak_allocated_bytes,
  kernels, trace, time_scale, size_scale, device, device_name, device_total_bytes,
  segments_allocated, cache_flushes, wall_ms.
  --progress prints one line per iteration on stderr. The job name is --job, else $COLOC_JOB,
  else coloc-train-<pid>.

EXIT STATUS
  0 ok; 1 a CUDA error other than out-of-memory (its name is in "error") or another failure;
  2 bad input (one line on stderr, nothing is run); 3 the driver returned CUDA_ERROR_OUT_OF_MEMORY.
)";
}

int list_models() {
  std::printf("%-12s %14s  %s\n", "model", "parameters", "source");
  for (const Preset& p : coloc::workload::presets()) {
    Model m = make_preset(p.name, RunShape{});
    std::printf("%-12s %14llu  %s\n", std::string(p.name).c_str(), (unsigned long long)m.param_count(),
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
  app.add_option("--dtype", o.dtype, "fp32 | bf16 | fp16 (mixed precision) (default fp32)");
  app.add_option("--optimizer", o.optimizer, "sgd | sgd-momentum | adam | adamw (default adam)");
  app.add_option("--tflops", o.tflops, "device rate that turns FLOPs into kernel time, 10^12 FLOP/s (default 400)");
  app.add_option("--time-scale", o.time_scale, "trace time factor: 2 = twice as slow, 0 = no waiting (default 1)");
  app.add_option("--loops", o.loops, "trace replays, each from the pre-existing state (default 1)");
  app.add_option("--size-scale", o.size_scale, "multiply every trace size by X > 0 (default 1)");
  app.add_option("--device", o.device, "device ordinal, as CUDA_VISIBLE_DEVICES numbers them (default 0)");
  app.add_option("--job", o.job, "job name in the output (default $COLOC_JOB or coloc-train-<pid>)");
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
  try {
    validate(o, app);
    if (!o.trace.empty()) {
      trace = load_trace(o.trace);
    } else {
      const RunShape shape{uint64_t(o.batch), app.count("--seq") ? uint64_t(o.seq) : 0, *parse_dtype(o.dtype)};
      model = o.model.empty() ? build_from_spec(load_model_spec(o.model_file), shape) : make_preset(o.model, shape);
    }
  } catch (const InputError& e) {
    one_line_error(e.what());
    return kBadInput;
  }

  const std::string job = o.job.empty() ? default_job() : o.job;
  Outcome out;
  auto t0 = std::chrono::steady_clock::now();
  if (model) run_model(o, *model, job, out);
  else run_trace(o, *trace, job, out);

  json line = {{"job", job},
               {"status", out.status},
               {"iters", out.iter_ms.size()},
               {"iter_ms_p50", out.iter_ms.empty() ? json(nullptr) : json(std::round(median(out.iter_ms) * 1000) / 1000)},
               {"peak_bytes", out.peak_bytes},
               {"error", out.error.empty() ? json(nullptr) : json(out.error)}};
  line.update(out.extra);
  line["wall_ms"] = std::round(ms_since(t0) * 1000) / 1000;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  if (out.status == "ok") return kOk;
  one_line_error(out.error);
  return out.status == "oom" ? kOom : kError;
}
