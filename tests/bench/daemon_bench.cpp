// daemon_bench — colocd under load: 1,000 simulated clients on 8 devices.
//
//   grant round trip   one client at a time asks to grow by one grant step (Grow -> GrowReply),
//                      then gives it back (Shrink): p50/p99/max of the round trip, in µs
//   throughput         every client asks at once (1,000 Grows in flight), all replies collected,
//                      all grants returned: messages per second through the daemon
//   daemon RSS         VmRSS and VmHWM of colocd with all clients registered, after the load
//   under a flood      the grant round trip again, while another user (nobody) holds as many idle
//                      connections as colocd lets it (its max_connections_per_user) and tries more
//   under scrapes      the grant round trip without and then with 100 parallel Prometheus scrapers
//                      (GET /metrics in a loop, colocd's --metrics-listen), side by side; the scrapes'
//                      latency and size
//   death to release   a job holding memory is SIGKILLed while another waits for that memory:
//                      the time from kill(2) to the waiter's grant, (a) with the socket closing,
//                      (b) with a forked child holding the socket (only pidfd/BPF can tell)
//
// Prints a table and writes JSON (--out). Targets (design notes): p99 <= 50 µs, RSS <= 64 MiB,
// death to release <= 100 ms. A benchmark, not a test: it reports, it does not fail on slowness.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "coloc/protocol.h"
#include "coloc/wire.h"
#include "machine.h"

using namespace coloc;
using nlohmann::json;

extern char** environ;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

pid_t g_daemon = 0;
pid_t g_victim = 0;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "daemon_bench: %s\n", what.c_str());
  if (g_victim > 0) ::kill(g_victim, SIGKILL);
  if (g_daemon > 0) ::kill(g_daemon, SIGKILL);
  std::exit(1);
}

pid_t spawn(const std::vector<std::string>& args, int out_fd = -1) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) die("cannot start " + args[0]);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

struct Conn {
  int fd = -1;
  uint32_t seq = 0;
  uint32_t slot = 0;
  uint64_t grant = 0;
  wire::Pages pages;
};

template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

proto::DeviceInfo device(int n, uint64_t cap) {
  auto d = zeroed<proto::DeviceInfo>();
  std::memset(d.uuid, 0xC0, 16);  // as colocd_client numbers devices
  d.uuid[15] = uint8_t(n);
  d.capacity = cap;
  d.physical_free = proto::kUnknown;
  return d;
}

std::vector<unsigned char> g_buf(proto::kMaxMessage);

void expect(int fd, uint32_t seq, proto::Message* m, int* fds = nullptr, size_t* nfds = nullptr) {
  for (;;) {
    int rc = wire::recv_message(fd, m, g_buf.data(), g_buf.size(), 10000, fds, fds ? 2 : 0, nfds);
    if (rc != 0) die(std::string("receive: ") + std::strerror(-rc));
    if (m->type() == proto::MsgType::kError) die(std::string("colocd: ") + m->body.error.text);
    if (m->h.seq == seq) return;
  }
}

