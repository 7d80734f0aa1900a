#include "suspend.h"

namespace coloc::ckpt {

namespace {

constexpr int kRunning = 0, kLocked = 1, kCheckpointed = 2, kFailed = 3;

int state_of(const Api& api, ProcessOutcome& p) {
  int s = -1;
  int rc = api.state(p.pid, &s);
  if (rc != 0) {
    p.state = "unknown";
    if (p.failed_step.empty()) {
      p.failed_step = "state";
      p.error = api.error_name(rc);
    }
    return -1;
  }
  p.state = state_name(s);
  return s;
}

// Runs `step` on p, timing it into *ms; records a failure. True on CUDA_SUCCESS.
bool run(const Api& api, ProcessOutcome& p, const char* name, double* ms, const std::function<int()>& step) {
  uint64_t t0 = api.now_ns();
  int rc = step();
  *ms = double(api.now_ns() - t0) / 1e6;
  if (rc == 0) return true;
  p.failed_step = name;
  p.error = api.error_name(rc);
  return false;
}

void refresh(const Api& api, std::vector<ProcessOutcome>& ps) {
  for (ProcessOutcome& p : ps) state_of(api, p);
}

std::string who(const ProcessOutcome& p) { return "process " + std::to_string(p.pid); }

}  // namespace

std::string state_name(int state) {
  switch (state) {
    case kRunning: return "running";
    case kLocked: return "locked";
    case kCheckpointed: return "checkpointed";
    case kFailed: return "failed";
  }
  return "unknown";
}

Outcome suspend(const Api& api, const std::vector<int>& pids, unsigned lock_timeout_ms) {
  Outcome out;
  for (int pid : pids) out.processes.push_back({.pid = pid});
  auto& ps = out.processes;
  for (ProcessOutcome& p : ps) {
    int s = state_of(api, p);
    if (s != kRunning) {
      out.summary = who(p) + (s < 0 ? " has no CUDA state (" + p.error + ")" : " is " + p.state + ", not running") +
                    ": nothing was locked";
      return out;
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (run(api, ps[i], "lock", &ps[i].lock_ms, [&] { return api.lock(ps[i].pid, lock_timeout_ms); })) continue;
    for (size_t j = 0; j < i; ++j) run(api, ps[j], "unlock", &ps[j].unlock_ms, [&] { return api.unlock(ps[j].pid); });
    refresh(api, ps);
    out.summary = "the lock of " + who(ps[i]) + " failed (" + ps[i].error + ")" +
                  (i ? "; the " + std::to_string(i) + " process(es) locked before it were unlocked" : "") +
                  "; the job runs on";
    return out;
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    if (run(api, ps[i], "checkpoint", &ps[i].checkpoint_ms, [&] { return api.checkpoint(ps[i].pid); })) continue;
    for (size_t j = 0; j < i; ++j) run(api, ps[j], "restore", &ps[j].restore_ms, [&] { return api.restore(ps[j].pid); });
    int locked = 0;
    for (ProcessOutcome& p : ps) {
      if (state_of(api, p) != kLocked) continue;
      if (run(api, p, "unlock", &p.unlock_ms, [&] { return api.unlock(p.pid); })) ++locked;
    }
    refresh(api, ps);
    out.summary = "the checkpoint of " + who(ps[i]) + " failed (" + ps[i].error + "), " + who(ps[i]) + " is " +
                  ps[i].state + "; " + std::to_string(locked) + " process(es) were restored and unlocked";
    for (const ProcessOutcome& p : ps)
      if (p.state != "running" && &p != &ps[i]) out.summary += "; " + who(p) + " is " + p.state;
    return out;
  }
  refresh(api, ps);
  out.ok = true;
  out.summary = "suspended " + std::to_string(ps.size()) + " process(es)";
  return out;
}

Outcome resume(const Api& api, const std::vector<int>& pids) {
  Outcome out;
  for (int pid : pids) out.processes.push_back({.pid = pid});
  auto& ps = out.processes;
  std::vector<int> s;
  for (ProcessOutcome& p : ps) s.push_back(state_of(api, p));
  for (size_t i = 0; i < ps.size(); ++i) {
    if (s[i] < 0 || s[i] == kFailed) {
      out.summary = who(ps[i]) + " is " + ps[i].state + ": it cannot be resumed; nothing was restored";
      return out;
    }
  }
  std::vector<size_t> restored;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (s[i] != kCheckpointed) continue;
    if (run(api, ps[i], "restore", &ps[i].restore_ms, [&] { return api.restore(ps[i].pid); })) {
      restored.push_back(i);
      continue;
    }
    // Keep the job wholly suspended: give back what was restored.
    for (size_t j : restored) run(api, ps[j], "checkpoint", &ps[j].checkpoint_ms, [&] { return api.checkpoint(ps[j].pid); });
    refresh(api, ps);
    out.summary = "the restore of " + who(ps[i]) + " failed (" + ps[i].error + "); the job stays suspended";
    return out;
  }
  for (ProcessOutcome& p : ps) {
    if (state_of(api, p) != kLocked) continue;
    if (!run(api, p, "unlock", &p.unlock_ms, [&] { return api.unlock(p.pid); })) {
      refresh(api, ps);
      out.summary = "the unlock of " + who(p) + " failed (" + p.error + ")";
      return out;
    }
  }
  refresh(api, ps);
  out.ok = true;
  out.summary = "resumed " + std::to_string(ps.size()) + " process(es)";
  return out;
}

Outcome states(const Api& api, const std::vector<int>& pids) {
  Outcome out;
  out.ok = true;
  for (int pid : pids) {
    out.processes.push_back({.pid = pid});
    if (state_of(api, out.processes.back()) < 0) out.ok = false;
  }
  out.summary = out.ok ? "states of " + std::to_string(pids.size()) + " process(es)" : "some process has no CUDA state";
  return out;
}

}  // namespace coloc::ckpt
