// tools/coloc/top_cmd.h — `coloc top`: a live view of the node, as nvtop and htop are for GPUs
// and processes: per device a memory bar split into each job's in-use memory, its reservation,
// the driver's overhead, the memory used outside coloc, the headroom and what is free; the jobs
// (state, limit, in use, peak, predicted peak, time waited, GPU share); the processes outside
// coloc.
//
//   coloc top [--once] [--socket PATH]
//
// Refreshes every second; `q` quits (the terminal in non-canonical mode without echo, in the
// alternate screen, restored on exit and on SIGINT/SIGTERM; a SIGWINCH redraws at the new size).
// `--once` prints one frame (80 columns) and exits, for scripts. Colour only when stdout is a
// terminal and NO_COLOR is not set (https://no-color.org). Exit codes: 0, 3 colocd unreachable
// (--once; the live view keeps trying), 2 bad usage.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace coloc::cli {

/// How a frame is drawn.
struct TopView {
  size_t width = 80;       ///< columns (at least 60 are used)
  bool colour = false;     ///< ANSI colours
  std::string clock;       ///< "08:12:03", shown in the title ("" = none)
  bool interactive = false;  ///< the title says "q quits"
};

/// One frame of `coloc top` from colocd's status (`coloc status --json`), every line at most
/// `view.width` columns (colour sequences not counted), each ending in "\n".
std::string top_frame(const nlohmann::json& status, const TopView& view);
/// Compact bytes for the job table: "0", "512M", "10.5G", "141G"; "-" for null.
std::string compact_bytes(const nlohmann::json& v);

class TopCommand {
 public:
  /// Adds the `top` subcommand and its options to `app`; returns it.
  CLI::App* add_to(CLI::App& app);
  /// Runs it once `app` has parsed it, against colocd at `socket`; returns the exit code.
  int run(const std::string& socket) const;

 private:
  CLI::App* cmd_ = nullptr;
  bool once_ = false;
};

}  // namespace coloc::cli
