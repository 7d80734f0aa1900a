#include "report/report_writer.h"

#include <pthread.h>
#include <signal.h>

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/clock.h"
#include "util/fs.h"
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

std::vector<std::string> ReportWriter::unwritten(const std::string& job_id) const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const Item& i : held_)
    if (i.job_id == job_id) out.push_back(i.text);
  if (writing_ && writing_->job_id == job_id) out.push_back(writing_->text);
  for (const Item& i : queue_)
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

std::optional<ReportWriter::Ended> ReportWriter::summarize(const std::string& text, const std::string& name) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto num = [&](const json& o, const char* k) -> std::optional<double> {
    auto it = o.find(k);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  // Whole numbers within range only (a cast of a double out of range is undefined).
  auto whole = [&](const json& o, const char* k, double lo, double hi) -> std::optional<int64_t> {
    auto it = o.find(k);
    if (it == o.end() || !(it->is_number_integer() || it->is_number_unsigned())) return std::nullopt;
    const double v = it->get<double>();
    if (v < lo || v > hi) return std::nullopt;
    return it->is_number_unsigned() ? int64_t(it->get<uint64_t>()) : it->get<int64_t>();
  };
  auto text_of = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  constexpr double kMaxMs = 1e15;  // year 33658
  constexpr double kMaxWaitS = 366.0 * 86400;
  const auto end = whole(j, "end_unix_ms", 0, kMaxMs), start = whole(j, "start_unix_ms", 0, kMaxMs),
             uid = whole(j, "uid", 0, 4294967295.0);
  if (!end || !start || !uid || text_of("job").empty()) return std::nullopt;
  Ended e;
  e.job = text_of("job");
  e.user = text_of("user");
  e.command = text_of("command");
  e.name = name;
  e.uid = uint32_t(*uid);
  e.start_ms = int64_t(*start);
  e.end_ms = int64_t(*end);
  if (auto x = whole(j, "exit_status", -1e6, 1e6)) e.exit_status = int(*x);
  if (auto x = whole(j, "exit_signal", 0, 1e6)) e.exit_signal = int(*x);
  if (auto d = j.find("devices"); d != j.end() && d->is_array())
    for (const json& dev : *d) {
      if (!dev.is_object()) continue;
      if (auto p = whole(dev, "peak", 0, 9.2e18)) e.peak = std::max(e.peak, uint64_t(*p));
      // A wait is a duration of at most a year (a report that says more is not believed).
      for (const char* k : {"wait_admission_s", "wait_memory_s"})
        if (auto w = num(dev, k); w && *w >= 0 && *w <= kMaxWaitS) e.waited_s += *w;
    }
  if (auto c = j.find("cancelled"); c != j.end() && c->is_object() && (*c)["by"].is_string())
    e.cancelled_by = (*c)["by"].get<std::string>();
  return e;
}

std::vector<ReportWriter::Ended> ReportWriter::ended(bool* indexed) const {
  std::lock_guard lk(mu_);
  if (indexed) *indexed = indexed_;
  return ended_;
}

std::vector<ReportWriter::Ended> ReportWriter::newest(size_t limit, const Filter& f, size_t* total, bool* indexed) const {
  std::lock_guard lk(mu_);
  if (indexed) *indexed = indexed_;
  std::vector<Ended> out;
  size_t kept = 0;
  for (const Ended& e : ended_) {  // newest end first: the rest ended before `since_ms`
    if (e.end_ms < f.since_ms) break;
    if (f.uid && e.uid != *f.uid) continue;
    if (kept++ < limit) out.push_back(e);
  }
  if (total) *total = kept;
  return out;
}

std::optional<ReportWriter::Ended> ReportWriter::find_ended(const std::string& job_id, std::optional<uint32_t> uid) const {
  std::lock_guard lk(mu_);
  for (const Ended& e : ended_)
    if (e.job == job_id && (!uid || e.uid == *uid)) return e;
  return std::nullopt;
}

void ReportWriter::set_retention(Retention r) {
  {
    std::lock_guard lk(mu_);
    retention_ = r;
    prune_due_ = true;
  }
  work_.notify_one();
}

