// A stopped process (SIGSTOP) does not keep the device: its queued kernels run on, interleaved with
// the others' (proxy turns, tools/simgpu/shared_state.h), so that after SIGCONT its completions are
// already there. Host times are cuprobe's `mono_ns`, device times the trace's; both CLOCK_MONOTONIC.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <map>
#include <set>
#include <string>

#include "probe.h"

using namespace probetest;
using coloc::test::Proc;

namespace {

uint64_t mono_ns() {  // CLOCK_MONOTONIC, the trace's clock
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

struct Slice {
  long pid;
  uint64_t launch, start, end;
};

std::vector<Slice> read_slices(const std::string& path) {
  std::istringstream in(coloc::test::read_file(path));
  std::string line;
  std::vector<Slice> out;
  REQUIRE(std::getline(in, line));
  while (std::getline(in, line)) {
    Slice s;
    unsigned dev, ctx, stream;
    char kernel[128];
    REQUIRE_MESSAGE(std::sscanf(line.c_str(), "%ld,%u,%u,%u,%lu,%127[^,],%lu,%lu", &s.pid, &dev, &ctx, &stream,
                                &s.launch, kernel, &s.start, &s.end) == 8,
                    "bad trace line: " << line);
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const Slice& x, const Slice& y) { return x.start < y.start; });
  return out;
}

}  // namespace

TEST_SUITE("simgpu") {
TEST_CASE("a stopped process's queued kernels run on while it is stopped, interleaved with another's") {
  TempDir tmp("simgpu-it");
  Env env = sim_env(tmp, "8GiB");
  const std::string trace = tmp / "trace.csv";
  env.set("SIMGPU_TRACE", trace);
  // A: 50 × 20 ms = 1 s of kernels queued, then stopped before it synchronizes.
  Proc a(probe_args({"init", "ctx", "launch-spin", "20000000", "50", "touch", tmp / "a-queued", "hold-file",
                     tmp / "a-go", "sync"}),
         env);
  REQUIRE(coloc::test::wait_until([&] { return coloc::test::file_exists(tmp / "a-queued") || !a.running(); }, 30s));
  a.kill(SIGSTOP);
  const uint64_t stop_ns = mono_ns();
  // B: 50 × 20 ms while A is stopped; it must not wait for A to be continued.
  Proc b(probe_args({"init", "ctx", "launch-spin", "20000000", "50", "sync"}), env);
  auto rb = b.wait(60s);  // a few seconds; without the model it waits for SIGCONT and times out
  REQUIRE_MESSAGE(rb.exit_code == 0, coloc::test::describe(rb));
  auto vb = lines(rb.out);
  REQUIRE(vb.size() == 4);
  const uint64_t b_launched = vb[2]["mono_ns"], b_synced = vb[3]["mono_ns"];
  // A writes the trace lines of the kernels run for it when it runs again: the device timeline is
  // checked once A has ended, against the time A was continued.
  const uint64_t cont_ns = mono_ns();
  a.kill(SIGCONT);
  coloc::test::write_file(tmp / "a-go", "");
  auto ra = a.wait(120s);
  REQUIRE_MESSAGE(ra.exit_code == 0, coloc::test::describe(ra));
  auto va = lines(ra.out);
  REQUIRE(va.size() == 6);
  REQUIRE(rc(va[5]) == "CUDA_SUCCESS");
  const uint64_t a_held = va[4]["mono_ns"], a_synced = va[5]["mono_ns"];
  const long a_pid = va[0]["pid"], b_pid = vb[0]["pid"];

  auto t = read_slices(trace);
  std::map<long, std::vector<Slice>> by;
  for (const Slice& s : t) by[s.pid].push_back(s);
  REQUIRE(by.size() == 2);
  uint64_t a_device = 0, a_last_end = 0, a_during_b = 0, a_after_stop = 0;
  std::set<uint64_t> a_launches;
  for (const Slice& s : by[a_pid]) {
    a_device += s.end - s.start;
    a_last_end = std::max(a_last_end, s.end);
    a_launches.insert(s.launch);
    if (s.start >= b_launched && s.end <= b_synced) a_during_b += s.end - s.start;
    if (s.start >= stop_ns) a_after_stop += s.end - s.start;
  }
  uint64_t b_device = 0;
  for (const Slice& s : by[b_pid]) b_device += s.end - s.start;
  MESSAGE("A: " << a_device / 1e6 << " ms on the device, " << a_after_stop / 1e6 << " ms of it after SIGSTOP, "
                << a_during_b / 1e6 << " ms while B ran; its last "
                << "kernel ended " << (double(cont_ns) - double(a_last_end)) / 1e6 << " ms before SIGCONT; B: "
                << b_device / 1e6 << " ms on the device, " << (b_synced - b_launched) / 1e6
                << " ms from launch to synchronize; A synchronized " << (double(a_synced) - double(cont_ns)) / 1e6
                << " ms after SIGCONT, its synchronize took " << (a_synced - a_held) / 1e6 << " ms");
  CHECK(a_launches.size() == 50);
  CHECK(a_device >= 1'000'000'000ull);         // all of A's work, once
  CHECK(a_device < 1'000'000'000ull * 13 / 10);
  // Much of A's work ran while it was stopped (it had 1 s queued and ran briefly before SIGSTOP),
  // turn by turn beside B's (not before or after it) ...
  CHECK(a_after_stop >= 300'000'000ull);
  CHECK(double(a_during_b) >= 0.8 * double(a_after_stop) - 10e6);
  // ... and all of it was done on the device timeline by the time A was continued (within the
  // time A's executor takes to wake: a turn run for it while the device was free is booked then).
  CHECK(a_last_end <= cont_ns + 50'000'000ull);
  // B was not held up until SIGCONT: it finished while A was stopped, sharing the device (about
  // 2 s for 1 s of its own work; loose for a loaded machine).
  CHECK(b_synced < cont_ns);
  CHECK(b_device >= 1'000'000'000ull);
  // A's synchronize, called after SIGCONT, returned at once: its work was done.
  CHECK(a_synced - a_held < 200'000'000ull);
  // The device ran one kernel at a time.
  for (size_t i = 1; i < t.size(); ++i) CHECK_MESSAGE(t[i].start >= t[i - 1].end, "slices " << i - 1 << " and " << i);
}
}  // TEST_SUITE
