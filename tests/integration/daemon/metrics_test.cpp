// colocd's Prometheus /metrics (daemon/metrics/): off by default, promtool accepts a live scrape,
// the values equal `coloc status --json`'s and `coloc jobs --json`'s, an ended job's series go,
// the docs list every family, and hostile scrapers stall nobody's allocations.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "metrics/exposition.h"
#include "../e2e/e2e.h"
#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

/// A TCP connection to "HOST:PORT" (IPv4), or -1.
int connect_to(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
  if (::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct HttpAnswer {
  int status = 0;  ///< 0: no answer
  std::string body;
};

/// Sends `request` and reads the answer until the server closes (at most `timeout`).
HttpAnswer http(const std::string& addr, const std::string& request, std::chrono::milliseconds timeout = 10s) {
  HttpAnswer a;
  int fd = connect_to(addr);
  if (fd < 0) return a;
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string in;
  const auto end = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, size_t(n));
  }
  ::close(fd);
  if (in.rfind("HTTP/1.1 ", 0) != 0 || in.size() < 12) return a;
  a.status = std::stoi(in.substr(9, 3));
  size_t body = in.find("\r\n\r\n");
  if (body != std::string::npos) a.body = in.substr(body + 4);
  return a;
}

HttpAnswer get_metrics(const std::string& addr) { return http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); }

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// The samples of an exposition (comments skipped).
std::vector<Sample> parse(const std::string& text) {
  std::vector<Sample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t sp = line.rfind(' ');
    s.value = std::stod(line.substr(sp + 1));
    std::string head = line.substr(0, sp);
    size_t brace = head.find('{');
    s.name = head.substr(0, brace);
    if (brace != std::string::npos) {
      static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
      std::string ls = head.substr(brace);
      for (std::sregex_iterator it(ls.begin(), ls.end(), kLabel), e; it != e; ++it) s.labels[(*it)[1]] = (*it)[2];
    }
    out.push_back(std::move(s));
  }
  return out;
}

/// The samples named `name` whose labels include `want`.
std::vector<Sample> find(const std::vector<Sample>& all, const std::string& name,
                         const std::map<std::string, std::string>& want = {}) {
  std::vector<Sample> out;
  for (const Sample& s : all) {
    if (s.name != name) continue;
    bool ok = true;
    for (auto& [k, v] : want) ok &= s.labels.count(k) && s.labels.at(k) == v;
    if (ok) out.push_back(s);
  }
  return out;
}

/// The one sample, checked to be one.
double one(const std::vector<Sample>& all, const std::string& name, const std::map<std::string, std::string>& want = {}) {
  auto f = find(all, name, want);
  INFO(name);
  REQUIRE(f.size() == 1);
  return f[0].value;
}

/// Port 0: colocd binds any free port, and status says which (no window in which another
/// process could take a port picked beforehand).
const char* const kAnyPort = "127.0.0.1:0";

std::string metrics_address(const Colocd& d) {
  json m = d.status()["daemon"]["metrics"];
  REQUIRE(m.is_string());
  const std::string a = m.get<std::string>();
  REQUIRE(a.rfind("127.0.0.1:", 0) == 0);
  REQUIRE(a != kAnyPort);  // the port bound, not the one asked for
  return a;
}

/// The inodes of the TCP sockets listening in this network namespace.
std::set<std::string> tcp_listen_inodes() {
  std::set<std::string> out;
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::string text = read_file(f);
    size_t pos = text.find('\n');
    while (pos != std::string::npos && pos + 1 < text.size()) {
      size_t nl = text.find('\n', pos + 1);
      std::istringstream line(text.substr(pos + 1, nl - pos - 1));
      std::string sl, local, remote, st, q, tr, rt, uid, to, inode;
      line >> sl >> local >> remote >> st >> q >> tr >> rt >> uid >> to >> inode;
      if (st == "0A") out.insert(inode);  // TCP_LISTEN
      pos = nl;
    }
  }
  return out;
}

/// The socket inodes process `pid` holds.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char target[256] = {};
      ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      std::string t(target, n > 0 ? size_t(n) : 0);
      if (t.rfind("socket:[", 0) == 0) out.insert(t.substr(8, t.size() - 9));
    }
    ::closedir(d);
  }
  return out;
}

