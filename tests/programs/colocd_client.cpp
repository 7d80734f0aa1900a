// colocd_client — a scriptable process that speaks the colocd protocol like a job would
// (libcoloc.so's daemon-backed broker does the same from inside a real job). Integration tests and
// the benchmark drive colocd with it; it is also the reference for the client-side contract:
// register, map the pages, attach (admission), allocate with the fast-path rule of pages.h, grow,
// shrink lazily, report driver OOMs, say goodbye, and after a daemon restart reconnect with
// back-off, re-register the exact ledger and re-send a parked request.
//
//   colocd_client [options] STEP...
//     --socket PATH  --job ID  --mem SIZE  --priority high|normal|best-effort  --on-full wait|fail
//     --wait-timeout SECONDS  --proto 1|2  --as-user NAME (setuid before connecting; needs root)
//     --reconnect (reconnect and re-register when the daemon goes away)
//     --estimate SIZE (the job's declared estimate per device, v10: as COLOC_MEM_ESTIMATE)
//     --step LABEL (the process's step within its job, v11: as COLOC_STEP)
//   Steps:
//     attach:N:CAP:REQ[:FREE[:DEVCAP]][,...]   admission on devices (uuid from number N, or N = a
//                               CUDA UUID "GPU-..." as coloc status prints it; FREE "-" = unknown;
//                               DEVCAP: the process's COLOC_MEM_LIMIT_<n> for it, v5)
//     footprint:SLOT:FREE[:COUNT]   ContextFootprint (the free memory after the first context), COUNT times
//     alloc:SLOT:BYTES[:FREE]   allocate: fast path within the grant, else Grow (and wait)
//     free:SLOT:BYTES           free; returns surplus grant lazily (Shrink) past two grant steps
//     shrink:SLOT:BYTES         Shrink to keep BYTES
//     oom:SLOT:BYTES[:FREE]     report a driver OOM
//     oom-flood:SLOT:BYTES:FREE:COUNT:MS   report it COUNT times, MS ms apart
//     cancel-after:MS           the next alloc cancels its wait after MS milliseconds
//     sleep:MS   hold[:MS] (wait for the daemon's messages; reconnect if it goes away)
//     hold-file:PATH            hold until PATH exists
//     close                     hang up without a goodbye (the process keeps running)
//     wait-file:PATH            wait until PATH exists, without reading the connection
//     fork-hold   goodbye:CODE   exit:CODE
//     status                    the attached slots (grant, limit, in use, launch gate) and the gate summary
//     rejoin                    drop the connection and re-register with the ledger (as after a restart)
//     raw:HEX                   send raw bytes (malformed-input tests)
//     sendfd                    send a valid Shrink carrying an unasked descriptor
//     recv                      read one datagram and print it (e.g. the daemon's Error)
//     tamper                    try to make the control page writable (must fail)
// Every step prints one JSON line on stdout. Sizes are plain bytes or coloc/size.h units.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "coloc/protocol.h"
#include "coloc/size.h"
#include "coloc/wire.h"

using namespace coloc;

namespace {

struct Slot {
  bool attached = false;
  proto::DeviceInfo device{};
  uint64_t peak = 0;
};

struct Client {
  std::string socket = proto::kDefaultSocket;
  std::string job;
  uint64_t limit = proto::kNoLimit;
  proto::Priority priority = proto::Priority::kNormal;
  proto::OnFull on_full = proto::OnFull::kWait;
  uint64_t wait_timeout_ns = 0;
  uint64_t estimate = 0;  // bytes per device; 0 = none
  std::string step;       // the process's step within its job (v11); "" = none
  uint16_t version = proto::kVersion;
  bool reconnect = false;
  int cancel_after_ms = -1;

  int fd = -1;
  uint32_t seq = 0;
  uint64_t grant_step = 64ull << 20;
  uint64_t epoch = 0;
  wire::Pages pages;
  Slot slots[proto::kMaxDevices];
  std::vector<unsigned char> buf = std::vector<unsigned char>(proto::kMaxMessage);
};

void out(const std::string& json) {
  std::printf("%s\n", json.c_str());
  std::fflush(stdout);
}

[[noreturn]] void die(const std::string& what) {
  out("{\"event\":\"error\",\"text\":\"" + what + "\"}");
  std::exit(3);
}

uint64_t size_arg(const std::string& s) {
  SizeParse p = parse_size(s);
  if (!p) die("bad size '" + s + "'");
  return *p.bytes;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t i = s.find(sep, start);
    parts.push_back(s.substr(start, i - start));
    if (i == std::string::npos) return parts;
    start = i + 1;
  }
}

