#include "doctor_cmd.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "coloc/protocol.h"
#include "coloc/version.h"
#include "daemon_client.h"

#ifndef COLOC_SAN_RUNTIME
#define COLOC_SAN_RUNTIME ""
#endif

extern char** environ;

namespace coloc::cli {

using nlohmann::json;
using Level = Check::Level;

const char* level_name(Level l) { return l == Level::kOk ? "OK" : l == Level::kWarn ? "WARN" : "FAIL"; }

std::string doctor_text(const std::vector<Check>& checks) {
  std::ostringstream o;
  for (const Check& c : checks) {
    char head[32];
    std::snprintf(head, sizeof head, "%-5s %-11s", level_name(c.level), c.name.c_str());
    o << head;
    o << c.summary;
    if (!c.fix.empty()) o << ": " << c.fix;
    o << "\n";
  }
  return o.str();
}

json doctor_json(const std::vector<Check>& checks) {
  json arr = json::array();
  bool ok = true;
  for (const Check& c : checks) {
    ok &= c.level != Level::kFail;
    std::string status = level_name(c.level);
    for (char& ch : status) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    arr.push_back({{"name", c.name},
                   {"status", status},
                   {"summary", c.summary},
                   {"fix", c.fix.empty() ? json(nullptr) : json(c.fix)},
                   {"details", c.details}});
  }
  return {{"ok", ok}, {"checks", arr}};
}

int compare_versions(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  for (;;) {
    std::string pa, pb;
    const bool ha = bool(std::getline(sa, pa, '.')), hb = bool(std::getline(sb, pb, '.'));
    if (!ha && !hb) return 0;
    const long va = ha ? std::strtol(pa.c_str(), nullptr, 10) : 0, vb = hb ? std::strtol(pb.c_str(), nullptr, 10) : 0;
    if (va != vb) return va < vb ? -1 : 1;
  }
}

namespace {

/// A read-only mapping of a whole file.
class Mapped {
 public:
  explicit Mapped(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error_ = path + ": " + std::strerror(errno);
      return;
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const unsigned char*>(p);
        size_ = size_t(st.st_size);
      } else {
        error_ = path + ": " + std::strerror(errno);
      }
    } else {
      error_ = path + ": not a regular file";
    }
    ::close(fd);
  }
  ~Mapped() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& error() const { return error_; }
  /// A T at `off` (nullptr when it does not fit in the file).
  template <class T>
  const T* at(uint64_t off) const {
    if (!data_ || off > size_ || size_ - off < sizeof(T)) return nullptr;
    return reinterpret_cast<const T*>(data_ + off);
  }
  /// The NUL-terminated string at `off` within [lo, hi), or "" when it does not end there.
  std::string str(uint64_t lo, uint64_t hi, uint64_t off) const {
    if (!data_ || hi > size_ || off < lo || off >= hi) return "";
    const unsigned char* s = data_ + off;
    const void* end = std::memchr(s, 0, size_t(hi - off));
    return end ? std::string(reinterpret_cast<const char*>(s)) : std::string();
  }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string error_;
};

/// The section headers of a 64-bit ELF file of this byte order; nullptr (and *error) otherwise.
const Elf64_Shdr* sections(const Mapped& m, size_t* count, std::string* error) {
  const Elf64_Ehdr* eh = m.at<Elf64_Ehdr>(0);
  if (!eh || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shentsize != sizeof(Elf64_Shdr)) {
    if (error) *error = "not a 64-bit ELF object";
    return nullptr;
  }
  if (eh->e_shnum == 0 || eh->e_shoff > m.size() || (m.size() - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum) {
    if (error) *error = "its section headers are cut";
    return nullptr;
  }
  *count = eh->e_shnum;
  return m.at<Elf64_Shdr>(eh->e_shoff);
}

}  // namespace

