// daemon/metrics/exporter.h — serves GET /metrics (Prometheus text format 0.0.4) on its own
// thread, from the latest snapshot the event loop published. The loop never waits for a scraper.
//
// The hand-off: a scrape whose snapshot is older than Limits::fresh (or than 20 times what the
// snapshot cost the loop to build, Snapshot::build_seconds, when that is longer) asks the loop for
// a new one (wanted_fd() becomes readable; the loop builds one and publish()es it) and waits for
// it at most Limits::publish_wait, then gets the latest there is. So colocd builds at most one
// snapshot per `fresh` however many scrapers come, spends at most 5% of its loop on them, and
// builds none while nobody scrapes.
//
// Every scraper is a stranger (the port may be reachable from the network): at most
// Limits::max_connections at once (the rest wait in the kernel's backlog; at the cap a newcomer
// takes the place of the oldest connection that has sent no whole request in Limits::idle_evict,
// so idle connections cannot keep a scraper out), a request head of at
// most Limits::max_request bytes, received within Limits::request_timeout, and the answer sent
// within Limits::response_timeout; then the connection is closed. One request per connection
// (Connection: close). Memory: the connections' request buffers plus one rendered text.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "metrics/exposition.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::metrics {

struct Limits {
  size_t max_connections = 64;
  size_t max_request = 8192;  ///< bytes of request line and headers
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds response_timeout{10000};
  /// At the connection cap, one still reading its request this long gives its place to a newcomer.
  std::chrono::milliseconds idle_evict{500};
  std::chrono::milliseconds fresh{250};         ///< a snapshot this young is served as it is (at least)
  std::chrono::milliseconds publish_wait{1000};  ///< the longest a scrape waits for a new one
};

/// What the exporter has done since it started (for tests and the log).
struct ExporterStats {
  uint64_t accepted = 0;
  uint64_t served = 0;        ///< 200 answers
  uint64_t bad_requests = 0;  ///< 4xx answers
  uint64_t timed_out = 0;     ///< connections closed at a deadline
  uint64_t evicted = 0;       ///< idle connections closed at the cap for a newcomer
  uint64_t snapshots_asked = 0;
};

class Exporter {
 public:
  /// Binds `listen` ("HOST:PORT", "[IPv6]:PORT"; HOST a name or address, PORT 0 = any free port)
  /// and starts the serving thread. Errors name the address: malformed, unresolvable, bind or
  /// listen failure (e.g. "127.0.0.1:9479: Address already in use").
  static Result<std::unique_ptr<Exporter>> start(const std::string& listen, Limits limits = {});
  /// Stops the thread and closes every connection.
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  /// The address bound, "HOST:PORT" with the port the kernel chose for 0.
  const std::string& address() const { return address_; }
  /// Readable when a scrape wants a fresh snapshot (an eventfd; the loop watches it).
  int wanted_fd() const { return wanted_.get(); }
  /// Clears wanted_fd(); true when a snapshot was asked for since the last call.
  bool take_wanted();
  /// Publishes a snapshot (the loop's thread); scrapes waiting get it. Never blocks on a scraper.
  void publish(std::shared_ptr<const Snapshot> s);
  ExporterStats stats() const;

 private:
  struct Conn;
  Exporter(UniqueFd listen, std::string address, Limits limits);
  void serve();
  /// The text of the latest snapshot (rendered once per snapshot), null when none yet.
  std::shared_ptr<const std::string> latest_text();

  UniqueFd listen_, wake_, wanted_;
  std::string address_;
  Limits limits_;
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> snapshot_;  ///< the latest published (mu_)
  std::chrono::steady_clock::time_point published_{};  ///< when (mu_)
  uint64_t generation_ = 0;                    ///< publish() count (mu_)
  bool asked_ = false;                         ///< a snapshot is asked for and not yet published (mu_)
  std::chrono::steady_clock::time_point asked_at_{};  ///< when (mu_)
  ExporterStats stats_;                        ///< (mu_)
  // The serving thread's own: the rendered text of snapshot generation text_gen_.
  std::shared_ptr<const std::string> text_;
  uint64_t text_gen_ = 0;
  std::shared_ptr<spdlog::logger> log_;  ///< taken on the starting thread (log::get is not for others)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace coloc::metrics
