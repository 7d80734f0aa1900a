#include "engine/server.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "broker/overhead.h"
#include "coloc/wire.h"
#include "device/nvml_reader.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"

namespace coloc::engine {

namespace {

constexpr broker::Nanos kExitStatusWait = 500'000'000;  // how long an ended job waits for exit statuses
constexpr int kMessagesPerWakeup = 64;          // fairness between busy connections

broker::BrokerConfig broker_config(const config::Config& c) {
  broker::BrokerConfig b;
  b.grant_step = c.grant_step;
  b.default_wait_timeout = c.wait_timeout;
  b.admission_wait_timeout = c.admission_timeout;
  b.backfill = c.backfill;
  b.headroom_fraction = c.headroom.fraction;
  b.headroom_bytes = c.headroom.bytes;
  b.max_per_user = c.max_per_user;
  return b;
}

/// "python3-4242": a job id for a process that did not name one.
std::string derived_job_id(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  std::string id;
  for (char c : comm) id += (c > 0x20 && c < 0x7f && c != '/' && c != '\\') ? c : '_';
  if (id.empty()) id = "process";
  id = id.substr(0, 40) + "-" + std::to_string(pid);
  return id;
}

report::ProcessExit exit_from_status(pid_t pid, std::optional<int> status, const char* source) {
  report::ProcessExit e;
  e.pid = pid;
  e.source = source;
  if (status) {
    if (WIFEXITED(*status)) e.exit_code = WEXITSTATUS(*status);
    else if (WIFSIGNALED(*status)) e.signal = WTERMSIG(*status);
  }
  return e;
}

template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

}  // namespace

Server::Server(config::Config cfg)
    : cfg_(std::move(cfg)),
      broker_(broker_config(cfg_), policy_),
      store_(cfg_.state_dir + "/reports"),
      resume_(cfg_.state_dir + "/clients"),
      job_states_(cfg_.state_dir + "/jobs"),
      rx_(proto::kMaxMessage) {
  gates_.set_scheduler(&scheduler_);
}

Server::~Server() {
  // Connections before the loop their callbacks live in.
  by_client_.clear();
  by_pid_.clear();
  conns_.clear();
  watcher_.reset();
}

broker::Nanos Server::now() const { return wire::now_ns(); }

// ---- start-up -----------------------------------------------------------------------------------

Result<void> Server::open_state_dir() {
  if (auto r = mkdir_p(cfg_.state_dir, 0755); !r) return r;
  std::string lock = cfg_.state_dir + "/colocd.lock";
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno("open " + lock);
  lock_fd_.reset(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    return Error{errno, "another colocd is using the state directory " + cfg_.state_dir + " (" + lock + " is locked)"};
  // The groups, by name, once at start: a name that is no group is an error now, not a silent
  // "nobody is a member" later.
  auto admin = config::lookup_group(cfg_, "admin_group");
  if (!admin) return admin.error();
  auto high = config::lookup_group(cfg_, "high_priority_group");
  if (!high) return high.error();
  const std::optional<gid_t> admin_gid = admin.value();
  info_.admin_gid = admin_gid;
  info_.admin_group = cfg_.admin_group;
  info_.high_priority_gid = high.value();
  info_.high_priority_group = cfg_.high_priority_group;
  if (auto r = store_.prepare(admin_gid ? int(*admin_gid) : -1); !r) return r;
  if (auto r = resume_.load(); !r) return r;
  // The devices' compute policies, as coloc policy last set them (a bad file: every device shares).
  for (const std::string& p : policies_.load()) log::get("engine")->error("{}", p);
  configure_policies();  // the config file's, under the stored ones
  policies_.apply(scheduler_);
  // The running jobs' report state of the previous run (server_restart.cpp).
  return load_saved_jobs();
}

Result<void> Server::open_listener() {
  Listener::Settings ls;
  ls.path = cfg_.socket;
  ls.max_per_user = cfg_.max_connections_per_user;
  ls.admin_gid = info_.admin_gid;
  auto l = Listener::open(
      ls, *loop_, [this](UniqueFd fd, const ucred& peer, bool exempt) { on_accept(std::move(fd), peer, exempt); },
      [this] { return make_room(); }, std::move(inherited_socket_));
  if (!l) return l.error();
  listener_ = std::move(l.value());
  info_.socket = listener_->settings().path;  // an inherited socket's own path
  listener_->set_after_events([this] { settle(); });
  log::get("engine")->info("at most {} connections per user other than root{}{}", listener_->cap(),
                           cfg_.admin_group.empty() ? "" : " and group " + cfg_.admin_group,
                           listener_->cap() < cfg_.max_connections_per_user
                               ? " (a quarter of what the descriptor limit leaves; max_connections_per_user is " +
                                     std::to_string(cfg_.max_connections_per_user) + ")"
                               : "");
  info_.connections = [this] {
    const ListenerCounters& k = listener_->counters();
    nlohmann::json per_uid = nlohmann::json::object();
    for (auto& [uid, n] : listener_->per_uid()) per_uid[std::to_string(uid)] = n;
    return nlohmann::json{{"open", conns_.size()},
                          {"per_uid", per_uid},
                          {"max_per_user", listener_->cap()},
                          {"accepted", k.accepted},
                          {"refused_cap", k.refused_cap},
                          {"refused_fd_limit", k.refused_limit},
                          {"made_room", made_room_},
                          {"accept_paused", k.paused},
                          {"hello_timeouts", hello_timeouts_},
                          {"socket_rebinds", k.rebinds},
                          {"stale_events", loop_->stale_events()},
                          {"log_lines_suppressed", log::peer_limiter().suppressed_total()}};
  };
  return {};
}

Result<void> Server::open_signals_and_timers() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return Error::from_errno("sigprocmask");
  ::signal(SIGPIPE, SIG_IGN);
  int sfd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) return Error::from_errno("signalfd");
  signal_fd_.reset(sfd);
  auto r = loop_->add(sfd, EPOLLIN, [this](uint32_t) {
    signalfd_siginfo si;
    while (::read(signal_fd_.get(), &si, sizeof si) == ssize_t(sizeof si)) {
      if (si.ssi_signo == SIGHUP) {
        reload_config();  // server_reload.cpp
        continue;
      }
      log::get("engine")->info("signal {}: stopping (jobs keep running on their grants)", si.ssi_signo);
      stop_ = true;
    }
  });
  if (!r) return r.error();

  int st = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  int dt = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (st < 0 || dt < 0) return Error::from_errno("timerfd_create");
  sample_timer_.reset(st);
  deadline_timer_.reset(dt);
  itimerspec its{};
  its.it_interval.tv_sec = time_t(cfg_.sample_interval / 1000000000);
  its.it_interval.tv_nsec = long(cfg_.sample_interval % 1000000000);
  its.it_value = its.it_interval;
  if (::timerfd_settime(st, 0, &its, nullptr) != 0) return Error::from_errno("timerfd_settime");
  if (auto r2 = loop_->add(st, EPOLLIN, [this](uint32_t) { on_sample(); }); !r2) return r2.error();
  if (auto r3 = loop_->add(dt, EPOLLIN, [this](uint32_t) { on_deadline(); }); !r3) return r3.error();
  return open_compute_timer();
}