bool glibc_floor(const std::string& path, std::string* floor, std::string* error) {
  Mapped m(path);
  if (!m.data()) {
    *error = m.error();
    return false;
  }
  size_t n = 0;
  const Elf64_Shdr* sh = sections(m, &n, error);
  if (!sh) {
    *error = path + ": " + *error;
    return false;
  }
  std::string best;
  for (size_t i = 0; i < n; ++i) {
    if (sh[i].sh_type != SHT_GNU_verneed || sh[i].sh_link >= n) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    const uint64_t s_lo = strtab.sh_offset, s_hi = strtab.sh_offset + strtab.sh_size;
    uint64_t off = sh[i].sh_offset;
    for (int guard = 0; guard < 1024; ++guard) {  // Elf64_Verneed entries, chained by vn_next
      const Elf64_Verneed* vn = m.at<Elf64_Verneed>(off);
      if (!vn) break;
      uint64_t aux = off + vn->vn_aux;
      for (unsigned k = 0; k < vn->vn_cnt && k < 1024; ++k) {
        const Elf64_Vernaux* va = m.at<Elf64_Vernaux>(aux);
        if (!va) break;
        std::string name = m.str(s_lo, s_hi, s_lo + va->vna_name);
        if (name.rfind("GLIBC_", 0) == 0 && name.size() > 6 && std::isdigit(static_cast<unsigned char>(name[6]))) {
          std::string v = name.substr(6);
          if (best.empty() || compare_versions(v, best) > 0) best = v;
        }
        if (va->vna_next == 0) break;
        aux += va->vna_next;
      }
      if (vn->vn_next == 0) break;
      off += vn->vn_next;
    }
  }
  *floor = best;
  return true;
}

bool defines_any(const std::string& path, const std::vector<std::string>& names, std::string* found) {
  Mapped m(path);
  if (!m.data()) return false;
  size_t n = 0;
  const Elf64_Shdr* sh = sections(m, &n, nullptr);
  if (!sh) return false;
  for (size_t i = 0; i < n; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= n || sh[i].sh_entsize != sizeof(Elf64_Sym)) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    const uint64_t s_lo = strtab.sh_offset, s_hi = strtab.sh_offset + strtab.sh_size;
    const uint64_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    for (uint64_t k = 0; k < count; ++k) {
      const Elf64_Sym* sym = m.at<Elf64_Sym>(sh[i].sh_offset + k * sizeof(Elf64_Sym));
      if (!sym) break;
      if (sym->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym->st_info) != STT_FUNC) continue;
      std::string name = m.str(s_lo, s_hi, s_lo + sym->st_name);
      for (const std::string& want : names)
        if (name == want) {
          if (found) *found = name;
          return true;
        }
    }
  }
  return false;
}

std::vector<std::string> other_interposers(const std::string& preload) {
  static const std::map<std::string, std::string> known = {
      {"libvgpu.so", "HAMi-core"},
      {"libnvshare.so", "nvshare"},
      {"libcuda-control.so", "vcuda-controller"},
  };
  std::vector<std::string> out;
  std::string item;
  std::string all = preload;
  for (char& c : all)
    if (c == ':' || c == '\t' || c == '\n') c = ' ';
  std::istringstream words(all);
  while (words >> item) {
    const std::string base = item.substr(item.rfind('/') == std::string::npos ? 0 : item.rfind('/') + 1);
    if (base.rfind("libcoloc.so", 0) == 0) continue;
    auto k = known.find(base);
    if (k != known.end()) {
      out.push_back(k->second + " (" + base + ")");
      continue;
    }
    std::string found;
    if (item.find('/') != std::string::npos && defines_any(item, {"cuInit", "cuMemAlloc_v2", "cuLaunchKernel"}, &found))
      out.push_back(base + " (defines " + found + ")");
  }
  return out;
}

namespace {

std::string exe_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

std::string dir_of(const std::string& p) {
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

/// "12.4" from cuDriverGetVersion's 12040.
std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

/// The path of the loaded object whose file name starts with `prefix` ("" when none is loaded).
std::string loaded_object(const char* prefix) {
  struct Q {
    const char* prefix;
    std::string path;
  } q{prefix, ""};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Q*>(data);
        const char* name = info->dlpi_name ? info->dlpi_name : "";
        const char* base = std::strrchr(name, '/');
        base = base ? base + 1 : name;
        if (std::strncmp(base, q->prefix, std::strlen(q->prefix)) == 0) {
          q->path = name;
          return 1;
        }
        return 0;
      },
      &q);
  return q.path;
}