/// The promtool binary (CI installs it with mk/deps.sh: Debian's prometheus package).
std::string promtool() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    std::string p = std::string(dir) + "/promtool";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string label(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return std::to_string(v.get<uint64_t>());
  return "";
}

/// A port someone else listens on (127.0.0.1): its fd and "127.0.0.1:PORT".
std::pair<int, std::string> busy_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return {fd, "127.0.0.1:" + std::to_string(ntohs(sa.sin_port))};
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd metrics: off by default, nothing listens") {
  Colocd d({}, true, false);
  json st = d.status();
  CHECK(st["daemon"]["metrics"].is_null());
  const std::set<std::string> listening = tcp_listen_inodes();
  for (const std::string& inode : socket_inodes(pid_t(st["daemon"]["pid"].get<int>())))
    CHECK_MESSAGE(!listening.count(inode), "colocd holds a listening TCP socket without --metrics-listen");
}

TEST_CASE("colocd metrics: a metrics port in use stops colocd at start, naming it, and leaves no socket behind") {
  // Someone else listens on the port.
  auto [busy, address] = busy_port();

  TempDir dir("colocd-metrics-busy");
  const std::string sock = dir / "colocd.sock";
  Env env;
  env.simgpu(dir);
  ProcResult r = run({build_path("bin/colocd"), "--socket", sock, "--state-dir", dir / "state", "--metrics-listen", address},
                     env, 30s);
  ::close(busy);
  CHECK(r.exit_code != 0);
  CHECK_MESSAGE(r.err.find(address) != std::string::npos, r.err);
  // A socket left behind would make every client's connect fail with "Connection refused"
  // instead of "no colocd".
  struct stat st;
  CHECK_MESSAGE(::stat(sock.c_str(), &st) != 0, "colocd left its socket behind");
}

TEST_CASE("colocd metrics: SIGHUP opens, moves and closes the listener; a host name or a port in use keeps the old one") {
  TempDir cfgdir("colocd-metrics-reload");
  const std::string file = cfgdir / "colocd.toml";
  write_file(file, "metrics_listen = \"\"\n");
  Colocd d({"--config", file}, true, false);
  CHECK(d.status()["daemon"]["metrics"].is_null());
  const pid_t pid = d.status()["daemon"]["pid"].get<pid_t>();
  auto lines = [&](const std::string& what) {
    const std::string log = d.log();
    size_t n = 0;
    for (size_t p = 0; (p = log.find(what, p)) != std::string::npos; p += what.size()) ++n;
    return n;
  };
  auto reload = [&](const std::string& text, const std::string& expect) {
    write_file(file, text);
    const size_t before = lines(expect);
    REQUIRE(::kill(pid, SIGHUP) == 0);
    REQUIRE_MESSAGE(wait_until([&] { return lines(expect) > before; }, 20s), "no '", expect, "' line:\n", d.log());
  };

  // Off -> on.
  reload(std::string("metrics_listen = \"") + kAnyPort + "\"\n", "SIGHUP: reloaded");
  const std::string first = metrics_address(d);
  CHECK(get_metrics(first).status == 200);

  // A host name is refused on reload (resolving it could stall colocd): nothing changes.
  reload("metrics_listen = \"localhost:0\"\n", "SIGHUP: metrics_listen 'localhost:0': a host name needs a restart");
  CHECK(d.status()["daemon"]["metrics"] == first);
  CHECK(get_metrics(first).status == 200);

  // Moved to another address: the new one serves, the old port closes.
  reload("metrics_listen = \"127.0.0.2:0\"\n", "SIGHUP: reloaded");
  json moved_to = d.status()["daemon"]["metrics"];
  REQUIRE(moved_to.is_string());
  const std::string moved = moved_to.get<std::string>();
  CHECK(moved.rfind("127.0.0.2:", 0) == 0);
  CHECK(get_metrics(moved).status == 200);
  {
    const int old_fd = connect_to(first);
    CHECK_MESSAGE(old_fd < 0, "something still listens on ", first);
    if (old_fd >= 0) ::close(old_fd);
  }
  reload(std::string("metrics_listen = \"") + kAnyPort + "\"\n", "SIGHUP: reloaded");
  CHECK(get_metrics(metrics_address(d)).status == 200);

  // A port someone else holds: one line says why, and /metrics is served again on the old
  // address (port 0 again: the kernel's pick, so status says where).
  auto [busy, taken] = busy_port();
  reload("metrics_listen = \"" + taken + "\"\n", "SIGHUP: metrics_listen: cannot serve '" + taken + "'");
  const std::string kept = metrics_address(d);
  CHECK(kept != taken);
  CHECK(get_metrics(kept).status == 200);
  CHECK(d.running());
  ::close(busy);

  // On -> off: the port closes.
  reload("metrics_listen = \"\"\n", "SIGHUP: reloaded");
  CHECK(d.status()["daemon"]["metrics"].is_null());
  const int fd = connect_to(kept);
  CHECK_MESSAGE(fd < 0, "something still listens on ", kept);
  if (fd >= 0) ::close(fd);
}

