// daemon/report/report_writer.h — writes job reports on a thread of its own, so that colocd's
// event loop never waits for the disk (a report is written whole and fsync'ed: on a busy disk that
// takes milliseconds, and during a mass start hundreds of jobs end while hundreds register).
//
// Reports are written in the order submitted; a write that fails for want of a descriptor (colocd
// at its descriptor limit) is tried again every 100 ms for up to a minute. flush() waits until everything submitted so far is
// on disk (admin requests that read reports call it first, so a report is never missed because it
// is still in the queue); the destructor writes what is left, then stops the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

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
  /// Reports submitted and not yet written.
  size_t pending() const;

 private:
  struct Item {
    std::string job_id, label, text;
  };
  void run();

  const ReportStore& store_;
  mutable std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Item> queue_;
  uint64_t submitted_ = 0, written_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace coloc::report
