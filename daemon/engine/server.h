// daemon/engine/server.h — colocd's engine: the listening socket, one epoll loop, the
// connections, and the glue between them and the broker, the process watcher and the reports.
//
// Everything runs on one thread. Each event (a datagram, a hang-up, a process exit, a timer)
// is handled to completion: decode, call the broker, then send the replies and record the
// events the broker handed back, then re-arm the deadline timer.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/broker.h"
#include "broker/priority_fifo_policy.h"
#include "config/config.h"
#include "engine/admin.h"
#include "engine/connection.h"
#include "engine/event_loop.h"
#include "engine/resume_state.h"
#include "report/job_recorder.h"
#include "report/report_store.h"
#include "util/result.h"
#include "util/unique_fd.h"
#include "watch/process_watcher.h"

namespace coloc::engine {

class Server {
 public:
  explicit Server(config::Config cfg);
  ~Server();

  /// Creates the state directory, takes its lock, binds the socket, loads the restart state and
  /// starts the process watcher. Errors name what failed; nothing is left listening then.
  Result<void> start();
  /// Serves until SIGINT or SIGTERM. Returns the process exit code.
  int run();

 private:
  using Nanos = broker::Nanos;

  Result<void> open_state_dir();
  Result<void> open_socket();
  Result<void> open_signals_and_timers();
  Nanos now() const;

  void on_accept();
  void on_connection_event(Connection& c, uint32_t events);
  void on_message(Connection& c, const unsigned char* data, size_t len);
  void on_register(Connection& c, const proto::Message& m);
  void on_admin(Connection& c, const proto::Message& m);
  void on_process_exit(const watch::Exit& e);
  void on_sample();
  /// Feeds the job's recorder a sample of each of its devices, summed over its processes'
  /// stats pages.
  void sample_job(const broker::Job& job, Nanos t);
  void sample_job(broker::JobSerial serial, Nanos t);
  void on_deadline();

  /// Sends an Error and closes the connection (after this event is handled).
  void refuse(Connection& c, proto::ErrorCode code, const std::string& text);
  /// Closes the connection after this event is handled; a job client leaves the books at once.
  void drop(Connection& c, const std::string& reason, std::optional<report::ProcessExit> exit = std::nullopt,
            bool warn = false);
  /// Sends the broker's replies, records its events, destroys dropped connections, re-arms timers.
  void settle();
  void send_reply(const broker::Reply& r);
  void on_broker_event(const broker::Event& e);
  void finalize_job(broker::JobSerial serial);
  void fold_stats(Connection& c);
  void rearm_deadline();
  void send_or_drop(Connection& c, const void* data, size_t len, std::vector<int> fds = {});

  config::Config cfg_;
  broker::PriorityFifoPolicy policy_;
  broker::Broker broker_;
  std::unique_ptr<EventLoop> loop_;
  UniqueFd listen_fd_, signal_fd_, sample_timer_, deadline_timer_, lock_fd_;
  ino_t socket_inode_ = 0;
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;  ///< by descriptor
  std::unordered_map<broker::ClientId, Connection*> by_client_;
  std::unordered_map<pid_t, std::vector<Connection*>> by_pid_;
  std::vector<int> doomed_;  ///< descriptors of connections to destroy in settle()
  std::map<broker::JobSerial, report::JobRecorder> recorders_;
  std::map<broker::JobSerial, Nanos> closing_;  ///< ended jobs waiting (briefly) for exit statuses
  std::map<pid_t, int> lingering_;  ///< watches kept after a hang-up, to learn the exit status
  std::map<uid_t, size_t> clients_per_uid_;
  report::ReportStore store_;
  ResumeState resume_;
  std::unique_ptr<watch::ProcessWatcher> watcher_;
  DaemonInfo info_;
  std::unique_ptr<Admin> admin_;
  uint64_t next_conn_id_ = 1;
  bool stop_ = false;
  Nanos armed_deadline_ = broker::kNever;  ///< what the deadline timer is set to
  std::vector<unsigned char> rx_;
};

}  // namespace coloc::engine