Result<void> Server::start() {
  auto lg = log::get("engine");
  // Every connection is a descriptor: take what the hard limit allows, and say what it is.
  info_.fd_limit = raise_descriptor_limit();
  lg->info("file descriptor limit (RLIMIT_NOFILE): {}",
           info_.fd_limit == size_t(-1) ? std::string("unlimited") : std::to_string(info_.fd_limit));
  auto loop = EventLoop::create();
  if (!loop) return loop.error();
  loop_ = std::make_unique<EventLoop>(std::move(loop.value()));
  if (auto r = open_state_dir(); !r) return r;

  uint64_t epoch = 0;
  if (::getrandom(&epoch, sizeof epoch, 0) != ssize_t(sizeof epoch)) epoch = uint64_t(wall_ms());
  info_.epoch = epoch;
  info_.pid = ::getpid();
  info_.socket = cfg_.socket;
  info_.state_dir = cfg_.state_dir;
  info_.started = now();

  using Mode = watch::ProcessWatcher::Mode;
  Mode mode = cfg_.watcher == "bpf" ? Mode::kBpf : cfg_.watcher == "pidfd" ? Mode::kPidfd : Mode::kAuto;
  auto w = watch::ProcessWatcher::start(mode, *loop_, [this](const watch::Exit& e) { on_process_exit(e); });
  if (!w) return w.error();
  watcher_ = std::move(w.value());
  info_.watcher = watcher_->description();
  info_.unseen = [this](uint32_t dev) {
    return memory_reader_ && dev < unreadable_.size() && unreadable_[dev];
  };
  writer_ = std::make_unique<report::ReportWriter>(store_);
  writer_->set_retention(retention_of(cfg_));
  admin_ = std::make_unique<Admin>(broker_, gates_, scheduler_, recorders_, store_, info_);
  admin_->set_report_writer(writer_.get());
  admin_->set_policy_store(&policies_);
  admin_->set_canceller([this](const broker::Job& job, int sig, Nanos grace, const Caller& caller, bool admin, Nanos t) {
    return cancel_job(job, sig, grace, caller, admin, t);
  });
  admin_->set_suspender(
      [this](const broker::Job& job, const Caller& caller, bool admin, Nanos t) { return admin_suspend(job, caller, admin, t); },
      [this](const broker::Job& job, const Caller& caller, bool admin, Nanos t, bool* ended) {
        return admin_resume(job, caller, admin, t, ended);
      },
      [this](const broker::Job& job, Nanos t) { return suspension_json(job, t); });
  if (cfg_.history) {
    history::HistoryOptions hopts;
    hopts.runs_kept = cfg_.history_runs;
    hopts.max_per_user = cfg_.history_fingerprints;
    history_ = std::make_unique<history::HistoryStore>(cfg_.state_dir + "/history.db", hopts);
  }
  admin_->set_history(history_.get());
  info_.nvml_devices = [this]() -> std::optional<std::vector<broker::Uuid>> {
    return memory_reader_ ? memory_reader_->devices() : std::nullopt;
  };
  info_.gpu_share = [this](broker::JobSerial j, const broker::Uuid& d) { return gpu_share(j, d); };
  info_.outside_processes = [this](const broker::Uuid& d) { return outside_.find(d); };
  info_.unmet_device = [this](const broker::Uuid& d) -> std::optional<device::DeviceMemory> {
    auto it = unmet_.find(d);
    return it == unmet_.end() ? std::nullopt : std::optional(it->second);
  };
  if (!memory_reader_set_) {
    auto nvml = device::NvmlReader::open();
    if (nvml) {
      memory_reader_ = std::move(nvml.value());
      lg->info("reading each device's free memory through NVML every {} ms and when a request finds no room",
               cfg_.sample_interval / 1000000);
    } else {
      lg->warn("NVML is not available ({}): memory used outside coloc is estimated only from the clients' reports",
               nvml.error().message());
      info_.memory_reader_error = nvml.error().message();
    }
  }
  info_.memory_reader = memory_reader_ ? memory_reader_->name() : "";

  // `coloc policy all` holds for the devices NVML lists from the start (and compute_tick gives it
  // to each device a client brings later).
  if (memory_reader_)
    if (auto devs = memory_reader_->devices())
      for (const broker::Uuid& d : *devs) policies_.apply_new_device(d, scheduler_);
  warn_unknown_devices();
  if (auto r = open_signals_and_timers(); !r) return r;
  // The metrics port before the socket: a port in use stops colocd before it has bound (and
  // would otherwise leave) a socket that nobody serves.
  if (auto r = open_metrics(cfg_.metrics_listen); !r) return r;
  if (auto r = open_listener(); !r) return r;
  check_checkpoint_support();  // preempt = "auto": the answer comes through the loop

  if (size_t n = resume_.expected(); n > 0) {
    broker_.hold_until(now() + cfg_.resume_grace);
    rearm_deadline();
    lg->info("restart: waiting up to {:.1f} s for {} running process(es) to re-register before serving new requests",
             double(cfg_.resume_grace) / 1e9, n);
  }
  away_deadline_ = now() + cfg_.resume_grace;
  lg->info("colocd listening on {} (protocol {}, accepts {}..{}), state in {}, headroom {}, watcher {}", info_.socket,
           proto::kVersion, proto::kMinVersion, proto::kVersion, cfg_.state_dir,
           cfg_.headroom.bytes ? broker::mib(*cfg_.headroom.bytes)
                               : fmt::format("{:g}% of each device", cfg_.headroom.fraction * 100),
           watcher_->description());
  notifier_.ready(now(), service_status());  // Type=notify: serving from here on
  return {};
}

int Server::run() {
  auto lg = log::get("engine");
  while (!stop_) {
    Result<int> r = 0;
    try {
      r = loop_->run_once(-1);
    } catch (const std::exception& e) {  // nothing should throw here; if it does, stop cleanly
      lg->critical("unexpected error: {}; stopping (jobs keep running on their grants)", e.what());
      return 1;
    }
    if (!r) {
      lg->critical("event loop: {}", r.error().message());
      return 1;
    }
  }
  notifier_.stopping("stopping: jobs keep running on their grants");
  if (auto r = resume_.save_if_dirty(); !r) lg->warn("{}", r.error().message());
  // Ended jobs still waiting briefly for an exit status get their report now (status unknown).
  while (!closing_.empty()) finalize_job(closing_.begin()->first);
  persist_jobs(now(), true);  // the jobs keep running: the next daemon continues their reports
  say_suspended_at_stop();    // suspended jobs stay so: how to restore each by hand
  listener_->unlink_path();
  writer_.reset();  // the reports still queued are written first
  lg->info("colocd stopped");
  return 0;
}

