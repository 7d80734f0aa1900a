// `make install` and `make uninstall` (mk/install.mk), run on this build's products: the layout,
// the systemd units naming the installed paths (and passing `systemd-analyze verify`), a job on
// simgpu with the installed coloc (which finds <prefix>/lib/coloc/libcoloc.so from its own path)
// and colocd, --version of both, the example config never overwritten, and an uninstall that
// leaves nothing but an edited config.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "coloc/version.h"
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

namespace {

/// `make -f mk/install.mk TARGET BUILD=<this build> VARS...` in the source tree: the install
/// rules alone, on the products already built (nothing is rebuilt).
ProcResult make_install(const std::string& target, const std::vector<std::string>& vars) {
  std::string build = build_path("");
  while (build.size() > 1 && build.back() == '/') build.pop_back();
  std::vector<std::string> argv = {"make", "--no-print-directory", "-C", source_path(""), "-f", "mk/install.mk",
                                   target, "BUILD=" + build};
  argv.insert(argv.end(), vars.begin(), vars.end());
  Env e;
  for (const char* v : {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}) e.unset(v);  // not the outer make's
  return run(argv, e, 60s);
}

/// Every file (or link) under `dir`, relative to it.
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    if (!it->is_directory()) out.push_back(std::filesystem::relative(it->path(), dir).string());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

/// The pids of `pid`'s children.
std::vector<pid_t> children(pid_t pid) {
  std::vector<pid_t> out;
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

}  // namespace

TEST_SUITE("e2e") {

TEST_CASE("install: make install under a prefix, a job on simgpu with the installed coloc and colocd, systemd-analyze verify, make uninstall leaves nothing") {
  if (simulated_only()) return;
  TempDir t("coloc-install");
  // A PREFIX of one's own, as `make install PREFIX=$HOME/coloc`: its config goes under it (the GNU
  // convention), never to /etc, and the unit names it.
  const std::string prefix = t / "usr", etc = prefix + "/etc";
  ProcResult in = make_install("install", {"PREFIX=" + prefix});
  REQUIRE_MESSAGE(in.exit_code == 0, describe(in));
  CHECK(executable(prefix + "/bin/coloc"));
  CHECK(executable(prefix + "/sbin/colocd"));
  CHECK(file_exists(prefix + "/lib/coloc/libcoloc.so"));
  CHECK(executable(prefix + "/lib/coloc/coloc-ckpt"));  // the checkpoint helper colocd runs
  CHECK(file_exists(prefix + "/lib/coloc/spank_coloc.so") == file_exists(build_path("lib/spank_coloc.so")));
  CHECK(read_file(etc + "/coloc/colocd.toml") == read_file(source_path("deploy/colocd.toml")));
  const std::string units = prefix + "/lib/systemd/system";
  const std::string service = read_file(units + "/colocd.service");
  CHECK(service.find("\nExecStart=" + prefix + "/sbin/colocd\n") != std::string::npos);
  CHECK(service.find('@') == std::string::npos);  // every @VAR@ filled in
  CHECK(service.find("\nEnvironment=COLOC_CONFIG=" + etc + "/coloc/colocd.toml\n") != std::string::npos);
  CHECK_MESSAGE(in.out.find("not colocd's default /etc/coloc/colocd.toml") != std::string::npos, in.out);
  // Installed stripped, as packagers do (the build keeps its debug information).
  for (const std::string& f : {prefix + "/bin/coloc", prefix + "/sbin/colocd", prefix + "/lib/coloc/libcoloc.so",
                               prefix + "/lib/coloc/coloc-ckpt"}) {
    CAPTURE(f);
    ProcResult sections = run({"readelf", "-S", "--wide", f}, Env(), 20s);
    REQUIRE(sections.exit_code == 0);
    CHECK(sections.out.find(".debug_info") == std::string::npos);
    CHECK(sections.out.find(".symtab") == std::string::npos);
  }
  CHECK(run({"readelf", "-S", "--wide", build_path("bin/colocd")}, Env(), 20s).out.find(".debug_info") != std::string::npos);
  CHECK(read_file(units + "/colocd.socket").find("\nListenSequentialPacket=/run/coloc/colocd.sock\n") != std::string::npos);

  // The units as installed (their paths exist): no error, no warning.
  REQUIRE_MESSAGE((file_exists("/usr/bin/systemd-analyze") || file_exists("/bin/systemd-analyze")),
                  "systemd-analyze is missing: mk/deps.sh installs it (Debian package systemd)");
  ProcResult verify = run({"systemd-analyze", "verify", units + "/colocd.socket", units + "/colocd.service"}, Env(), 30s);
  CHECK_MESSAGE(verify.exit_code == 0, describe(verify));
  // No warning about our units (a warning, such as an unknown key or value, still exits 0; lines
  // about the host's own units, if any, are not ours to judge).
  CHECK_MESSAGE((verify.out + verify.err).find("colocd") == std::string::npos, describe(verify));

  // --version of what was installed.
  const std::string release = coloc::kReleaseVersion, protocol = std::to_string(coloc::proto::kVersion);
  ProcResult cv = run({prefix + "/bin/coloc", "--version"}, Env(), 20s);
  CHECK(cv.exit_code == 0);
  CHECK(cv.out == "coloc " + release + " (protocol " + protocol + ")\n");
  ProcResult dv = run({prefix + "/sbin/colocd", "--version"}, Env(), 20s);
  CHECK(dv.exit_code == 0);
  CHECK(dv.out == "colocd " + release + " (protocol " + protocol + ", accepts " +
                      std::to_string(coloc::proto::kMinVersion) + " to " + protocol + ")\n");

  // A node run from the prefix: simgpu stands in for the system's driver (LD_LIBRARY_PATH), as
  // a real libcuda.so.1 would be found; `coloc run` without --sim.
  const std::string socket = t / "run/colocd.sock";
  Env env;
  env.simgpu(t, "16GiB");
  env.set("COLOC_SOCKET", socket);
  env.set("COLOC_CONFIG", "");  // not this machine's /etc/coloc/colocd.toml
  if (sanitizer() == "tsan") env.set("TSAN_OPTIONS", env.get("TSAN_OPTIONS").value_or("") + " atexit_sleep_ms=0");
  Proc colocd({prefix + "/sbin/colocd", "--socket", socket, "--state-dir", t / "state"}, env);
  const bool up = wait_until([&] {
    return run({prefix + "/bin/coloc", "status"}, env, 20s).exit_code == 0 || !colocd.running();
  }, 30s, 20ms);
  REQUIRE_MESSAGE((up && colocd.running()), colocd.err_so_far());
  Proc job({prefix + "/bin/coloc", "run", "--job", "installed", "--mem", "2GiB", "--", cuprobe(), "init", "ctx", "0",
            "alloc", "1GiB", "a", "touch", t / "ready", "hold-file", t / "go"},
           env);
  REQUIRE_MESSAGE(reached(job, t / "ready"), job.err_so_far(), "\n", colocd.err_so_far());
  std::vector<pid_t> kids = children(job.pid());
  REQUIRE(kids.size() == 1);
  const std::string maps = read_file("/proc/" + std::to_string(kids[0]) + "/maps");
  CHECK_MESSAGE(maps.find(prefix + "/lib/coloc/libcoloc.so") != std::string::npos, "the job did not load the installed libcoloc.so");
  ProcResult st = run({prefix + "/bin/coloc", "status", "--json"}, env, 20s);
  REQUIRE_MESSAGE(st.exit_code == 0, describe(st));
  json s = json::parse(st.out);
  REQUIRE(s["jobs"].size() == 1);
  CHECK(s["jobs"][0]["job"].get<std::string>().rfind("installed-", 0) == 0);
  CHECK(s["jobs"][0]["in_use"] == 1 * GiB + kContext);
  write_file(t / "go", "");
  ProcResult jr = finish(job);
  CHECK(step(jr.out, "alloc")["rc_name"] == "CUDA_SUCCESS");
  colocd.kill(SIGTERM);
  CHECK(colocd.wait(20s).exit_code == 0);

  ProcResult un = make_install("uninstall", {"PREFIX=" + prefix});
  REQUIRE_MESSAGE(un.exit_code == 0, describe(un));
  CHECK(un.out.find("daemon-reload") == std::string::npos);  // systemd never looked there
  CHECK_MESSAGE(files_under(prefix).empty(), joined(files_under(prefix)));
  CHECK_MESSAGE(files_under(etc).empty(), joined(files_under(etc)));
  CHECK_FALSE(std::filesystem::exists(prefix + "/lib/coloc"));  // coloc's own directories go too
  CHECK_FALSE(std::filesystem::exists(etc + "/coloc"));
}

TEST_CASE("install: DESTDIR stages /usr/local; an existing config is never overwritten, and an edited one outlives uninstall") {
  TempDir t("coloc-destdir");
  const std::string dest = t / "dest";
  ProcResult in = make_install("install", {"DESTDIR=" + dest});
  REQUIRE_MESSAGE(in.exit_code == 0, describe(in));
  std::vector<std::string> files = files_under(dest);
  std::sort(files.begin(), files.end());
  // The Slurm plugin is there where the build made one (Slurm's headers installed).
  std::vector<std::string> expected = {"etc/coloc/colocd.toml", "usr/local/bin/coloc", "usr/local/lib/coloc/coloc-ckpt",
                                       "usr/local/lib/coloc/libcoloc.so"};
  if (file_exists(build_path("lib/spank_coloc.so"))) expected.push_back("usr/local/lib/coloc/spank_coloc.so");
  for (const char* f : {"usr/local/lib/systemd/system/colocd.service", "usr/local/lib/systemd/system/colocd.socket",
                        "usr/local/sbin/colocd"})
    expected.push_back(f);
  CHECK(joined(files) == joined(expected));
  const std::string service = read_file(dest + "/usr/local/lib/systemd/system/colocd.service");
  CHECK(service.find("\nExecStart=/usr/local/sbin/colocd\n") != std::string::npos);  // no DESTDIR in it
  CHECK(service.find("Environment=COLOC_CONFIG") == std::string::npos);  // /etc/coloc/colocd.toml: colocd's default
  CHECK(service.find(dest) == std::string::npos);

  const std::string config = dest + "/etc/coloc/colocd.toml";
  const std::string edited = read_file(config) + "headroom = \"4GiB\"\n";
  write_file(config, edited);
  in = make_install("install", {"DESTDIR=" + dest});
  REQUIRE_MESSAGE(in.exit_code == 0, describe(in));
  CHECK(read_file(config) == edited);
  CHECK(in.out.find("kept") != std::string::npos);

  ProcResult un = make_install("uninstall", {"DESTDIR=" + dest});
  REQUIRE_MESSAGE(un.exit_code == 0, describe(un));
  CHECK(un.out.find("kept") != std::string::npos);
  CHECK(joined(files_under(dest)) == "etc/coloc/colocd.toml\n");  // the admin's edits stay
  CHECK(read_file(config) == edited);

  ProcResult bad = make_install("install", {"DESTDIR=" + dest, "PREFIX=usr/local"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("PREFIX must be an absolute path") != std::string::npos);
}

}  // TEST_SUITE