Conn connect_client(const std::string& socket, const std::string& job, int dev, uint64_t cap, uint64_t request) {
  Conn c;
  if (int rc = wire::connect_retry(socket.c_str(), 10'000'000'000ull, &c.fd); rc != 0) die("connect: " + std::string(std::strerror(-rc)));
  auto r = zeroed<proto::RegisterMsg>();
  r.limit = proto::kNoLimit;
  r.priority = uint8_t(proto::Priority::kNormal);
  proto::set_string(r.job, job.c_str());
  proto::set_string(r.cmdline, "daemon_bench");
  if (wire::send(c.fd, r, ++c.seq) != 0) die("send Register");
  proto::Message m;
  int fds[2];
  size_t nfds = 0;
  expect(c.fd, c.seq, &m, fds, &nfds);
  if (nfds != 2 || wire::map_pages(fds[0], fds[1], &c.pages) != 0) die("pages");
  auto a = zeroed<proto::AttachMsg>();
  a.n_devices = 1;
  a.devices[0].device = device(dev, cap);
  a.devices[0].request = request;
  if (wire::send(c.fd, a, ++c.seq) != 0) die("send Attach");
  expect(c.fd, c.seq, &m);
  if (m.body.attach_reply.outcome != uint32_t(proto::Outcome::kGranted)) die("attach refused");
  c.slot = m.body.attach_reply.devices[0].slot;
  c.grant = m.body.attach_reply.devices[0].grant;
  return c;
}

void send_grow(Conn& c, uint64_t need) {
  auto g = zeroed<proto::GrowMsg>();
  g.slot = c.slot;
  g.need = need;
  g.in_use = 0;
  g.physical_free = proto::kUnknown;
  if (wire::send(c.fd, g, ++c.seq) != 0) die("send Grow");
}

void send_shrink(Conn& c, uint64_t keep) {
  auto s = zeroed<proto::ShrinkMsg>();
  s.slot = c.slot;
  s.grant = keep;
  if (wire::send(c.fd, s, ++c.seq) != 0) die("send Shrink");
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = size_t(p / 100.0 * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

uint64_t status_kib(pid_t pid, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + std::strlen(key), nullptr, 10);
  return 0;
}

/// CPU time a process has run so far, ns (/proc/PID/schedstat, first field).
uint64_t cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  uint64_t ns = 0;
  in >> ns;
  return ns;
}

std::string read_line(int fd) {
  std::string s;
  char ch;
  while (::read(fd, &ch, 1) == 1) {
    if (ch == '\n') return s;
    s += ch;
  }
  return s;
}

/// The floor under any round trip: two processes ping-ponging a 48-byte datagram over an
/// AF_UNIX SOCK_SEQPACKET socketpair (what a Grow and its reply cost without the daemon), in µs.
std::vector<double> baseline_round_trips(int n) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  pid_t echo = ::fork();
  if (echo == 0) {
    ::close(sv[0]);
    char b[64];
    for (;;) {
      ssize_t k = ::recv(sv[1], b, sizeof b, 0);
      if (k <= 0 || ::send(sv[1], b, size_t(k), MSG_NOSIGNAL) != k) _exit(0);
    }
  }
  ::close(sv[1]);
  std::vector<double> out;
  char b[48] = {};
  for (int i = 0; i < n; ++i) {
    uint64_t t0 = wire::now_ns();
    if (::send(sv[0], b, sizeof b, 0) != ssize_t(sizeof b) || ::recv(sv[0], b, sizeof b, 0) != ssize_t(sizeof b)) die("echo");
    out.push_back(double(wire::now_ns() - t0) / 1e3);
  }
  ::close(sv[0]);
  int st;
  ::waitpid(echo, &st, 0);
  return out;
}

/// SIGKILL a job that holds most of a device while `waiter` waits for that memory; returns ms.
/// `ops` grant round trips, one client at a time in turn: Grow by one step, wait for the reply
/// (timed, µs), give it back (Shrink).
std::vector<double> round_trips(std::vector<Conn>& clients, int ops) {
  std::vector<double> us;
  us.reserve(size_t(ops));
  for (int k = 0; k < ops; ++k) {
    Conn& c = clients[size_t(k) % clients.size()];
    proto::Message m;
    uint64_t t0 = wire::now_ns();
    send_grow(c, c.grant + 64 * MiB);
    expect(c.fd, c.seq, &m);
    uint64_t t1 = wire::now_ns();
    if (m.body.grow_reply.outcome != uint32_t(proto::Outcome::kGranted)) die("grow refused");
    us.push_back(double(t1 - t0) / 1e3);
    send_shrink(c, c.grant);
  }
  return us;
}

/// A local user's flood: a child that becomes uid 65534 and opens `n` connections to `socket`,
/// holding them without a word. Returns its pid; *kept receives how many connect() succeeded and
/// *hold is the pipe whose closing ends it.
pid_t start_flood(const std::string& socket, int n, int* connected, int* hold) {
  int ready[2], stay[2];
  if (::pipe(ready) != 0 || ::pipe(stay) != 0) die("pipe");
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    ::close(ready[0]);
    ::close(stay[1]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    int ok = 0;
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      int fd = -1;
      if (wire::connect_socket(socket.c_str(), &fd, 2000) == 0) {
        fds.push_back(fd);
        ++ok;
      }
    }
    (void)!::write(ready[1], &ok, sizeof ok);
    char c;
    while (::read(stay[0], &c, 1) > 0) {
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(stay[0]);
  *connected = 0;
  if (::read(ready[0], connected, sizeof *connected) != ssize_t(sizeof *connected)) die("the flood did not start (needs root)");
  ::close(ready[0]);
  *hold = stay[1];
  return pid;
}

double death_to_release(const std::string& client_bin, const std::string& socket, Conn& waiter, int dev, bool forked) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) die("pipe");
  std::vector<std::string> args = {client_bin, "--socket", socket, "--job", "victim",
                                   "attach:" + std::to_string(dev) + ":10GiB:1GiB", "alloc:0:8GiB"};
  if (forked) args.push_back("fork-hold");
  args.push_back("hold");
  pid_t victim = spawn(args, pipefd[1]);
  g_victim = victim;
  ::close(pipefd[1]);
  pid_t child = 0;
  for (;;) {
    std::string line = read_line(pipefd[0]);
    if (line.empty()) die("victim ended early");
    if (line.find("\"forked\"") != std::string::npos) child = pid_t(std::atoi(line.c_str() + line.find("child") + 7));
    if (line.find("\"holding\"") != std::string::npos) break;
  }
  // The waiter asks for memory only the victim's death can free; wait until it is parked.
  uint64_t before = waiter.grant;
  send_grow(waiter, before + 4 * GiB);
  proto::Message m;
  if (wire::recv_message(waiter.fd, &m, g_buf.data(), g_buf.size(), 50) != -ETIMEDOUT) die("the waiter was not parked");
  uint64_t t0 = wire::now_ns();
  ::kill(victim, SIGKILL);
  expect(waiter.fd, waiter.seq, &m);
  uint64_t t1 = wire::now_ns();
  if (m.body.grow_reply.outcome != uint32_t(proto::Outcome::kGranted)) die("the waiter was refused");
  waiter.grant = m.body.grow_reply.grant;
  send_shrink(waiter, before);
  waiter.grant = before;
  int st;
  ::waitpid(victim, &st, 0);
  g_victim = 0;
  if (child > 0) ::kill(child, SIGKILL);
  ::close(pipefd[0]);
  return double(t1 - t0) / 1e6;
}