// ---- connections --------------------------------------------------------------------------------

void Server::on_accept(UniqueFd fd, const ucred& peer, bool exempt) {
  const uint64_t id = next_conn_id_++;
  const Nanos t = now();
  auto c = std::make_unique<Connection>(std::move(fd), peer, id, exempt);
  auto token = loop_->add(c->fd(), EPOLLIN | EPOLLRDHUP, [this, id](uint32_t ev) {
    if (Connection* conn = find_connection(id)) on_connection_event(*conn, ev);
    settle();
  });
  if (!token) {
    log::limited(log::get("engine"), spdlog::level::warn, "watch", "cannot watch a new connection: {}",
                 token.error().message());
    listener_->connection_closed(peer.uid);
    return;
  }
  c->token = token.value();
  conns_.emplace(id, std::move(c));
  hellos_.emplace_back(t, id);
}

Connection* Server::find_connection(uint64_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second.get();
}

void Server::destroy(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  (void)it->second->flush();  // best effort: an Error message explains the close
  loop_->remove(it->second->token);
  const uid_t uid = it->second->uid();
  conns_.erase(it);
  listener_->connection_closed(uid);
}

bool Server::descriptors_for(const Connection& c, int n) {
  std::vector<UniqueFd> probes;
  while (int(probes.size()) < n) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      probes.emplace_back(fd);
      continue;
    }
    if ((errno != EMFILE && errno != ENFILE) || !c.exempt() || !make_room()) return false;
  }
  return true;  // the probes close here: n descriptors are free for the caller
}

bool Server::make_room() {
  auto doomed = [&](uint64_t id) { return std::find(doomed_.begin(), doomed_.end(), id) != doomed_.end(); };
  for (auto& [at, id] : hellos_) {
    Connection* c = find_connection(id);
    if (!c || c->exempt() || c->role != Connection::Role::kNew || doomed(id)) continue;
    log::limited(log::get("engine"), spdlog::level::info, "make room uid " + std::to_string(c->uid()),
                 "closing the unregistered connection of {} to let a root or admin connection in", c->describe());
    destroy(id);
    ++made_room_;
    return true;
  }
  // None: the newest connection of the user (not root, not admin) that holds the most, if it
  // holds more than one. A job connection closed so re-registers later, as after a restart.
  uid_t heaviest = 0;
  size_t most = 1;
  for (auto& [uid, n] : listener_->per_uid())
    if (uid != 0 && n > most) {
      heaviest = uid;
      most = n;
    }
  if (most <= 1) return false;
  Connection* pick = nullptr;
  for (auto& [id, c] : conns_)
    if (c->uid() == heaviest && !c->exempt() && !doomed(id) && (!pick || id > pick->id())) pick = c.get();
  if (!pick) return false;
  log::limited(log::get("engine"), spdlog::level::warn, "make room uid " + std::to_string(heaviest),
               "at the descriptor limit: closing the newest of the {} connections of uid {} ({}) to let a root or "
               "admin connection in",
               most, heaviest, pick->describe());
  const uint64_t id = pick->id();
  drop(*pick, "closed to make room for a root or admin connection", std::nullopt, false);
  destroy(id);
  ++made_room_;
  return true;
}

void Server::expire_hellos(Nanos t) {
  while (!hellos_.empty()) {
    auto [at, id] = hellos_.front();
    Connection* c = find_connection(id);
    if (c && c->role == Connection::Role::kNew) {
      if (t - at < cfg_.hello_timeout) break;
      // What it sent meanwhile counts (a busy colocd may not have read it yet).
      on_connection_event(*c, EPOLLIN);
      if (c->role == Connection::Role::kNew &&
          std::find(doomed_.begin(), doomed_.end(), id) == doomed_.end()) {
        ++hello_timeouts_;
        log::limited(log::get("engine"), spdlog::level::info, "hello uid " + std::to_string(c->uid()),
                     "closing the connection of {}: no first message within {} ms", c->describe(),
                     cfg_.hello_timeout / 1000000);
        drop(*c, "no first message in time");
      }
    }
    hellos_.pop_front();
  }
}

