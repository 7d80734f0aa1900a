// daemon/metrics/: the exposition from a snapshot (labels, escaping, null figures, bounded
// outside processes), the counters (wait time, refusals, the histogram), and the exporter's
// hand-off with the loop (asks for a snapshot, serves it, 503 before the first).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <thread>

#include "metrics/counters.h"
#include "metrics/exporter.h"
#include "metrics/exposition.h"
#include "report/job_recorder.h"

using namespace coloc;
using nlohmann::json;

namespace {

std::string get(const std::string& addr, const std::string& request = "GET /metrics HTTP/1.1\r\n\r\n") {
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
  ::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 10000) > 0) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, size_t(n));
  }
  ::close(fd);
  return in;
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("metrics: label values are escaped, cut, and kept ASCII") {
  CHECK(metrics::label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(metrics::label_value("caf\xc3\xa9\x01") == "caf???");
  CHECK(metrics::label_value(std::string(300, 'x'), 64).size() == 64);
}

TEST_CASE("metrics: the exposition of a snapshot") {
  metrics::Snapshot s;
  s.status = json::parse(R"({
    "daemon": {"clients": 3, "waiting_requests": 1, "holding_for_restart": false},
    "devices": [{"uuid": "GPU-1", "index": 2, "index_from": "nvml", "policy": {"mode": "share"},
                 "capacity": 1000, "headroom": 20, "usable": 900, "committed": 500, "granted": 400,
                 "available": 400, "in_use": 300, "outside": 80, "driver_overhead": 5,
                 "waiting_requests": 1, "over_committed": false, "driver_ooms": 2,
                 "outside_processes": [{"pid": 7, "user": "bob", "command": "python \"x\"", "used_bytes": 70}]}],
    "jobs": [{"job": "j1", "uid": 1000, "user": "alice",
              "devices": [{"uuid": "GPU-1", "limit": null, "reserved": 100, "granted": 400, "in_use": 300,
                           "peak": 350, "predicted_peak": null, "driver_overhead": 5, "gpu_share": null}]}]})");
  s.jobs["1000:j1"]["GPU-1"].wait_seconds = {1.5, 0, 0.25, 0, 0};
  s.counters.refusals[uint32_t(proto::Reason::kOwnLimit)] = 4;
  s.counters.grant_round_trip[0].observe(30'000);  // 30 µs
  const std::string t = metrics::render(s);
  CHECK(t.find("coloc_device_capacity_bytes{gpu=\"2\",UUID=\"GPU-1\"} 1000\n") != std::string::npos);
  CHECK(t.find("coloc_driver_ooms_total{gpu=\"2\",UUID=\"GPU-1\"} 2\n") != std::string::npos);
  CHECK(t.find("coloc_device_over_committed{gpu=\"2\",UUID=\"GPU-1\"} 0\n") != std::string::npos);
  CHECK(t.find("coloc_outside_process_memory_bytes{gpu=\"2\",UUID=\"GPU-1\",pid=\"7\",user=\"bob\",command=\"python \\\"x\\\"\"} 70\n") !=
        std::string::npos);
  const std::string job = "coloc_job=\"j1\",user=\"alice\",gpu=\"2\",UUID=\"GPU-1\"";
  CHECK(t.find("coloc_job_in_use_bytes{" + job + "} 300\n") != std::string::npos);
  CHECK(t.find("coloc_job_limit_bytes{") == std::string::npos);           // no limit: no sample
  CHECK(t.find("coloc_job_predicted_peak_bytes{") == std::string::npos);  // no prediction yet
  CHECK(t.find("coloc_job_wait_seconds_total{" + job + ",cause=\"memory\"} 1.5\n") != std::string::npos);
  CHECK(t.find("coloc_job_wait_seconds_total{" + job + ",cause=\"quantum\"} 0.25\n") != std::string::npos);
  CHECK(t.find("coloc_refusals_total{reason=\"own-limit\"} 4\n") != std::string::npos);
  CHECK(t.find("coloc_refusals_total{reason=\"user-cap\"} 0\n") != std::string::npos);
  CHECK(t.find("coloc_grant_round_trip_seconds_bucket{request=\"grow\",le=\"2.5e-05\"} 0\n") != std::string::npos);
  CHECK(t.find("coloc_grant_round_trip_seconds_bucket{request=\"grow\",le=\"5e-05\"} 1\n") != std::string::npos);
  CHECK(t.find("coloc_grant_round_trip_seconds_bucket{request=\"grow\",le=\"+Inf\"} 1\n") != std::string::npos);
  CHECK(t.find("coloc_grant_round_trip_seconds_count{request=\"grow\"} 1\n") != std::string::npos);
  // Every family has HELP and TYPE, samples or not; "job" is never a label.
  for (auto& [name, type] : metrics::families()) CHECK(t.find("# TYPE " + name + " " + type + "\n") != std::string::npos);
  CHECK(t.find("{job=") == std::string::npos);
  CHECK(t.find(",job=") == std::string::npos);
}

TEST_CASE("metrics: suspensions are counted with the bytes they moved and the time they lasted") {
  metrics::Counters c;
  c.on_suspended(3ull << 30);
  c.on_suspended(1ull << 30);
  c.on_suspension_end(2.5);
  metrics::Snapshot s;
  s.counters = c.values();
  const std::string t = metrics::render(s);
  CHECK(t.find("coloc_suspensions_total 2\n") != std::string::npos);
  CHECK(t.find("coloc_suspension_bytes_total 4294967296\n") != std::string::npos);
  CHECK(t.find("coloc_suspended_seconds_total 2.5\n") != std::string::npos);
}

TEST_CASE("metrics: a waiting job's position in the queue, labelled with its reason") {
  metrics::Snapshot s;
  s.status = json::parse(R"({
    "daemon": {"clients": 2, "waiting_requests": 1, "holding_for_restart": false},
    "devices": [{"uuid": "GPU-1", "index": 0, "index_from": "nvml", "policy": {"mode": "share"}, "capacity": 1000}],
    "jobs": [{"job": "ft", "uid": 1000, "user": "alice",
              "devices": [{"uuid": "GPU-1", "reserved": 0, "granted": 0, "in_use": 0, "peak": 0,
                           "queue": {"reason": "Queue", "position": 2, "behind": "a"}}]},
             {"job": "run", "uid": 1000, "user": "alice",
              "devices": [{"uuid": "GPU-1", "reserved": 0, "granted": 0, "in_use": 0, "peak": 0, "queue": null}]}]})");
  const std::string t = metrics::render(s);
  CHECK_MESSAGE(t.find("coloc_job_waiting{coloc_job=\"ft\",user=\"alice\",gpu=\"0\",UUID=\"GPU-1\",reason=\"Queue\"} 2\n") !=
                    std::string::npos,
                t);
  CHECK(t.find("coloc_job_waiting{coloc_job=\"run\"") == std::string::npos);  // running: no sample
}

