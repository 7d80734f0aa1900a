// Who may be `high` (protocol v8): colocd grants priority high only to root and the members of
// --admin-group and --high-priority-group (config key high_priority_group). Anyone else asking for
// it is registered as normal, and the RegisterReply says so (granted_priority, kPriorityLowered);
// a lower priority is anyone's; a v7 client is lowered too but not told; a job an admin raised to
// high stays high for the processes that join it; a priority restored from a saved state holds; a
// group that does not exist is refused at start. Real colocd, real sockets, real uids and groups.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>

#include "as_user.h"
#include "coloc/wire.h"
#include "colocd_fixture.h"
#include "config/config.h"

using namespace coloc::test;
using coloc::proto::AdminOp;
using coloc::proto::Priority;
using nlohmann::json;

namespace {

/// What a registration got back.
struct Granted {
  int rc = -1;  ///< 0: registered; else -errno of the failing step
  uint16_t version = 0;
  uint8_t granted = 0, flags = 0;
};

/// A process registered with colocd as `who` (a forked child: its groups, gid and uid, then a
/// Register asking `asked` for job `job` at `version`), held registered until this object goes.
class Registration {
 public:
  Registration(const Colocd& d, const Who& who, Priority asked, const std::string& job,
               uint16_t version = coloc::proto::kVersion) {
    int res[2], hold[2];
    REQUIRE(::pipe(res) == 0);
    REQUIRE(::pipe(hold) == 0);
    const std::string socket = d.socket();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(res[0]);
      ::close(hold[1]);
      Granted g;
      int fd = -1;
      if (!become(who)) g.rc = -EPERM;
      else if (int rc = coloc::wire::connect_socket(socket.c_str(), &fd); rc != 0) g.rc = rc;
      else {
        coloc::proto::RegisterMsg r;
        std::memset(&r, 0, sizeof r);
        r.limit = coloc::proto::kNoLimit;
        r.priority = uint8_t(asked);
        coloc::proto::set_string(r.job, job.c_str());
        coloc::proto::set_string(r.cmdline, "priority-grant-test");
        coloc::proto::Status st;
        if (int rc = coloc::wire::send(fd, r, 1, version, &st); rc != 0) g.rc = rc;
        else {
          coloc::proto::Message m;
          static unsigned char buf[coloc::proto::kMaxMessage];
          int fds[2] = {-1, -1};
          size_t n = 0;
          int got = coloc::wire::recv_message(fd, &m, buf, sizeof buf, 10000, fds, 2, &n, &st);
          for (size_t i = 0; i < n; ++i) ::close(fds[i]);
          if (got != 0) g.rc = got;
          else if (m.type() != coloc::proto::MsgType::kRegisterReply) g.rc = -EPROTO;
          else g = Granted{0, m.h.version, m.body.register_reply.granted_priority, m.body.register_reply.priority_flags};
        }
      }
      (void)!::write(res[1], &g, sizeof g);
      char c;
      while (::read(hold[0], &c, 1) < 0 && errno == EINTR) {
      }  // registered until the test lets go (EOF)
      _exit(0);
    }
    ::close(res[1]);
    ::close(hold[0]);
    hold_ = hold[1];
    if (::read(res[0], &got_, sizeof got_) != ssize_t(sizeof got_)) got_.rc = -EIO;
    ::close(res[0]);
  }
  ~Registration() { end(); }
  /// Goodbye: the process exits (its connection with it).
  void end() {
    if (hold_ >= 0) ::close(hold_);
    hold_ = -1;
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const Granted& got() const { return got_; }
  /// The priority colocd granted, by name ("?" when it did not tell).
  std::string granted() const {
    return got_.granted ? coloc::proto::priority_name(Priority(got_.granted - 1)) : "?";
  }
  bool lowered() const { return (got_.flags & coloc::proto::kPriorityLowered) != 0; }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  Granted got_;
};

/// kSet of a job's priority, as root (the test).
coloc::cli::Answer set_priority(const Colocd& d, const std::string& job, Priority p) {
  coloc::proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(AdminOp::kSet);
  m.set_fields = coloc::proto::kSetPriority;
  m.priority = uint8_t(p);
  coloc::proto::set_string(m.job, job.c_str());
  return coloc::cli::admin_request(d.socket(), m, 5000);
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd priority: high for root and the admin and high-priority groups; anyone else registers as normal, told so") {
  Who user;
  if (!nobody(&user)) return;
  auto groups = spare_groups();
  if (groups.empty()) return;
  const auto& [admin_name, admin_gid] = groups[0];
  const auto& [high_name, high_gid] = groups[1];
  Colocd d({"--admin-group", admin_name, "--high-priority-group", high_name});
  const json daemon = d.status()["daemon"];
  CHECK(daemon["admin_group"] == admin_name);
  CHECK(daemon["high_priority_group"] == high_name);

  Registration root(d, Who{0, 0, {}}, Priority::kHigh, "hp-root");
  REQUIRE(root.got().rc == 0);
  CHECK(root.got().version == coloc::proto::kVersion);
  CHECK(root.granted() == "high");
  CHECK_FALSE(root.lowered());
  CHECK(d.job("hp-root")["priority"] == "high");

  Registration plain(d, user, Priority::kHigh, "hp-plain");
  REQUIRE(plain.got().rc == 0);
  CHECK(plain.granted() == "normal");
  CHECK(plain.lowered());
  CHECK(d.job("hp-plain")["priority"] == "normal");
  CHECK_MESSAGE(d.log().find("uid " + std::to_string(user.uid) + " asked for priority high, which is for root and the "
                             "admin group " + admin_name + " and the high-priority group " + high_name + ": job " +
                             std::to_string(user.uid) + ":hp-plain runs as normal") != std::string::npos,
                d.log());

  Who member = user;
  member.groups = {high_gid};
  Registration high(d, member, Priority::kHigh, "hp-member");
  REQUIRE(high.got().rc == 0);
  CHECK(high.granted() == "high");
  CHECK_FALSE(high.lowered());
  CHECK(d.job("hp-member")["priority"] == "high");

  Who admin = user;
  admin.groups = {admin_gid};
  Registration by_admin(d, admin, Priority::kHigh, "hp-admin");
  REQUIRE(by_admin.got().rc == 0);
  CHECK(by_admin.granted() == "high");
  CHECK_FALSE(by_admin.lowered());
  CHECK(d.job("hp-admin")["priority"] == "high");

  // The primary group counts as membership too.
  Who primary{user.uid, high_gid, {}};
  Registration by_primary(d, primary, Priority::kHigh, "hp-primary");
  REQUIRE(by_primary.got().rc == 0);
  CHECK(by_primary.granted() == "high");

  // Lower is anyone's: no warning, no flag.
  Registration be(d, user, Priority::kBestEffort, "hp-be");
  REQUIRE(be.got().rc == 0);
  CHECK(be.granted() == "best-effort");
  CHECK_FALSE(be.lowered());
  Registration normal(d, user, Priority::kNormal, "hp-normal");
  REQUIRE(normal.got().rc == 0);
  CHECK(normal.granted() == "normal");
  CHECK_FALSE(normal.lowered());
  // Lowering one's own job later is fine; raising it back is an admin's (coloc set, as before).
  coloc::proto::AdminMsg lower;
  std::memset(&lower, 0, sizeof lower);
  lower.op = uint32_t(AdminOp::kSet);
  lower.set_fields = coloc::proto::kSetPriority;
  lower.priority = uint8_t(Priority::kBestEffort);
  coloc::proto::set_string(lower.job, "hp-normal");
  struct passwd* pw = ::getpwnam("nobody");
  CHECK(ask_as(d, pw, lower) == 0);
  CHECK(d.job("hp-normal")["priority"] == "best-effort");
  coloc::proto::AdminMsg raise = lower;
  raise.priority = uint8_t(Priority::kHigh);
  CHECK(ask_as(d, pw, raise) == 10 + uint32_t(coloc::proto::AdminStatus::kNotAllowed));
  CHECK(d.job("hp-normal")["priority"] == "best-effort");
  // The same user as a member of the high-priority group may raise its own job to high (what its
  // registration would have been granted), but not to normal (an admin's).
  struct passwd member_pw = *pw;
  member_pw.pw_gid = high_gid;
  coloc::proto::AdminMsg to_normal = lower;
  to_normal.priority = uint8_t(Priority::kNormal);
  CHECK(ask_as(d, &member_pw, to_normal) == 10 + uint32_t(coloc::proto::AdminStatus::kNotAllowed));
  CHECK(ask_as(d, &member_pw, raise) == 0);
  CHECK(d.job("hp-normal")["priority"] == "high");
}

TEST_CASE("colocd priority: a v7 client asking high is lowered too, without being told; joining a job an admin raised keeps it high") {
  Who user;
  if (!nobody(&user)) return;
  Colocd d;  // no groups: high is root's alone
  CHECK(d.status()["daemon"]["high_priority_group"].is_null());
  Registration old(d, user, Priority::kHigh, "hp-v7", 7);
  REQUIRE(old.got().rc == 0);
  CHECK(old.got().version == 7);
  CHECK(old.got().granted == 0);  // (a v7 reply has no such byte)
  CHECK(old.got().flags == 0);
  CHECK(d.job("hp-v7")["priority"] == "normal");
  CHECK_MESSAGE(d.log().find("asked for priority high, which is for root and no other user: job " +
                             std::to_string(user.uid) + ":hp-v7 runs as normal") != std::string::npos,
                d.log());

  // An admin raises the user's job; a process of it that registers later asking high gets the
  // job's high, not lowered (nor told it was).
  Registration first(d, user, Priority::kNormal, "hp-join");
  REQUIRE(first.got().rc == 0);
  auto a = set_priority(d, std::to_string(user.uid) + ":hp-join", Priority::kHigh);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  Registration second(d, user, Priority::kHigh, "hp-join");
  REQUIRE(second.got().rc == 0);
  CHECK(second.granted() == "high");
  CHECK_FALSE(second.lowered());
  // One that joins a normal job asking high is told: its job runs as normal.
  Registration third(d, user, Priority::kNormal, "hp-join2");
  REQUIRE(third.got().rc == 0);
  Registration fourth(d, user, Priority::kHigh, "hp-join2");
  REQUIRE(fourth.got().rc == 0);
  CHECK(fourth.granted() == "normal");
  CHECK(fourth.lowered());
}

TEST_CASE("colocd priority: a high priority restored from the saved state after a restart holds") {
  Who user;
  if (!nobody(&user)) return;
  Colocd d;
  auto c = d.client({"--as-user", "nobody", "--job", "hp-saved", "--reconnect", "attach:1:10GiB:1GiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  REQUIRE(d.job("hp-saved")["priority"] == "normal");
  auto a = set_priority(d, "hp-saved", Priority::kHigh);  // an admin's grant
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  REQUIRE(wait_until([&] { return saved_job(d, "hp-saved")["priority"] == "high"; }));  // saved at every coloc set
  d.kill9();
  d.start();
  // The client re-registers with the priority of its control page (high), as a user who may not
  // ask for high: the saved state says it was granted, and it holds.
  REQUIRE(wait_until([&] { return has_event(*c, "reregistered"); }, 20s));
  CHECK(d.job("hp-saved")["priority"] == "high");
  CHECK(d.log().find("hp-saved runs as normal") == std::string::npos);
  c->kill(SIGKILL);
}

TEST_CASE("colocd priority: --high-priority-group and high_priority_group: a group that does not exist is refused at start") {
  TempDir dir("colocd-hpg");
  const std::string bad = "coloc-no-such-group-7f3a";
  ProcResult r = run({build_path("bin/colocd"), "--socket", dir / "s.sock", "--state-dir", dir / "state",
                      "--high-priority-group", bad},
                     Env(), 20s);
  CHECK(r.exit_code == 2);  // a configuration error: systemd does not restart it
  CHECK_MESSAGE(r.err.find("--high-priority-group: no such group '" + bad + "'") != std::string::npos, describe(r));
  CHECK_FALSE(file_exists(dir / "s.sock"));
  write_file(dir / "colocd.toml", "high_priority_group = \"" + bad + "\"\n");
  r = run({build_path("bin/colocd"), "--socket", dir / "s.sock", "--state-dir", dir / "state", "--config",
           dir / "colocd.toml"},
          Env(), 20s);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.err.find(dir / "colocd.toml" + ":1: high_priority_group: no such group '" + bad + "'") != std::string::npos,
                describe(r));

  // The settings themselves: the key and the flag (the flag wins), and --help names it.
  coloc::config::Config cfg;
  REQUIRE(coloc::config::apply_toml("high_priority_group = \"ml\"\n", "t.toml", cfg).ok());
  CHECK(cfg.high_priority_group == "ml");
  const char* argv[] = {"colocd", "--config", nullptr, "--high-priority-group", "research"};
  const std::string file = dir / "hp.toml";
  write_file(file, "high_priority_group = \"ml\"\n");
  argv[2] = file.c_str();
  auto cl = coloc::config::parse_command_line(5, argv);
  REQUIRE(cl.ok());
  CHECK(cl.value().config.high_priority_group == "research");
  auto from_file = coloc::config::parse_command_line(3, argv);
  REQUIRE(from_file.ok());
  CHECK(from_file.value().config.high_priority_group == "ml");
  ProcResult help = run({build_path("bin/colocd"), "--help"}, Env(), 20s);
  CHECK(help.out.find("--high-priority-group") != std::string::npos);
}

TEST_CASE("colocd priority: the config key high_priority_group grants its members high") {
  Who user;
  if (!nobody(&user)) return;
  auto groups = spare_groups();
  if (groups.empty()) return;
  TempDir conf("colocd-hpg-conf");
  ::chmod(conf.path().c_str(), 0755);
  write_file(conf / "colocd.toml", "high_priority_group = \"" + groups[1].first + "\"\n");
  Colocd d({"--config", conf / "colocd.toml"});
  CHECK(d.status()["daemon"]["high_priority_group"] == groups[1].first);
  CHECK(d.status()["daemon"]["admin_group"].is_null());
  Who member = user;
  member.groups = {groups[1].second};
  Registration in(d, member, Priority::kHigh, "hp-conf-in");
  REQUIRE(in.got().rc == 0);
  CHECK(in.granted() == "high");
  Who other = user;
  other.groups = {groups[0].second};  // another group: no
  Registration out(d, other, Priority::kHigh, "hp-conf-out");
  REQUIRE(out.got().rc == 0);
  CHECK(out.granted() == "normal");
  CHECK(out.lowered());
}

}  // TEST_SUITE