/// The device `spec` names: a number N (a made-up UUID ending in N) or a CUDA UUID as colocd
/// prints it ("GPU-1234abcd-...": a real or simgpu device).
proto::DeviceInfo device_info(const std::string& spec, uint64_t cap, uint64_t free) {
  proto::DeviceInfo d;
  std::memset(&d, 0, sizeof d);
  if (spec.rfind("GPU-", 0) == 0) {
    std::string hex;
    for (char ch : spec.substr(4))
      if (ch != '-') hex += ch;
    if (hex.size() != 32) die("a device UUID has 32 hex digits: " + spec);
    for (int i = 0; i < 16; ++i) d.uuid[i] = uint8_t(std::stoul(hex.substr(size_t(2 * i), 2), nullptr, 16));
  } else {
    std::memset(d.uuid, 0xC0, sizeof d.uuid);
    d.uuid[15] = uint8_t(std::atoi(spec.c_str()));
  }
  d.capacity = cap;
  d.physical_free = free;
  return d;
}

/// Waits for the reply to `seq` (other datagrams are unexpected here). Returns 0 or -errno.
int await(Client& c, uint32_t seq, proto::Message* m, int* fds = nullptr, size_t* nfds = nullptr, int timeout_ms = -1) {
  for (;;) {
    proto::Status st;
    int rc = wire::recv_message(c.fd, m, c.buf.data(), c.buf.size(), timeout_ms, fds, fds ? 2 : 0, nfds, &st);
    if (rc != 0) return rc;
    if (m->type() == proto::MsgType::kError) {
      out(std::string("{\"event\":\"refused\",\"text\":\"") + m->body.error.text + "\"}");
      return -EPROTO;
    }
    if (m->h.seq == seq) return 0;
  }
}

int do_register(Client& c, bool resume) {
  auto r = proto::RegisterMsg{};
  std::memset(&r, 0, sizeof r);
  r.limit = c.limit;
  r.priority = uint8_t(c.priority);
  r.on_full = uint8_t(c.on_full);
  r.wait_timeout_ns = c.wait_timeout_ns;
  wire::Cmdline cmd;
  wire::read_cmdline(&cmd);
  r.cmdline_hash = cmd.hash;
  std::memcpy(r.cmdline, cmd.text, sizeof r.cmdline);
  proto::set_string(r.job, c.job.c_str());
  // As libcoloc.so: the environment's footprint hash (v9; encode() leaves it out for older daemons).
  r.env_hash = wire::env_fingerprint([](const char* n) { return ::getenv(n); });
  r.flags = proto::kRegEnvHash;
  if (c.estimate > 0) {  // (v10; encode() leaves it out for older daemons)
    r.estimate = c.estimate;
    r.flags = uint16_t(r.flags | proto::kRegEstimate);
  }
  if (!c.step.empty()) {  // (v11, as libcoloc.so sends COLOC_STEP; encode() leaves it out for older daemons)
    proto::set_string(r.step, c.step.c_str());
    r.flags = uint16_t(r.flags | proto::kRegStep);
  }
  if (resume) {
    // The exact ledger, slot i as entry i: the daemon rebuilds its books from it.
    r.flags = uint16_t(r.flags | proto::kRegResume);
    uint32_t n = 0;
    while (n < proto::kMaxDevices && c.slots[n].attached) ++n;
    r.n_ledger = n;
    for (uint32_t i = 0; i < n; ++i) {
      proto::LedgerEntry& e = r.ledger[i];
      e.device = c.slots[i].device;
      e.in_use = c.pages.stats->slots[i].in_use.load();
      e.grant = c.pages.control->slots[i].grant.load();
      e.peak = std::max(c.pages.stats->slots[i].peak.load(), e.in_use);
      e.limit = c.pages.control->slots[i].limit.load();
      e.overhead = std::min(c.pages.control->slots[i].overhead.load(), e.device.capacity);  // 0 before layout 3
    }
    r.priority = uint8_t(c.pages.control->priority.load());
  }
  uint32_t seq = ++c.seq;
  proto::Status st;
  if (int rc = wire::send(c.fd, r, seq, c.version, &st); rc != 0) return rc;
  proto::Message m;
  int fds[2];
  size_t nfds = 0;
  if (int rc = await(c, seq, &m, fds, &nfds); rc != 0) return rc;
  if (m.type() != proto::MsgType::kRegisterReply || nfds != 2) return -EPROTO;
  wire::Pages fresh;
  if (int rc = wire::map_pages(fds[0], fds[1], &fresh); rc != 0) return rc;
  if (resume) {
    // Copy the counters into the new stats page before anything else is sent.
    for (uint32_t i = 0; i < proto::kMaxDevices; ++i) {
      auto& from = c.pages.stats->slots[i];
      auto& to = fresh.stats->slots[i];
      to.in_use.store(from.in_use.load());
      to.peak.store(from.peak.load());
      to.allocs.store(from.allocs.load());
      to.frees.store(from.frees.load());
      to.failures.store(from.failures.load());
      to.wait_memory_ns.store(from.wait_memory_ns.load());
      to.wait_admission_ns.store(from.wait_admission_ns.load());
      to.launches.store(from.launches.load());
    }
    wire::unmap_pages(&c.pages);
  }
  c.pages = fresh;
  c.grant_step = m.body.register_reply.grant_step;
  c.epoch = m.body.register_reply.epoch;
  c.job = m.body.register_reply.job;
  out("{\"event\":\"" + std::string(resume ? "reregistered" : "registered") + "\",\"job\":\"" + c.job +
      "\",\"pid\":" + std::to_string(getpid()) + ",\"limit\":" + std::to_string(m.body.register_reply.limit) +
      ",\"daemon_version\":" + std::to_string(m.body.register_reply.daemon_version) +
      ",\"layout\":" + std::to_string(c.pages.control->layout_version) +
      ",\"stats_layout\":" + std::to_string(c.pages.stats->layout_version) + "}");
  return 0;
}

