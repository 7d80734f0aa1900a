// tools/coloc/daemon_client.h — one admin request to colocd over its socket, the answer
// reassembled from its chunks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "coloc/protocol.h"

namespace coloc::cli {

/// The outcome of a request.
struct Answer {
  enum class Kind {
    kOk,           ///< `text` is the JSON answer
    kRefused,      ///< the daemon said no: `status` and `text` (a sentence) say why
    kUnreachable,  ///< no daemon at the socket (`text` says what failed)
    kProtocol,     ///< the daemon answered something we cannot read
  } kind = Kind::kOk;
  proto::AdminStatus status = proto::AdminStatus::kOk;
  std::string text;
};

/// Sends `msg` to the daemon at `socket` and waits up to `timeout_ms` for the whole answer.
Answer admin_request(const std::string& socket, const proto::AdminMsg& msg, int timeout_ms = 10000);

/// The socket to use: `flag` if given, else $COLOC_SOCKET, else the default.
std::string resolve_socket(const std::string& flag);

/// What `coloc run` registers as its job's anchor (proto::kRegAnchor): the job's settings, as
/// the command's processes would register them, so the job is the same whichever comes first.
struct AnchorSpec {
  std::string job;                                 ///< the job id (COLOC_JOB)
  uint64_t limit = proto::kNoLimit;                ///< bytes per device (COLOC_MEM_LIMIT), kNoLimit = none
  proto::Priority priority = proto::Priority::kNormal;
  proto::OnFull on_full = proto::OnFull::kWait;
  uint64_t wait_timeout_ns = 0;                    ///< COLOC_WAIT_TIMEOUT in ns; 0 = colocd's default
  std::vector<std::string> command;                ///< the command and its arguments (the report's command)
  /// Bytes per device of the job's analytic estimate (COLOC_MEM_ESTIMATE, --estimate-from); 0 = none.
  /// Sent with kRegEstimate (protocol v10; left out for an older colocd).
  uint64_t estimate = 0;
  /// The Slurm step the anchor stands for (`coloc anchor --step`, from the Slurm plugin; a
  /// proto::valid_step() label, "" = none). Sent with kRegStep (v11): colocd then knows the job as
  /// Slurm's, and `coloc cancel` points to scancel.
  std::string step;
};

/// Connects to colocd at `socket` and registers as the anchor of `spec.job`, waiting up to
/// `timeout_ms` for the reply (and up to wire::kConnectTimeoutMs for the connection). Returns the
/// connected descriptor (close-on-exec; keep it open as long as the job runs), or -1 with a
/// sentence in *why: no colocd, one that refuses anchors (e.g. an older protocol), or one that is
/// there but busy — its listen queue full, no answer in time, or the connection closed unanswered
/// (*busy = true when given: then try again later, never run outside the books).
/// `resume`: registering again after colocd restarted (kRegResume, no ledger). `reply` (when
/// given) receives colocd's RegisterReply on success: its granted_priority (0 from a colocd older
/// than protocol v8, which does not tell) and priority_flags say whether the job's priority was
/// lowered (kPriorityLowered: high is for root and colocd's admin and high-priority groups).
int register_anchor(const std::string& socket, const AnchorSpec& spec, std::string* why, int timeout_ms = 10000,
                    bool resume = false, bool* busy = nullptr, proto::RegisterReplyMsg* reply = nullptr);

/// Holds a job's anchor until `end_fd` turns readable (or hangs up): a pidfd of the command
/// (`coloc run`), or a pipe whose writer ends the job (`coloc anchor`). `anchor` is the registered
/// descriptor, or -1 while colocd was busy at the start. When colocd goes away (a restart) it
/// registers again (kRegResume) with back-off from 50 ms to 2 s, so the job keeps its settings and
/// reservation. `on_registered` (when given) runs after each registration made here (the first
/// one, when colocd was busy at the start, or one after a restart). Returns the anchor's
/// descriptor at the end (-1 when not registered then); the caller says goodbye on it.
int hold_anchor(int end_fd, int anchor, const std::string& socket, const AnchorSpec& spec,
                const std::function<void()>& on_registered = nullptr);

/// Says goodbye on the anchor's connection with the command's exit status (its exit code, or
/// 128 + the signal that killed it), then closes it: the job ends once its processes are gone,
/// and its report carries `exit_status`.
void anchor_goodbye(int fd, int exit_status);

}  // namespace coloc::cli
