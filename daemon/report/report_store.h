// daemon/report/report_store.h — job reports on disk: <state-dir>/reports/<job id>.json.
//
// File names are sanitized (letters, digits, '.', '_', '-'; anything else becomes '_'; no
// leading '.'; at most 100 bytes). A report is never overwritten: when the name is taken (a job id
// reused, or two users' jobs that sanitize alike) the next free of <name>.2.json, <name>.3.json,
// ... is used. Files are written whole (a temporary file, then link(2), which fails rather than
// replace), mode 0640.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace coloc::report {

class ReportStore {
 public:
  /// `dir` is the reports directory; it is created by prepare().
  explicit ReportStore(std::string dir);

  /// Creates the directory (mode 0750; group `gid` when >= 0, so an admin group can read it).
  Result<void> prepare(int gid = -1) const;
  /// The file name stem for a job id.
  static std::string sanitize(const std::string& job_id);
  /// Writes `text` as a new report for `job_id`; returns the path written.
  Result<std::string> write(const std::string& job_id, const std::string& text) const;
  /// Paths of every report filed under `job_id`, newest (highest suffix) first.
  std::vector<std::string> find(const std::string& job_id) const;
  /// Job ids `coloc run` made from `name` ("NAME-" and 6 hex digits) that have a report, newest
  /// report file (modification time) first.
  std::vector<std::string> run_ids_of(const std::string& name) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace coloc::report