/// After the daemon went away: reconnect with back-off and re-register the ledger.
void reconnect(Client& c) {
  ::close(c.fd);
  c.fd = -1;
  out("{\"event\":\"daemon-lost\"}");
  wire::Backoff b;
  for (;;) {
    int rc = wire::connect_retry(c.socket.c_str(), 60'000'000'000ull, &c.fd, &b);
    if (rc != 0) die("reconnect failed: " + std::string(std::strerror(-rc)));
    if (do_register(c, true) == 0) return;
    ::close(c.fd);
    c.fd = -1;
    wire::sleep_ns(b.next());
  }
}

void step_attach(Client& c, const std::string& spec) {
  auto a = proto::AttachMsg{};
  std::memset(&a, 0, sizeof a);
  for (const std::string& d : split(spec, ',')) {
    auto f = split(d, ':');
    if (f.size() < 3) die("attach wants N:CAP:REQ[:FREE[:DEVCAP]]");
    proto::AttachDevice& ad = a.devices[a.n_devices++];
    ad.device = device_info(f[0], size_arg(f[1]), f.size() > 3 && f[3] != "-" ? size_arg(f[3]) : proto::kUnknown);
    ad.request = size_arg(f[2]);
    if (f.size() > 4) ad.cap = size_arg(f[4]);
  }
  uint64_t t0 = wire::now_ns();
  for (;;) {
    uint32_t seq = ++c.seq;
    proto::Message m;
    int rc = wire::send(c.fd, a, seq, c.version);
    if (rc == 0) rc = await(c, seq, &m);
    if (rc == -ECONNRESET || rc == -EPIPE) {
      if (!c.reconnect) die("daemon gone");
      reconnect(c);
      continue;  // re-send the parked request
    }
    if (rc != 0) die("attach: " + std::string(std::strerror(-rc)));
    const auto& r = m.body.attach_reply;
    std::string slots = "[", grants = "[";
    for (uint32_t i = 0; i < r.n_devices; ++i) {
      uint32_t s = r.devices[i].slot;
      c.slots[s].attached = true;
      c.slots[s].device = a.devices[i].device;
      slots += (i ? "," : "") + std::to_string(s);
      grants += (i ? "," : "") + std::to_string(r.devices[i].grant);
    }
    uint64_t waited = wire::now_ns() - t0;
    for (uint32_t i = 0; i < r.n_devices; ++i) c.pages.stats->slots[r.devices[i].slot].wait_admission_ns.fetch_add(waited);
    out("{\"event\":\"attach\",\"granted\":" + std::string(r.outcome == uint32_t(proto::Outcome::kGranted) ? "true" : "false") +
        ",\"reason\":\"" + proto::reason_name(proto::Reason(r.reason)) + "\",\"slots\":" + slots + "],\"grants\":" + grants +
        "],\"waited_ns\":" + std::to_string(r.waited_ns) + "}");
    return;
  }
}

/// The allocation rule of pages.h: count first, then compare with the grant and the limit.
bool fast_path(Client& c, uint32_t slot, uint64_t bytes) {
  auto& st = c.pages.stats->slots[slot];
  const auto& ctl = c.pages.control->slots[slot];
  uint64_t now = st.in_use.fetch_add(bytes, std::memory_order_seq_cst) + bytes;
  if (now <= ctl.grant.load(std::memory_order_seq_cst) && now <= ctl.limit.load(std::memory_order_relaxed)) {
    uint64_t p = st.peak.load();
    while (now > p && !st.peak.compare_exchange_weak(p, now)) {
    }
    st.allocs.fetch_add(1);
    return true;
  }
  st.in_use.fetch_sub(bytes, std::memory_order_seq_cst);
  return false;
}

void step_alloc(Client& c, uint32_t slot, uint64_t bytes, uint64_t free) {
  if (slot >= proto::kMaxDevices || !c.slots[slot].attached) die("alloc on a slot that is not attached");
  uint64_t t0 = wire::now_ns();
  std::string how = "fast";
  proto::Reason reason = proto::Reason::kNone;
  bool ok = fast_path(c, slot, bytes);
  int cancel_ms = c.cancel_after_ms;
  c.cancel_after_ms = -1;
  uint64_t waited = 0;
  while (!ok) {
    how = "grow";
    auto g = proto::GrowMsg{};
    std::memset(&g, 0, sizeof g);
    g.slot = slot;
    g.in_use = c.pages.stats->slots[slot].in_use.load();
    g.need = g.in_use + bytes;
    g.physical_free = free;
    uint32_t seq = ++c.seq;
    int rc = wire::send(c.fd, g, seq, c.version);
    proto::Message m;
    if (rc == 0) {
      rc = await(c, seq, &m, nullptr, nullptr, cancel_ms);
      if (rc == -ETIMEDOUT) {
        auto x = proto::CancelMsg{};
        std::memset(&x, 0, sizeof x);
        x.target_seq = seq;
        x.why = uint32_t(proto::CancelWhy::kSignal);
        rc = wire::send(c.fd, x, ++c.seq, c.version);
        if (rc == 0) rc = await(c, seq, &m);  // every request gets exactly one reply
      }
    }
    if (rc == -ECONNRESET || rc == -EPIPE) {
      if (!c.reconnect) die("daemon gone");
      reconnect(c);
      ok = fast_path(c, slot, bytes);  // the re-registered grant may already cover it
      continue;                        // else re-send the request
    }
    if (rc != 0) die("grow: " + std::string(std::strerror(-rc)));
    waited += m.body.grow_reply.waited_ns;
    if (m.body.grow_reply.outcome != uint32_t(proto::Outcome::kGranted)) {
      reason = proto::Reason(m.body.grow_reply.reason);
      c.pages.stats->slots[slot].failures.fetch_add(1);
      break;
    }
    ok = fast_path(c, slot, bytes);  // another process of the job may have taken it back: ask again
  }
  c.pages.stats->slots[slot].wait_memory_ns.fetch_add(waited);
  out("{\"event\":\"alloc\",\"slot\":" + std::to_string(slot) + ",\"bytes\":" + std::to_string(bytes) + ",\"ok\":" +
      (ok ? "true" : "false") + ",\"how\":\"" + how + "\",\"reason\":\"" + proto::reason_name(reason) +
      "\",\"grant\":" + std::to_string(c.pages.control->slots[slot].grant.load()) +
      ",\"in_use\":" + std::to_string(c.pages.stats->slots[slot].in_use.load()) +
      ",\"waited_ns\":" + std::to_string(waited) + ",\"took_ns\":" + std::to_string(wire::now_ns() - t0) + "}");
}

void send_shrink(Client& c, uint32_t slot, uint64_t keep) {
  auto s = proto::ShrinkMsg{};
  std::memset(&s, 0, sizeof s);
  s.slot = slot;
  s.grant = keep;
  s.in_use = c.pages.stats->slots[slot].in_use.load();
  if (wire::send(c.fd, s, ++c.seq, c.version) != 0 && !c.reconnect) die("daemon gone");
}

void step_free(Client& c, uint32_t slot, uint64_t bytes) {
  auto& st = c.pages.stats->slots[slot];
  uint64_t cur = st.in_use.load();
  if (bytes > cur) bytes = cur;
  st.in_use.fetch_sub(bytes);
  st.frees.fetch_add(1);
  uint64_t in_use = st.in_use.load();
  uint64_t grant = c.pages.control->slots[slot].grant.load();
  // Lazy return: keep one step of slack, give back the rest once it exceeds two steps.
  if (grant > in_use + 2 * c.grant_step) send_shrink(c, slot, (in_use / c.grant_step + 1) * c.grant_step);
  out("{\"event\":\"free\",\"slot\":" + std::to_string(slot) + ",\"in_use\":" + std::to_string(in_use) + "}");
}

/// Waits for the daemon's messages (there are none unasked) for `ms` milliseconds (-1: forever),
/// noticing at once when it goes away, and reconnecting then with --reconnect.
/// Waits up to `timeout_ms` (-1: for ever) for the daemon's messages: reconnects (--reconnect) or
/// exits when the daemon goes away, exits on an Error.
void serve(Client& c, int timeout_ms) {
  proto::Message m;
  int rc = wire::recv_message(c.fd, &m, c.buf.data(), c.buf.size(), timeout_ms);
  if (rc == -ETIMEDOUT) return;
  if (rc == -ECONNRESET || rc == -EPIPE) {
    if (!c.reconnect) {
      out("{\"event\":\"daemon-lost\"}");
      std::exit(0);
    }
    reconnect(c);
    return;
  }
  if (rc == 0 && m.type() == proto::MsgType::kError) {
    out(std::string("{\"event\":\"refused\",\"text\":\"") + m.body.error.text + "\"}");
    std::exit(4);
  }
  if (rc != 0 && rc != -EPROTO) die("hold: " + std::string(std::strerror(-rc)));
}

void step_hold(Client& c, int64_t ms) {
  out("{\"event\":\"holding\"}");
  const uint64_t end = ms < 0 ? UINT64_MAX : wire::now_ns() + uint64_t(ms) * 1000000ull;
  for (;;) {
    uint64_t now = wire::now_ns();
    if (now >= end) {
      out("{\"event\":\"held\"}");
      return;
    }
    serve(c, end == UINT64_MAX ? -1 : int((end - now) / 1000000ull) + 1);
  }
}

/// Like hold, until `path` exists (checked every 10 ms): the test says when to go on.
void step_hold_file(Client& c, const std::string& path) {
  out("{\"event\":\"holding\"}");
  while (::access(path.c_str(), F_OK) != 0) serve(c, 10);
  out("{\"event\":\"held\"}");
}

void step_status(Client& c) {
  std::string s = "{\"event\":\"status\",\"epoch\":" + std::to_string(c.epoch) + ",\"slots\":[";
  bool first = true;
  for (uint32_t i = 0; i < proto::kMaxDevices; ++i) {
    if (!c.slots[i].attached) continue;
    s += std::string(first ? "" : ",") + "{\"slot\":" + std::to_string(i) +
         ",\"grant\":" + std::to_string(c.pages.control->slots[i].grant.load()) +
         ",\"limit\":" + std::to_string(c.pages.control->slots[i].limit.load()) +
         ",\"in_use\":" + std::to_string(c.pages.stats->slots[i].in_use.load()) +
         ",\"gate\":" + std::to_string(c.pages.control->gates[i].state.load()) +
         ",\"gate_seq\":" + std::to_string(c.pages.control->gates[i].seq.load()) + "}";
    first = false;
  }
  // The page's launch-gate summary (pages.h; always 0, RUN, in pages older than layout 4).
  out(s + "],\"gate\":" + std::to_string(c.pages.control->gate.load()) + "}");
}

void step_raw(Client& c, const std::string& hex) {
  std::vector<unsigned char> b;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) b.push_back(uint8_t(std::strtoul(hex.substr(i, 2).c_str(), nullptr, 16)));
  int rc = wire::send_bytes(c.fd, b.data(), b.size());
  out("{\"event\":\"raw\",\"bytes\":" + std::to_string(b.size()) + ",\"rc\":" + std::to_string(rc) + "}");
}