/// Whether the file at `path` is simgpu's libcuda.so.1 (it carries simgpu's own settings' names).
bool is_simgpu(const std::string& path) {
  Mapped m(path);
  static const char kMark[] = "SIMGPU_DEVICES";
  return m.data() && ::memmem(m.data(), m.size(), kMark, sizeof kMark - 1) != nullptr;
}

/// The probe, in a child process: loads libcuda.so.1 and asks its version, directly (`driver`)
/// or through libcoloc.so's cuGetProcAddress hook (`coloc`, run with libcoloc.so preloaded).
/// Never calls cuInit. Prints one JSON line.
int probe(const std::string& kind) {
  json r = json::object();
  if (kind == "coloc") {
    std::string lib = loaded_object("libcoloc.so");
    r["libcoloc"] = lib.empty() ? json(nullptr) : json(lib);
  }
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    r["load_error"] = e ? e : "unknown error";
    std::cout << r.dump() << std::endl;
    return 0;
  }
  link_map* lm = nullptr;
  if (::dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
    r["driver"] = real(lm->l_name);
    r["simgpu"] = is_simgpu(lm->l_name);
  }
  using VersionFn = int (*)(int*);
  VersionFn version = nullptr;
  if (kind == "coloc") {
    using ResolveFn = int (*)(const char*, void**, int, unsigned long long);
    auto resolve = reinterpret_cast<ResolveFn>(::dlsym(h, "cuGetProcAddress"));
    Dl_info di{};
    if (resolve && ::dladdr(reinterpret_cast<void*>(resolve), &di) && di.dli_fname) r["resolver"] = di.dli_fname;
    void* fn = nullptr;
    const int rc = resolve ? resolve("cuDriverGetVersion", &fn, 11030, 0) : -1;
    r["resolve_rc"] = rc;
    if (rc == 0) version = reinterpret_cast<VersionFn>(fn);
  } else {
    version = reinterpret_cast<VersionFn>(::dlsym(h, "cuDriverGetVersion"));
    if (!version) r["load_error"] = "libcuda.so.1 has no cuDriverGetVersion";
  }
  if (version) {
    int v = 0;
    r["rc"] = version(&v);
    r["version"] = v;
  }
  std::cout << r.dump() << std::endl;
  return 0;
}

struct ChildResult {
  int status = -1;
  bool timed_out = false;
  bool started = false;
  std::string out, err;
};

/// Runs `argv` with the environment `env` to its end (SIGKILL after `timeout_ms`), capturing its
/// output (the first 64 KiB of each stream).
ChildResult run_child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int timeout_ms) {
  ChildResult r;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return r;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return r;
  }
  std::vector<std::string> envs;
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> a, e;
  std::vector<std::string> args = argv;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : envs) e.push_back(s.data());
  e.push_back(nullptr);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execve(a[0], a.data(), e.data());
    _exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  r.started = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sink[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(p, 2, int(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !p[i].revents) continue;
      char buf[4096];
      ssize_t k = ::read(p[i].fd, buf, sizeof buf);
      if (k > 0) {
        if (sink[i]->size() < 65536) sink[i]->append(buf, size_t(k));
      } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(p[i].fd);
        p[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : p)
    if (f.fd >= 0) ::close(f.fd);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = st;
  return r;
}

/// The last JSON object line of `out` (null when there is none).
json last_json_line(const std::string& out) {
  json found;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l.front() == '{') {
      json j = json::parse(l, nullptr, false);
      if (!j.is_discarded()) found = std::move(j);
    }
  return found;
}

/// The first line of `text`, at most 200 characters ("" when empty).
std::string first_line(const std::string& text) {
  std::string l = text.substr(0, text.find('\n'));
  return l.size() > 200 ? l.substr(0, 197) + "..." : l;
}