TEST_CASE("colocd metrics: a live scrape passes promtool and equals coloc status and jobs; ended jobs leave") {
  const std::string tool = promtool();
  REQUIRE_MESSAGE(!tool.empty(), "promtool is missing: install Debian's prometheus package (mk/deps.sh)");
  Colocd d({"--metrics-listen", kAnyPort}, true, false);
  const std::string addr = metrics_address(d);
  // A job holding memory, idle: nothing moves. A second asks past its own limit (a refusal).
  auto a = d.client({"--job", "held", "--mem", "6GiB", "attach:1:10GiB:1GiB", "alloc:0:3GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }, 20s));
  auto b = d.client({"--job", "greedy", "--mem", "1GiB", "attach:1:10GiB:512MiB", "alloc:0:2GiB", "goodbye:0", "exit:0"});
  CHECK(b->wait(20s).exit_code == 0);
  REQUIRE(wait_until([&] { return d.job("greedy").is_null(); }, 10s));

  HttpAnswer m = get_metrics(addr);
  REQUIRE(m.status == 200);
  // promtool reads the exposition on stdin.
  const std::string file = d.dir() / "scrape.txt";
  write_file(file, m.body);
  ProcResult check = run({"/bin/sh", "-c", "'" + tool + "' check metrics < '" + file + "'"}, Env(), 30s);
  CHECK_MESSAGE(check.exit_code == 0, describe(check), "\n", m.body);

  // Field by field against coloc status --json and coloc jobs --json (the CLI, as a user runs it).
  ProcResult st_run = run({build_path("bin/coloc"), "status", "--json"}, d.env(), 20s);
  ProcResult jobs_run = run({build_path("bin/coloc"), "jobs", "--json"}, d.env(), 20s);
  REQUIRE(st_run.exit_code == 0);
  REQUIRE(jobs_run.exit_code == 0);
  const json st = json::parse(st_run.out), jobs = json::parse(jobs_run.out);
  const auto s = parse(m.body);
  CHECK(one(s, "coloc_clients") == st["daemon"]["clients"].get<double>());
  CHECK(one(s, "coloc_jobs") == double(st["jobs"].size()));
  CHECK(one(s, "coloc_waiting_requests") == st["daemon"]["waiting_requests"].get<double>());
  REQUIRE(st["devices"].size() == 1);
  std::map<std::string, std::string> gpu_of;
  for (const json& dev : st["devices"]) {
    const std::map<std::string, std::string> l = {{"gpu", label(dev["index"])}, {"UUID", dev["uuid"].get<std::string>()}};
    gpu_of[dev["uuid"].get<std::string>()] = label(dev["index"]);
    CHECK(dev["uuid"].get<std::string>().rfind("GPU-", 0) == 0);
    for (auto [metric, field] : std::vector<std::pair<const char*, const char*>>{
             {"coloc_device_capacity_bytes", "capacity"},
             {"coloc_device_headroom_bytes", "headroom"},
             {"coloc_device_usable_bytes", "usable"},
             {"coloc_device_committed_bytes", "committed"},
             {"coloc_device_granted_bytes", "granted"},
             {"coloc_device_available_bytes", "available"},
             {"coloc_device_in_use_bytes", "in_use"},
             {"coloc_device_outside_bytes", "outside"},
             {"coloc_device_driver_overhead_bytes", "driver_overhead"},
             {"coloc_device_waiting_requests", "waiting_requests"},
             {"coloc_driver_ooms_total", "driver_ooms"}}) {
      INFO(metric);
      CHECK(one(s, metric, l) == dev[field].get<double>());
    }
    CHECK(one(s, "coloc_device_over_committed", l) == (dev["over_committed"].get<bool>() ? 1 : 0));
    CHECK(one(s, "coloc_device_in_use_bytes", l) == double(3ull << 30));
  }
  REQUIRE(jobs["jobs"].size() == 1);
  for (const json& job : jobs["jobs"]) {
    for (const json& dev : job["devices"]) {
      const std::map<std::string, std::string> l = {{"coloc_job", job["job"].get<std::string>()},
                                                    {"user", job["user"].get<std::string>()},
                                                    {"gpu", gpu_of.at(dev["uuid"].get<std::string>())},
                                                    {"UUID", dev["uuid"].get<std::string>()}};
      for (auto [metric, field] : std::vector<std::pair<const char*, const char*>>{
               {"coloc_job_limit_bytes", "limit"},
               {"coloc_job_reservation_bytes", "reserved"},
               {"coloc_job_granted_bytes", "granted"},
               {"coloc_job_in_use_bytes", "in_use"},
               {"coloc_job_peak_bytes", "peak"},
               {"coloc_job_driver_overhead_bytes", "driver_overhead"}}) {
        INFO(metric);
        CHECK(one(s, metric, l) == dev[field].get<double>());
      }
      CHECK(find(s, "coloc_job_predicted_peak_bytes", l).size() == (dev["predicted_peak"].is_null() ? 0u : 1u));
      // The device is not timesliced: no share measured, null in status and no sample (not 0).
      CHECK_MESSAGE(dev["gpu_share"].is_null(), dev.dump());
      CHECK(find(s, "coloc_job_gpu_share_ratio", l).empty());
      CHECK(find(s, "coloc_job_wait_seconds_total", l).size() == 5);
      CHECK(one(s, "coloc_job_gpu_time_seconds_total", l) == 0);
    }
  }
  // The counters: one admission each, the greedy job's refusal by its reason name.
  CHECK(one(s, "coloc_admissions_total") == 2);
  CHECK(one(s, "coloc_refusals_total", {{"reason", "own-limit"}}) == 1);
  CHECK(one(s, "coloc_refusals_total", {{"reason", "device-full"}}) == 0);
  CHECK(one(s, "coloc_grant_round_trip_seconds_count", {{"request", "attach"}}) == 2);
  CHECK(one(s, "coloc_grant_round_trip_seconds_count", {{"request", "grow"}}) >= 1);
  CHECK(one(s, "coloc_grant_round_trip_seconds_bucket", {{"request", "grow"}, {"le", "+Inf"}}) ==
        one(s, "coloc_grant_round_trip_seconds_count", {{"request", "grow"}}));

  // Every family the docs list is what a scrape shows, with its type (so the two cannot drift).
  const std::string ops = read_file(std::string(COLOC_SOURCE_DIR) + "/docs/operations.md");
  std::set<std::string> documented;
  static const std::regex kRow(R"(\n\| `(coloc_[a-z_]+)` \| (gauge|counter|histogram) \|)");
  for (std::sregex_iterator it(ops.begin(), ops.end(), kRow), e; it != e; ++it)
    documented.insert(std::string((*it)[1]) + " " + std::string((*it)[2]));
  std::set<std::string> scraped;
  static const std::regex kType(R"(# TYPE (coloc_[a-z_]+) ([a-z]+))");
  for (std::sregex_iterator it(m.body.begin(), m.body.end(), kType), e; it != e; ++it)
    scraped.insert(std::string((*it)[1]) + " " + std::string((*it)[2]));
  CHECK(scraped.size() == coloc::metrics::families().size());
  CHECK(documented == scraped);

  // SIGKILL: the job ends, its series leave, the release is counted.
  a->kill(SIGKILL);
  a->wait(10s);
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }, 10s));
  std::vector<Sample> after;
  CHECK(wait_until([&] {
    after = parse(get_metrics(addr).body);
    return find(after, "coloc_job_in_use_bytes").empty() && !find(after, "coloc_sigkill_releases_total").empty() &&
           find(after, "coloc_sigkill_releases_total")[0].value == 1;
  }, 10s, 50ms));
  for (const Sample& x : after) CHECK_MESSAGE(!x.labels.count("coloc_job"), x.name);
  CHECK(one(after, "coloc_admissions_total") == 2);
}

