// colocd under systemd, with the test playing systemd's part (deploy/systemd/colocd.socket and
// colocd.service): the test holds the SOCK_SEQPACKET listening socket, starts colocd with it as fd 3
// (LISTEN_FDS=1, LISTEN_PID set in the child after fork) and a NOTIFY_SOCKET it reads itself. A job
// keeps its books across a SIGKILL of colocd and a start of the next one on the same socket, whose
// path never goes away; READY=1, STATUS= and STOPPING=1 arrive; a socket of the wrong kind is
// refused with exit status 2 (no restart loop); a deleted path is reported, not bound again;
// LISTEN_FDS meant for another process is ignored.
// (systemd-socket-activate cannot show the restart: its socket dies with the program.)
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "../e2e/e2e.h"
#include "util/unique_fd.h"

using namespace coloc::test;
using namespace coloc::test::e2e;
using coloc::UniqueFd;

namespace {

/// A Unix socket of `type` bound at `path` ("@name": abstract), close-on-exec (so only colocd,
/// given it as fd 3, inherits it); listening when `listen_too`.
UniqueFd unix_socket(int type, const std::string& path, bool listen_too) {
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
  if (path[0] == '@') addr.sun_path[0] = '\0';
  REQUIRE_MESSAGE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0, "bind ", path, ": ", std::strerror(errno));
  if (path[0] != '@') ::chmod(path.c_str(), 0666);  // as SocketMode=0666
  if (listen_too) REQUIRE(::listen(fd.get(), 4096) == 0);
  return fd;
}