std::string exit_text(const ChildResult& r) {
  if (!r.started) return "could not be started";
  if (r.timed_out) return "did not finish in 10 s (killed)";
  if (WIFSIGNALED(r.status)) return std::string("was killed by ") + strsignal(WTERMSIG(r.status));
  if (WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0) return "exited " + std::to_string(WEXITSTATUS(r.status));
  return "printed nothing readable";
}

constexpr int kProbeTimeoutMs = 10000;
constexpr int kCudaErrorStubLibrary = 34;  // CUDA_ERROR_STUB_LIBRARY

std::string driver_words(const json& p) {
  const std::string path = p.value("driver", std::string("?"));
  return (p.value("simgpu", false) ? "simgpu (the simulated GPU) " : "the NVIDIA driver ") + path;
}

}  // namespace

CLI::App* DoctorCommand::add_to(CLI::App& app) {
  cmd_ = app.add_subcommand("doctor", "Check what jobs under coloc need here: the driver, libcoloc.so, glibc, other "
                                      "interposers, colocd and its socket, BPF and NVML (one line each, with what to do)");
  cmd_->add_flag("--json", json_, "Print the checks as JSON");
  cmd_->add_flag("--sim", sim_, "Check simgpu, the simulated GPU, as `coloc run --sim` uses it");
  cmd_->add_option("--probe", probe_, "(internal: the child process of a check)")->group("");
  cmd_->footer("Exit codes: 0 nothing blocks jobs (warnings allowed), 1 a check failed.\n"
               "docs/operations.md (\"Troubleshooting: coloc doctor\") explains every check.");
  return cmd_;
}

