// The CUresult table behind cuGetErrorName/cuGetErrorString covers every value cuda.h defines
// (checked against cuda.h read here, independently of the generator).
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tools/simgpu/errors.h"

TEST_SUITE("simgpu") {
TEST_CASE("error table: every CUresult of cuda.h, by name and value") {
  std::ifstream in(std::string(COLOC_CUDA_HOME) + "/include/cuda.h");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t begin = text.find("typedef enum cudaError_enum {");
  size_t end = text.find("} CUresult;", begin);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  std::string body = text.substr(begin, end - begin);
  std::regex re(R"(\n\s*(CUDA_[A-Z0-9_]+)\s*=\s*(\d+))");
  size_t seen = 0;
  for (auto it = std::sregex_iterator(body.begin(), body.end(), re); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1];
    int value = std::stoi((*it)[2]);
    CAPTURE(name);
    const simgpu::ErrorInfo* e = simgpu::find_error(value);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->name) == name);
    CHECK(std::string(e->description).size() > 5);
    ++seen;
  }
  CHECK(seen > 90);
  CHECK(seen == simgpu::error_count());
  CHECK(simgpu::find_error(12345) == nullptr);
  CHECK(simgpu::find_error(-1) == nullptr);
  CHECK(std::string(simgpu::find_error(CUDA_ERROR_OUT_OF_MEMORY)->name) == "CUDA_ERROR_OUT_OF_MEMORY");
}
}
