// colocd — the coloc node daemon. See daemon/engine/server.h and docs/ARCHITECTURE.md.
#include <cstdio>

#include "config/config.h"
#include "engine/server.h"
#include "util/log.h"

int main(int argc, char** argv) {
  auto cl = coloc::config::parse_command_line(argc, argv);
  if (!cl) {
    std::fprintf(stderr, "colocd: %s\n", cl.error().message().c_str());
    std::fprintf(stderr, "Run 'colocd --help' for the options.\n");
    return 2;
  }
  if (cl.value().exit_now) return cl.value().exit_code;
  const coloc::config::Config& cfg = cl.value().config;
  if (!coloc::log::set_level(cfg.log_level)) {
    std::fprintf(stderr, "colocd: --log-level: '%s' is not one of trace, debug, info, warn, error, critical, off\n",
                 cfg.log_level.c_str());
    return 2;
  }
  coloc::engine::Server server(cfg);
  if (auto r = server.start(); !r) {
    std::fprintf(stderr, "colocd: %s\n", r.error().message().c_str());
    return 1;
  }
  return server.run();
}
