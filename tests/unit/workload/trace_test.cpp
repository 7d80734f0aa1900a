// The trace parser (good files, every kind of malformed line with its line number, frees of
// unknown handles) and the segment-level replay against a fake device.
#include <doctest/doctest.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "../../../tools/workload/errors.h"
#include "../../../tools/workload/trace.h"
#include "../../support/proc.h"
#include "fakes.h"

using namespace coloc::workload;
using coloc::workload::test::FakeCompute;
using coloc::workload::test::FakeDevice;

namespace {

constexpr uint64_t MiB = 1ULL << 20;

Trace parse(const std::string& text) {
  std::istringstream in(text);
  return parse_trace(in, "t.csv");
}

// The error message parse() gives, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kHeader = "t_us,kind,event,size,stream,handle\n";

// Records the due times it is asked to wait for, in ns since the start of its loop.
class FakePacer : public Pacer {
 public:
  void start_loop() override { ++loops; }
  void wait_until(std::chrono::nanoseconds since_start) override { due.push_back(since_start.count()); }
  int loops = 0;
  std::vector<long long> due;
};

const std::string kSmall =
    "# source: a test\n"
    "# preexisting_segment,4194304,1\n"
    "# preexisting_segment,20971520,2\n" +
    kHeader +
    "0,segment,alloc,2097152,0,10\n"
    "5,block,alloc,512,0,10\n"
    "10,segment,free,20971520,0,2\n"
    "12,block,free,512,0,10\n"
    "20,segment,alloc,31457280,0,2\n"   // handle 2 again, after it was freed
    "30,segment,free,2097152,0,10\n";

}  // namespace

