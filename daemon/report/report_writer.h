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
//
// The same thread keeps the index of ended jobs (`coloc jobs --all`): at start it reads every
// report in the directory (a few at a time, between writes), then adds each report it writes; the
// loop reads the index from memory (ended()). It also applies the retention (set_retention): at
// start, after each write, and every hour, the reports past the age or beyond the count (the
// oldest ends first) are deleted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
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
  /// The reports of `job_id` not on disk: held in memory for want of disk space, being written,
  /// or queued; oldest first. (`coloc report` reads these instead of waiting for the writer; a
  /// report being written may be on disk as well by the time the caller reads the directory.)
  std::vector<std::string> unwritten(const std::string& job_id) const;
  /// How many reports are held now.
  size_t held_count() const;

  /// One ended job, as `coloc jobs --all` lists it (from its report).
  struct Ended {
    std::string job, user, command;
    std::string name;  ///< its report's file name without ".json" (what `coloc report` takes)
    uint32_t uid = 0;
    int64_t start_ms = 0, end_ms = 0;  ///< Unix ms
    std::optional<int> exit_status, exit_signal;
    uint64_t peak = 0;       ///< bytes: the largest of its devices' peaks
    double waited_s = 0;     ///< its admission and memory waits, summed over its devices (s)
    std::string cancelled_by;  ///< who cancelled it ("" = nobody)
  };
  /// The entry of a report's text (file name `name`); nullopt for a text that is not a complete
  /// report.
  static std::optional<Ended> summarize(const std::string& text, const std::string& name);
  /// The ended jobs, newest end first; *indexed (when given): the directory has been read whole
  /// (before that, the list holds what was read so far).
  std::vector<Ended> ended(bool* indexed = nullptr) const;
  /// Which ended jobs to list: those that ended at or after `since_ms` (Unix ms; 0: any), of user
  /// `uid` (nullopt: any).
  struct Filter {
    int64_t since_ms = 0;
    std::optional<uint32_t> uid;
  };
  /// The newest `limit` of those `f` keeps; *total (when given): how many it keeps.
  std::vector<Ended> newest(size_t limit, const Filter& f, size_t* total, bool* indexed = nullptr) const;
  /// The newest ended job `job_id` of user `uid` (any user when nullopt), looked up under the lock.
  std::optional<Ended> find_ended(const std::string& job_id, std::optional<uint32_t> uid) const;
  /// Which reports to keep: those that ended within `age_ms` (0 = any age) and are among the
  /// newest `count` (0 = any number). Applied on the writer's thread, at once.
  struct Retention {
    int64_t age_ms = 0;
    uint64_t count = 0;
  };
  void set_retention(Retention r);
  /// How often the retention is applied when no report is written.
  static constexpr std::chrono::minutes kPruneEvery{60};
  /// Reports read per step while indexing the directory at start.
  static constexpr size_t kIndexBatch = 32;
  /// The largest report file read (bytes): a larger file in the directory is no report of ours.
  static constexpr size_t kMaxReportBytes = 64u << 20;

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
  /// Reads up to kIndexBatch reports of the start-up scan into the index (the lock not held).
  void index_some();
  /// Adds a report to the index (the lock held).
  void index_add(Ended e);
  /// Deletes the reports the retention does not keep (the lock not held).
  void prune();

  const ReportStore& store_;
  mutable std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Item> queue_;
  std::deque<Item> held_;  ///< oldest first
  const Item* writing_ = nullptr;  ///< the queued report being written (taken off queue_), if any
  size_t held_bytes_ = 0;
  uint64_t submitted_ = 0, written_ = 0;
  bool stop_ = false;
  std::vector<Ended> ended_;             ///< newest end first
  std::vector<std::string> to_index_;    ///< file names of the start-up scan still to read
  std::set<std::string> index_names_;    ///< the names in ended_
  bool listed_ = false, indexed_ = false;
  Retention retention_;
  bool prune_due_ = true;
  std::thread thread_;
};

}  // namespace coloc::report
