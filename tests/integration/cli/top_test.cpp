// coloc top against a live colocd on simgpu with a job waiting for memory (a process outside
// coloc holds most of the device): `--once` for scripts, and the live view in a real terminal
// (tmux on a private socket: the frame shows the waiting job and the bar; `q` ends it).
#include <doctest/doctest.h>

#include <sstream>

#include "../e2e/e2e.h"
#include "format.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// Runs tmux on the private server `sock`.
ProcResult tmux(const std::string& sock, std::vector<std::string> args) {
  args.insert(args.begin(), {"tmux", "-S", sock});
  return run(args, Env(), 10s);
}

/// Kills the private tmux server (and what runs in its panes) when the test ends, however it ends.
struct TmuxServer {
  std::string sock;
  ~TmuxServer() { tmux(sock, {"kill-server"}); }
};

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

size_t widest_line(const std::string& text) {
  std::istringstream in(text);
  size_t w = 0;
  for (std::string l; std::getline(in, l);) w = std::max(w, coloc::cli::display_width(l));
  return w;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("coloc top: --once and the live view under tmux show the waiting job, the bar and the outside process; q quits") {
  if (simulated_only()) return;
  Node n("16GiB");
  auto outside = std::make_unique<Proc>(
      std::vector<std::string>{cuprobe(), "init", "ctx", "0", "alloc", "10GiB", "o", "touch", n.file("taken"),
                               "hold-file", n.file("release")},
      n.base_env());
  REQUIRE(reached(*outside, n.file("taken")));
  auto job = n.run({"--job", "held", "--mem", "8GiB"},
                   {cuprobe(), "init", "ctx", "0", "alloc", "1GiB", "b", "touch", n.file("admitted")});
  REQUIRE_MESSAGE(n.wait_state("held", "admission-pending"), n.cli({"status", "--json"}).out, "\n", n.log());
  // colocd lists the outside process on its sampling timer.
  REQUIRE(wait_until([&] {
    json d = n.status()["devices"][0];
    return d["outside_processes"].is_array() && d["outside_processes"].size() == 1;
  }, 20s, 20ms));

  // --once: one frame, 80 columns, no colour (not a terminal), the job waiting, the bar.
  ProcResult once = n.cli({"top", "--once"});
  REQUIRE_MESSAGE(once.exit_code == 0, describe(once));
  const std::string& f = once.out;
  CHECK_MESSAGE(widest_line(f) <= 80, f);
  CHECK(f.find("\033") == std::string::npos);
  CHECK(f.find(" A held-") != std::string::npos);
  CHECK(f.find("wait-admit") != std::string::npos);
  // Its reason under its row: what is missing is held outside coloc (issue 28).
  CHECK_MESSAGE(f.find("#1 in line: Outside") != std::string::npos, f);
  CHECK(n.job("held")["queue"]["reason"] == "Outside");
  CHECK(f.find("8.0G") != std::string::npos);  // its limit
  const size_t bar = f.find("  [");
  REQUIRE(bar != std::string::npos);
  const std::string bar_line = f.substr(bar, f.find('\n', bar) - bar);
  CHECK(bar_line.size() == 80);
  CHECK(count_of(bar_line, "#") >= 49);  // 10.5 GiB of 16 outside coloc: about 50 of 76 cells
  CHECK(f.find("1 process outside coloc") != std::string::npos);
  CHECK(f.find(std::to_string(outside->pid())) != std::string::npos);

  // The live view in a terminal of 80x30.
  TempDir t("coloc-top");
  if (run({"tmux", "-V"}, Env(), 10s).exit_code != 0) {
    MESSAGE("skipped the live view: no tmux (mk/deps.sh installs it)");
    write_file(n.file("release"), "");
    return;
  }
  const std::string sock = t / "tmux.sock";
  TmuxServer server{sock};
  // The shell records top's exit status (tmux's own #{pane_dead_status} is sometimes left empty).
  const std::string cmd = "env COLOC_SOCKET=" + n.socket() + " " + build_path("bin/coloc") + " top; echo $? > " + (t / "status");
  ProcResult started = tmux(sock, {"new-session", "-d", "-x", "80", "-y", "30", "-s", "top", cmd});
  REQUIRE_MESSAGE(started.exit_code == 0, describe(started));
  tmux(sock, {"set-option", "-t", "top", "remain-on-exit", "on"});
  std::string screen;
  const bool shown = wait_until([&] {
    screen = tmux(sock, {"capture-pane", "-p", "-t", "top"}).out;
    return screen.find("wait-admit") != std::string::npos && screen.find("  [") != std::string::npos;
  }, 20s, 50ms);
  CHECK_MESSAGE(shown, screen);
  CHECK(screen.find("q quits") != std::string::npos);
  CHECK(screen.find(" A held-") != std::string::npos);
  CHECK(screen.find("#####") != std::string::npos);
  CHECK(widest_line(screen) <= 80);
  // In a terminal, in colour: outside coloc on red (SGR 41).
  CHECK(tmux(sock, {"capture-pane", "-e", "-p", "-t", "top"}).out.find("\033[41m") != std::string::npos);
  // A resize (SIGWINCH) redraws at the new width: the bar spans the 100 columns.
  tmux(sock, {"resize-window", "-t", "top", "-x", "100", "-y", "30"});
  CHECK_MESSAGE(wait_until([&] {
    screen = tmux(sock, {"capture-pane", "-p", "-t", "top"}).out;
    return screen.find(std::string(2, ' ') + "[") != std::string::npos && widest_line(screen) == 100;
  }, 20s, 50ms), screen);
  tmux(sock, {"send-keys", "-t", "top", "q"});
  std::string dead;
  CHECK_MESSAGE(wait_until([&] { return read_file(t / "status") == "0\n"; }, 20s, 20ms), read_file(t / "status"));
  CHECK(wait_until([&] {  // and the pane's command is over
    dead = tmux(sock, {"display-message", "-p", "-t", "top", "#{pane_dead}"}).out;
    return dead == "1\n";
  }, 20s, 20ms));
  // ^C (SIGINT from the terminal): the terminal is given back (the alternate screen left) first.
  // (The shell traps SIGINT, so that it lives on to record the status; top gets the default.)
  const std::string cmd2 = "trap true INT; env COLOC_SOCKET=" + n.socket() + " " + build_path("bin/coloc") + " top; echo $? > " + (t / "status2");
  REQUIRE(tmux(sock, {"new-session", "-d", "-x", "80", "-y", "30", "-s", "top2", cmd2}).exit_code == 0);
  tmux(sock, {"set-option", "-t", "top2", "remain-on-exit", "on"});
  CHECK(wait_until([&] {
    return tmux(sock, {"capture-pane", "-p", "-t", "top2"}).out.find("q quits") != std::string::npos;
  }, 20s, 50ms));
  CHECK(tmux(sock, {"display-message", "-p", "-t", "top2", "#{alternate_on}"}).out == "1\n");
  tmux(sock, {"send-keys", "-t", "top2", "C-c"});
  CHECK_MESSAGE(wait_until([&] { return read_file(t / "status2") == "130\n"; }, 20s, 20ms), read_file(t / "status2"));
  CHECK(wait_until([&] {
    return tmux(sock, {"display-message", "-p", "-t", "top2", "#{alternate_on}"}).out == "0\n";
  }, 20s, 20ms));
  // NO_COLOR=1: no colour, even in a terminal.
  const std::string cmd3 = "env NO_COLOR=1 COLOC_SOCKET=" + n.socket() + " " + build_path("bin/coloc") + " top --once; echo $? > " + (t / "status3") + "; exec sleep 60";  // the pane stays for capture-pane
  REQUIRE(tmux(sock, {"new-session", "-d", "-x", "80", "-y", "30", "-s", "top3", cmd3}).exit_code == 0);
  CHECK(wait_until([&] { return read_file(t / "status3") == "0\n"; }, 20s, 20ms));
  std::string plain;  // (tmux may show the output a moment after the command ended)
  CHECK_MESSAGE(wait_until([&] {
    plain = tmux(sock, {"capture-pane", "-e", "-p", "-t", "top3"}).out;
    return plain.find("wait-admit") != std::string::npos;
  }, 20s, 20ms), plain);
  CHECK(plain.find("\033[4") == std::string::npos);

  write_file(n.file("release"), "");
  finish(*outside);
  finish(*job, 30s);
}

TEST_CASE("coloc top --once: colocd unreachable is exit 3 with the reason") {
  TempDir tmp("coloc-top");
  Env e;
  e.set("COLOC_SOCKET", tmp / "none.sock");
  ProcResult r = run({build_path("bin/coloc"), "top", "--once"}, e, 20s);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("cannot reach colocd at " + tmp / "none.sock") != std::string::npos);
}

}  // TEST_SUITE
