// tools/workload/data_check.h — coloc-train --check-data: a buffer of the job's own device memory
// that holds a known pattern, checked every iteration, so that a job whose memory was moved away
// and back (a suspension: checkpoint to host memory, restore) proves its data came back intact.
//
//   setup    allocates `bytes` (rounded up to 4 KiB pages, at least 2), writes word i of every page
//            but the last as pattern_word(i) (cuMemcpyHtoD).
//   launch   queues, on the job's stream, this iteration's device write: the last page set to
//            iteration_word(iteration) (cuMemsetD32Async), behind the iteration's kernels.
//   verify   after the iteration's synchronize: reads back kPagesPerCheck pattern pages (a window
//            that moves on every iteration, so a long run reads every page) and the last page, and
//            counts the words that differ. Every word read goes into an FNV-1a digest: two runs
//            with the same size and iterations read the same words, so an intact run's digest is
//            the same with or without a suspension.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace coloc::workload {

class Gpu;

/// Word `index` of the pattern pages (Knuth's multiplicative hash; any fixed bijection would do).
inline uint32_t pattern_word(uint64_t index) { return uint32_t(index * 2654435761u) ^ 0x9e3779b9u; }
/// The word the device writes in iteration `iteration` (0-based).
inline uint32_t iteration_word(uint64_t iteration) { return 0xc0000000u | uint32_t(iteration & 0x3fffffff); }

class DataCheck {
 public:
  static constexpr uint64_t kPage = 4096;
  static constexpr uint64_t kPagesPerCheck = 16;

  /// Allocates and fills the buffer. Throws CudaError.
  DataCheck(Gpu& gpu, uint64_t bytes);
  /// Frees the buffer (errors ignored).
  ~DataCheck();
  DataCheck(const DataCheck&) = delete;
  DataCheck& operator=(const DataCheck&) = delete;

  /// Queues iteration `iteration`'s device write. Throws CudaError.
  void launch(uint64_t iteration);
  /// Checks iteration `iteration` (after its synchronize). Throws CudaError.
  void verify(uint64_t iteration);

  uint64_t bytes() const { return pages_ * kPage; }
  uint64_t checks() const { return checks_; }
  uint64_t mismatches() const { return mismatches_; }
  /// The digest as 16 hex digits.
  std::string digest() const;

 private:
  Gpu& gpu_;
  uint64_t pages_;
  CUdeviceptr buffer_ = 0;
  uint64_t checks_ = 0, mismatches_ = 0;
  uint64_t digest_ = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
};

}  // namespace coloc::workload