void ReportWriter::index_add(Ended e) {
  if (!index_names_.insert(e.name).second) return;  // read twice (written while the scan ran)
  auto at = std::upper_bound(ended_.begin(), ended_.end(), e.end_ms,
                             [](int64_t end, const Ended& x) { return end > x.end_ms; });
  ended_.insert(at, std::move(e));
}

void ReportWriter::index_some() {
  if (!listed_) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(store_.dir().c_str())) {
      while (dirent* ent = ::readdir(d)) {
        const std::string f = ent->d_name;
        if (f.size() > 5 && f[0] != '.' && f.compare(f.size() - 5, 5, ".json") == 0) names.push_back(f);
      }
      ::closedir(d);
    }
    std::lock_guard lk(mu_);
    to_index_ = std::move(names);
    listed_ = true;
  }
  std::vector<std::string> batch;
  {
    std::lock_guard lk(mu_);
    while (!to_index_.empty() && batch.size() < kIndexBatch) {
      batch.push_back(std::move(to_index_.back()));
      to_index_.pop_back();
    }
  }
  std::vector<Ended> read;
  for (const std::string& f : batch) {
    // Not std::ifstream: a FIFO named *.json must not stop the writer.
    auto text = read_regular_file(store_.dir() + "/" + f, kMaxReportBytes);
    if (!text) continue;
    // One that says it ends more than a day from now would head the list for ever.
    if (auto e = summarize(text.value(), f.substr(0, f.size() - 5)); e && e->end_ms <= wall_ms() + 86'400'000)
      read.push_back(std::move(*e));
  }
  std::lock_guard lk(mu_);
  for (Ended& e : read) index_add(std::move(e));
  if (to_index_.empty()) {
    indexed_ = true;
    prune_due_ = true;
  }
}

void ReportWriter::prune() {
  std::vector<std::string> gone;
  {
    std::lock_guard lk(mu_);
    if (!indexed_) return;  // the count needs every report
    const int64_t oldest = retention_.age_ms ? wall_ms() - retention_.age_ms : INT64_MIN;
    std::vector<Ended> kept;
    for (Ended& e : ended_) {
      if (e.end_ms < oldest || (retention_.count && kept.size() >= retention_.count)) {
        index_names_.erase(e.name);
        gone.push_back(std::move(e.name));
      } else {
        kept.push_back(std::move(e));
      }
    }
    ended_ = std::move(kept);
  }
  size_t deleted = 0;
  for (const std::string& name : gone) deleted += ::unlink((store_.dir() + "/" + name + ".json").c_str()) == 0;
  if (deleted) log::get("report")->info("report retention: {} report(s) deleted from {}", deleted, store_.dir());
}

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
    const std::string& p = path.value();
    const std::string base = p.substr(p.rfind('/') + 1);
    if (auto e = summarize(item.text, base.substr(0, base.size() - 5))) {
      std::lock_guard lk(mu_);
      index_add(std::move(*e));
      prune_due_ = true;
    }
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
  auto next_prune = std::chrono::steady_clock::now() + kPruneEvery;
  for (;;) {
    // Reading the directory at start, a few reports per turn, goes on while nothing is to write.
    if (indexed_ || stop_) {
      const auto wake = [&] { return stop_ || !queue_.empty() || prune_due_; };
      const auto limit = held_.empty() ? std::chrono::duration_cast<std::chrono::milliseconds>(kPruneEvery) : kRetry;
      work_.wait_for(lk, limit, wake);
      if (std::chrono::steady_clock::now() >= next_prune) prune_due_ = true;
    }
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
      if (!indexed_) {
        lk.unlock();
        index_some();
        lk.lock();
      } else if (prune_due_) {
        prune_due_ = false;
        next_prune = std::chrono::steady_clock::now() + kPruneEvery;
        lk.unlock();
        prune();
        lk.lock();
      }
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    if (!held_.empty()) {
      hold(std::move(item));
    } else {
      writing_ = &item;
      lk.unlock();
      const bool done = write_one(item);
      lk.lock();
      writing_ = nullptr;
      if (!done) hold(std::move(item));
    }
    ++written_;
    done_.notify_all();
  }
}

}  // namespace coloc::report
