#include "anchor_cmd.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "coloc/protocol.h"
#include "coloc/size.h"
#include "daemon_client.h"
#include "run_plan.h"

namespace coloc::cli {

namespace {

void say(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string l = line;
  for (char& c : l)
    if (c == '\n' || c == '\r') c = ' ';
  l += '\n';
  const char* p = l.data();
  size_t left = l.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= size_t(n);
  }
}

void close_ready(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

/// Reads the job's exit status from `fd`: a decimal line, or nothing (EOF). -1 = none given.
int read_status(int fd) {
  char buf[32];
  size_t got = 0;
  while (got < sizeof buf - 1) {
    ssize_t n = ::read(fd, buf + got, sizeof buf - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
    if (std::memchr(buf, '\n', got)) break;
  }
  buf[got] = '\0';
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(buf, &end, 10);
  if (end == buf || errno != 0 || v < 0 || v > 255 || (*end != '\0' && *end != '\n')) return -1;
  return int(v);
}

}  // namespace

int run_anchor(const AnchorOptions& opt) {
  int ready = opt.ready_fd;
  auto refuse = [&](int code, const std::string& why) {
    std::fprintf(stderr, "coloc anchor: %s\n", why.c_str());
    say(ready, "error " + why);
    close_ready(&ready);
    return code;
  };
  if (opt.until_fd < 3 || ::fcntl(opt.until_fd, F_GETFD) < 0)
    return refuse(2, "--until-fd must name an open descriptor above 2 (the job's end)");
  if (opt.job.empty() || !proto::valid_job_id(opt.job.c_str()))
    return refuse(2, "--job '" + opt.job + "' is not a job id (letters, digits, ._-+@:, at most 63 characters)");
  AnchorSpec spec;
  spec.job = opt.job;
  if (!opt.mem.empty()) {
    SizeParse s = parse_limit(opt.mem);
    if (!s) return refuse(2, "--mem '" + opt.mem + "': " + s.error);
    spec.limit = *s.bytes;
  }
  if (!opt.priority.empty() && !proto::parse_priority(opt.priority.c_str(), &spec.priority))
    return refuse(2, "--priority '" + opt.priority + "': use high, normal or best-effort");
  const proto::Priority asked = spec.priority;
  if (opt.on_full.empty() || opt.on_full == "wait") spec.on_full = proto::OnFull::kWait;
  else if (opt.on_full == "fail") spec.on_full = proto::OnFull::kFail;
  else return refuse(2, "--on-full '" + opt.on_full + "': use wait or fail");
  uint32_t weight = 0;
  if (!opt.weight.empty()) {
    std::string error;
    if (!parse_weight(opt.weight, &weight, &error)) return refuse(2, "--weight: " + error);
  }
  spec.command = {opt.command.empty() ? std::string("(anchor)") : opt.command};
  if (!opt.step.empty() && !proto::valid_step(opt.step.c_str()))
    return refuse(2, "--step '" + opt.step + "': letters, digits, '.', '_' and '-' only (at most " +
                         std::to_string(proto::kStepSize - 1) + ")");
  spec.step = opt.step;

  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
  std::string why;
  bool busy = false;
  proto::RegisterReplyMsg reply;
  std::memset(&reply, 0, sizeof reply);
  int anchor = register_anchor(opt.socket, spec, &why, 10000, false, &busy, &reply);
  if (anchor < 0 && !busy) return refuse(3, why);
  if (anchor >= 0 && reply.granted_priority != 0 && (reply.priority_flags & proto::kPriorityLowered)) {
    const auto granted = proto::Priority(reply.granted_priority - 1);
    spec.priority = granted;  // asked again after a restart: what was granted
    say(ready, std::string("note priority ") + proto::priority_name(asked) +
                   " is for root and colocd's admin and high-priority groups; job " + opt.job + " runs as " +
                   proto::priority_name(granted));
    // For the launcher's environment of the job's processes (COLOC_PRIORITY): what was granted,
    // so that each process does not ask for the refused priority again, and warn again.
    say(ready, std::string("priority ") + proto::priority_name(granted));
  }
  // --weight: set as `coloc set --weight` is, once the job is registered: now, or (colocd busy at
  // the start) at the first registration hold_anchor makes, and again at each later one (after a
  // colocd restart).
  auto set_weight = [&]() -> std::string {
    proto::AdminMsg m;
    std::memset(&m, 0, sizeof m);
    m.op = uint32_t(proto::AdminOp::kSet);
    proto::set_string(m.job, opt.job.c_str());
    m.set_fields = proto::kSetWeight;
    m.weight = uint8_t(weight);
    Answer a = admin_request(opt.socket, m);
    if (a.kind == Answer::Kind::kOk) return "";
    return a.text.empty() ? std::string("colocd did not answer") : a.text;
  };
  if (weight > 1 && anchor >= 0)
    if (std::string why_not = set_weight(); !why_not.empty())
      say(ready, "note weight " + std::to_string(weight) + " is not set: " + why_not);
  say(ready, anchor >= 0 ? std::string("ok") : "busy " + why);
  close_ready(&ready);

  anchor = hold_anchor(opt.until_fd, anchor, opt.socket, spec, [&] {
    if (weight > 1) (void)set_weight();  // nobody to tell any more: the task has started
  });
  const int status = read_status(opt.until_fd);
  if (status >= 0) anchor_goodbye(anchor, status);
  else if (anchor >= 0) ::close(anchor);  // no status: the job's first process's own is the truer one
  return 0;
}

}  // namespace coloc::cli
