#include "errors.h"

namespace simgpu {

namespace {
constexpr ErrorInfo kErrors[] = {
#include "cuda_errors.inc"
};
}  // namespace

const ErrorInfo* find_error(long long code) {
  for (const ErrorInfo& e : kErrors)
    if ((long long)e.code == code) return &e;
  return nullptr;
}

size_t error_count() { return sizeof kErrors / sizeof kErrors[0]; }

}  // namespace simgpu