TEST_CASE("colocd metrics: each waiting job is a coloc_job_waiting series, its position, labelled with its reason") {
  Colocd d({"--metrics-listen", kAnyPort}, true, false);
  const std::string addr = metrics_address(d);
  auto held = d.client({"--job", "held", "--mem", "8GiB", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*held, "holding"); }, 20s));
  auto first = d.client({"--job", "first", "--mem", "4GiB", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return d.job("first")["state"] == "admission-pending"; }, 20s));
  auto second = d.client({"--job", "second", "--mem", "4GiB", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return d.job("second")["state"] == "admission-pending"; }, 20s));
  // The series line of `job`, or "".
  auto series = [](const std::string& body, const std::string& job) {
    std::istringstream in(body);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("coloc_job_waiting{coloc_job=\"" + job + "\"", 0) == 0) return l;
    return std::string();
  };
  HttpAnswer m = get_metrics(addr);
  REQUIRE(m.status == 200);
  const std::string f = series(m.body, "first"), s2 = series(m.body, "second");
  CHECK_MESSAGE(f.find("reason=\"Resources\"} 1") != std::string::npos, m.body);
  CHECK_MESSAGE(s2.find("reason=\"Queue\"} 2") != std::string::npos, m.body);
  CHECK_MESSAGE(series(m.body, "held").empty(), m.body);  // running: no series
  // And as coloc status --json has them.
  CHECK(d.job("first")["queue"]["reason"] == "Resources");
  CHECK(d.job("second")["queue"]["position"] == 2);
  for (auto* p : {&held, &first, &second}) (*p)->kill(SIGKILL);
}