void step_sendfd(Client& c) {
  auto s = proto::ShrinkMsg{};
  std::memset(&s, 0, sizeof s);
  unsigned char buf[sizeof s];
  proto::Encoded e = proto::encode(s, ++c.seq, buf, sizeof buf, c.version);
  int extra = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  iovec iov{buf, e.size};
  alignas(cmsghdr) unsigned char ctrl[CMSG_SPACE(sizeof(int))];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  cmsghdr* cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &extra, sizeof extra);
  ssize_t n = ::sendmsg(c.fd, &m, MSG_NOSIGNAL);
  ::close(extra);
  out("{\"event\":\"sendfd\",\"rc\":" + std::to_string(n < 0 ? -errno : 0) + "}");
}

/// Reads one datagram (up to 5 s) and prints what it was.
void step_recv(Client& c) {
  proto::Message m;
  proto::Status st;
  int rc = wire::recv_message(c.fd, &m, c.buf.data(), c.buf.size(), 5000, nullptr, 0, nullptr, &st);
  std::string text = rc == 0 && m.type() == proto::MsgType::kError ? m.body.error.text : "";
  out("{\"event\":\"received\",\"rc\":" + std::to_string(rc) + ",\"type\":\"" +
      (rc == 0 ? proto::type_name(m.h.type) : "") + "\",\"text\":\"" + text + "\"}");
}

