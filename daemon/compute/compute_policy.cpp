#include "compute/compute_policy.h"

#include "compute/priority_policy.h"

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
  if (s.mode == proto::PolicyMode::kPriority) return std::make_unique<PriorityPolicy>(s.target_pct);
  return std::make_unique<SharePolicy>();
}

}  // namespace coloc::compute