TEST_CASE("colocd metrics: hostile scrapers (idle, garbage, huge, 100 at once) do not stall a job's allocations") {
  Colocd d({"--metrics-listen", kAnyPort}, true, false);
  const std::string addr = metrics_address(d);
  // Idle connections that never send a byte hold part of the exporter's slots.
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i)
    if (int fd = connect_to(addr); fd >= 0) idle.push_back(fd);
  CHECK(idle.size() == 40);
  // 100 scrapers at once, in a loop: most scrape, some send garbage or a huge request.
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes_ok{0};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 100; ++i)
    scrapers.emplace_back([&, i] {
      while (!stop) {
        if (i % 10 == 0) {
          (void)http(addr, std::string(100000, 'x'), 2s);  // too large
        } else if (i % 10 == 1) {
          (void)http(addr, "BREW /coffee HTCPCP/1.0\r\n\r\n", 2s);
        } else if (get_metrics(addr).status == 200) {
          ++scrapes_ok;
        }
      }
    });
  REQUIRE(wait_until([&] { return scrapes_ok >= 50; }, 20s));
  // Meanwhile a job grows and shrinks: each a round trip through colocd's loop.
  std::vector<std::string> steps = {"--job", "busy", "attach:1:10GiB:256MiB"};
  for (int i = 0; i < 300; ++i) {
    steps.push_back("alloc:0:1GiB");
    steps.push_back("free:0:1GiB");
  }
  steps.push_back("goodbye:0");
  steps.push_back("exit:0");
  const int before = scrapes_ok;
  auto job = d.client(steps);
  ProcResult r = job->wait(30s);  // generous: under sanitizers on a loaded machine
  const int during = scrapes_ok - before;
  // colocd still answers its own socket meanwhile.
  CHECK(d.ask(coloc::proto::AdminOp::kStatus).kind == coloc::cli::Answer::Kind::kOk);
  for (int fd : idle) ::close(fd);
  stop = true;
  for (auto& t : scrapers) t.join();
  CHECK_MESSAGE(r.exit_code == 0, describe(r));
  CHECK(!r.timed_out);
  const auto allocs = events_of(*job, "alloc");
  CHECK(allocs.size() == 300);
  double slowest_ms = 0;
  for (const json& a : allocs) {
    CHECK(a["ok"] == true);
    slowest_ms = std::max(slowest_ms, a["took_ns"].get<double>() / 1e6);
  }
  CHECK(slowest_ms < 2500);  // a grant round trip is tens of microseconds; a loop stalled by a scraper, 5 s or more
  MESSAGE("300 grows under 100 hostile scrapers: slowest " << slowest_ms << " ms; " << during << " scrapes served meanwhile");
  // Served again at once; every wrong request gets its error.
  CHECK(get_metrics(addr).status == 200);
  CHECK(http(addr, "GET /other HTTP/1.1\r\n\r\n").status == 404);
  CHECK(http(addr, "POST /metrics HTTP/1.1\r\n\r\n").status == 405);
  CHECK(http(addr, "garbage\r\n\r\n").status == 400);
  CHECK(http(addr, std::string(20000, 'G')).status == 431);
}

