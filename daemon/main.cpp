// colocd — the coloc node daemon. See daemon/engine/server.h and docs/ARCHITECTURE.md.
#include <cstdio>
#include <cstring>
#include <string>

#include "coloc/version.h"
#include "config/config.h"
#include "engine/server.h"
#include "engine/systemd.h"
#include "util/log.h"

int main(int argc, char** argv) {
  // --version before anything else: it needs no configuration (and an unreadable one must not
  // hide what is installed).
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--version") == 0) {
      char line[128];
      std::printf("%s\n", coloc::version_line(line, sizeof line, "colocd", true));
      return 0;
    }
  // --check-config validates and prints the configuration, and takes no socket (config.h).
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--check-config") == 0) return coloc::config::check_config(argc, argv, stdout, stderr);
  // The socket systemd may have passed (colocd.socket), taken before any thread starts: it
  // changes the environment. A wrong one is a configuration error (exit 2: no restart loop).
  coloc::engine::systemd::Notifier notifier;
  std::string activation_note;
  auto inherited = coloc::engine::systemd::take_listen_socket(&activation_note);
  if (!inherited) {
    std::fprintf(stderr, "colocd: %s\n", inherited.error().message().c_str());
    notifier.final_status("failed: " + inherited.error().message());
    return 2;
  }
  auto cl = coloc::config::parse_command_line(argc, argv);
  if (!cl) {
    std::fprintf(stderr, "colocd: %s\n", cl.error().message().c_str());
    std::fprintf(stderr, "Run 'colocd --help' for the options.\n");
    notifier.final_status("failed: " + cl.error().message());
    return 2;
  }
  if (cl.value().exit_now) return cl.value().exit_code;
  const coloc::config::Config& cfg = cl.value().config;
  if (!coloc::log::set_level(cfg.log_level)) {
    std::fprintf(stderr, "colocd: --log-level: '%s' is not one of trace, debug, info, warn, error, critical, off\n",
                 cfg.log_level.c_str());
    return 2;
  }
  // A group that does not exist is a configuration error too (exit 2), named as the file or the flag gave it.
  if (auto r = coloc::config::check_groups(cfg); !r) {
    std::fprintf(stderr, "colocd: %s\n", r.error().message().c_str());
    notifier.final_status("failed: " + r.error().message());
    return 2;
  }
  if (!activation_note.empty()) coloc::log::get("engine")->info("{}", activation_note);
  coloc::engine::Server server(cfg);
  if (inherited.value().valid()) server.adopt_listen_socket(std::move(inherited.value()));
  if (auto r = server.start(); !r) {
    std::fprintf(stderr, "colocd: %s\n", r.error().message().c_str());
    notifier.final_status("failed: " + r.error().message());
    return 1;
  }
  return server.run();
}