void Server::send_or_drop(Connection& c, const void* data, size_t len, std::vector<int> fds) {
  if (std::find(doomed_.begin(), doomed_.end(), c.id()) != doomed_.end()) return;
  auto r = c.send(data, len, std::move(fds));
  if (!r) {
    drop(c, r.error().message(), std::nullopt, true);
    return;
  }
  if (c.has_queued()) (void)loop_->modify(c.token, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
}

void Server::on_connection_event(Connection& c, uint32_t events) {
  auto doomed = [&] { return std::find(doomed_.begin(), doomed_.end(), c.id()) != doomed_.end(); };
  if (events & EPOLLOUT) {
    auto f = c.flush();
    if (!f) {
      drop(c, f.error().message());
      return;
    }
    if (f.value()) (void)loop_->modify(c.token, EPOLLIN | EPOLLRDHUP);
  }
  for (int i = 0; i < kMessagesPerWakeup && !doomed(); ++i) {
    Received r = c.receive(rx_.data(), rx_.size());
    if (r.unasked_fds > 0)
      log::limited(log::get("engine"), spdlog::level::warn, "fds uid " + std::to_string(c.uid()),
                   "{} sent {} file descriptor(s) unasked: closed", c.describe(), r.unasked_fds);
    switch (r.kind) {
      case Received::Kind::kNone:
        if (events & (EPOLLHUP | EPOLLERR)) drop(c, "connection closed");
        return;
      case Received::Kind::kHangup:
        drop(c, "hung up");
        return;
      case Received::Kind::kOversized:
        refuse(c, proto::ErrorCode::kMalformed,
               "message larger than " + std::to_string(proto::kMaxMessage) + " bytes");
        return;
      case Received::Kind::kError:
        drop(c, std::string("receive failed: ") + std::strerror(r.err), std::nullopt, true);
        return;
      case Received::Kind::kMessage:
        on_message(c, rx_.data(), r.len);
        break;
    }
  }
}

void Server::refuse(Connection& c, proto::ErrorCode code, const std::string& text) {
  auto e = zeroed<proto::ErrorMsg>();
  e.code = uint32_t(code);
  e.min_version = proto::kMinVersion;
  e.max_version = proto::kVersion;
  std::string clean;
  for (char ch : text) clean += (ch >= 0x20 && ch != 0x7f) ? ch : ' ';
  proto::set_string(e.text, clean.c_str());
  unsigned char buf[sizeof e];
  uint16_t version = c.version ? c.version : proto::kVersion;
  if (proto::Encoded enc = proto::encode(e, 0, buf, sizeof buf, version); enc.status) (void)c.send(buf, enc.size);
  drop(c, text, std::nullopt, true);
}

void Server::drop(Connection& c, const std::string& reason, std::optional<report::ProcessExit> exit, bool warn) {
  if (std::find(doomed_.begin(), doomed_.end(), c.id()) != doomed_.end()) return;
  doomed_.push_back(c.id());
  auto lg = log::get("engine");
  if (warn)
    log::limited(lg, spdlog::level::warn, "closing uid " + std::to_string(c.uid()), "closing connection of {}: {}",
                 c.describe(), reason);
  else lg->debug("closing connection of {}: {}", c.describe(), reason);
  if (c.role != Connection::Role::kJob || !c.client) return;
  const broker::ClientId id = *c.client;
  look_device_time(now(), id);  // its last work, into its job's device time
  sample_job(c.job, now());  // its last state, before its counters fold away
  auto rec = recorders_.find(c.job);
  fold_stats(c);
  const broker::Client* bc = broker_.find_client(id);
  const bool anchor = bc && bc->anchor;
  if (rec != recorders_.end()) {
    // The anchor (coloc run) is no process of the job's: its goodbye carries the command's status.
    if (anchor) {
      // Without a Goodbye (coloc run killed), its command died with it: the job's first process's
      // own status is the truer one, so the anchor's exit is not taken for the command's.
      if (c.said_goodbye && c.exit_status) rec->second.command_exited(*c.exit_status);
    } else if (exit) {
      rec->second.process_exited(*exit);
    } else if (c.said_goodbye) {
      rec->second.process_exited({c.pid(), c.exit_status, std::nullopt, "goodbye"});
    }
  }
  // The books first: the memory is free for others from this moment.
  broker_.remove_client(id, now());
  gates_.remove_client(id);
  device_time_.forget_client(id);
  compute_dirty_ = true;
  by_client_.erase(id);
  auto& same_pid = by_pid_[c.pid()];
  same_pid.erase(std::remove(same_pid.begin(), same_pid.end(), &c), same_pid.end());
  if (same_pid.empty()) by_pid_.erase(c.pid());
  resume_.remove(c.pid());
  const watch::ProcKey key{c.pid(), c.start_time};
  if (exit || c.said_goodbye || anchor) {
    watcher_->unwatch(key);
  } else {  // keep watching briefly: its exit status belongs in the report
    Linger& l = lingering_[c.pid()];
    if (l.count > 0 && l.start != key.start) {  // an earlier process with that pid: let it go
      for (; l.count > 0; --l.count) watcher_->unwatch({c.pid(), l.start});
    }
    l.start = key.start;
    ++l.count;
  }
  log::limited(lg, spdlog::level::info, "left uid " + std::to_string(c.uid()), "process {} of job {} left ({})",
               c.pid(), rec != recorders_.end() ? rec->second.key().str() : "?", reason);
  c.client.reset();
}

void Server::fold_stats(Connection& c) {
  auto rec = recorders_.find(c.job);
  const broker::Client* client = broker_.find_client(*c.client);
  if (rec == recorders_.end() || !client || !c.pages) return;
  for (uint32_t s = 0; s < pages::kSlots; ++s) {
    if (!client->slots[s].attached) continue;
    const pages::StatsSlot& st = c.pages->stats()->slots[s];
    // (Its busy_ns is not folded: the job's device time is the union device_time_ keeps.)
    const report::Counters k =
        report::counters_of(*c.pages->stats(), s, pages::layout_for_protocol(c.version) >= pages::kGatedLayout);
    const broker::Device& d = broker_.devices()[client->slots[s].device];
    rec->second.fold(d.uuid, k, std::min(st.peak.load(std::memory_order_relaxed), d.capacity));
  }
}

// ---- messages -----------------------------------------------------------------------------------

void Server::on_message(Connection& c, const unsigned char* data, size_t len) {
  proto::Header h;
  proto::Status hs = proto::decode_header(data, len, &h);
  if (!hs) {
    if (hs.error == proto::Error::kBadVersion) {
      refuse(c, proto::ErrorCode::kVersion,
             "protocol version " + std::to_string(h.version) + " is not supported: colocd speaks versions " +
                 std::to_string(proto::kMinVersion) + " to " + std::to_string(proto::kVersion));
    } else {
      refuse(c, proto::ErrorCode::kMalformed, std::string("malformed message: ") + proto::error_name(hs.error) + " (" + hs.field + ")");
    }
    return;
  }
  proto::Message m;
  if (proto::Status s = proto::decode(data, len, proto::Receiver::kDaemon, &m); !s) {
    refuse(c, proto::ErrorCode::kMalformed,
           std::string("malformed ") + proto::type_name(h.type) + ": " + proto::error_name(s.error) + " (" + s.field + ")");
    return;
  }
  if (c.role != Connection::Role::kNew && h.version != c.version) {
    refuse(c, proto::ErrorCode::kOrder, "protocol version changed on a connection");
    return;
  }
  const broker::Nanos t = now();
  switch (m.type()) {
    case proto::MsgType::kRegister:
      if (c.role != Connection::Role::kNew) return refuse(c, proto::ErrorCode::kOrder, "Register sent twice or on an admin connection");
      return on_register(c, m);
    case proto::MsgType::kAdmin:
      if (c.role == Connection::Role::kJob) return refuse(c, proto::ErrorCode::kOrder, "Admin on a job's connection");
      c.role = Connection::Role::kAdmin;
      c.version = h.version;
      return on_admin(c, m);
    default:
      break;
  }
  if (c.role != Connection::Role::kJob || !c.client)
    return refuse(c, proto::ErrorCode::kOrder, std::string(proto::type_name(h.type)) + " before Register");
  const broker::ClientId id = *c.client;
  switch (m.type()) {
    case proto::MsgType::kAttach: {
      std::vector<broker::AttachRequest> reqs;
      for (uint32_t i = 0; i < m.body.attach.n_devices; ++i) {
        const proto::AttachDevice& d = m.body.attach.devices[i];
        reqs.push_back({broker::Uuid::from(d.device.uuid), d.device.capacity, d.device.physical_free, d.request});
        reqs.back().cap = d.cap == 0 ? broker::kNoLimit : d.cap;
        if (const broker::Client* cl = broker_.find_client(id)) {
          const HistoryFootprint f = history_footprint(cl->job, reqs.back().uuid, d.device.capacity);
          reqs.back().estimate = f.estimate;
          reqs.back().run = f.run;
        }
        // The device's own figures whenever colocd can read it: a client's are only its word.
        if (memory_reader_)
          if (auto mem = memory_reader_->memory(reqs.back().uuid)) {
            reqs.back().capacity = mem->total;
            reqs.back().physical_free = mem->free;
            reqs.back().measured = true;
          }
      }
      note_request(id, h.seq, metrics::Request::kAttach, t);
      broker_.attach(id, h.seq, reqs, t);
      break;
    }
    case proto::MsgType::kGrow:
      note_request(id, h.seq, metrics::Request::kGrow, t);
      broker_.grow(id, h.seq, m.body.grow.slot, m.body.grow.need, m.body.grow.physical_free, t, m.body.grow.in_use);
      break;
    case proto::MsgType::kShrink:
      broker_.shrink(id, m.body.shrink.slot, m.body.shrink.grant, t);
      break;
    case proto::MsgType::kDriverOom:
      broker_.driver_oom(id, m.body.driver_oom.slot, m.body.driver_oom.request, m.body.driver_oom.in_use,
                         m.body.driver_oom.physical_free, t);
      break;
    case proto::MsgType::kContextFootprint: {
      const proto::ContextFootprintMsg& f = m.body.context_footprint;
      broker::Bytes free = f.physical_free;
      bool measured = false;
      // The device's own figure whenever colocd can read it: the client's is only its word. Read
      // only for the footprint that counts (one per Attach), however many a client sends.
      const broker::Client* cl = broker_.find_client(id);
      if (memory_reader_ && cl && cl->slots[f.slot].attached && cl->slots[f.slot].footprint_due)
        if (auto mem = memory_reader_->memory(broker_.devices()[cl->slots[f.slot].device].uuid)) {
          free = mem->free;
          measured = true;
        }
      broker_.context_footprint(id, f.slot, free, f.in_use, measured, t);
      break;
    }
    case proto::MsgType::kCancel:
      broker_.cancel(id, m.body.cancel.target_seq, t);
      break;
    case proto::MsgType::kGoodbye:
      c.said_goodbye = true;
      if (m.body.goodbye.has_status) c.exit_status = m.body.goodbye.exit_status;
      break;
    default:
      break;
  }
  // A request found no room: the outside-coloc estimate may be stale (nobody reported since
  // that memory was freed). Ask the device; a lower figure serves the waiter at once.
  for (uint32_t dev : broker_.take_short_devices()) read_device_memory(dev, t, true);
  // Grants change at requests: sample the job there too, so short jobs have a timeline.
  sample_job(c.job, t);
}

void Server::on_register(Connection& c, const proto::Message& m) {
  const proto::RegisterMsg& r = m.body.reg;
  auto lg = log::get("engine");
  // A registration costs three descriptors (two pages, a pidfd). At the descriptor limit, root and
  // admin peers get them from unregistered connections of others (Listener::MakeRoom); anyone
  // else is closed unanswered, which its client takes for a busy colocd (it tries again, and never
  // runs outside the books meanwhile).
  auto out_of_fds = [](const Error& e) { return e.err == EMFILE || e.err == ENFILE; };
  if (!descriptors_for(c, 4))
    return drop(c, "no file descriptor left for its registration (closed unanswered: it tries again)", std::nullopt, true);
  auto pages = ClientPages::create(info_.epoch, pages::layout_for_protocol(m.h.version));
  if (!pages && out_of_fds(pages.error()))
    return drop(c, pages.error().message() + " (closed unanswered: it tries again)", std::nullopt, true);
  if (!pages) return refuse(c, proto::ErrorCode::kInternal, pages.error().message());
  if (!pages.value().future_write_sealed())
    lg->warn("this kernel cannot seal control pages against writing (F_SEAL_FUTURE_WRITE, Linux 5.1)");
  // The process is named by pid and start time from here on: its pid may be reused after it dies.
  auto start_time = process_start_time(c.pid());
  if (!start_time) return drop(c, "process " + std::to_string(c.pid()) + " is already gone");
  c.start_time = *start_time;
  auto w = watcher_->watch({c.pid(), c.start_time});
  if (!w && out_of_fds(w.error()))
    return drop(c, w.error().message() + " (closed unanswered: it tries again)", std::nullopt, true);
  if (!w) return drop(c, "process " + std::to_string(c.pid()) + " is already gone");
  const broker::Nanos t = now();
  broker::ClientSpec spec;
  spec.uid = c.uid();
  spec.pid = c.pid();
  spec.job_id = r.job[0] ? std::string(r.job) : derived_job_id(c.pid());
  spec.priority = proto::Priority(r.priority);
  spec.on_full = proto::OnFull(r.on_full);
  spec.limit = r.limit;
  spec.wait_timeout = r.wait_timeout_ns;
  spec.anchor = (r.flags & proto::kRegAnchor) != 0;
  spec.estimate = (r.flags & proto::kRegEstimate) ? r.estimate : 0;  // (v10; decode refuses it below)
  spec.age = *start_time;
  const bool resume = (r.flags & proto::kRegResume) != 0;
  // A job that was running when the previous daemon stopped keeps the limit and priority the
  // daemon last gave it (a `coloc set` survives), not the ones its environment asked for.
  std::optional<report::SavedJob> saved = claim_saved(spec, start_time, resume);
  // Priority high buys device time: it is granted to root and the admin and high-priority groups
  // only. Anyone else asking for it registers as normal (a lower one is always theirs to ask for).
  // A priority restored from a saved state was granted before, and holds.
  const proto::Priority asked = spec.priority;
  const bool high_refused = asked == proto::Priority::kHigh && !saved &&
                            !admin_->may_be_high(Caller{c.uid(), c.gid(), c.groups()});
  if (high_refused) spec.priority = proto::Priority::kNormal;
  if (saved) {
    spec.limit = saved->limit;
    for (proto::Priority p : {proto::Priority::kBestEffort, proto::Priority::kNormal, proto::Priority::kHigh})
      if (saved->priority == proto::priority_name(p)) spec.priority = p;
  }
  c.pages = std::make_unique<ClientPages>(std::move(pages.value()));
  const broker::ClientId id = broker_.add_client(spec, c.pages->control(), c.pages->stats(), t);
  if (resume) {
    std::vector<broker::ResumeEntry> ledger;
    for (uint32_t i = 0; i < r.n_ledger; ++i) {
      const proto::LedgerEntry& e = r.ledger[i];
      // The limit it saw on the device: where it is below the job's (saved, or the Register's)
      // it was a cap there, and holds there again (Broker::resume).
      ledger.push_back({broker::Uuid::from(e.device.uuid), e.device.capacity, e.device.physical_free, e.in_use, e.grant,
                        e.limit});
      ledger.back().cap = e.cap == 0 ? broker::kNoLimit : e.cap;
      ledger.back().overhead = e.overhead;
      if (memory_reader_)
        if (auto mem = memory_reader_->memory(ledger.back().uuid)) {
          ledger.back().capacity = mem->total;
          ledger.back().physical_free = mem->free;
          ledger.back().measured = true;
          // What the driver holds for the process there: the most of its ledger that is known
          // to be in use (Broker::resume).
          if (auto procs = memory_reader_->processes(ledger.back().uuid); procs && pids_are_ours(*procs)) {
            ledger.back().driver_used = 0;
            for (const device::ProcessMemory& p : *procs)
              if (p.pid == c.pid()) ledger.back().driver_used = p.used;
          }
        }
    }
    // A process the previous colocd had registered (its saved clients): its ledger is believed.
    broker_.resume(id, ledger, t, start_time && resume_.is_expected(c.pid(), *start_time));
  }
  const broker::Client* client = broker_.find_client(id);
  const broker::Job& job = broker_.jobs().at(client->job);
  // Lowered: it asked for high, may not have it, and its job runs lower (a job an admin raised to
  // high, which it joins, stays high).
  const bool lowered = high_refused && job.priority < asked;
  if (lowered)
    log::limited(lg, spdlog::level::warn, "priority uid " + std::to_string(c.uid()),
                 "{} asked for priority high, which is for root and {}: job {} runs as {}", c.describe(),
                 admin_->high_priority_holders(), job.key.str(), proto::priority_name(job.priority));
  c.role = Connection::Role::kJob;
  c.version = m.h.version;
  c.client = id;
  c.job = job.serial;
  // Its connection dropped and its job ended meanwhile: a pause holds for the job it starts anew.
  if (resume && !saved && gates_.inherit(job.serial, job.key, t))
    lg->info("job {}: still paused (a process of it came back after its connection dropped)", job.key.str());
  gates_.add_client(id, job.serial, c.pages->control(), pages::layout_for_protocol(m.h.version), c.pages->stats(),
                    c.pid());
  compute_dirty_ = true;
  by_client_[id] = &c;
  by_pid_[c.pid()].push_back(&c);
  if (!spec.anchor) {  // an anchor does not re-register after a restart: none is expected back
    resume_.add(c.pid(), start_time.value_or(0));
    resume_.settle(c.pid());
  }
  if (saved) continue_saved(job, *saved, t);  // its report and its pause, from before a restart
  if (!recorders_.count(job.serial)) {
    std::string command = r.cmdline[0] ? std::string(r.cmdline)
                                       : (m.h.version == 1 ? "(unknown: protocol v1 client)" : "(unknown)");
    // A process coming back after a restart that left no saved state: the job started no later
    // than the process did.
    const int64_t wall_now = wall_ms();
    auto started = resume && start_time ? start_on_daemon_clocks(*start_time, t, wall_now) : std::make_pair(t, wall_now);
    recorders_.emplace(std::piecewise_construct, std::forward_as_tuple(job.serial),
                       std::forward_as_tuple(job.serial, job.key, user_name(job.key.uid), command, r.cmdline_hash,
                                             proto::priority_name(job.priority), started.first, started.second));
    // Not from a process coming back after a restart without its job's saved state: under
    // `coloc run` its command is not the job's (the anchor's, which does not re-register).
    if (!resume) note_fingerprint(job, r, m.h.version, command);
  }
  // Its step within the job (v11, COLOC_STEP; decode refuses the flag below v11, and a step without it).
  if (!spec.anchor) recorders_.at(job.serial).add_process(c.pid(), (r.flags & proto::kRegStep) ? std::string(r.step) : "");
  if (r.flags & proto::kRegStep) slurm_jobs_.insert(job.serial);  // only the Slurm plugin sets a step

  auto reply = zeroed<proto::RegisterReplyMsg>();
  reply.epoch = info_.epoch;
  reply.limit = job.limit;
  reply.grant_step = broker_.config().grant_step;
  reply.n_slots = resume ? r.n_ledger : 0;
  reply.daemon_version = proto::kVersion;
  if (c.version >= 8) {  // an older client knows these bytes as reserved (zero)
    reply.granted_priority = uint8_t(uint8_t(job.priority) + 1);
    reply.priority_flags = lowered ? proto::kPriorityLowered : 0;
  }
  proto::set_string(reply.job, job.key.id.c_str());
  unsigned char buf[sizeof reply];
  proto::Encoded enc = proto::encode(reply, m.h.seq, buf, sizeof buf, c.version);
  if (!enc.status) return refuse(c, proto::ErrorCode::kInternal, "could not encode RegisterReply");
  send_or_drop(c, buf, enc.size, {c.pages->control_fd(), c.pages->stats_fd()});
  c.pages->close_fds();  // sent (or dup'ed into the queue); the mappings keep the pages
  log::limited(lg, spdlog::level::info, "register uid " + std::to_string(c.uid()),
           "{} registered{}{} as job {} (limit {}, priority {}, on full: {}){}", c.describe(),
           resume ? " again" : "", spec.anchor ? " (the job's anchor)" : "", job.key.str(),
           broker::mib(job.limit),
           proto::priority_name(job.priority), job.on_full == proto::OnFull::kWait ? "wait" : "fail",
           m.h.version < proto::kVersion ? " [protocol v" + std::to_string(m.h.version) + "]" : "");
}

void Server::on_admin(Connection& c, const proto::Message& m) {
  Caller caller{c.uid(), c.gid(), c.groups()};
  AdminAnswer a;
  try {
    a = admin_->handle(m.body.admin, caller, now());
    // A pause, a weight or a policy may have changed: the gates follow before the answer goes.
    // (Only when it was done: a refused request costs no tick.)
    if (a.status == proto::AdminStatus::kOk && m.body.admin.op >= uint32_t(proto::AdminOp::kSet) &&
        m.body.admin.op != uint32_t(proto::AdminOp::kReport))
      compute_tick(now());
  } catch (const std::exception& e) {  // e.g. a report file that is not what we wrote
    a = {proto::AdminStatus::kInternal, std::string("colocd could not answer: ") + e.what()};
    log::limited(log::get("engine"), spdlog::level::err, "admin error", "admin request from {}: {}", c.describe(),
                 e.what());
  }
  if (a.status != proto::AdminStatus::kOk)
    log::limited(log::get("engine"), spdlog::level::info, "admin uid " + std::to_string(c.uid()),
                 "admin request from {} refused: {}", c.describe(), a.text);
  else if (proto::AdminOp op = proto::AdminOp(m.body.admin.op);
           op == proto::AdminOp::kSet || op == proto::AdminOp::kPause || op == proto::AdminOp::kResume ||
           op == proto::AdminOp::kSuspend)
    persist_jobs(now(), false, false);  // a new limit, priority or pause outlives a daemon killed right after
  std::vector<unsigned char> buf(proto::kMaxMessage);
  size_t off = 0;
  do {
    size_t n = std::min(proto::kAdminChunk, a.text.size() - off);
    auto chunk = zeroed<proto::AdminReplyMsg>();
    chunk.status = uint32_t(a.status);
    chunk.flags = off + n < a.text.size() ? proto::kAdminMore : 0;
    proto::Encoded enc = proto::encode_admin_reply(chunk, a.text.data() + off, n, m.h.seq, buf.data(), buf.size(), c.version);
    if (!enc.status) return refuse(c, proto::ErrorCode::kInternal, "could not encode AdminReply");
    send_or_drop(c, buf.data(), enc.size);
    off += n;
  } while (off < a.text.size());
}

// ---- broker outputs -----------------------------------------------------------------------------

void Server::send_reply(const broker::Reply& r) {
  auto it = by_client_.find(r.client);
  if (it == by_client_.end()) return;  // gone meanwhile
  Connection& c = *it->second;
  if (r.kind == broker::Reply::Kind::kAttach) {
    auto m = zeroed<proto::AttachReplyMsg>();
    m.outcome = uint32_t(r.granted ? proto::Outcome::kGranted : proto::Outcome::kRefused);
    m.reason = uint32_t(proto::reason_for_version(r.reason, c.version));
    m.waited_ns = r.waited;
    if (r.granted) {
      m.n_devices = uint32_t(r.slots.size());
      for (size_t i = 0; i < r.slots.size(); ++i) m.devices[i] = {r.slots[i].slot, 0, r.slots[i].grant};
    }
    unsigned char buf[sizeof m];
    proto::Encoded enc = proto::encode(m, r.seq, buf, sizeof buf, c.version);
    if (enc.status) send_or_drop(c, buf, enc.size);
    if (r.waited == 0) note_answer(r);
  } else {
    auto m = zeroed<proto::GrowReplyMsg>();
    m.outcome = uint32_t(r.granted ? proto::Outcome::kGranted : proto::Outcome::kRefused);
    m.reason = uint32_t(proto::reason_for_version(r.reason, c.version));
    m.slot = r.slot;
    m.grant = r.grant;
    m.limit = r.limit;
    m.waited_ns = r.waited;
    unsigned char buf[sizeof m];
    proto::Encoded enc = proto::encode(m, r.seq, buf, sizeof buf, c.version);
    if (enc.status) send_or_drop(c, buf, enc.size);
    if (r.waited == 0) note_answer(r);
  }
}

void Server::on_broker_event(const broker::Event& e) {
  metrics_.on_event(e);
  if (e.kind == broker::Event::Kind::kJobEnded) forget_suspension(e.job, e.at);
  auto rec = recorders_.find(e.job);
  if (rec == recorders_.end()) return;
  if (e.kind != broker::Event::Kind::kJobEnded) {
    // A device the job waits for (or was refused on) is in the books with the capacity its
    // Attach gave: the report shows it before admission too.
    if (e.kind == broker::Event::Kind::kWaitBegin || e.kind == broker::Event::Kind::kRefused)
      for (const broker::Device& d : broker_.devices())
        if (d.uuid == e.device) rec->second.set_capacity(d.uuid, d.capacity);
    rec->second.on_event(e);
    return;
  }
  rec->second.finish(now(), wall_ms());
  bool waiting_for_exit = false;
  for (pid_t pid : rec->second.pending_exits()) waiting_for_exit |= lingering_.count(pid) > 0;
  if (waiting_for_exit) closing_[e.job] = now() + kExitStatusWait;
  else finalize_job(e.job);
}

void Server::finalize_job(broker::JobSerial serial) {
  closing_.erase(serial);
  slurm_jobs_.erase(serial);
  auto rec = recorders_.find(serial);
  if (rec == recorders_.end()) return;
  for (pid_t pid : rec->second.pending_exits()) {
    rec->second.process_exited({pid, std::nullopt, std::nullopt, "hangup"});
    if (auto l = lingering_.find(pid); l != lingering_.end()) {
      for (int i = 0; i < l->second.count; ++i) watcher_->unwatch({pid, l->second.start});
      lingering_.erase(l);
    }
  }
  rec->second.close_restart_waits();  // requests open at a restart that never came back
  restart_waits_.erase(serial);
  // Written on the writer's thread: the loop does not wait for the disk (report_writer.h).
  writer_->submit(rec->second.key().id, rec->second.key().str(), rec->second.to_json(now()).dump(1));
  record_history(serial);  // its run, for the next one's admission (queued to the history's thread)
  if (!broker_.find_job(rec->second.key())) job_states_.remove(rec->second.key());  // (not a new run of the same id)
  persisted_.erase(serial);
  continued_.erase(serial);
  gates_.forget_job(serial, now());
  scheduler_.forget_job(serial);
  device_time_.forget_job(serial);
  recorders_.erase(rec);
}

void Server::settle() {
  // Replies and events can cascade (a drop frees memory, which serves a waiter, whose reply
  // fails to send, which drops another connection...): loop until everything is quiet.
  for (int round = 0; round < 1000; ++round) {
    for (broker::JobSerial j : broker_.take_restores()) start_restore(j);  // may answer at once
    auto replies = broker_.take_replies();
    auto events = broker_.take_events();
    // A device just attached may be timesliced: its gate is written before the reply goes out.
    for (const broker::Reply& r : replies) compute_dirty_ |= r.kind == broker::Reply::Kind::kAttach && r.granted;
    if (compute_dirty_) compute_tick(now());
    for (const broker::Reply& r : replies) send_reply(r);
    for (const broker::Event& e : events) on_broker_event(e);
    if (doomed_.empty() && replies.empty() && events.empty()) break;
    std::vector<uint64_t> doomed;
    doomed.swap(doomed_);
    for (uint64_t id : doomed) destroy(id);
  }
  rtt_pending_.clear();  // requests not answered by now wait: no round trip of theirs is measured
  preempt_check(now());  // a high job that waits for memory may suspend best-effort work
  rearm_deadline();
}

void Server::rearm_deadline() {
  broker::Nanos t = broker_.next_deadline();
  for (auto& [serial, deadline] : closing_) t = std::min(t, deadline);
  for (const Kill& k : kills_) t = std::min(t, k.at);
  if (t == armed_deadline_) return;  // most messages change no deadline: spare the system call
  armed_deadline_ = t;
  itimerspec its{};
  if (t != broker::kNever) {
    t = std::max<broker::Nanos>(t, 1);
    its.it_value.tv_sec = time_t(t / 1000000000);
    its.it_value.tv_nsec = long(t % 1000000000);
  }
  ::timerfd_settime(deadline_timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

// ---- time and processes ---------------------------------------------------------------------------

void Server::on_deadline() {
  uint64_t n;
  while (::read(deadline_timer_.get(), &n, sizeof n) == ssize_t(sizeof n)) {
  }
  armed_deadline_ = broker::kNever;  // fired: disarmed
  const broker::Nanos t = now();
  broker_.tick(t);
  std::vector<broker::JobSerial> due;
  for (auto& [serial, deadline] : closing_)
    if (deadline <= t) due.push_back(serial);
  for (broker::JobSerial s : due) finalize_job(s);
  kill_due(t);
  settle();
}

void Server::on_process_exit(const watch::Exit& e) {
  report::ProcessExit info = exit_from_status(e.pid, e.wait_status, e.source);
  if (auto l = lingering_.find(e.pid); l != lingering_.end() && l->second.start == e.start)
    lingering_.erase(l);  // the watcher has let go of it
  // Only the connections of the process that exited: a later process may hold its pid already.
  std::vector<Connection*> conns;
  if (auto it = by_pid_.find(e.pid); it != by_pid_.end())
    for (Connection* c : it->second)
      if (c->start_time == e.start) conns.push_back(c);
  // The exit can be noticed before the socket's last messages are read (or before its hang-up,
  // when a child holds the socket): a Goodbye sent just before the exit (coloc run's carries the
  // command's status) still counts, and where the watcher cannot tell how the process ended
  // (pidfd: not colocd's child) its status is the Goodbye's.
  for (Connection* c : conns) {
    on_connection_event(*c, EPOLLIN);
    if (!info.exit_code && !info.signal && c->said_goodbye && c->exit_status) {
      info.exit_code = c->exit_status;
      info.source = "goodbye";
    }
  }
  for (auto& [serial, rec] : recorders_)
    if (rec.has_process(e.pid)) {
      const std::vector<pid_t> pending = rec.pending_exits();  // (counted once, however many watchers tell)
      const bool first = std::find(pending.begin(), pending.end(), e.pid) != pending.end();
      rec.process_exited(info);
      if (first && info.signal == SIGKILL) metrics_.on_sigkill();  // released without a Goodbye
    }
  for (Connection* c : conns) drop(*c, std::string("process exited (noticed by ") + e.source + ")", info);
  std::vector<broker::JobSerial> ready;
  for (auto& [serial, deadline] : closing_)
    if (recorders_.count(serial) && recorders_.at(serial).pending_exits().empty()) ready.push_back(serial);
  for (broker::JobSerial s : ready) finalize_job(s);
  settle();
}

void Server::sample_job(const broker::Job& job, Nanos t) {
  auto rec = recorders_.find(job.serial);
  if (rec == recorders_.end()) return;
  rec->second.set_limit(job.limit);  // also before admission, and after a `coloc set`
  for (const auto& [dev, jd] : job.devices) {
    const broker::Device& d = broker_.devices()[dev];
    report::DeviceSample ds;
    ds.capacity = d.capacity;
    ds.limit = broker_.limit_on(job, dev);
    ds.reservation = jd.reserved;
    fill_prediction(job, dev, ds);
    for (broker::ClientId id : job.clients) {
      const broker::Client* client = broker_.find_client(id);
      for (uint32_t s = 0; s < pages::kSlots; ++s) {
        if (!client->slots[s].attached || client->slots[s].device != dev) continue;
        const pages::StatsSlot& st = client->stats->slots[s];
        ds.in_use += broker_.client_in_use(*client, s);
        ds.driver_overhead += client->slots[s].overhead;
        ds.peak_hint = std::max(ds.peak_hint, std::min(st.peak.load(std::memory_order_relaxed), d.capacity));
        auto conn = by_client_.find(id);
        const bool gated = conn != by_client_.end() && pages::layout_for_protocol(conn->second->version) >= pages::kGatedLayout;
        ds.live += report::counters_of(*client->stats, s, gated);
      }
    }
    // Device time: the union of its processes' busy intervals (compute/device_time.h), not the sum.
    ds.live.busy_ns = device_time_.total({job.serial, d.uuid});
    rec->second.sample(d.uuid, t, ds);
  }
}

void Server::sample_job(broker::JobSerial serial, Nanos t) {
  auto it = broker_.jobs().find(serial);
  if (it != broker_.jobs().end()) sample_job(it->second, t);
}

void Server::read_device_memory(uint32_t device, Nanos t, bool prompted) {
  if (!memory_reader_ || device >= broker_.devices().size()) return;
  // Prompted by a client's message: at most one reading per device per millisecond, however
  // many messages ask (the sample timer reads every device anyway).
  constexpr Nanos kMinInterval = 1'000'000;
  if (last_read_.size() <= device) last_read_.resize(device + 1, 0);
  if (prompted && last_read_[device] != 0 && t - last_read_[device] < kMinInterval) return;
  last_read_[device] = t;
  if (unreadable_.size() <= device) unreadable_.resize(device + 1, 0);
  auto mem = memory_reader_->memory(broker_.devices()[device].uuid);
  unreadable_[device] = !mem;
  if (mem) broker_.refresh_outside(device, mem->free, t);
}

void Server::reconcile_overheads(uint32_t device, Nanos t) {
  if (!memory_reader_ || device >= broker_.devices().size()) return;
  // The driver's list from read_processes, just before (none: it cannot tell, keep what is booked).
  if (device >= processes_.size() || !processes_[device]) {
    broker_.reconcile_device(device, nullptr, t);
    return;
  }
  // Not read this time (no process attached, read at most once a second: read_processes): the
  // broker keeps the list it has, which, being older than this reading, floors nothing.
  if (processes_read_[device] != t) return;
  std::vector<broker::ProcessFigure> figures;
  figures.reserve(processes_[device]->size());
  for (const device::ProcessMemory& p : *processes_[device]) figures.push_back({p.pid, p.used});
  broker_.reconcile_device(device, &figures, t, pids_are_ours(*processes_[device]));
}

void Server::on_sample() {
  uint64_t n;
  while (::read(sample_timer_.get(), &n, sizeof n) == ssize_t(sizeof n)) {
  }
  const broker::Nanos t = now();
  listener_->check();  // the socket still there (re-bound if deleted), a paused accept resumed
  expire_hellos(t);
  (void)broker_.take_short_devices();  // every device is read below
  for (uint32_t dev = 0; dev < broker_.devices().size(); ++dev) {
    read_processes(dev, t);
    reconcile_overheads(dev, t);  // before the outside estimate, which the overheads are part of
    read_device_memory(dev, t);
  }
  read_unmet_devices(t);
  broker_.publish_job_others();  // each process's view of its job (pages.h: job_others)
  publish_queue_notes(t);
  estimate_sample(t);  // before the samples: they show the reservation it may raise
  look_device_time(t);  // before the samples: they show each job's device time
  for (const auto& [serial, job] : broker_.jobs()) sample_job(job, t);
  compute_sample(t);
  if (auto r = resume_.save_if_dirty(); !r)
    log::limited(log::get("engine"), spdlog::level::warn, "save clients", "{} (tried again in {} ms)", r.error().message(),
                 cfg_.sample_interval / 1000000);
  for (auto it = restart_waits_.begin(); it != restart_waits_.end();) {
    if (t < it->second) {
      ++it;
      continue;
    }
    if (auto rec = recorders_.find(it->first); rec != recorders_.end()) rec->second.close_restart_waits();
    it = restart_waits_.erase(it);
  }
  persist_jobs(t, false);
  sweep_away(t);
  notify_tick(t);
  if (broker_.holding() && resume_.expected() == 0) {
    log::get("engine")->info("restart: every running process has re-registered");
    broker_.end_hold(t);
  }
  settle();
}

}  // namespace coloc::engine
