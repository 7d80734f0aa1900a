// tools/coloc/run_plan.h — what `coloc run` does before it starts the command: validate the options, mint the job
// id, find libcoloc.so (and simgpu for --sim) next to the coloc binary, and build the environment.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "coloc/protocol.h"

namespace coloc::cli {

struct RunOptions {
  std::string mem;          ///< "" = no limit; else a size (coloc/size.h)
  std::string priority;     ///< "" = normal
  std::string on_full;      ///< "" = wait
  std::string job;          ///< "" = the command's base name
  std::string wait_timeout; ///< "" = $COLOC_WAIT_TIMEOUT (or colocd's default); else a duration
  std::string weight;       ///< "" = the default (1); else 1..100 (quanta per round under timeslice)
  bool sim = false;
  /// --estimate-from: a preset model name or a model file (estimator/analytic.h resolve_model);
  /// "" = none. The job declares its estimate (COLOC_MEM_ESTIMATE, Register v10) from it.
  std::string estimate_from;
  /// The run --estimate-from estimates, as `coloc estimate` takes it ("" = not given): --batch
  /// (required with it), --seq, --image, --classes, --dtype (fp32), --optimizer (adam),
  /// --allocator (pytorch), --device-model (A100). Any of them without --estimate-from is an error.
  std::string batch, seq, image, classes, dtype, optimizer, allocator, device_model;
  std::string socket;       ///< resolved socket path
  std::vector<std::string> command;
};

struct RunPlan {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  ///< the child's whole environment
  std::string job_id;
  // The job's settings, as its processes will register them (and coloc run's anchor does).
  uint64_t limit = proto::kNoLimit;  ///< bytes per device (--mem), kNoLimit = none
  proto::Priority priority = proto::Priority::kNormal;
  proto::OnFull on_full = proto::OnFull::kWait;
  uint64_t wait_timeout_ns = 0;      ///< COLOC_WAIT_TIMEOUT of the environment; 0 = colocd's default
  uint32_t weight = 0;               ///< --weight; 0 = not given (the job keeps colocd's default, 1)
  /// Bytes per device of the analytic estimate (--estimate-from; COLOC_MEM_ESTIMATE in `env`); 0 =
  /// none. Not a limit: colocd reserves it at admission when the job has no history.
  uint64_t estimate = 0;
  /// Sentences for the user (coloc run prints each as "coloc: note: ..." on stderr): the job name
  /// was made from the command's name with characters changed or cut; --mem is less than one CUDA
  /// context costs; the estimate --estimate-from made.
  std::vector<std::string> notes;
};

/// Builds the plan from `opt`, this process's environment `env`, and `exe_dir` (the directory of
/// the coloc binary). `suffix` is the random part of the job id (6 hex digits). Errors (a
/// malformed --mem, an unknown priority, a bad job name, no libcoloc.so; --estimate-from with
/// --mem, the estimate's options without it, a model or shape the estimator refuses, with its
/// message) are returned as a sentence in `*error`. With --estimate-from it runs the analytic
/// estimate (estimator/analytic.h): milliseconds, no file but the model's.
bool plan_run(const RunOptions& opt, const std::map<std::string, std::string>& env, const std::string& exe_dir,
              const std::string& suffix, RunPlan* plan, std::string* error);

/// What coloc charges per CUDA context when COLOC_CONTEXT_BYTES is not set (bytes; libcoloc.so's
/// default, and what simgpu's contexts cost).
inline constexpr uint64_t kDefaultContextBytes = 512ull << 20;

/// A duration as libcoloc.so reads COLOC_WAIT_TIMEOUT ("250ms", "5s", "2m", "1h", "1.5" seconds;
/// also "us", "ns") in nanoseconds; 0 when it is not one, or is 0 (the daemon's default then).
uint64_t parse_wait_timeout(const std::string& text);

/// A signal (`coloc cancel --signal`): a name with or without "SIG" (any case: TERM, sigint), or
/// a number from 1 to proto::kMaxSignal. False with a sentence in *error otherwise.
bool parse_signal(const std::string& text, int* sig, std::string* error);

/// A duration option (`coloc cancel --grace`, `coloc jobs --since`) in the grammar of
/// parse_wait_timeout (days, "2d", too): its nanoseconds in *ns (0 for a zero), or false with a
/// sentence naming `option` in *error (a negative number, or text that is not a duration).
bool parse_duration_option(const std::string& option, const std::string& text, uint64_t* ns, std::string* error);

/// A job's weight (`coloc set --weight`, `coloc run --weight`): a whole number from
/// proto::kMinWeight to proto::kMaxWeight. False with a sentence in *error otherwise.
bool parse_weight(const std::string& text, uint32_t* out, std::string* error);

/// A timeslice quantum (`coloc policy ... --quantum`), in the grammar of parse_wait_timeout, in
/// whole milliseconds from proto::kMinQuantumMs to proto::kMaxQuantumMs. False with a sentence in
/// *error otherwise (0 among them).
bool parse_quantum(const std::string& text, uint32_t* ms, std::string* error);

/// The priority policy's target slowdown (`coloc policy ... priority --target-slowdown`): "5%" or
/// "5", a whole percentage from proto::kMinTargetPct to proto::kMaxTargetPct. False with a sentence
/// in *error otherwise.
bool parse_target_slowdown(const std::string& text, uint32_t* pct, std::string* error);

/// The exit status `coloc run` reports for a command's wait status (waitpid): its exit code, or
/// 128 + the signal that killed it.
int exit_code_of(int wait_status);

/// 6 random hex digits (getrandom).
std::string random_suffix();

}  // namespace coloc::cli