/// colocd started as systemd starts it: `listen_fd` as fd 3 with LISTEN_FDS=1 and LISTEN_PID (its
/// own pid, or `listen_pid` when given), NOTIFY_SOCKET=`notify`. Output goes to a file.
class Started {
 public:
  Started(const std::vector<std::string>& argv, Env env, int listen_fd, const std::string& log,
          const std::string& listen_pid = "") {
    std::vector<std::string> envs = env.strings();
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    // LISTEN_PID=<the child's pid>, written by the child after fork (no allocation there).
    char pid_var[64] = "LISTEN_PID=";
    const size_t prefix = std::strlen(pid_var);
    if (!listen_pid.empty()) std::snprintf(pid_var + prefix, sizeof pid_var - prefix, "%s", listen_pid.c_str());
    envp.push_back(pid_var);
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    REQUIRE(out >= 0);
    const bool own_pid = listen_pid.empty();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      if (own_pid) {  // the digits of getpid(), by hand (async-signal-safe)
        char digits[24];
        int n = 0;
        for (pid_t p = ::getpid(); p > 0; p /= 10) digits[n++] = char('0' + p % 10);
        for (size_t i = 0; i < size_t(n); ++i) pid_var[prefix + i] = digits[n - 1 - i];
        pid_var[prefix + n] = '\0';
      }
      ::dup2(out, 1);
      ::dup2(out, 2);
      if (listen_fd == 3) ::fcntl(3, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
      else if (listen_fd >= 0) ::dup2(listen_fd, 3);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    ::close(out);
  }
  ~Started() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      (void)wait(10s);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() {
    if (reaped_) return false;
    int st;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = st;
    }
    return !reaped_;
  }
  /// Waits up to `timeout` for the exit; the exit code, or -1 (killed by a signal, or still running).
  int wait(std::chrono::milliseconds timeout) {
    wait_until([&] { return !running(); }, timeout);
    if (!reaped_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  void kill(int sig) { ::kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

/// A node the way systemd runs it: the socket unit's socket, a notification socket, simgpu.
class ServiceNode {
 public:
  explicit ServiceNode(bool abstract_notify = false) {
    REQUIRE(::mkdir((dir_ / "run").c_str(), 0755) == 0);
    ::chmod(dir_.path().c_str(), 0755);
    socket_ = dir_ / "run/colocd.sock";
    notify_path_ = abstract_notify ? "@coloc-test-notify-" + std::to_string(::getpid()) + "-" + std::to_string(::rand())
                                   : dir_ / "notify";
    notify_ = unix_socket(SOCK_DGRAM, notify_path_, false);
  }
  /// colocd's environment: simgpu, NOTIFY_SOCKET, and (with `listen_fds`) LISTEN_FDS=1.
  Env daemon_env(bool listen_fds = true) const {
    Env e;
    e.simgpu(dir_, "16GiB");
    e.set("NOTIFY_SOCKET", notify_path_);
    if (listen_fds) e.set("LISTEN_FDS", "1");
    if (sanitizer() == "tsan") e.set("TSAN_OPTIONS", e.get("TSAN_OPTIONS").value_or("") + " atexit_sleep_ms=0");
    return e;
  }
  std::vector<std::string> daemon_argv(const std::string& socket_flag = "") const {
    // --socket names another path: a socket from systemd wins over it (and it is never bound).
    return {build_path("bin/colocd"), "--socket", socket_flag.empty() ? dir_ / "run/unused.sock" : socket_flag,
            "--state-dir", dir_ / "state", "--log-level", "info", "--resume-grace", "3s"};
  }
  std::unique_ptr<Started> start(int listen_fd, const std::string& listen_pid = "", const std::string& socket_flag = "") {
    return std::make_unique<Started>(daemon_argv(socket_flag), daemon_env(), listen_fd, log_path(), listen_pid);
  }

  /// Waits up to `timeout` for a notification containing `needle` (after those already read);
  /// every one read is kept in messages().
  bool await(const std::string& needle, std::chrono::milliseconds timeout = 30s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (; seen_ < messages_.size(); ++seen_)
        if (messages_[seen_].find(needle) != std::string::npos) {
          ++seen_;
          return true;
        }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{notify_.get(), POLLIN, 0};
      if (::poll(&p, 1, int(std::min<long>(left.count(), 100))) > 0) {
        char buf[4096];
        ssize_t n = ::recv(notify_.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) messages_.emplace_back(buf, size_t(n));
      }
    }
  }
  std::string messages() const {
    std::string s;
    for (auto& m : messages_) s += "[" + m + "] ";
    return s;
  }

  /// The coloc CLI against the socket.
  ProcResult cli(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {build_path("bin/coloc"), "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    return coloc::test::run(argv, Env(), 20s);
  }
  json jobs() const {
    ProcResult r = cli({"jobs", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    return json::parse(r.out)["jobs"];
  }
  json status() const {
    ProcResult r = cli({"status", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
    return json::parse(r.out);
  }
  /// Status as text, or why there is none, for a failure message (never asserts: see e2e.h).
  std::string status_text() const {
    ProcResult r = cli({"status", "--json"});
    return r.exit_code == 0 ? r.out : "(coloc status failed: " + describe(r) + ")";
  }
  /// `coloc run --sim` of `cmd` on this node.
  std::unique_ptr<Proc> run(const std::vector<std::string>& coloc_args, const std::vector<std::string>& cmd) const {
    std::vector<std::string> argv = {build_path("bin/coloc"), "run", "--sim"};
    argv.insert(argv.end(), coloc_args.begin(), coloc_args.end());
    argv.push_back("--");
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    Env e;
    e.simgpu(dir_, "16GiB");
    e.set("COLOC_SOCKET", socket_);
    if (sanitizer() == "tsan") e.set("TSAN_OPTIONS", e.get("TSAN_OPTIONS").value_or("") + " atexit_sleep_ms=0");
    return std::make_unique<Proc>(argv, e);
  }

  std::string log() const { return file_exists(log_path()) ? read_file(log_path()) : std::string(); }
  std::string log_path() const { return dir_ / "colocd.log"; }
  std::string file(const std::string& name) const { return dir_ / name; }
  const std::string& socket() const { return socket_; }

 private:
  TempDir dir_{"coloc-sd"};
  std::string socket_, notify_path_;
  UniqueFd notify_;
  std::vector<std::string> messages_;
  size_t seen_ = 0;
};

/// Records every change of `path`'s name in its directory (inotify: deleted, moved away, created,
/// moved in), however brief, from construction on.
class PathWatch {
 public:
  explicit PathWatch(const std::string& path) : path_(path) {
    const auto slash = path.rfind('/');
    name_ = path.substr(slash + 1);
    fd_ = UniqueFd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    REQUIRE(fd_.valid());
    REQUIRE(::inotify_add_watch(fd_.get(), path.substr(0, slash).c_str(),
                                IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF) >= 0);
    struct stat st;
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    ino_ = st.st_ino;
  }
  /// The changes so far (and 1 more when the path no longer names the same socket).
  int changes() {
    alignas(inotify_event) char buf[4096];
    for (ssize_t n; (n = ::read(fd_.get(), buf, sizeof buf)) > 0;)
      for (char* p = buf; p < buf + n;) {
        auto* e = reinterpret_cast<inotify_event*>(p);
        if ((e->mask & IN_DELETE_SELF) || (e->len && name_ == e->name)) ++changes_;
        p += sizeof(inotify_event) + e->len;
      }
    struct stat st;
    const bool same = ::lstat(path_.c_str(), &st) == 0 && st.st_ino == ino_ && S_ISSOCK(st.st_mode);
    return changes_ + (same ? 0 : 1);
  }

 private:
  std::string path_, name_;
  UniqueFd fd_;
  ino_t ino_ = 0;
  int changes_ = 0;
};

json find_job(const json& jobs, const std::string& prefix) {
  for (const json& j : jobs)
    if (j.value("job", "").rfind(prefix + "-", 0) == 0) return j;
  return nullptr;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("systemd socket activation: a job keeps its books across a SIGKILL of colocd, the socket never goes away") {
  if (simulated_only()) return;
  ServiceNode n;
  UniqueFd sock = unix_socket(SOCK_SEQPACKET, n.socket(), true);
  PathWatch watch(n.socket());

  auto d = n.start(sock.get());
  REQUIRE_MESSAGE(n.await("READY=1"), "no READY=1: ", n.messages(), "\n", n.log());
  CHECK(n.messages().find("STATUS=serving ") != std::string::npos);  // with READY=1
  CHECK(n.log().find("listening on the socket passed by the service manager (" + n.socket() + ")") != std::string::npos);
  CHECK_FALSE(file_exists(n.file("run/unused.sock")));  // --socket was not bound
  json st = n.status();
  CHECK(st["daemon"]["socket"] == n.socket());

  // A job that holds 1 GiB (and its context) and waits.
  auto job = n.run({"--job", "kept", "--mem", "4GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "a", "touch", n.file("ready"), "hold-file", n.file("go")});
  REQUIRE_MESSAGE(reached(*job, n.file("ready")), job->err_so_far(), "\n", n.log());
  json before = find_job(n.jobs(), "kept");
  REQUIRE(!before.is_null());
  CHECK(before["in_use"] == 1 * GiB + kContext);
  // A STATUS= line for the change (at most one a second).
  CHECK_MESSAGE(n.await("STATUS=serving 1 device, 1 job", 20s), n.messages());

  d->kill(SIGKILL);
  CHECK(d->wait(10s) == -1);  // killed
  // systemd restarts it on the same socket: connections made meanwhile wait in its queue.
  d = n.start(sock.get());
  REQUIRE_MESSAGE(n.await("READY=1"), "no second READY=1: ", n.messages(), "\n", n.log());
  bool back = wait_until([&] {
    json s = n.status();
    json j = find_job(s["jobs"], "kept");
    return !j.is_null() && !s["daemon"]["holding_for_restart"].get<bool>();
  }, 30s, 20ms);
  REQUIRE_MESSAGE(back, n.status_text(), "\n", n.log());
  json after = find_job(n.jobs(), "kept");
  CHECK(after["job"] == before["job"]);
  CHECK(after["in_use"] == before["in_use"]);
  CHECK(after["limit"] == before["limit"]);
  CHECK(after["state"] == before["state"]);

  write_file(n.file("go"), "");
  ProcResult r = finish(*job);
  CHECK(step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS");

  // systemctl stop: SIGTERM, STOPPING=1, exit 0, and the socket (systemd's) stays.
  d->kill(SIGTERM);
  CHECK_MESSAGE(n.await("STOPPING=1", 20s), n.messages());
  CHECK(d->wait(20s) == 0);
  CHECK_MESSAGE(watch.changes() == 0, "the socket path was deleted, moved or replaced\n", n.log());
  CHECK(file_exists(n.socket()));
  CHECK(n.log().find("bound it again") == std::string::npos);  // never re-bound
}

TEST_CASE("systemd socket activation: a socket of another kind is refused with a clear error and exit status 2") {
  if (simulated_only()) return;
  ServiceNode n(/*abstract_notify=*/true);
  {
    UniqueFd stream = unix_socket(SOCK_STREAM, n.socket(), true);
    auto d = n.start(stream.get());
    CHECK(d->wait(30s) == 2);
    const std::string log = n.log();
    CHECK_MESSAGE(log.find("SOCK_STREAM") != std::string::npos, log);
    CHECK_MESSAGE(log.find("ListenSequentialPacket=") != std::string::npos, log);
    // The service manager hears why (STATUS=, to an abstract NOTIFY_SOCKET).
    CHECK_MESSAGE(n.await("STATUS=failed: ", 10s), n.messages());
    CHECK(file_exists(n.socket()));  // not colocd's to remove
  }
  // (A pipe, a socket that is not listening: check_listen_socket's unit tests, tests/unit/daemon/systemd_test.cpp.)
}

TEST_CASE("systemd socket activation: a deleted socket path is the socket unit's to make again: colocd says so, binds nothing") {
  if (simulated_only()) return;
  ServiceNode n;
  UniqueFd sock = unix_socket(SOCK_SEQPACKET, n.socket(), true);
  auto d = n.start(sock.get());
  REQUIRE_MESSAGE(n.await("READY=1"), n.messages(), "\n", n.log());
  PathWatch watch(n.socket());
  CHECK(watch.changes() == 0);
  REQUIRE(::unlink(n.socket().c_str()) == 0);
  CHECK(watch.changes() >= 1);  // (the watch the restart test relies on sees a deletion)
  const bool said = wait_until([&] { return n.log().find("(the service manager's) was deleted") != std::string::npos; }, 20s);
  CHECK_MESSAGE(said, n.log());
  CHECK_FALSE(file_exists(n.socket()));  // not bound again behind the socket unit's back
  CHECK(d->running());
  d->kill(SIGTERM);
  CHECK(d->wait(20s) == 0);
}

TEST_CASE("systemd: LISTEN_FDS meant for another process is ignored; colocd's own socket is removed at exit, as before") {
  if (simulated_only()) return;
  ServiceNode n;
  UniqueFd other = unix_socket(SOCK_SEQPACKET, n.file("run/other.sock"), true);
  auto d = n.start(other.get(), "1", n.socket());  // LISTEN_PID=1: not colocd
  REQUIRE_MESSAGE(n.await("READY=1"), n.messages(), "\n", n.log());
  CHECK(n.log().find("LISTEN_FDS is set for pid 1, not this one") != std::string::npos);
  CHECK(n.status()["daemon"]["socket"] == n.socket());  // its own, bound at --socket
  d->kill(SIGTERM);
  CHECK_MESSAGE(n.await("STOPPING=1", 20s), n.messages());
  CHECK(d->wait(20s) == 0);
  CHECK_FALSE(file_exists(n.socket()));  // its own socket: removed at a clean stop
  CHECK(file_exists(n.file("run/other.sock")));
}

}  // TEST_SUITE