TEST_CASE("metrics: outside processes are bounded, the largest kept") {
  metrics::Snapshot s;
  s.status = json{{"devices", json::array()}};
  json procs = json::array();
  for (int i = 0; i < 100; ++i) procs.push_back({{"pid", i}, {"user", "u"}, {"command", "c"}, {"used_bytes", i}});
  s.status["devices"].push_back({{"uuid", "GPU-1"}, {"index", 0}, {"outside_processes", procs}});
  const std::string t = metrics::render(s);
  size_t n = 0;
  for (size_t p = t.find("\ncoloc_outside_process_memory_bytes{"); p != std::string::npos;
       p = t.find("\ncoloc_outside_process_memory_bytes{", p + 1))
    ++n;
  CHECK(n == metrics::kMaxOutsideProcesses);
  CHECK(t.find("pid=\"99\"") != std::string::npos);
  CHECK(t.find("pid=\"0\"") == std::string::npos);
}

TEST_CASE("metrics: counters of waits, refusals and admissions from broker events") {
  metrics::Counters c;
  broker::Event e;
  e.job = 1;
  e.kind = broker::Event::Kind::kWaitBegin;
  e.at = 1'000'000'000;
  c.on_event(e);
  e.at = 2'000'000'000;
  c.on_event(e);  // a second process of the job parks too
  e.kind = broker::Event::Kind::kWaitEnd;
  e.at = 2'500'000'000;
  c.on_event(e);
  e.at = 3'000'000'000;
  c.on_event(e);
  e.kind = broker::Event::Kind::kWaitEnd;  // one begun before a restart: no time of ours
  c.on_event(e);
  e.kind = broker::Event::Kind::kRefused;
  e.reason = broker::Reason::kDeviceFull;
  c.on_event(e);
  e.kind = broker::Event::Kind::kAdmitted;
  c.on_event(e);
  const metrics::Values& v = c.values();
  CHECK(v.waits[uint32_t(metrics::WaitKind::kGrowth)] == 2);
  CHECK(v.wait_seconds[uint32_t(metrics::WaitKind::kGrowth)] == doctest::Approx(2.5));
  CHECK(v.refusals[uint32_t(broker::Reason::kDeviceFull)] == 1);
  CHECK(v.admissions == 1);
}

