// coloc doctor's pure parts (ELF version needs, interposer detection, versions, output) and
// coloc top's frame (80 columns, the bar, the jobs, the processes outside coloc) from a status
// document; coloc status's list of the processes outside coloc.
#include <doctest/doctest.h>

#include <gnu/libc-version.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "../../support/proc.h"
#include "doctor_cmd.h"
#include "format.h"
#include "top_cmd.h"

using namespace coloc::cli;
using coloc::test::build_path;
using nlohmann::json;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

/// Every line of `text` at most `columns` wide; the widest in *widest.
bool fits(const std::string& text, size_t columns, size_t* widest = nullptr) {
  std::istringstream in(text);
  size_t w = 0;
  for (std::string l; std::getline(in, l);) w = std::max(w, display_width(l));
  if (widest) *widest = w;
  return w <= columns;
}

json sample_status() {
  json outside = json::array();
  outside.push_back({{"pid", 4242},
                     {"uid", 1000},
                     {"user", "alice"},
                     {"command", "python /home/alice/a/very/long/path/to/some/training/script.py --with --many "
                                 "--arguments --that --go --on --and --on --past --eighty --columns"},
                     {"used_bytes", 10 * GiB + 512 * MiB}});
  outside.push_back({{"pid", 7}, {"uid", nullptr}, {"user", nullptr}, {"command", nullptr}, {"used_bytes", nullptr}});
  json jobs = json::array();
  jobs.push_back({{"job", "train-with-a-long-name-0a1b2c"},
                  {"user", "bob"},
                  {"state", "running"},
                  {"compute_state", "running"},
                  {"limit", 4 * GiB},
                  {"in_use", 2 * GiB},
                  {"reserved", 3 * GiB},
                  {"peak", 2 * GiB},
                  {"predicted_peak", nullptr},
                  {"waited_s", 0.0},
                  {"gpu_share", nullptr}});
  jobs.push_back({{"job", "held-ff00aa"},
                  {"user", "carol"},
                  {"state", "admission-pending"},
                  {"compute_state", "running"},
                  {"limit", 8 * GiB},
                  {"in_use", 0},
                  {"reserved", 0},
                  {"peak", 0},
                  {"predicted_peak", nullptr},
                  {"waited_s", 3.25},
                  {"gpu_share", 0.5}});
  json dev = {{"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
              {"index", 0},
              {"policy", {{"mode", "timeslice"}, {"quantum_ms", 100}}},  // GPU SHARE shows on timesliced devices only
              {"capacity", 16 * GiB},
              {"headroom", 0},
              {"outside", 10 * GiB + 512 * MiB},
              {"driver_overhead", 512 * MiB},
              {"jobs", jobs},
              {"outside_processes", outside},
              {"outside_processes_more", 3}};
  return {{"daemon", {{"version", "0.14.0"}, {"pid", 99}}}, {"devices", json::array({dev})}, {"jobs", jobs}};
}

}  // namespace

TEST_CASE("coloc doctor: libcoloc.so's glibc floor from its ELF version needs; versions compare by number") {
  std::string floor, error;
  REQUIRE_MESSAGE(glibc_floor(build_path("lib/libcoloc.so"), &floor, &error), error);
  // It loads here; a release build binds its symbols to old glibc versions (ARCHITECTURE.md: it
  // loads on glibc >= 2.17; sanitizer builds keep the default versions).
  CHECK(!floor.empty());
  CHECK(compare_versions(floor, gnu_get_libc_version()) <= 0);
  if (coloc::test::sanitizer().empty()) CHECK(compare_versions(floor, "2.17") <= 0);
  CHECK(compare_versions("2.9", "2.17") < 0);
  CHECK(compare_versions("2.36", "2.36") == 0);
  CHECK(compare_versions("2.36", "2.4") > 0);
  CHECK(!glibc_floor("/nonexistent/lib.so", &floor, &error));
  CHECK(error.find("/nonexistent/lib.so") != std::string::npos);
  CHECK(!glibc_floor(coloc::test::source_path("README.md"), &floor, &error));
  CHECK(error.find("not a 64-bit ELF") != std::string::npos);
}

