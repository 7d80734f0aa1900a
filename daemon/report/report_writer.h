// daemon/report/report_writer.h — writes job reports on a thread of its own, so that colocd's
// event loop never waits for the disk (a report is written whole and fsync'ed: on a busy disk that
// takes milliseconds, and during a mass start hundreds of jobs end while hundreds register).
//
// Reports are written in the order submitted; a write that fails for want of a descriptor (colocd
// at its descriptor limit) is tried again every 100 ms for up to a minute. A write that fails for
// want of space (ENOSPC, EDQUOT: the state directory's disk is full) keeps the report in memory,
// *held*, and tries again every second until space returns; then the held reports are written,
// oldest first, before any later one. At most kMaxHeld reports and kMaxHeldBytes are held: past
// that the oldest is dropped, with a log line naming its job. flush() waits until everything
// submitted so far is on disk or held (admin requests that read reports call it first, so a report
// is never missed because it is still in the queue; held() gives them the held ones); the
// destructor writes what is left, then stops the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "report/report_store.h"

namespace coloc::report {

class ReportWriter {
 public:
  explicit ReportWriter(const ReportStore& store);
  ~ReportWriter();
  ReportWriter(const ReportWriter&) = delete;
  ReportWriter& operator=(const ReportWriter&) = delete;

  /// Queues the report `text` of job `job_id` (ReportStore::write). `label` names the job in the
  /// log line that follows the write ("job 0:train-1a2b3c ended; report PATH", or the error).
  void submit(std::string job_id, std::string label, std::string text);
  /// Returns once every report submitted before the call is written (or has failed), or after
  /// `limit` (false then: some are still on their way).
  bool flush(std::chrono::milliseconds limit);
  /// Reports submitted and not yet written or held.
  size_t pending() const;
  /// The reports of `job_id` held in memory for want of disk space, oldest first.
  std::vector<std::string> held(const std::string& job_id) const;
  /// How many reports are held now.
  size_t held_count() const;

  /// The most reports, and bytes of them, held for want of disk space.
  static constexpr size_t kMaxHeld = 1000;
  static constexpr size_t kMaxHeldBytes = 64u << 20;
  /// How often held reports are tried again.
  static constexpr std::chrono::milliseconds kRetry{1000};

 private:
  struct Item {
    std::string job_id, label, text;
  };
  void run();
  /// Writes one report (the lock not held); true when it is written or failed for good, false
  /// when the disk is full (the caller holds it).
  bool write_one(const Item& item);
  /// Holds `item` (the lock held), dropping the oldest past the limits.
  void hold(Item item);

  const ReportStore& store_;
  mutable std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Item> queue_;
  std::deque<Item> held_;  ///< oldest first
  size_t held_bytes_ = 0;
  uint64_t submitted_ = 0, written_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace coloc::report