int DoctorCommand::run(const std::string& socket) const {
  if (!probe_.empty()) {
    if (probe_ != "driver" && probe_ != "coloc") {
      std::fprintf(stderr, "coloc: doctor --probe: use driver or coloc\n");
      return 2;
    }
    return probe(probe_);
  }
  std::vector<Check> checks;
  const std::string self = exe_path(), exe_dir = dir_of(self);
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const std::string user_preload = env.count("LD_PRELOAD") ? env["LD_PRELOAD"] : "";
  env.erase("LD_PRELOAD");
  if (sim_) {
    const std::string sim = real(exe_dir + "/../sim");
    env["LD_LIBRARY_PATH"] = env.count("LD_LIBRARY_PATH") && !env["LD_LIBRARY_PATH"].empty()
                                 ? sim + ":" + env["LD_LIBRARY_PATH"]
                                 : sim;
  }

  // driver: which libcuda.so.1 loads, and its version (no cuInit).
  bool driver_ok = false;
  json drv;
  {
    Check c{"driver"};
    ChildResult r = run_child({self, "doctor", "--probe", "driver"}, env, kProbeTimeoutMs);
    drv = last_json_line(r.out);
    c.details = drv.is_null() ? json::object() : drv;
    if (drv.is_null()) {
      c.level = Level::kFail;
      c.summary = "the driver check " + exit_text(r) + (r.err.empty() ? "" : " (" + first_line(r.err) + ")");
      c.fix = "run `coloc doctor` again; if it persists, the driver hangs or crashes when loaded: check nvidia-smi";
    } else if (drv.contains("load_error")) {
      c.level = Level::kFail;
      c.summary = "no CUDA driver loads: " + drv["load_error"].get<std::string>();
      // simgpu sits in the build tree only (make install leaves the test tools out), so an
      // installed coloc has none next to it: say where it is instead of "reinstall".
      c.fix = sim_ ? "simgpu is not next to this coloc (" + exe_dir +
                         "/../sim; make install leaves the test tools out): run the build tree's coloc "
                         "(build/bin/coloc doctor --sim), or put simgpu's directory (build/sim) on LD_LIBRARY_PATH "
                         "and leave out --sim"
                   : "install the NVIDIA driver (nvidia-smi must work) or put its libcuda.so.1 on the loader's path; "
                     "without a GPU use simgpu from the build tree: build/bin/coloc doctor --sim, "
                     "build/bin/coloc run --sim";
    } else if (drv.value("rc", -1) != 0) {
      c.level = Level::kFail;
      c.summary = driver_words(drv) + " loads, but cuDriverGetVersion fails (CUresult " + std::to_string(drv.value("rc", -1)) + ")";
      c.fix = "the driver is broken or does not match the kernel module: check nvidia-smi and dmesg";
    } else {
      driver_ok = true;
      c.summary = driver_words(drv) + ", CUDA " + cuda_version_text(drv.value("version", 0));
      if (drv.value("simgpu", false) && !sim_) {
        c.level = Level::kWarn;
        c.fix = "jobs run on simulated devices: remove simgpu's directory from LD_LIBRARY_PATH to use the GPU";
      }
    }
    checks.push_back(std::move(c));
  }

  // checkpoint: does the driver offer the checkpoint API that suspension uses? Asked by coloc-ckpt
  // itself (beside coloc in the build tree, in PREFIX/lib/coloc when installed), which calls cuInit.
  if (driver_ok) {
    Check c{"checkpoint"};
    std::string helper;
    for (const std::string& cand : {exe_dir + "/coloc-ckpt", exe_dir + "/../lib/coloc/coloc-ckpt"})
      if (::access(cand.c_str(), X_OK) == 0) {
        helper = real(cand);
        break;
      }
    if (helper.empty()) {
      c.level = Level::kWarn;
      c.summary = "cannot find coloc-ckpt next to coloc (looked in " + exe_dir + " and " + exe_dir +
                  "/../lib/coloc): colocd cannot suspend jobs";
      c.fix = "reinstall coloc (make install puts it in PREFIX/lib/coloc)";
    } else {
      ChildResult r = run_child({helper, "--json", "check"}, env, kProbeTimeoutMs);
      json p = last_json_line(r.out);
      c.details = p.is_null() ? json::object() : p;
      c.details["path"] = helper;
      if (p.is_null()) {
        c.level = Level::kWarn;
        c.summary = "coloc-ckpt check " + exit_text(r) + (r.err.empty() ? "" : " (" + first_line(r.err) + ")");
        c.fix = "run `" + helper + " check` by hand to see why";
      } else if (!p.value("ok", false)) {
        c.level = Level::kWarn;
        c.summary = "no suspension on this node: " + p.value("error", std::string("the checkpoint API is missing"));
        c.fix = "the checkpoint API needs NVIDIA driver 570 or newer on x86-64; colocd's preempt setting stays off";
      } else {
        c.summary = "the driver offers the checkpoint API (CUDA " + cuda_version_text(p.value("driver_version", 0)) +
                    "): jobs can be suspended to host memory; coloc-ckpt calls cuInit, so restore needs no "
                    "persistence mode";
      }
    }
    checks.push_back(std::move(c));
  }

  // libcoloc: loads in a test process and reaches the driver through its hooks.
  std::string lib;
  for (const std::string& cand : {exe_dir + "/../lib/libcoloc.so", exe_dir + "/../lib/coloc/libcoloc.so", exe_dir + "/libcoloc.so"})
    if (exists(cand)) {
      lib = real(cand);
      break;
    }
  {
    Check c{"libcoloc"};
    if (lib.empty()) {
      c.level = Level::kFail;
      c.summary = "cannot find libcoloc.so next to coloc (looked in " + exe_dir + "/../lib, " + exe_dir + "/../lib/coloc and " +
                  exe_dir + ")";
      c.fix = "reinstall coloc (make install puts it in PREFIX/lib/coloc)";
    } else {
      std::map<std::string, std::string> penv = env;
      const std::string san = COLOC_SAN_RUNTIME;
      penv["LD_PRELOAD"] = san.empty() ? lib : san + ":" + lib;
      ChildResult r = run_child({self, "doctor", "--probe", "coloc"}, penv, kProbeTimeoutMs);
      json p = last_json_line(r.out);
      c.details = p.is_null() ? json::object() : p;
      c.details["path"] = lib;
      const std::string resolver = p.is_null() ? "" : p.value("resolver", std::string());
      if (p.is_null() || p["libcoloc"].is_null()) {
        c.level = Level::kFail;
        c.summary = "libcoloc.so (" + lib + ") does not load in a test process: " +
                    (r.err.empty() ? "the process " + exit_text(r) : first_line(r.err));
        c.fix = "see the glibc check; reinstall coloc built for this system";
      } else if (p.contains("load_error")) {
        c.level = Level::kFail;
        c.summary = "libcoloc.so loads, but no driver does: " + p["load_error"].get<std::string>();
        c.fix = "see the driver check";
      } else if (resolver.empty() || resolver.find("libcoloc.so") == std::string::npos) {
        c.level = Level::kFail;
        c.summary = "libcoloc.so loads but does not intercept the driver (cuGetProcAddress comes from " +
                    (resolver.empty() ? std::string("nowhere") : resolver) + ")";
        c.fix = "another library in front of it takes the driver's calls: see the preload check";
      } else if (p.value("resolve_rc", -1) == kCudaErrorStubLibrary) {
        c.level = Level::kFail;
        c.summary = "libcoloc.so loads but reaches no driver (CUDA_ERROR_STUB_LIBRARY)";
        c.fix = "see the driver check";
      } else if (p.value("resolve_rc", -1) != 0 || p.value("rc", -1) != 0) {
        c.level = Level::kFail;
        c.summary = "libcoloc.so loads, but asking the driver's version through it fails (cuGetProcAddress " +
                    std::to_string(p.value("resolve_rc", -1)) + ", cuDriverGetVersion " + std::to_string(p.value("rc", -1)) + ")";
        c.fix = "run `COLOC_LOG_LEVEL=debug coloc doctor` and report what libcoloc.so logs";
      } else {
        c.summary = "libcoloc.so (" + lib + ") loads and reaches " + driver_words(p) + " (CUDA " +
                    cuda_version_text(p.value("version", 0)) + ") through its hooks";
        if (driver_ok && drv.value("driver", std::string()) != p.value("driver", std::string())) {
          c.level = Level::kWarn;
          c.fix = "it reaches another libcuda.so.1 than a plain process (" + drv.value("driver", std::string("?")) +
                  "): check LD_LIBRARY_PATH";
        }
      }
    }
    checks.push_back(std::move(c));
  }

  // glibc: this system's against the newest GLIBC_ version libcoloc.so needs.
  {
    Check c{"glibc"};
    const std::string have = gnu_get_libc_version();
    std::string floor, error;
    c.details["version"] = have;
    if (lib.empty()) {
      c.level = Level::kWarn;
      c.summary = "glibc " + have + "; libcoloc.so's floor is unknown (no libcoloc.so)";
    } else if (!glibc_floor(lib, &floor, &error)) {
      c.level = Level::kWarn;
      c.summary = "glibc " + have + "; cannot read libcoloc.so's version needs: " + error;
    } else {
      c.details["floor"] = floor;
      if (!floor.empty() && compare_versions(have, floor) < 0) {
        c.level = Level::kFail;
        c.summary = "glibc " + have + " is older than libcoloc.so needs (" + floor + ")";
        c.fix = "install a coloc built for this system's glibc";
      } else {
        c.summary = "glibc " + have + " (libcoloc.so needs " + (floor.empty() ? std::string("none") : floor) + " or newer)";
      }
    }
    checks.push_back(std::move(c));
  }

  // preload: another CUDA interposer in LD_PRELOAD or /etc/ld.so.preload.
  {
    Check c{"preload"};
    std::string system_preload;
    if (std::ifstream in("/etc/ld.so.preload"); in) system_preload.assign(std::istreambuf_iterator<char>(in), {});
    std::vector<std::string> found = other_interposers(user_preload);
    for (const std::string& s : other_interposers(system_preload)) found.push_back(s + " in /etc/ld.so.preload");
    c.details["interposers"] = found;
    if (found.empty()) {
      c.summary = "no other CUDA interposer in LD_PRELOAD or /etc/ld.so.preload";
    } else {
      c.level = Level::kWarn;
      c.summary = "another CUDA interposer is preloaded: " + found.front() + (found.size() > 1 ? " and more" : "");
      c.fix = "two interposers count and limit the same memory, and the first takes the calls: run coloc jobs "
              "without it (unset LD_PRELOAD, or remove it from /etc/ld.so.preload)";
    }
    checks.push_back(std::move(c));
  }

  // socket: may this user connect?
  bool connected = false;
  {
    Check c{"socket"};
    c.details["path"] = socket;
    c.details["uid"] = ::getuid();
    struct stat st {};
    if (::stat(socket.c_str(), &st) != 0) {
      const int e = errno;
      c.level = Level::kFail;
      if (e == ENOENT) {
        c.summary = "no socket at " + socket + " (colocd is not running there)";
        c.fix = "start colocd (systemctl start colocd.socket colocd.service), or point --socket or COLOC_SOCKET at "
                "its socket; without colocd jobs run alone on their own limits, and nothing shares the GPU";
      } else {
        c.summary = "cannot reach " + socket + ": " + std::strerror(e);
        c.fix = "a directory on the way is closed to uid " + std::to_string(::getuid()) +
                ": colocd's socket directory (/run/coloc) must be searchable by every user who runs jobs";
      }
    } else {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
      c.details["mode"] = mode;
      c.details["owner_uid"] = st.st_uid;
      int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::strncpy(a.sun_path, socket.c_str(), sizeof a.sun_path - 1);
      const int rc = fd < 0 ? -1 : ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      const int e = errno;
      if (fd >= 0) ::close(fd);
      if (!S_ISSOCK(st.st_mode)) {
        c.level = Level::kFail;
        c.summary = socket + " is not a socket";
        c.fix = "point --socket or COLOC_SOCKET at colocd's socket";
      } else if (rc != 0 && (e == EACCES || e == EPERM)) {
        c.level = Level::kFail;
        c.summary = "uid " + std::to_string(::getuid()) + " may not connect to " + socket + " (mode " + mode + ", owner uid " +
                    std::to_string(st.st_uid) + ")";
        c.fix = "every user who runs jobs must be able to connect: SocketMode=0666 in colocd.socket (colocd itself "
                "decides what each user may do, by SO_PEERCRED)";
      } else if (rc != 0) {
        c.level = Level::kFail;
        c.summary = "cannot connect to " + socket + ": " + std::strerror(e) +
                    (e == ECONNREFUSED ? " (nobody listens: colocd stopped and left its socket)" : "");
        c.fix = "start colocd (systemctl start colocd.socket colocd.service)";
      } else {
        connected = true;
        c.summary = "uid " + std::to_string(::getuid()) + " may connect to " + socket + " (mode " + mode + ")";
      }
    }
    checks.push_back(std::move(c));
  }

  // colocd: answers, and speaks this CLI's protocol.
  json status;
  {
    Check c{"colocd"};
    if (!connected) {
      c.level = Level::kFail;
      c.summary = "not reached (see the socket check)";
      c.fix = "fix the socket check first";
    } else {
      coloc::proto::AdminMsg m;
      std::memset(&m, 0, sizeof m);
      m.op = uint32_t(coloc::proto::AdminOp::kStatus);
      Answer a = admin_request(socket, m, 5000);
      json s = a.kind == Answer::Kind::kOk ? json::parse(a.text, nullptr, false) : json();
      if (a.kind != Answer::Kind::kOk) {
        c.level = Level::kFail;
        c.summary = "colocd took the connection but did not answer: " + a.text;
        c.fix = "colocd refused this user (its per-user connection cap) or is stuck: see its log (journalctl -u colocd)";
      } else if (s.is_discarded() || !s.is_object() || !s.contains("daemon") || !s["daemon"].is_object()) {
        c.level = Level::kFail;
        c.summary = "colocd's status is not what this coloc reads";
        c.fix = "install matching versions of coloc and colocd";
      } else try {
        status = s;
        const json& d = s["daemon"];
        const unsigned max = d.value("protocol", 0u), min = d.value("min_protocol", max);
        const std::string version = d.contains("version") && d["version"].is_string() ? d["version"].get<std::string>() : "";
        c.details = {{"version", version.empty() ? json(nullptr) : json(version)},
                     {"protocol", max},
                     {"min_protocol", min},
                     {"pid", d.value("pid", 0)},
                     {"cli_version", kReleaseVersion},
                     {"cli_protocol", unsigned(proto::kVersion)}};
        const std::string who = "colocd " + (version.empty() ? std::string("(version not said)") : version) + " (pid " +
                                std::to_string(d.value("pid", 0)) + ", protocol " + std::to_string(max) + ", accepts " +
                                std::to_string(min) + " to " + std::to_string(max) + ")";
        if (proto::kVersion < min || proto::kVersion > max) {
          c.level = Level::kFail;
          c.summary = who + " does not accept this coloc's protocol " + std::to_string(proto::kVersion);
          c.fix = "install matching versions: libcoloc.so of this coloc cannot register jobs with it";
        } else if (version != kReleaseVersion) {
          c.level = Level::kWarn;
          c.summary = who + "; this coloc is " + kReleaseVersion;
          c.fix = "they talk, but restart colocd after an upgrade so both are the same (running jobs keep their grants)";
        } else {
          c.summary = who + " answers, the same version as this coloc";
        }
      } catch (const json::exception& e) {  // fields of another type: a colocd of another version
        status = json();
        c.level = Level::kFail;
        c.summary = std::string("colocd's status is not what this coloc reads: ") + e.what();
        c.fix = "install matching versions of coloc and colocd";
      }
    }
    checks.push_back(std::move(c));
  }

  // exit-watch and nvml: what colocd says of itself (its status was read above and has a daemon
  // object; a field of another type is a colocd of another version).
  try {
    Check c{"exit-watch"};
    if (status.is_null()) {
      c.level = Level::kWarn;
      c.summary = "not checked: colocd not reached";
    } else {
      const json& d = status["daemon"];
      const std::string watcher = d.value("watcher", std::string("?"));
      c.details["watcher"] = watcher;
      if (!d.contains("bpf_exit_watch")) {
        c.level = Level::kWarn;
        c.summary = "colocd does not say (older than " + std::string(kReleaseVersion) + "); its watcher: " + watcher;
      } else if (d.value("bpf_exit_watch", false)) {
        c.summary = "colocd watches process exits through BPF (" + watcher + ")";
      } else {
        c.level = Level::kWarn;
        c.summary = "colocd watches exits without BPF: " + watcher;
        c.fix = "jobs are released all the same (pidfd), but exit statuses may be unknown in reports: run colocd as "
                "root with CAP_BPF and CAP_PERFMON, on a kernel with BTF";
      }
    }
    checks.push_back(std::move(c));
  } catch (const json::exception& e) {
    checks.push_back({"exit-watch", Level::kWarn, std::string("cannot read colocd's answer: ") + e.what(), "", json::object()});
  }
  try {
    Check c{"nvml"};
    if (status.is_null()) {
      c.level = Level::kWarn;
      c.summary = "not checked: colocd not reached";
    } else {
      const json& d = status["daemon"];
      const json nvml = d.value("nvml", json());
      c.details = nvml.is_object() ? nvml : json::object();
      if (!nvml.is_object()) {
        c.level = Level::kWarn;
        c.summary = "colocd does not say (older than " + std::string(kReleaseVersion) + ")";
      } else if (nvml.value("available", false)) {
        c.summary = "colocd reads the devices through NVML (memory and processes outside coloc)";
      } else {
        c.level = Level::kWarn;
        c.summary = "colocd has no NVML: " + (nvml["error"].is_string() ? nvml["error"].get<std::string>() : std::string("?"));
        c.fix = "memory used outside coloc is then known only from the jobs' reports, and its processes are not "
                "listed: install the driver's libnvidia-ml.so.1 where colocd finds it";
      }
    }
    checks.push_back(std::move(c));
  } catch (const json::exception& e) {
    checks.push_back({"nvml", Level::kWarn, std::string("cannot read colocd's answer: ") + e.what(), "", json::object()});
  }

  bool failed = false;
  for (const Check& c : checks) failed |= c.level == Level::kFail;
  std::cout << (json_ ? doctor_json(checks).dump(2) + "\n" : doctor_text(checks));
  return failed ? 1 : 0;
}

}  // namespace coloc::cli