TEST_CASE("metrics: a job's totals (waits by cause, GPU time) are its report's figures") {
  constexpr uint64_t kSec = 1'000'000'000;
  broker::Uuid dev;
  dev.bytes.fill(0x22);
  report::JobRecorder r(1, {1000, "j"}, "alice", "python train.py", 0, "normal", 100 * kSec, 1700000000000);
  report::DeviceSample s;
  s.capacity = 8ull << 30;
  s.live.gate_wait_ns[uint32_t(pages::GateState::kTimeslice)] = kSec / 4;
  s.live.gate_wait_ns[uint32_t(pages::GateState::kPaused)] = kSec / 2;
  s.live.busy_ns = 3 * kSec;
  r.sample(dev, 101 * kSec, s);
  broker::Event e{};
  e.device = dev;
  e.kind = broker::Event::Kind::kWaitBegin;
  e.at = 102 * kSec;
  r.on_event(e);
  e.kind = broker::Event::Kind::kWaitEnd;
  e.at = 104 * kSec;
  r.on_event(e);
  e.kind = broker::Event::Kind::kWaitBegin;  // open at `now`: counts up to it
  e.admission = true;
  e.at = 105 * kSec;
  r.on_event(e);
  const uint64_t now = 106 * kSec;
  const auto totals = r.totals(now);
  REQUIRE(totals.count(dev) == 1);
  const auto& t = totals.at(dev);
  const json d = r.to_json(now)["devices"][0];
  CHECK(double(t.wait_memory) / 1e9 == doctest::Approx(d["wait_memory_s"].get<double>()));
  CHECK(double(t.wait_memory) / 1e9 == doctest::Approx(2.0));
  CHECK(double(t.wait_admission) / 1e9 == doctest::Approx(d["wait_admission_s"].get<double>()));
  CHECK(double(t.wait_admission) / 1e9 == doctest::Approx(1.0));
  CHECK(double(t.gate_wait_ns[uint32_t(pages::GateState::kTimeslice)]) / 1e9 == doctest::Approx(d["gate_wait_s"]["quantum"].get<double>()));
  CHECK(double(t.gate_wait_ns[uint32_t(pages::GateState::kPaused)]) / 1e9 == doctest::Approx(d["gate_wait_s"]["pause"].get<double>()));
  CHECK(double(t.busy_ns) / 1e9 == doctest::Approx(d["gpu_time_s"].get<double>()));
}

TEST_CASE("metrics: the exporter asks the loop for a snapshot, serves it, and says 503 before the first") {
  metrics::Limits lim;
  lim.publish_wait = std::chrono::milliseconds(200);
  auto e = metrics::Exporter::start("127.0.0.1:0", lim);
  REQUIRE(e);
  auto& ex = *e.value();
  // Nobody publishes: the scrape asks (wanted_fd), waits publish_wait, then gets 503.
  std::string first = get(ex.address());
  CHECK(first.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(ex.take_wanted());
  CHECK(!ex.take_wanted());
  // A loop that publishes when asked.
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) {
      pollfd p{ex.wanted_fd(), POLLIN, 0};
      if (::poll(&p, 1, 20) > 0 && ex.take_wanted()) {
        auto s = std::make_shared<metrics::Snapshot>();
        s->status = json{{"daemon", {{"clients", 5}}}};
        ex.publish(s);
      }
    }
  });
  std::string ok = get(ex.address());
  stop = true;
  loop.join();
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("\ncoloc_clients 5\n") != std::string::npos);
  // Fresh: served without asking again.
  CHECK(get(ex.address()).find("\ncoloc_clients 5\n") != std::string::npos);
  CHECK(get(ex.address(), "HEAD /metrics HTTP/1.0\r\n\r\n").find("coloc_clients") == std::string::npos);
  CHECK(metrics::Exporter::start("127.0.0.1").error().message().find("HOST:PORT") != std::string::npos);
  CHECK(!metrics::Exporter::start("127.0.0.1:99999"));
  CHECK(!metrics::Exporter::start(ex.address()));  // in use
}

TEST_CASE("metrics: the exporter closes a connection that sends nothing, and one over the request bound") {
  metrics::Limits lim;
  lim.request_timeout = std::chrono::milliseconds(100);
  lim.max_request = 1024;
  auto e = metrics::Exporter::start("127.0.0.1:0", lim);
  REQUIRE(e);
  const std::string addr = e.value()->address();
  // Idle: closed unanswered after request_timeout.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(get(addr, "").empty());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(e.value()->stats().timed_out == 1);
  // A request head that never ends within the bound: 431.
  CHECK(get(addr, std::string(2000, 'A')).rfind("HTTP/1.1 431", 0) == 0);
  CHECK(e.value()->stats().bad_requests == 1);
}

TEST_CASE("metrics: idle connections at the cap give their places to a scraper") {
  // One peer holds every connection with a byte of a request each: before, a scraper waited in
  // the backlog until they timed out (request_timeout, 5 s; a peer reconnecting kept it out for good).
  metrics::Limits lim;
  lim.max_connections = 4;
  lim.request_timeout = std::chrono::seconds(30);
  lim.idle_evict = std::chrono::milliseconds(50);
  lim.fresh = std::chrono::hours(1);
  auto e = metrics::Exporter::start("127.0.0.1:0", lim);
  REQUIRE(e);
  auto& ex = *e.value();
  auto s = std::make_shared<metrics::Snapshot>();
  s->status = json{{"daemon", {{"clients", 7}}}};
  ex.publish(s);
  const std::string addr = ex.address();
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
  ::inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    (void)!::send(fd, "G", 1, MSG_NOSIGNAL);
    idle.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string ok = get(addr);
  CHECK(ok.find("\ncoloc_clients 7\n") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(ex.stats().evicted >= 1);
  CHECK(ex.stats().timed_out == 0);
  // A connection that sent its request is never evicted: it is answered.
  for (int fd : idle) ::close(fd);
}

}  // TEST_SUITE
