// tools/coloc/estimate_cmd.h — `coloc estimate`: a training job's peak device memory from its
// model description, before it runs (estimator/analytic.h). Needs no daemon and no GPU.
//
//   coloc estimate --model NAME|--model-file FILE --batch N [--seq N] [--image N] [--classes N]
//                  [--dtype fp32|bf16|fp16] [--optimizer sgd|sgd-momentum|adam|adamw]
//                  [--allocator pytorch|plain] [--device-model NAME] [--json]
//   coloc estimate --list-models [--json]
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace coloc::cli {

class EstimateCommand {
 public:
  /// Adds the `estimate` subcommand and its options to `app`; returns it.
  CLI::App* add_to(CLI::App& app);
  /// Runs it once `app` has parsed it: prints the estimate (or the model list) on stdout and
  /// returns 0, or prints one line on stderr naming the bad field and returns 2.
  int run() const;

 private:
  CLI::App* cmd_ = nullptr;
  std::string model_, model_file_, batch_, seq_, image_, classes_;
  std::string dtype_ = "fp32", optimizer_ = "adam", allocator_ = "pytorch", device_model_ = "A100";
  bool json_ = false, list_models_ = false;
};

}  // namespace coloc::cli