/// Tries to make the control page writable; it is sealed, so every attempt must fail.
void step_tamper(Client& c) {
  void* page = const_cast<pages::ControlPage*>(c.pages.control);
  int rc = ::mprotect(page, pages::kPageSize, PROT_READ | PROT_WRITE);
  int err = rc == 0 ? 0 : errno;
  out("{\"event\":\"tamper\",\"mprotect_rc\":" + std::to_string(rc) + ",\"errno\":" + std::to_string(err) + "}");
}

void goodbye(Client& c, int code) {
  auto g = proto::GoodbyeMsg{};
  std::memset(&g, 0, sizeof g);
  g.exit_status = code;
  g.has_status = 1;
  wire::send(c.fd, g, ++c.seq, c.version);
}

void become(const std::string& user) {
  struct passwd* pw = ::getpwnam(user.c_str());
  if (!pw) die("no user " + user);
  if (::initgroups(pw->pw_name, pw->pw_gid) != 0 || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0)
    die("cannot become " + user + ": " + std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  Client c;
  if (const char* s = std::getenv("COLOC_SOCKET"); s && *s) c.socket = s;
  std::vector<std::string> steps;
  std::string as_user;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--socket") c.socket = val();
    else if (a == "--job") c.job = val();
    else if (a == "--mem") c.limit = size_arg(val());
    else if (a == "--estimate") c.estimate = size_arg(val());
    else if (a == "--step") c.step = val();
    else if (a == "--priority") {
      std::string p = val();
      if (!proto::parse_priority(p.c_str(), &c.priority)) die("bad priority " + p);
    } else if (a == "--on-full") c.on_full = val() == "fail" ? proto::OnFull::kFail : proto::OnFull::kWait;
    else if (a == "--wait-timeout") c.wait_timeout_ns = uint64_t(std::atof(val().c_str()) * 1e9);
    else if (a == "--proto") c.version = uint16_t(std::atoi(val().c_str()));
    else if (a == "--as-user") as_user = val();
    else if (a == "--reconnect") c.reconnect = true;
    else steps.push_back(a);
  }
  if (!as_user.empty()) become(as_user);
  if (int rc = wire::connect_retry(c.socket.c_str(), 10'000'000'000ull, &c.fd); rc != 0)
    die("connect " + c.socket + ": " + std::strerror(-rc));
  bool registered = false;
  for (const std::string& s : steps) {
    auto f = split(s, ':');
    const std::string& op = f[0];
    bool needs_registration = op != "raw" && op != "sleep" && op != "exit" && op != "recv";
    if (needs_registration && !registered) {
      if (int rc = do_register(c, false); rc != 0) die("register: " + std::string(std::strerror(-rc)));
      registered = true;
    }
    if (op == "attach") step_attach(c, s.substr(7));
    else if (op == "alloc") step_alloc(c, uint32_t(std::atoi(f.at(1).c_str())), size_arg(f.at(2)), f.size() > 3 ? size_arg(f[3]) : proto::kUnknown);
    else if (op == "free") step_free(c, uint32_t(std::atoi(f.at(1).c_str())), size_arg(f.at(2)));
    else if (op == "shrink") send_shrink(c, uint32_t(std::atoi(f.at(1).c_str())), size_arg(f.at(2)));
    else if (op == "oom") {
      auto o = proto::DriverOomMsg{};
      std::memset(&o, 0, sizeof o);
      o.slot = uint32_t(std::atoi(f.at(1).c_str()));
      o.request = size_arg(f.at(2));
      o.in_use = c.pages.stats->slots[o.slot].in_use.load();
      o.physical_free = f.size() > 3 ? size_arg(f[3]) : proto::kUnknown;
      wire::send(c.fd, o, ++c.seq, c.version);
      out("{\"event\":\"oom-reported\"}");
    } else if (op == "oom-flood") {  // oom-flood:SLOT:BYTES:FREE:COUNT:MS — the same report, again and again
      auto o = proto::DriverOomMsg{};
      std::memset(&o, 0, sizeof o);
      o.slot = uint32_t(std::atoi(f.at(1).c_str()));
      o.request = size_arg(f.at(2));
      o.physical_free = size_arg(f.at(3));
      const int count = std::atoi(f.at(4).c_str());
      const uint64_t every = uint64_t(std::atoll(f.at(5).c_str())) * 1000000ull;
      out("{\"event\":\"flooding\"}");
      for (int i = 0; i < count; ++i) {
        o.in_use = c.pages.stats->slots[o.slot].in_use.load();
        wire::send(c.fd, o, ++c.seq, c.version);
        wire::sleep_ns(every);
      }
      out("{\"event\":\"flood-done\"}");
    } else if (op == "footprint") {  // footprint:SLOT:FREE[:COUNT]
      auto fp = proto::ContextFootprintMsg{};
      std::memset(&fp, 0, sizeof fp);
      fp.slot = uint32_t(std::atoi(f.at(1).c_str()));
      fp.physical_free = size_arg(f.at(2));
      const int count = f.size() > 3 ? std::atoi(f[3].c_str()) : 1;
      for (int i = 0; i < count; ++i) {
        fp.in_use = c.pages.stats->slots[fp.slot].in_use.load();
        wire::send(c.fd, fp, ++c.seq, c.version);
      }
      out("{\"event\":\"footprint-sent\"}");
    } else if (op == "cancel-after") c.cancel_after_ms = std::atoi(f.at(1).c_str());
    else if (op == "sleep") wire::sleep_ns(uint64_t(std::atoll(f.at(1).c_str())) * 1000000ull);
    else if (op == "hold") step_hold(c, f.size() > 1 ? std::atoll(f[1].c_str()) : -1);
    else if (op == "hold-file") step_hold_file(c, s.substr(10));
    else if (op == "close") {  // hang up without a goodbye, and keep running
      ::close(c.fd);
      c.fd = -1;
      out("{\"event\":\"closed\"}");
    } else if (op == "wait-file") {  // wait for a file without a connection
      while (::access(s.substr(10).c_str(), F_OK) != 0) wire::sleep_ns(10'000'000);
      out("{\"event\":\"waited\"}");
    }
    else if (op == "fork-hold") {
      pid_t child = ::fork();
      if (child == 0) {
        for (;;) ::pause();  // holds the inherited socket and pages; never touches them
      }
      out("{\"event\":\"forked\",\"child\":" + std::to_string(child) + "}");
    } else if (op == "goodbye") goodbye(c, std::atoi(f.at(1).c_str()));
    else if (op == "exit") std::exit(std::atoi(f.at(1).c_str()));
    else if (op == "status") step_status(c);
    else if (op == "rejoin") reconnect(c);  // drop the connection, connect again, re-register (resume)
    else if (op == "raw") step_raw(c, f.at(1));
    else if (op == "sendfd") step_sendfd(c);
    else if (op == "recv") step_recv(c);
    else if (op == "tamper") step_tamper(c);
    else die("unknown step " + s);
  }
  return 0;
}
