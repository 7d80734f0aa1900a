// colocd's helper processes (daemon/engine/helper_process.h): started without waiting, their output
// read by the loop, killed past their deadline, reported stuck when even SIGKILL does not end them.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <optional>

#include "../../support/proc.h"
#include "engine/event_loop.h"
#include "engine/helper_process.h"

using coloc::engine::EventLoop;
using coloc::engine::HelperProcess;

namespace {

// Runs the loop until `h` reports, or `limit` passes.
std::optional<HelperProcess::Outcome> run_until_done(EventLoop& loop, const std::vector<std::string>& argv, int timeout_ms,
                                                     std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  std::optional<HelperProcess::Outcome> got;
  auto h = HelperProcess::start(loop, argv, timeout_ms, [&](const HelperProcess::Outcome& o) { got = o; });
  REQUIRE_MESSAGE(h.ok(), h.error().message());
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!got && std::chrono::steady_clock::now() < end) REQUIRE(loop.run_once(100).ok());
  CHECK_FALSE(h.value()->running());
  return got;
}

}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("helper process: its output and exit status come back through the loop") {
  auto made = EventLoop::create();
  REQUIRE(made.ok());
  EventLoop loop = std::move(made.value());
  auto o = run_until_done(loop, {"/bin/sh", "-c", "echo '{\"ok\":true}'; echo oops >&2; exit 3"}, 10'000);
  REQUIRE(o);
  CHECK(o->exit_code == 3);
  CHECK(o->signal == 0);
  CHECK_FALSE(o->timed_out);
  CHECK(o->out == "{\"ok\":true}\n");
  CHECK(o->err == "oops\n");
  CHECK(loop.size() == 0);  // nothing left watched
  // Output past the cap is read and dropped (the helper never blocks on a full pipe).
  o = run_until_done(loop, {"/bin/sh", "-c", "head -c 300000 /dev/zero"}, 10'000);
  REQUIRE(o);
  CHECK(o->exit_code == 0);
  CHECK(o->out.size() == HelperProcess::kMaxOutput);
  CHECK(o->truncated);
  // A program that does not exist does not start.
  auto bad = HelperProcess::start(loop, {"/nonexistent/coloc-ckpt"}, 1000, [](const HelperProcess::Outcome&) {});
  CHECK_FALSE(bad.ok());
}

TEST_CASE("helper process: past its deadline it is killed, and the loop never waited for it") {
  auto made = EventLoop::create();
  REQUIRE(made.ok());
  EventLoop loop = std::move(made.value());
  const auto t0 = std::chrono::steady_clock::now();
  auto o = run_until_done(loop, {"/bin/sleep", "30"}, 200);
  REQUIRE(o);
  CHECK(o->timed_out);
  CHECK(o->signal == SIGKILL);
  CHECK(o->exit_code == -1);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // Destroying a running helper kills it; it is reaped later, without waiting.
  {
    auto h = HelperProcess::start(loop, {"/bin/sleep", "30"}, 60'000, [](const HelperProcess::Outcome&) {});
    REQUIRE(h.ok());
    const pid_t pid = h.value()->pid();
    h.value().reset();
    CHECK(coloc::test::wait_until([&] { return ::kill(pid, 0) != 0 || HelperProcess::unreaped() > 0; }));
  }
  o = run_until_done(loop, {"/bin/true"}, 10'000);  // the next helper's events reap the old one
  REQUIRE(o);
  CHECK(coloc::test::wait_until([&] {
    run_until_done(loop, {"/bin/true"}, 10'000);
    return HelperProcess::unreaped() == 0;
  }));
}
}
