// tests/bench/machine.h — what a benchmark's JSON says of the machine it ran on.
#pragma once

#include <sys/utsname.h>

#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace coloc::bench {

/// {"cpu": /proc/cpuinfo's first model name, "cores": hardware threads, "kernel": uname -r}.
inline nlohmann::json machine() {
  utsname u;
  ::uname(&u);
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, cpu = "?";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  return {{"cpu", cpu}, {"cores", std::thread::hardware_concurrency()}, {"kernel", u.release}};
}

}  // namespace coloc::bench
