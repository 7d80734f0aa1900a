// SIMGPU_TRACE analysis for the compute tests: whole kernels (slices joined by pid, device and
// launch_id), overlaps between processes, runs (consecutive kernels of one process on a
// device), and each process's device time. Shared by the e2e tests and tests/bench/timeslice_bench.
#pragma once

#include <algorithm>
#include <fstream>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace coloc::test::trace {

struct Kernel {
  long pid = 0;
  int device = 0;
  uint64_t start = 0, end = 0;  ///< CLOCK_MONOTONIC ns, first slice's start to last slice's end
};

/// Every kernel in the trace file at `path`, by start time.
inline std::vector<Kernel> kernels(const std::string& path) {
  std::ifstream in(path);  // (no test support needed: the timeslice benchmark uses this too)
  std::string line;
  std::getline(in, line);  // header
  std::map<std::tuple<long, int, unsigned long>, Kernel> by;
  while (std::getline(in, line)) {
    long pid;
    int dev;
    unsigned ctx, stream;
    unsigned long launch, start, end;
    char name[128];
    if (std::sscanf(line.c_str(), "%ld,%d,%u,%u,%lu,%127[^,],%lu,%lu", &pid, &dev, &ctx, &stream, &launch, name, &start,
                    &end) != 8)
      continue;
    auto [it, fresh] = by.try_emplace({pid, dev, launch}, Kernel{pid, dev, start, end});
    if (!fresh) {
      it->second.start = std::min<uint64_t>(it->second.start, start);
      it->second.end = std::max<uint64_t>(it->second.end, end);
    }
  }
  std::vector<Kernel> out;
  for (auto& [k, v] : by) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const Kernel& a, const Kernel& b) { return a.start < b.start; });
  return out;
}

/// Kernels on `device` that started while a kernel of another process was running there.
inline int overlaps(const std::vector<Kernel>& ks, int device) {
  int n = 0;
  std::vector<Kernel> active;
  for (const Kernel& k : ks) {
    if (k.device != device) continue;
    std::erase_if(active, [&](const Kernel& a) { return a.end <= k.start; });
    for (const Kernel& a : active)
      if (a.pid != k.pid) {
        ++n;
        break;
      }
    active.push_back(k);
  }
  return n;
}

/// A run: consecutive kernels of one process on a device (nobody else's in between).
struct Run {
  long pid = 0;
  uint64_t start = 0, end = 0;
  int kernels = 0;
};
inline std::vector<Run> runs(const std::vector<Kernel>& ks, int device) {
  std::vector<Run> out;
  for (const Kernel& k : ks) {
    if (k.device != device) continue;
    if (!out.empty() && out.back().pid == k.pid) {
      out.back().end = std::max(out.back().end, k.end);
      ++out.back().kernels;
    } else {
      out.push_back({k.pid, k.start, k.end, 1});
    }
  }
  return out;
}
/// The runs of `rs` that are neither a process's first nor its last (start-up and wind-down).
inline std::vector<Run> interior(const std::vector<Run>& rs) {
  std::map<long, std::pair<size_t, size_t>> first_last;
  for (size_t i = 0; i < rs.size(); ++i) {
    auto [it, fresh] = first_last.try_emplace(rs[i].pid, i, i);
    if (!fresh) it->second.second = i;
  }
  std::vector<Run> out;
  for (size_t i = 0; i < rs.size(); ++i) {
    auto fl = first_last[rs[i].pid];
    if (i != fl.first && i != fl.second) out.push_back(rs[i]);
  }
  return out;
}

/// Device time of each process on `device` (ns), within [from, to).
inline std::map<long, uint64_t> busy(const std::vector<Kernel>& ks, int device, uint64_t from = 0,
                                      uint64_t to = UINT64_MAX) {
  std::map<long, uint64_t> out;
  for (const Kernel& k : ks) {
    if (k.device != device) continue;
    uint64_t s = std::max(k.start, from), e = std::min(k.end, to);
    if (e > s) out[k.pid] += e - s;
  }
  return out;
}

}  // namespace coloc::test::trace