TEST_SUITE("workload") {
TEST_CASE("a good trace parses") {
  Trace t = parse(kSmall);
  CHECK(t.source == "t.csv");
  REQUIRE(t.preexisting.size() == 2);
  CHECK(t.preexisting[0].bytes == 4 * MiB);
  CHECK(t.preexisting[1].handle == 2);
  CHECK(t.preexisting_bytes() == 24 * MiB);
  REQUIRE(t.segments.size() == 4);
  CHECK(t.segments[1].alloc == false);
  CHECK(t.segments[1].line == 7);
  CHECK(t.segments[2].bytes == 30 * MiB);
  CHECK(t.block_rows == 2);
  CHECK(t.duration_us == 30);
  // CRLF line ends and blank lines are fine.
  CHECK(error_of("\r\n" + kHeader.substr(0, kHeader.size() - 1) + "\r\n0,segment,alloc,512,0,1\r\n\n") == "");
}

TEST_CASE("malformed lines are errors with their line number") {
  const std::string pre = "# preexisting_segment,2097152,7\n" + kHeader;  // data rows start on line 3
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {pre + "0,segment,alloc,-5,0,1\n", "t.csv:3: negative size '-5'"},
      {pre + "0,segment,alloc,2097152,0\n", "t.csv:3: expected 6 fields"},
      {pre + "0,segment,alloc,2097152,0,1,9\n", "t.csv:3: expected 6 fields"},
      {pre + "x,segment,alloc,2097152,0,1\n", "t.csv:3: t_us 'x' is not a whole number"},
      {pre + "-1,segment,alloc,2097152,0,1\n", "t.csv:3: negative t_us"},
      {pre + "0,tensor,alloc,2097152,0,1\n", "t.csv:3: unknown kind 'tensor'"},
      {pre + "0,segment,malloc,2097152,0,1\n", "t.csv:3: unknown event 'malloc'"},
      {pre + "0,segment,alloc,2.5,0,1\n", "t.csv:3: size '2.5' is not a whole number"},
      {pre + "0,segment,alloc,,0,1\n", "t.csv:3: empty size"},
      {pre + "0,segment,alloc,0,0,1\n", "t.csv:3: size 0"},
      {pre + "0,segment,alloc,99999999999999999999999,0,1\n", "t.csv:3: size '99999999999999999999999' is too large"},
      {pre + "0,segment,alloc,512,s,1\n", "t.csv:3: stream 's' is not a whole number"},
      {pre + "0,segment,alloc,512,0,h\n", "t.csv:3: handle 'h' is not a whole number"},
      {pre + "5,segment,alloc,512,0,1\n4,segment,free,512,0,1\n", "t.csv:4: time goes backwards"},
      {pre + "0,segment,alloc,512,0,1\n1,segment,alloc,512,0,1\n", "t.csv:4: alloc of segment handle 1, which is live"},
      {pre + "0,segment,alloc,512,0,7\n", "t.csv:3: alloc of segment handle 7, which is live"},
      {pre + "0,segment,free,512,0,3\n", "t.csv:3: free of segment handle 3, which is neither live nor pre-existing"},
      {pre + "0,segment,free,2097152,0,7\n1,segment,free,2097152,0,7\n",
       "t.csv:4: free of segment handle 7, a pre-existing segment that was already freed"},
      {pre + "0,segment,free,4096,0,7\n", "t.csv:3: free of segment handle 7 with size 4096, but it was allocated with size 2097152"},
      {pre + "0,block,free,512,0,7\n", "t.csv:3: free of block handle 7, which is neither live nor pre-existing"},
      {pre + "0,block,alloc,512,0,1\n0,block,alloc,512,0,1\n", "t.csv:4: alloc of block handle 1, which is live"},
      {"# preexisting_segment,abc,1\n" + kHeader, "t.csv:1: size 'abc' is not a whole number"},
      {"# preexisting_segment,512\n" + kHeader, "t.csv:1: malformed preexisting_segment line"},
      {"# preexisting_segment,-512,1\n" + kHeader, "t.csv:1: negative size"},
      {"# preexisting_segment,512,1\n# preexisting_segment,1024,1\n" + kHeader, "t.csv:2: pre-existing segment handle 1 is listed twice"},
      {kHeader + "# preexisting_segment,512,1\n", "t.csv:2: preexisting_segment after the header"},
      {"time,kind,event,size,stream,handle\n", "t.csv:1: expected the header"},
      {"# only metadata\n", "t.csv: no header line"},
      {"", "t.csv: no header line"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    std::string err = error_of(c.text);
    CHECK_MESSAGE(err.rfind(c.message, 0) == 0, "got: " << err);
    CHECK(err.find('\n') == std::string::npos);  // one line
  }
}

TEST_CASE("sizes scale and round up to 2 MiB") {
  CHECK(scaled_segment_bytes(20 * MiB, 1.0) == 20 * MiB);
  CHECK(scaled_segment_bytes(20 * MiB, 0.5) == 10 * MiB);
  CHECK(scaled_segment_bytes(20 * MiB, 0.25) == 6 * MiB);   // 5 MiB -> 6 MiB
  CHECK(scaled_segment_bytes(2 * MiB, 0.01) == 2 * MiB);    // never below 2 MiB
  CHECK(scaled_segment_bytes(27262976, 1.0) == 27262976);   // exactly 1 keeps the size
  CHECK(scaled_segment_bytes(100 * MiB, 3.0) == 300 * MiB);
  CHECK(scaled_segment_bytes(UINT64_MAX / 2, 1e6) % (2 * MiB) == 0);  // saturates, no overflow
}

TEST_CASE("replay: pre-existing state, handle reuse, loops restart from the pre-existing state") {
  Trace t = parse(kSmall);
  FakeDevice dev;
  FakePacer pacer;
  TraceReplayer r(t, dev, 1.0, 2.0);
  r.restore_preexisting();
  CHECK(r.live_bytes() == 24 * MiB);
  r.run_loop(pacer);
  // Peak: 24 MiB + 2 MiB, then 20 MiB freed, then 30 MiB: 4 + 2 + 30 = 36 MiB.
  CHECK(r.peak_bytes() == 36 * MiB);
  // Back at the pre-existing state, on the device too.
  CHECK(r.live_bytes() == 24 * MiB);
  CHECK(dev.used == 24 * MiB);
  // Time scale 2: due times are twice the recorded ones (µs -> ns).
  CHECK(pacer.due == std::vector<long long>{0, 20000, 40000, 60000});
  r.run_loop(pacer);
  r.run_loop(pacer);
  CHECK(pacer.loops == 3);
  CHECK(r.peak_bytes() == 36 * MiB);
  r.release_all();
  CHECK(dev.live.empty());
}

TEST_CASE("replay: time scale 0 never waits; size scale scales every segment") {
  Trace t = parse(kSmall);
  FakeDevice dev;
  FakePacer pacer;
  TraceReplayer r(t, dev, 0.5, 0.0);
  r.restore_preexisting();
  r.run_loop(pacer);
  CHECK(pacer.due.empty());
  // Pre-existing 4 + 20 MiB -> 2 + 10; +2 MiB (1 MiB rounded up to 2) = 14; -10 = 4; +30 MiB -> 16:
  // the peak is 20 MiB.
  CHECK(r.live_bytes() == 12 * MiB);
  CHECK(r.peak_bytes() == 20 * MiB);
}

TEST_CASE("replay: an OOM from the device is passed on and nothing is lost") {
  Trace t = parse(kSmall);
  FakeDevice dev;
  dev.capacity = 30 * MiB;
  FakePacer pacer;
  {
    TraceReplayer r(t, dev, 1.0, 0.0);
    r.restore_preexisting();
    try {
      r.run_loop(pacer);
      FAIL("expected an out-of-memory error");
    } catch (const CudaError& e) {
      CHECK(e.out_of_memory());
    }
    CHECK(r.live_bytes() == dev.used);
  }
  CHECK(dev.live.empty());  // the destructor frees what was live
}

TEST_CASE("the shared traces replay to their known peak of 61,111,009,280 bytes") {
  // Known result (data README): 56.9 GiB of live segments at the peak, for both traces; the same
  // peak every loop.
  for (const char* name : {"transformer-lm-ctx128-fullstep.csv", "transformer-lm-ctx256-fullstep.csv"}) {
    CAPTURE(name);
    Trace t = load_trace(coloc::test::source_path(std::string("tools/workload/traces/") + name));
    CHECK(t.block_rows > 10000);
    FakeDevice dev;
    FakePacer pacer;
    TraceReplayer r(t, dev, 1.0, 0.0);
    r.restore_preexisting();
    const uint64_t start = r.live_bytes();
    r.run_loop(pacer);
    CHECK(r.peak_bytes() == 61111009280ULL);
    CHECK(r.live_bytes() == start);
    r.run_loop(pacer);
    CHECK(r.peak_bytes() == 61111009280ULL);
    CHECK(dev.used == start);
  }
}

TEST_CASE("a missing trace file is an input error") {
  CHECK_THROWS_WITH_AS(load_trace("/nonexistent/trace.csv"), doctest::Contains("cannot read"), InputError);
}
}
