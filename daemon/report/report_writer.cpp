#include "report/report_writer.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <chrono>

#include "util/log.h"

namespace coloc::report {

ReportWriter::ReportWriter(const ReportStore& store) : store_(store) {
  // The thread takes no signal (the daemon's are read from a signalfd on the loop's thread).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ReportWriter::~ReportWriter() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void ReportWriter::submit(std::string job_id, std::string label, std::string text) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back({std::move(job_id), std::move(label), std::move(text)});
    ++submitted_;
  }
  work_.notify_one();
}

bool ReportWriter::flush(std::chrono::milliseconds limit) {
  std::unique_lock lk(mu_);
  const uint64_t target = submitted_;
  return done_.wait_for(lk, limit, [&] { return written_ >= target; });
}

size_t ReportWriter::pending() const {
  std::lock_guard lk(mu_);
  return size_t(submitted_ - written_);
}

std::vector<std::string> ReportWriter::held(const std::string& job_id) const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const Item& i : held_)
    if (i.job_id == job_id) out.push_back(i.text);
  return out;
}

size_t ReportWriter::held_count() const {
  std::lock_guard lk(mu_);
  return held_.size();
}

namespace {
bool no_space(int err) { return err == ENOSPC || err == EDQUOT; }
}  // namespace

bool ReportWriter::write_one(const Item& item) {
  auto lg = log::get("report");
  // Out of descriptors (colocd at its limit, under a flood): try again for a minute.
  auto path = store_.write(item.job_id, item.text);
  for (int i = 0; i < 600 && !path && (path.error().err == EMFILE || path.error().err == ENFILE); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    path = store_.write(item.job_id, item.text);
  }
  if (path) {
    lg->info("job {} ended; report {}", item.label, path.value());
    return true;
  }
  if (no_space(path.error().err)) return false;
  lg->error("job {} ended; its report could not be written: {}", item.label, path.error().message());
  return true;
}

void ReportWriter::hold(Item item) {
  auto lg = log::get("report");
  if (held_.empty())
    lg->error("job {} ended; its report cannot be written for want of disk space in {}: reports are kept in memory "
              "(at most {}, {} MiB) and written once space returns",
              item.label, store_.dir(), kMaxHeld, kMaxHeldBytes >> 20);
  held_bytes_ += item.text.size();
  held_.push_back(std::move(item));
  while (held_.size() > 1 && (held_.size() > kMaxHeld || held_bytes_ > kMaxHeldBytes)) {
    lg->error("the report of job {} is dropped: {} reports ({} MiB) already wait for disk space in {}",
              held_.front().label, held_.size() - 1, (held_bytes_ - held_.front().text.size()) >> 20, store_.dir());
    held_bytes_ -= held_.front().text.size();
    held_.pop_front();
  }
}

void ReportWriter::run() {
  auto lg = log::get("report");
  std::unique_lock lk(mu_);
  for (;;) {
    if (held_.empty()) work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    else work_.wait_for(lk, kRetry, [&] { return stop_ || !queue_.empty(); });
    // Held reports first (the oldest first): while the oldest cannot be written, neither can the
    // rest, and a new one joins them, so reports reach the disk in the order jobs ended.
    size_t written_held = 0;
    while (!held_.empty()) {
      Item item = held_.front();
      lk.unlock();
      const bool done = write_one(item);
      lk.lock();
      if (!done) break;
      if (!held_.empty() && held_.front().job_id == item.job_id && held_.front().text == item.text) {
        held_bytes_ -= held_.front().text.size();
        held_.pop_front();
      }
      ++written_held;
    }
    if (written_held > 0 && held_.empty())
      lg->info("disk space is back in {}: {} held report(s) written", store_.dir(), written_held);
    if (queue_.empty()) {
      if (stop_) {
        if (!held_.empty())
          lg->error("{} report(s) were never written (no disk space in {}) and are lost as colocd stops", held_.size(),
                    store_.dir());
        return;  // stopping, and everything is written
      }
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    if (!held_.empty()) {
      hold(std::move(item));
    } else {
      lk.unlock();
      const bool done = write_one(item);
      lk.lock();
      if (!done) hold(std::move(item));
    }
    ++written_;
    done_.notify_all();
  }
}

}  // namespace coloc::report
