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

void ReportWriter::run() {
  auto lg = log::get("report");
  std::unique_lock lk(mu_);
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    // Out of descriptors (colocd at its limit, under a flood): try again for a minute.
    auto path = store_.write(item.job_id, item.text);
    for (int i = 0; i < 600 && !path && (path.error().err == EMFILE || path.error().err == ENFILE); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      path = store_.write(item.job_id, item.text);
    }
    if (path) lg->info("job {} ended; report {}", item.label, path.value());
    else lg->error("job {} ended; its report could not be written: {}", item.label, path.error().message());
    lk.lock();
    ++written_;
    done_.notify_all();
  }
}

}  // namespace coloc::report
