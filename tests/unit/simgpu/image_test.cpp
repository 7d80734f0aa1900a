// What simgpu's cuModuleLoadData accepts and how cuModuleGetFunction finds names, on the real
// fatbin nvcc builds from tools/workload/kernels.cu.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "tests/support/proc.h"
#include "tools/simgpu/image.h"

using simgpu::ImageKind;

namespace {
std::string fatbin() {
  std::string f = coloc::test::read_file(coloc::test::build_path("gen/kernels.fatbin"));
  REQUIRE_MESSAGE(f.size() > 16, "build/gen/kernels.fatbin is missing");
  return f;
}
}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("image: nvcc's fatbin is recognised whole, and its kernels are found by exact name") {
  std::string f = fatbin();
  size_t size = 0;
  REQUIRE(simgpu::classify_image(f.data(), &size) == ImageKind::fatbin);
  CHECK(size == f.size());
  std::string_view image(f.data(), size);
  CHECK(simgpu::image_has_kernel(ImageKind::fatbin, image, "coloc_spin"));
  CHECK(simgpu::image_has_kernel(ImageKind::fatbin, image, "coloc_fill"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::fatbin, image, "coloc_sp"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::fatbin, image, "spin"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::fatbin, image, "coloc_noop"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::fatbin, image, ""));
}

TEST_CASE("image: a cubin inside the fatbin is an ELF image of its own") {
  std::string f = fatbin();
  size_t at = f.find("\x7f" "ELF");
  REQUIRE(at != std::string::npos);
  size_t size = 0;
  REQUIRE(simgpu::classify_image(f.data() + at, &size) == ImageKind::cubin);
  REQUIRE(at + size <= f.size());
  CHECK(simgpu::image_has_kernel(ImageKind::cubin, std::string_view(f.data() + at, size), "coloc_fill"));
}

TEST_CASE("image: PTX text") {
  const char ptx[] = "//\n// Generated\n//\n.version 7.0\n.target sm_52\n.address_size 64\n"
                     ".visible .entry coloc_noop()\n{\n  ret;\n}\n";
  size_t size = 0;
  REQUIRE(simgpu::classify_image(ptx, &size) == ImageKind::ptx);
  CHECK(size == sizeof ptx);
  CHECK(simgpu::image_has_kernel(ImageKind::ptx, ptx, "coloc_noop"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::ptx, ptx, "coloc_no"));
  CHECK_FALSE(simgpu::image_has_kernel(ImageKind::ptx, ptx, "ret"));
}

TEST_CASE("image: garbage is invalid") {
  size_t size = 0;
  const char text[] = "hello, this is not a module";
  CHECK(simgpu::classify_image(text, &size) == ImageKind::invalid);
  const unsigned char binary[64] = {1, 2, 3, 0xff, 0xfe};
  CHECK(simgpu::classify_image(binary, &size) == ImageKind::invalid);
  unsigned char elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  elf[18] = 62;  // EM_X86_64: a host object, not a cubin
  CHECK(simgpu::classify_image(elf, &size) == ImageKind::invalid);
  elf[18] = 190;  // EM_CUDA
  CHECK(simgpu::classify_image(elf, &size) == ImageKind::cubin);
  CHECK(size == 64);
  std::string f = fatbin();
  uint64_t huge = 1ull << 40;
  std::memcpy(f.data() + 8, &huge, 8);  // a payload size no image has
  CHECK(simgpu::classify_image(f.data(), &size) == ImageKind::invalid);
}
}