TEST_CASE("coloc doctor: other CUDA interposers in LD_PRELOAD, by name or by what they define") {
  CHECK(other_interposers("").empty());
  CHECK(other_interposers(build_path("lib/libcoloc.so")).empty());  // coloc's own is not another
  auto found = other_interposers("/usr/lib/libfoo.so /opt/hami/libvgpu.so:libnvshare.so");
  REQUIRE(found.size() == 2);
  CHECK(found[0] == "HAMi-core (libvgpu.so)");
  CHECK(found[1] == "nvshare (libnvshare.so)");
  // Any library that defines the driver's entry points (here simgpu's libcuda.so.1).
  found = other_interposers(build_path("sim/libcuda.so.1"));
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("defines cu") != std::string::npos);
}

TEST_CASE("coloc doctor: text is one line per check, JSON says ok only without a FAIL") {
  std::vector<Check> checks = {{"driver", Check::Level::kOk, "simgpu", "", json::object()},
                               {"preload", Check::Level::kWarn, "libvgpu.so", "unset it", json::object()}};
  std::string text = doctor_text(checks);
  CHECK(text == "OK    driver     simgpu\nWARN  preload    libvgpu.so: unset it\n");
  json j = doctor_json(checks);
  CHECK(j["ok"] == true);
  CHECK(j["checks"][1]["status"] == "warn");
  CHECK(j["checks"][0]["fix"].is_null());
  checks.push_back({"socket", Check::Level::kFail, "no socket", "start colocd", json::object()});
  CHECK(doctor_json(checks)["ok"] == false);
}

TEST_CASE("coloc top: one frame fits 80 columns, with the bar, the jobs and the processes outside coloc") {
  TopView v;
  std::string frame = top_frame(sample_status(), v);
  size_t widest = 0;
  CHECK_MESSAGE(fits(frame, 80, &widest), widest, "\n", frame);
  CHECK(frame.find("\033") == std::string::npos);  // no colour unless asked
  // The bar: job A's 2 GiB in use and 1 GiB more reserved, the overhead, outside coloc, free.
  const std::string bar = "  [" + std::string(10, 'A') + std::string(4, 'a') + std::string(3, '~') + std::string(50, '#') +
                          std::string(9, '.') + "]";
  CHECK_MESSAGE(frame.find(bar + "\n") != std::string::npos, frame);
  CHECK(frame.find(" A train-with-a-~ bob") != std::string::npos);
  CHECK(frame.find(" B held-ff00aa") != std::string::npos);
  CHECK(frame.find("wait-admit") != std::string::npos);
  CHECK(frame.find("3.2s") != std::string::npos);  // waited
  CHECK(frame.find("50%") != std::string::npos);   // GPU share
  CHECK(frame.find("5 processes outside coloc") != std::string::npos);
  CHECK(frame.find("4242") != std::string::npos);
  CHECK(frame.find("alice") != std::string::npos);
  CHECK(frame.find("... and 3 more") != std::string::npos);
  // With colour, the same lines once the escape sequences are taken out.
  v.colour = true;
  std::string coloured = top_frame(sample_status(), v);
  CHECK(coloured.find("\033[") != std::string::npos);
  std::string plain;
  for (size_t i = 0; i < coloured.size(); ++i) {
    if (coloured[i] == '\033') {
      while (i < coloured.size() && coloured[i] != 'm') ++i;
      continue;
    }
    plain += coloured[i];
  }
  CHECK(plain == frame);
  // A wide terminal shows a long job id whole (it can be copied into `coloc pause`); 80 columns
  // cut it. A job without a limit says "none", as status does.
  json st = sample_status();
  const std::string long_id = "finetune-llama-7b-lora-run-0042-a1b2c3";
  st["devices"][0]["jobs"][0]["job"] = long_id;
  st["devices"][0]["jobs"][0]["limit"] = nullptr;
  TopView wide;
  wide.width = 150;
  const std::string wframe = top_frame(st, wide);
  CHECK_MESSAGE(wframe.find(" A " + long_id + " ") != std::string::npos, wframe);
  CHECK(fits(wframe, 150, &widest));
  CHECK(top_frame(st, TopView{}).find(long_id) == std::string::npos);
  CHECK(top_frame(st, TopView{}).find(" A finetune-llam~ ") != std::string::npos);
  CHECK_MESSAGE(fits(top_frame(st, TopView{}), 80, &widest), widest, "\n", top_frame(st, TopView{}));
  CHECK(wframe.find(" none ") != std::string::npos);
  // No devices yet.
  CHECK(top_frame(json{{"daemon", json::object()}, {"devices", json::array()}, {"jobs", json::array()}}, TopView{})
            .find("No devices yet") != std::string::npos);
  CHECK(compact_bytes(json(512 * MiB)) == "512M");
  CHECK(compact_bytes(json(10 * GiB + 512 * MiB)) == "10.5G");
  CHECK(compact_bytes(json(141 * GiB)) == "141G");
  CHECK(compact_bytes(json(nullptr)) == "-");
}

