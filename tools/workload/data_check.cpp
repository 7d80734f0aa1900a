// tools/workload/data_check.cpp — see data_check.h.
#include "data_check.h"

#include <cstdio>
#include <vector>

#include "gpu.h"

namespace coloc::workload {

DataCheck::DataCheck(Gpu& gpu, uint64_t bytes) : gpu_(gpu), pages_(std::max<uint64_t>(2, (bytes + kPage - 1) / kPage)) {
  buffer_ = gpu_.allocate(pages_ * kPage);
  constexpr uint64_t kWords = kPage / 4;
  std::vector<uint32_t> chunk(kWords * 256);  // 1 MiB at a time
  for (uint64_t page = 0; page + 1 < pages_;) {
    const uint64_t n = std::min<uint64_t>(256, pages_ - 1 - page);
    for (uint64_t w = 0; w < n * kWords; ++w) chunk[w] = pattern_word(page * kWords + w);
    gpu_.upload(buffer_ + page * kPage, chunk.data(), n * kPage);
    page += n;
  }
}

DataCheck::~DataCheck() {
  try {
    if (buffer_) gpu_.release(buffer_);
  } catch (...) {
    // The process exit returns it anyway.
  }
}

void DataCheck::launch(uint64_t iteration) {
  gpu_.memset32(buffer_ + (pages_ - 1) * kPage, iteration_word(iteration), kPage / 4);
}

void DataCheck::verify(uint64_t iteration) {
  constexpr uint64_t kWords = kPage / 4;
  std::vector<uint32_t> page(kWords);
  auto fold = [&](uint32_t w, uint32_t expected) {
    for (int b = 0; b < 4; ++b) {
      digest_ ^= (w >> (8 * b)) & 0xff;
      digest_ *= 0x100000001b3ull;  // FNV-1a 64 prime
    }
    if (w != expected) ++mismatches_;
  };
  const uint64_t pattern_pages = pages_ - 1;
  for (uint64_t k = 0; k < std::min(kPagesPerCheck, pattern_pages); ++k) {
    const uint64_t p = (iteration * kPagesPerCheck + k) % pattern_pages;
    gpu_.download(page.data(), buffer_ + p * kPage, kPage);
    for (uint64_t w = 0; w < kWords; ++w) fold(page[w], pattern_word(p * kWords + w));
  }
  gpu_.download(page.data(), buffer_ + pattern_pages * kPage, kPage);
  for (uint64_t w = 0; w < kWords; ++w) fold(page[w], iteration_word(iteration));
  ++checks_;
}

std::string DataCheck::digest() const {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(digest_));
  return s;
}

}  // namespace coloc::workload
