// tools/coloc/doctor_cmd.h — `coloc doctor`: checks what jobs under coloc need on this node, one
// line per check (OK, WARN or FAIL, and what to do), or JSON.
//
//   coloc doctor [--sim] [--json] [--socket PATH]
//
// The checks (docs/operations.md, "Troubleshooting: coloc doctor", says what each outcome means):
//   driver     which libcuda.so.1 loads (the NVIDIA driver or simgpu) and its CUDA version, by
//              cuDriverGetVersion in a child process (no cuInit: nothing registers a job)
//   libcoloc   libcoloc.so (next to coloc, as `coloc run` finds it) loads in a child process and
//              reaches that driver through its own cuGetProcAddress hook
//   glibc      this glibc (gnu_get_libc_version) against the newest GLIBC_x.y libcoloc.so needs
//              (read from its ELF version needs, .gnu.version_r, at run time)
//   preload    LD_PRELOAD and /etc/ld.so.preload hold no other CUDA interposer (HAMi-core's
//              libvgpu.so, nvshare's libnvshare.so, vcuda's libcuda-control.so, or any library
//              that defines cuInit or cuMemAlloc_v2)
//   socket     this user may connect to colocd's socket (file permissions, colocd's refusal)
//   colocd     colocd answers, its version and its protocol range against this CLI's
//   exit-watch colocd watches exits through BPF (else pidfd)
//   nvml       colocd reads the devices itself through NVML
// Exit status: 0 when nothing would block jobs (WARNs allowed), 1 when a check FAILs, 2 bad usage.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace coloc::cli {

/// One check's outcome.
struct Check {
  enum class Level { kOk, kWarn, kFail };
  std::string name;     ///< "driver", "libcoloc", ...
  Level level = Level::kOk;
  std::string summary;  ///< what was found
  std::string fix;      ///< what to do ("" for OK)
  nlohmann::json details = nlohmann::json::object();
};

/// "OK", "WARN", "FAIL".
const char* level_name(Check::Level level);
/// The checks as text, one line each: "OK    driver      simgpu ...; fix".
std::string doctor_text(const std::vector<Check>& checks);
/// The checks as JSON: {"ok": bool (no FAIL), "checks": [{name, status ("ok", "warn", "fail"),
/// summary, fix, details}]}.
nlohmann::json doctor_json(const std::vector<Check>& checks);

/// The newest GLIBC_x.y among the ELF version needs (.gnu.version_r) of the shared object at
/// `path` ("2.17"), "" when it needs none; false with a sentence in *error when the file cannot be
/// read or is not a 64-bit ELF object of this machine's byte order.
bool glibc_floor(const std::string& path, std::string* floor, std::string* error);
/// Whether the ELF shared object at `path` defines (exports) any of `names` in its dynamic symbol
/// table; false when it cannot be read. *found (if given) receives the first one found.
bool defines_any(const std::string& path, const std::vector<std::string>& names, std::string* found = nullptr);
/// -1, 0, 1 as version `a` ("2.31") is older than, equal to, newer than `b` (numeric parts).
int compare_versions(const std::string& a, const std::string& b);
/// The other CUDA interposers among the libraries of `preload` (LD_PRELOAD's syntax: separated by
/// ':' or spaces): "nvshare (libnvshare.so)" for the ones known by name, "NAME (defines cuInit)"
/// for others that define a driver entry point; libcoloc.so itself is not one.
std::vector<std::string> other_interposers(const std::string& preload);

class DoctorCommand {
 public:
  /// Adds the `doctor` subcommand and its options to `app`; returns it.
  CLI::App* add_to(CLI::App& app);
  /// Runs it once `app` has parsed it, against colocd at `socket`; prints the checks on stdout
  /// and returns 0 (nothing blocks jobs) or 1 (a check failed).
  int run(const std::string& socket) const;

 private:
  CLI::App* cmd_ = nullptr;
  bool json_ = false, sim_ = false;
  std::string probe_;  ///< hidden: "driver" or "coloc" runs the probe in this (child) process
};

}  // namespace coloc::cli