TEST_CASE("coloc top and coloc status: devices in index order, whatever order status lists them in") {
  // Status lists the devices the books met first: here device 1 (a job's), then device 0 (idle,
  // listed from NVML), then one without an index.
  json st = sample_status();
  json dev1 = st["devices"][0];
  for (const char* k : {"committed", "in_use", "granted", "available", "driver_ooms"}) dev1[k] = 0;  // (status_table's)
  for (json& j : dev1["jobs"]) j["granted"] = 0;
  dev1["index"] = 1;
  dev1["uuid"] = "GPU-11111111-1111-1111-1111-111111111111";
  json dev0 = dev1;
  dev0["index"] = 0;
  dev0["uuid"] = "GPU-00000000-0000-0000-0000-000000000000";
  dev0["jobs"] = json::array();
  json none = dev0;
  none["index"] = nullptr;
  none["uuid"] = "GPU-99999999-9999-9999-9999-999999999999";
  st["devices"] = json::array({dev1, dev0, none});
  CHECK(devices_by_index(st["devices"])[0]["index"] == 0);
  CHECK(devices_by_index(st["devices"])[2]["index"].is_null());
  CHECK(st["devices"][0]["index"] == 1);  // (a copy: the status is not reordered)
  auto in_order = [](const std::string& text) {
    const size_t a = text.find("GPU-0000"), b = text.find("GPU-1111"), c = text.find("GPU-9999");
    INFO(text);
    CHECK(a != std::string::npos);
    CHECK(b != std::string::npos);
    CHECK(c != std::string::npos);
    CHECK(a < b);
    CHECK(b < c);
  };
  in_order(top_frame(st, TopView{}));
  in_order(status_table(st));
}

TEST_CASE("coloc status: the processes outside coloc, within 100 columns; none known: nothing printed") {
  json dev = sample_status()["devices"][0];
  std::string text = outside_processes_text(dev, 100);
  CHECK(fits(text, 100));
  CHECK(text.find("5 processes outside coloc:") != std::string::npos);
  CHECK(text.find("PID") != std::string::npos);
  CHECK(text.find("10.50 GiB") != std::string::npos);
  CHECK(text.find("...") != std::string::npos);  // the long command cut
  dev["outside_processes"] = nullptr;
  CHECK(outside_processes_text(dev, 100).empty());
  dev["outside_processes"] = json::array();
  dev["outside_processes_more"] = 0;
  CHECK(outside_processes_text(dev, 100).empty());
}