/// "127.0.0.1:PORT" with a port free now (the kernel's pick, released for colocd to bind).
std::string free_address() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    die("no free TCP port");
  ::close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
}

/// One scrape of http://`addr`/metrics: the bytes of the answer, 0 when it failed (the answer in
/// *text when given).
size_t scrape(const std::string& addr, std::string* text = nullptr) {
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
  ::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return 0;
  }
  const char req[] = "GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n";
  (void)!::send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
  std::vector<char> buf(1 << 16);
  size_t total = 0;
  bool ok = false;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 20000) > 0) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    if (total == 0) ok = n >= 12 && std::memcmp(buf.data(), "HTTP/1.1 200", 12) == 0;
    total += size_t(n);
    if (text) text->append(buf.data(), size_t(n));
  }
  ::close(fd);
  return ok ? total : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string colocd = "build/bin/colocd", client_bin = "build/tests/bin/colocd_client", out = "build/bench/daemon.json";
  int n_clients = 1000, n_devices = 8, rounds = 20, deaths = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--colocd") colocd = v;
    else if (a == "--client") client_bin = v;
    else if (a == "--out") out = v;
    else if (a == "--clients") n_clients = std::atoi(v.c_str());
    else if (a == "--rounds") rounds = std::atoi(v.c_str());
    else die("unknown option " + a);
  }
  rlimit rl;
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  ::signal(SIGPIPE, SIG_IGN);

  char tmpl[] = "/tmp/coloc-bench.XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::string socket = dir + "/colocd.sock";
  const std::string metrics = free_address();
  pid_t daemon = spawn({colocd, "--socket", socket, "--state-dir", dir + "/state", "--log-level", "warn", "--metrics-listen", metrics});
  g_daemon = daemon;

  std::printf("daemon_bench: colocd pid %d, %d clients on %d devices\n", daemon, n_clients, n_devices);
  std::fflush(stdout);
  uint64_t t_reg0 = wire::now_ns();
  std::vector<Conn> clients;
  clients.reserve(size_t(n_clients));
  for (int i = 0; i < n_clients; ++i)
    clients.push_back(connect_client(socket, "bench-" + std::to_string(i), i % n_devices, 80 * GiB, 64 * MiB));
  double register_s = double(wire::now_ns() - t_reg0) / 1e9;
  uint64_t rss_registered = status_kib(daemon, "VmRSS:");

  // 0. The floor: the same round trip without the daemon.
  std::vector<double> base_us = baseline_round_trips(n_clients * rounds);

  // 1. Round trips, one at a time.
  const int ops = n_clients * rounds;
  std::vector<double> rtt_us = round_trips(clients, ops);

  // 2. Throughput: everyone at once.
  uint64_t messages = 0;
  uint64_t cpu0 = cpu_ns(daemon);
  uint64_t t_tp0 = wire::now_ns();
  for (int r = 0; r < rounds; ++r) {
    for (Conn& c : clients) send_grow(c, c.grant + 64 * MiB);
    for (Conn& c : clients) {
      proto::Message m;
      expect(c.fd, c.seq, &m);
    }
    for (Conn& c : clients) send_shrink(c, c.grant);
    messages += 3ull * uint64_t(n_clients);  // Grow, GrowReply, Shrink
  }
  double tp_s = double(wire::now_ns() - t_tp0) / 1e9;
  double cpu_per_grant_us = double(cpu_ns(daemon) - cpu0) / 1e3 / double(messages / 3);
  uint64_t rss_after = status_kib(daemon, "VmRSS:");
  uint64_t hwm = status_kib(daemon, "VmHWM:");

  // 3. The round trip again while a flood is held open: another user opens 1,500 connections
  // (its cap keeps 1,024 of them) and holds them idle.
  ::chmod(dir.c_str(), 0755);
  int flood_connected = 0, flood_hold = -1;
  pid_t flood = start_flood(socket, 1500, &flood_connected, &flood_hold);
  std::vector<double> flood_rtt_us = round_trips(clients, ops);
  ::close(flood_hold);
  ::waitpid(flood, nullptr, 0);

  // 4. /metrics: the round trip without, then with, 100 parallel scrapers (side by side, same
  // clients), 5 s each: long enough to take in several snapshot builds (one per 250 ms, or per 20
  // times its cost, while scraped).
  auto round_trips_for = [&](double seconds) {
    std::vector<double> all;
    uint64_t t0 = wire::now_ns();
    while (double(wire::now_ns() - t0) / 1e9 < seconds) {
      std::vector<double> some = round_trips(clients, n_clients);
      all.insert(all.end(), some.begin(), some.end());
    }
    return all;
  };
  std::vector<double> quiet_rtt_us = round_trips_for(5);
  constexpr int kScrapers = 100;
  std::atomic<bool> stop_scraping{false};
  std::atomic<uint64_t> scrapes{0}, scrape_failures{0}, scrape_bytes{0};
  std::vector<double> scrape_ms;
  std::mutex scrape_mu;
  std::vector<std::thread> scrapers;
  for (int i = 0; i < kScrapers; ++i)
    scrapers.emplace_back([&] {
      std::vector<double> mine;
      while (!stop_scraping) {
        uint64_t t0 = wire::now_ns();
        size_t n = scrape(metrics);
        if (n == 0) {
          ++scrape_failures;
          continue;
        }
        mine.push_back(double(wire::now_ns() - t0) / 1e6);
        ++scrapes;
        scrape_bytes = n;
      }
      std::lock_guard<std::mutex> lk(scrape_mu);
      scrape_ms.insert(scrape_ms.end(), mine.begin(), mine.end());
    });
  for (int i = 0; i < 30000 && scrapes < uint64_t(kScrapers); ++i) ::usleep(1000);  // the scrapers under way
  if (scrapes == 0) die("no scrape of http://" + metrics + "/metrics succeeded");
  uint64_t cpu_s0 = cpu_ns(daemon), t_s0 = wire::now_ns(), scrapes0 = scrapes;
  std::vector<double> scraped_rtt_us = round_trips_for(5);
  double scraped_s = double(wire::now_ns() - t_s0) / 1e9;
  double scrape_rate = double(scrapes - scrapes0) / scraped_s;
  double daemon_cpu_share = double(cpu_ns(daemon) - cpu_s0) / 1e9 / scraped_s;
  stop_scraping = true;
  for (auto& t : scrapers) t.join();
  // What one snapshot of these 1,000 jobs cost the loop (colocd's own gauge).
  double snapshot_ms = -1;
  {
    std::string text;
    scrape(metrics, &text);
    const char key[] = "\ncoloc_metrics_snapshot_seconds ";
    size_t at = text.find(key);
    if (at != std::string::npos) snapshot_ms = std::atof(text.c_str() + at + sizeof key - 1) * 1e3;
  }

  // 5. Death to release.
  Conn waiter = connect_client(socket, "waiter", 99, 10 * GiB, 0);
  std::vector<double> hangup_ms, watcher_ms;
  for (int i = 0; i < deaths; ++i) hangup_ms.push_back(death_to_release(client_bin, socket, waiter, 99, false));
  for (int i = 0; i < deaths; ++i) watcher_ms.push_back(death_to_release(client_bin, socket, waiter, 99, true));

  ::kill(daemon, SIGTERM);
  int st;
  ::waitpid(daemon, &st, 0);
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "daemon_bench: could not remove %s\n", dir.c_str());

  json j{{"clients", n_clients},
         {"devices", n_devices},
         {"machine", bench::machine()},
         {"register_and_attach_s", register_s},
         {"grant_round_trip_us", {{"p50", pct(rtt_us, 50)}, {"p99", pct(rtt_us, 99)}, {"max", pct(rtt_us, 100)}, {"samples", rtt_us.size()}}},
         {"grant_round_trip_under_flood_us",
          {{"p50", pct(flood_rtt_us, 50)}, {"p99", pct(flood_rtt_us, 99)}, {"max", pct(flood_rtt_us, 100)},
           {"flood_connections_attempted", 1500}, {"flood_connections_connected", flood_connected}}},
         {"grant_round_trip_metrics_us",
          {{"without_scrapers", {{"p50", pct(quiet_rtt_us, 50)}, {"p99", pct(quiet_rtt_us, 99)}, {"p99.9", pct(quiet_rtt_us, 99.9)}, {"max", pct(quiet_rtt_us, 100)}, {"samples", quiet_rtt_us.size()}}},
           {"with_100_scrapers", {{"p50", pct(scraped_rtt_us, 50)}, {"p99", pct(scraped_rtt_us, 99)}, {"p99.9", pct(scraped_rtt_us, 99.9)}, {"max", pct(scraped_rtt_us, 100)}, {"samples", scraped_rtt_us.size()}}},
           {"scrapers", kScrapers},
           {"scrapes_per_second", scrape_rate},
           {"scrape_failures", scrape_failures.load()},
           {"scrape_ms", {{"p50", pct(scrape_ms, 50)}, {"p99", pct(scrape_ms, 99)}, {"max", pct(scrape_ms, 100)}}},
           {"scrape_bytes", scrape_bytes.load()},
           {"colocd_cpu_share_while_scraped", daemon_cpu_share},
           {"snapshot_build_ms", snapshot_ms}}},
         {"socketpair_round_trip_us", {{"p50", pct(base_us, 50)}, {"p99", pct(base_us, 99)}, {"max", pct(base_us, 100)}}},
         {"daemon_added_us_p50", pct(rtt_us, 50) - pct(base_us, 50)},
         {"messages_per_second", double(messages) / tp_s},
         {"grants_per_second", double(messages / 3) / tp_s},
         {"daemon_cpu_us_per_grant", cpu_per_grant_us},
         {"daemon_rss_mib", {{"registered", double(rss_registered) / 1024}, {"after_load", double(rss_after) / 1024}, {"peak", double(hwm) / 1024}}},
         {"death_to_release_ms",
          {{"socket_hangup", {{"p50", pct(hangup_ms, 50)}, {"max", pct(hangup_ms, 100)}}},
           {"pidfd_or_bpf_only", {{"p50", pct(watcher_ms, 50)}, {"max", pct(watcher_ms, 100)}}}}},
         {"targets", {{"grant_round_trip_p99_us", 50}, {"daemon_rss_mib", 64}, {"death_to_release_ms", 100}}}};
  std::string parent = out.substr(0, out.rfind('/'));
  if (out.find('/') != std::string::npos) ::mkdir(parent.c_str(), 0755);
  std::ofstream(out) << j.dump(2) << "\n";

  std::printf("  register+attach %d clients      %8.3f s\n", n_clients, register_s);
  std::printf("  grant round trip p50 / p99 / max  %6.1f / %6.1f / %6.1f us   (target p99 <= 50 us)\n", pct(rtt_us, 50),
              pct(rtt_us, 99), pct(rtt_us, 100));
  std::printf("  ... while a user floods colocd        %6.1f / %6.1f / %6.1f us   (1500 idle connections tried, %d connected)\n",
              pct(flood_rtt_us, 50), pct(flood_rtt_us, 99), pct(flood_rtt_us, 100), flood_connected);
  std::printf("  /metrics: round trip without scrapers %6.1f / %6.1f / %6.1f us\n", pct(quiet_rtt_us, 50),
              pct(quiet_rtt_us, 99), pct(quiet_rtt_us, 100));
  std::printf("  ... with %d parallel scrapers        %6.1f / %6.1f / %6.1f us   (%.0f scrapes/s of %.1f MiB, p50 %.0f ms; %llu failed; a snapshot costs the loop %.1f ms)\n",
              kScrapers, pct(scraped_rtt_us, 50), pct(scraped_rtt_us, 99), pct(scraped_rtt_us, 100), scrape_rate,
              double(scrape_bytes.load()) / double(MiB), pct(scrape_ms, 50), (unsigned long long)scrape_failures.load(), snapshot_ms);
  std::printf("  bare socketpair ping-pong, same size  %6.1f / %6.1f / %6.1f us   (the floor: kernel + scheduler)\n",
              pct(base_us, 50), pct(base_us, 99), pct(base_us, 100));
  std::printf("  messages per second (all at once) %8.0f  (%0.0f grants/s)\n", double(messages) / tp_s, double(messages / 3) / tp_s);
  std::printf("  colocd CPU per grant (Grow + reply + Shrink, kernel included)  %5.2f us\n", cpu_per_grant_us);
  std::printf("  colocd RSS registered / after / peak  %5.1f / %5.1f / %5.1f MiB   (target <= 64 MiB)\n",
              double(rss_registered) / 1024, double(rss_after) / 1024, double(hwm) / 1024);
  std::printf("  SIGKILL to release, socket hang-up    p50 %5.2f ms, max %5.2f ms   (target <= 100 ms)\n", pct(hangup_ms, 50),
              pct(hangup_ms, 100));
  std::printf("  SIGKILL to release, pidfd/BPF only    p50 %5.2f ms, max %5.2f ms\n", pct(watcher_ms, 50), pct(watcher_ms, 100));
  std::printf("  written to %s\n", out.c_str());
  return 0;
}
