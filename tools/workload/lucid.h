// tools/workload/lucid.h — duty cycles calibrated on Lucid's measurements of real training jobs
// (ASPLOS'23; tools/workload/lucid/README.md says where the data comes from and how it reads).
//
//   lucid-solo.csv   one job alone on a GPU: model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label
//   lucid-pairs.csv  two jobs on one GPU: model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,...,
//                    speed2,gpu_util,gmem_util,gmem; speed1/speed2 = collocated speed / solo speed
//
// A solo configuration becomes a duty cycle (duty.h): gpu_util is the share of the iteration the
// device is busy; the period is batchsize / speed, because Lucid's `speed` is samples per second,
// not iterations per second (its profilers print (iterations − warm-up) × batch_size / seconds;
// ResNet-50/ImageNet runs at 432, 436 and 466 at batch 32, 64 and 128: flat in samples/s, as a
// saturated GPU is, where iterations/s would fall 4× — and 432 iterations/s of batch 32 would be
// 13,800 images/s, far beyond any GPU of its time).
//
// simgpu cannot emulate every configuration faithfully (emulation()): a period under 5 simgpu
// slices (10 ms at the default 2 ms) is dominated by one slice of waiting and by host timer
// wake-ups; a period over 200 ms gives a few-second benchmark too few iterations to compare.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "duty.h"

namespace coloc::workload::lucid {

/// One job's configuration, as both files name it.
struct JobConfig {
  std::string model, dataset;
  uint64_t batch = 0;
  bool amp = false;  ///< mixed precision
  /// "MODEL/DATASET/BATCH", plus "/amp" for mixed precision: what --lucid takes.
  std::string key() const;
  /// Same model and dataset (ignoring case), batch and amp.
  bool matches(const JobConfig& other) const;
};

/// A row of lucid-solo.csv.
struct Solo {
  JobConfig config;
  double speed = 0;       ///< samples per second alone
  double gpu_util = 0;    ///< percent, nvidia-smi's utilization averaged over the run
  double gmem_util = 0;   ///< percent
  double gmem_mib = 0;    ///< device memory in use, MiB
  int label = 0;
  size_t line = 0;        ///< line number in the file
};

/// A row of lucid-pairs.csv.
struct Pair {
  JobConfig job[2];
  uint64_t gpu_num[2] = {1, 1};
  double speed[2] = {0, 0};  ///< each job's collocated speed / its solo speed
  double gpu_util = 0, gmem_util = 0, gmem_mib = 0;  ///< the pair's
  size_t line = 0;
};

/// Parses the text of lucid-solo.csv. `name` (the file) starts every error: "name:LINE: ...".
/// The header must be exactly the columns above; every row has all of them: model and dataset
/// non-empty, batchsize a whole number >= 1, amp 0 or 1, speed > 0, the utilizations in [0, 100],
/// gmem >= 0, label a whole number; no configuration twice. Throws InputError.
std::vector<Solo> parse_solo(std::string_view text, const std::string& name);
/// Parses the text of lucid-pairs.csv, with the same rules per job, gpu_num >= 1 and speeds > 0.
std::vector<Pair> parse_pairs(std::string_view text, const std::string& name);
/// Reads and parses a file. Throws InputError (also when it cannot be read).
std::vector<Solo> load_solo(const std::string& path);
std::vector<Pair> load_pairs(const std::string& path);

/// The directory of the CSVs: $COLOC_LUCID_DIR, else the copy in the source tree
/// (tools/workload/lucid, compiled in).
std::string default_dir();

/// Parses "MODEL/DATASET/BATCH[/amp|/fp32]". Throws InputError naming the key.
JobConfig parse_key(std::string_view key);
/// The row for `config`, or nullptr.
const Solo* find(const std::vector<Solo>& solos, const JobConfig& config);
/// The row for `key`. Throws InputError (unknown key: says how to list the known ones).
const Solo& lookup(const std::vector<Solo>& solos, std::string_view key);

/// The duty cycle of a solo configuration: gpu_util percent of a period of 1000 × batch / speed ms.
Duty duty_of(const Solo& solo);

/// What simgpu can emulate: a period from 5 slices to 200 ms.
struct Limits {
  double min_period_ms = 10;   ///< 5 × SIMGPU_TIMESLICE_US
  double max_period_ms = 200;
};
/// The limits for a simgpu slice of `timeslice_us` (SIMGPU_TIMESLICE_US; 2000 by default).
Limits limits_for(uint64_t timeslice_us = 2000);
/// Empty when simgpu can emulate `solo`'s duty cycle within `limits`, else why not (one phrase:
/// "period 4.2 ms < 10 ms (5 simgpu slices)").
std::string exclusion(const Solo& solo, const Limits& limits = Limits{});

}  // namespace coloc::workload::lucid