TEST_CASE("colocd metrics: on simgpu, gpu is NVML's index, and processes outside coloc are a series") {
  using namespace coloc::test::e2e;
  if (simulated_only()) return;
  Node n("8GiB,16GiB", {"--metrics-listen", kAnyPort});
  const std::string addr = [&] {
    json m = n.status()["daemon"]["metrics"];
    REQUIRE(m.is_string());
    return m.get<std::string>();
  }();
  // A job under coloc on NVML's device 1 (the only one colocd's books know, so its first: gpu must
  // still say 1), and a process outside coloc beside it.
  auto outside = std::make_unique<Proc>(std::vector<std::string>{cuprobe(), "init", "ctx", "1", "alloc", "1GiB", "o", "touch",
                                                                 n.file("taken"), "hold-file", n.file("release")},
                                        n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  auto job = n.run({"--job", "inside", "--mem", "4GiB"}, {cuprobe(), "init", "ctx", "1", "alloc", "1GiB", "b", "touch",
                                                          n.file("admitted"), "hold-file", n.file("release")});
  REQUIRE(reached(*job, n.file("admitted")));
  json st;
  REQUIRE_MESSAGE(wait_until([&] {
    st = n.status();
    for (const json& d : st["devices"])
      if (d["outside_processes"].is_array() && !d["outside_processes"].empty()) return true;
    return false;
  }, 20s, 20ms), st.dump(1));  // (not n.status(): a message that asserts deadlocks doctest's reporter)
  std::vector<Sample> s;
  REQUIRE(wait_until([&] {
    s = parse(get_metrics(addr).body);
    return !find(s, "coloc_outside_process_memory_bytes").empty() && !find(s, "coloc_job_in_use_bytes").empty();
  }, 10s, 50ms));
  // Two devices: NVML's device 0, which no coloc job used (listed from NVML, idle), after the
  // one the job met.
  REQUIRE(st["devices"].size() == 2);
  {
    const json& idle = st["devices"][1];
    INFO(idle.dump());
    CHECK(idle["index"] == 0);
    CHECK(idle["index_from"] == "nvml");
    CHECK(idle["idle"] == true);
    CHECK(idle["capacity"] == 8 * GiB);
    CHECK(one(s, "coloc_device_capacity_bytes", {{"gpu", "0"}, {"UUID", idle["uuid"].get<std::string>()}}) == 8 * GiB);
  }
  for (const json& d : {st["devices"][0]}) {
    INFO(d.dump());
    CHECK(d["index_from"] == "nvml");
    const std::map<std::string, std::string> l = {{"gpu", label(d["index"])}, {"UUID", d["uuid"].get<std::string>()}};
    CHECK(one(s, "coloc_device_info", {{"gpu", label(d["index"])}, {"UUID", d["uuid"].get<std::string>()}, {"index_from", "nvml"}}) == 1);
    CHECK(one(s, "coloc_device_capacity_bytes", l) == d["capacity"].get<double>());
    CHECK(d["index"] == 1);
    CHECK(d["capacity"] == 16 * GiB);  // NVML's device 1 is simgpu's second
    REQUIRE(d["outside_processes"].size() == 1);
    const json& p = d["outside_processes"][0];
    auto o = l;
    o["pid"] = std::to_string(outside->pid());
    o["user"] = p["user"].get<std::string>();
    CHECK(one(s, "coloc_outside_process_memory_bytes", o) == p["used_bytes"].get<double>());
    auto j = l;
    j["coloc_job"] = st["jobs"][0]["job"].get<std::string>();  // (coloc run's id for --job inside)
    CHECK(j["coloc_job"].rfind("inside", 0) == 0);
    CHECK(one(s, "coloc_job_in_use_bytes", j) == st["jobs"][0]["devices"][0]["in_use"].get<double>());
    CHECK(st["jobs"][0]["devices"][0]["in_use"] == GiB + kContext);  // its allocation and its context
  }
  write_file(n.file("release"), "");
  CHECK(finish(*job).exit_code == 0);
  CHECK(outside->wait(20s).exit_code == 0);
}

}  // TEST_SUITE
