#include "compute/compute_policy.h"

namespace coloc::compute {

const char* mode_name(proto::PolicyMode m) {
  switch (m) {
    case proto::PolicyMode::kShare: return "share";
    case proto::PolicyMode::kTimeslice: return "timeslice";
    case proto::PolicyMode::kPriority: return "priority";
  }
  return "share";
}

std::unique_ptr<ComputePolicy> make_policy(const PolicySettings& s) {
  if (s.mode == proto::PolicyMode::kTimeslice) return std::make_unique<TimeslicePolicy>(s.quantum);
  return std::make_unique<SharePolicy>();  // kPriority is not served yet: the admin op refuses it
}

}  // namespace coloc::compute
