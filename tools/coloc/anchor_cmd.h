// tools/coloc/anchor_cmd.h — `coloc anchor`: registers a job's anchor for a launcher that is not
// `coloc run` (the Slurm plugin's slurmstepd; a prolog cannot, as it must exit) and holds it until the launcher
// says the job ended. docs/slurm.md describes its use.
#pragma once

#include <string>

namespace coloc::cli {

/// The options of `coloc anchor`, as given on its command line.
struct AnchorOptions {
  std::string socket;    ///< resolved socket path
  std::string job;       ///< the job id; required; proto::valid_job_id
  std::string mem;       ///< "" = no limit; else a size (coloc/size.h)
  std::string priority;  ///< "" = normal; high, normal or best-effort
  std::string on_full;   ///< "" = wait; wait or fail
  std::string weight;    ///< "" = colocd's default (1); else 1..100, set as `coloc set --weight` is
  std::string command;   ///< what the report names as the job's command ("" = "(anchor)")
  std::string step;      ///< the Slurm step it stands for ("" = none; AnchorSpec::step)
  /// The job's end: when this descriptor turns readable the anchor reads at most one line, the
  /// job's exit status as a decimal number (0..255, as a shell reports it), says goodbye with it
  /// (or without a status on EOF alone), and exits 0. Required (>= 3).
  int until_fd = -1;
  /// Where the outcome of the registration is written, one line each, then the descriptor is
  /// closed: zero or more "note TEXT" (a lowered priority, a weight colocd refused) and, when
  /// colocd lowered the priority asked for, "priority NAME" (the one granted: what the job's
  /// processes should ask for), then exactly one of "ok", "busy TEXT" (colocd is there but does
  /// not answer: the anchor keeps trying) or "error TEXT" (no colocd, or it refused the anchor;
  /// the anchor then exits 3). A reader ignores lines it does not know. -1 = none.
  int ready_fd = -1;
};

/// Runs `coloc anchor`. Returns the process's exit code: 0 when the job ended, 2 on bad options
/// (with a sentence on stderr and an "error" line on ready_fd), 3 when colocd is not there.
/// SIGINT, SIGTERM, SIGHUP and SIGPIPE are ignored: only until_fd ends the anchor (a scheduler's
/// signals are for the job's processes).
int run_anchor(const AnchorOptions& opt);

}  // namespace coloc::cli
