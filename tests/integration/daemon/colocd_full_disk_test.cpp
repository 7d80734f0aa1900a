// colocd with its state directory on a full disk (a 2 MiB tmpfs, filled): the reports of jobs that
// end meanwhile are kept in memory (served by `coloc report`) and written once space returns, and
// the run history keeps learning (its writes are retried, not turned off until a restart).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

namespace {

/// A tmpfs of `size` mounted on `dir` for the test's life (root only: mounted() says).
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, const char* size) : dir_(dir) {
    std::filesystem::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size + ",mode=0755").c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  /// Fills the disk: a file written until ENOSPC. Returns its path.
  std::string fill() const {
    const std::string path = dir_ + "/filler";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    std::string block(4096, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    const int err = errno;
    ::close(fd);
    REQUIRE(err == ENOSPC);
    return path;
  }

 private:
  std::string dir_;
  bool mounted_ = false;
};

json admin_json(const Colocd& d, coloc::proto::AdminOp op, const std::string& job = "") {
  coloc::cli::Answer a = d.ask(op, job);
  REQUIRE_MESSAGE(a.kind == coloc::cli::Answer::Kind::kOk, a.text);
  return json::parse(a.text);
}

}  // namespace

TEST_SUITE("daemon") {

TEST_CASE("colocd on a full state disk: reports are held and written when space returns; history keeps learning") {
  Colocd d({}, false);
  SmallDisk disk(d.state(), "2m");
  if (!disk.mounted()) {
    MESSAGE("skipped: mounting a tmpfs needs root");
    return;
  }
  d.start();
  // The history's worker opens its database after colocd serves: the disk fills once it has (a
  // database that cannot even be created stays off until a restart, a case this test is not for).
  REQUIRE(wait_until([&] {
    json h = admin_json(d, coloc::proto::AdminOp::kHistory);
    return h["loaded"] == true && h["usable"] == true;
  }, 20s));
  const std::string filler = disk.fill();
  // Three jobs end while the disk is full.
  for (const char* job : {"during-1", "during-2", "during-3"}) {
    ProcResult r = d.client({"--job", job, "attach:1:40GiB:1GiB", "alloc:0:2GiB", "goodbye:0", "exit:0"})->wait(30s);
    REQUIRE_MESSAGE(r.exit_code == 0, describe(r));
  }
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }, 20s));
  // Not on disk, yet coloc report finds each one (held in memory).
  for (const char* job : {"during-1", "during-2", "during-3"}) {
    CAPTURE(job);
    CHECK_FALSE(file_exists(d.state() + "/reports/" + job + ".json"));
    json rep = admin_json(d, coloc::proto::AdminOp::kReport, job);
    CHECK(rep["job"] == job);
  }
  CHECK(d.log().find("for want of disk space") != std::string::npos);
  // History is not turned off: its writes wait for space, and it has the runs (from memory).
  REQUIRE_MESSAGE(wait_until([&] { return d.log().find("no disk space; runs are kept in memory") != std::string::npos; }, 20s),
                  d.log());
  json h = admin_json(d, coloc::proto::AdminOp::kHistory);
  CHECK(h["usable"] == true);
  CHECK(h["fingerprints"].size() == 3);
  // Space returns: the held reports are written, in order, without a restart.
  REQUIRE(::unlink(filler.c_str()) == 0);
  for (const char* job : {"during-1", "during-2", "during-3"}) CHECK(d.report(job)["job"] == job);
  REQUIRE(wait_until([&] { return d.log().find("disk space is back") != std::string::npos; }, 20s));
  // ... and the history's runs reached the database: a restarted colocd still has them.
  REQUIRE(wait_until([&] { return d.log().find("run history") != std::string::npos &&
                                  d.log().find("writing again") != std::string::npos; }, 20s));
  REQUIRE(d.stop().exit_code == 0);
  d.start();
  REQUIRE(wait_until([&] { return admin_json(d, coloc::proto::AdminOp::kHistory)["loaded"] == true; }, 20s));
  CHECK(admin_json(d, coloc::proto::AdminOp::kHistory)["fingerprints"].size() == 3);
}

}  // TEST_SUITE
