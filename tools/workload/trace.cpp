// tools/workload/trace.cpp — see trace.h.
#include "trace.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "errors.h"

namespace coloc::workload {

uint64_t Trace::preexisting_bytes() const {
  uint64_t n = 0;
  for (const PreexistingSegment& p : preexisting) n += p.bytes;
  return n;
}

namespace {

constexpr std::string_view kHeader = "t_us,kind,event,size,stream,handle";
constexpr std::string_view kPreexisting = "# preexisting_segment,";
constexpr uint64_t k2MiB = 2ULL << 20;

class LineError {
 public:
  LineError(const std::string& source, int line) : prefix_(source + ":" + std::to_string(line) + ": ") {}
  [[noreturn]] void operator()(const std::string& problem) const { throw InputError(prefix_ + problem); }

 private:
  std::string prefix_;
};

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

// A decimal integer >= 0, digits only.
uint64_t unsigned_field(std::string_view text, const char* field, const LineError& fail) {
  if (text.empty()) fail(std::string("empty ") + field);
  if (text.front() == '-') fail(std::string("negative ") + field + " '" + std::string(text) + "'");
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) fail(std::string(field) + " '" + std::string(text) + "' is too large");
  if (ec != std::errc() || end != text.data() + text.size())
    fail(std::string(field) + " '" + std::string(text) + "' is not a whole number");
  return v;
}

// Tracks live handles of one kind, to check every free against an allocation.
class Handles {
 public:
  explicit Handles(const char* kind) : kind_(kind) {}
  void add_preexisting(uint64_t handle, uint64_t bytes, const LineError& fail) {
    if (!live_.emplace(handle, bytes).second) fail("pre-existing segment handle " + std::to_string(handle) + " is listed twice");
    preexisting_.insert(handle);
  }
  void alloc(uint64_t handle, uint64_t bytes, const LineError& fail) {
    if (!live_.emplace(handle, bytes).second)
      fail(std::string("alloc of ") + kind_ + " handle " + std::to_string(handle) + ", which is live (never freed)");
  }
  void free(uint64_t handle, uint64_t bytes, const LineError& fail) {
    auto it = live_.find(handle);
    if (it == live_.end()) {
      bool was_pre = preexisting_.count(handle) != 0;
      fail(std::string("free of ") + kind_ + " handle " + std::to_string(handle) +
           (was_pre ? ", a pre-existing segment that was already freed" : ", which is neither live nor pre-existing"));
    }
    if (it->second != bytes)
      fail(std::string("free of ") + kind_ + " handle " + std::to_string(handle) + " with size " + std::to_string(bytes) +
           ", but it was allocated with size " + std::to_string(it->second));
    live_.erase(it);
  }

 private:
  const char* kind_;
  std::unordered_map<uint64_t, uint64_t> live_;
  std::unordered_set<uint64_t> preexisting_;
};

}  // namespace

Trace parse_trace(std::istream& in, const std::string& source) {
  Trace trace;
  trace.source = source;
  Handles segments("segment"), blocks("block");
  bool header_seen = false;
  uint64_t last_t = 0;
  std::string raw;
  int lineno = 0;
  while (std::getline(in, raw)) {
    ++lineno;
    std::string_view line(raw);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineError fail(source, lineno);
    if (line.empty()) continue;
    if (line.front() == '#') {
      if (line.substr(0, kPreexisting.size()) != kPreexisting) continue;  // free-form metadata
      if (header_seen) fail("preexisting_segment after the header: pre-existing segments must come first");
      auto f = split_commas(line.substr(kPreexisting.size()));
      if (f.size() != 2) fail("malformed preexisting_segment line: expected '# preexisting_segment,<bytes>,<handle>'");
      PreexistingSegment p;
      p.bytes = unsigned_field(f[0], "size", fail);
      p.handle = unsigned_field(f[1], "handle", fail);
      if (p.bytes == 0) fail("pre-existing segment of size 0");
      segments.add_preexisting(p.handle, p.bytes, fail);
      trace.preexisting.push_back(p);
      continue;
    }
    if (!header_seen) {
      if (line != kHeader) fail("expected the header '" + std::string(kHeader) + "'");
      header_seen = true;
      continue;
    }
    auto f = split_commas(line);
    if (f.size() != 6) fail("expected 6 fields (t_us,kind,event,size,stream,handle), found " + std::to_string(f.size()));
    const uint64_t t = unsigned_field(f[0], "t_us", fail);
    const bool is_segment = f[1] == "segment";
    if (!is_segment && f[1] != "block") fail("unknown kind '" + std::string(f[1]) + "' (expected segment or block)");
    const bool alloc = f[2] == "alloc";
    if (!alloc && f[2] != "free") fail("unknown event '" + std::string(f[2]) + "' (expected alloc or free)");
    const uint64_t bytes = unsigned_field(f[3], "size", fail);
    unsigned_field(f[4], "stream", fail);
    const uint64_t handle = unsigned_field(f[5], "handle", fail);
    if (bytes == 0) fail("size 0");
    if (t < last_t) fail("time goes backwards (" + std::to_string(t) + " µs after " + std::to_string(last_t) + " µs)");
    last_t = t;
    Handles& h = is_segment ? segments : blocks;
    if (alloc) h.alloc(handle, bytes, fail);
    else h.free(handle, bytes, fail);
    if (is_segment) trace.segments.push_back({t, alloc, bytes, handle, lineno});
    else ++trace.block_rows;
  }
  if (in.bad()) throw InputError(source + ": read error");
  if (!header_seen) throw InputError(source + ": no header line '" + std::string(kHeader) + "' (is this a trace?)");
  trace.duration_us = last_t;
  return trace;
}

Trace load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the trace");
  return parse_trace(in, path);
}

uint64_t scaled_segment_bytes(uint64_t bytes, double scale) {
  if (scale == 1.0) return bytes;
  const long double chunks = std::ceil((long double)bytes * scale / (long double)k2MiB);
  constexpr long double kMaxChunks = (long double)(UINT64_MAX / k2MiB);
  if (chunks >= kMaxChunks) return UINT64_MAX / k2MiB * k2MiB;  // no device has it: the driver says OOM
  return std::max<uint64_t>(1, (uint64_t)chunks) * k2MiB;
}

void SteadyPacer::start_loop() { start_ = std::chrono::steady_clock::now(); }

void SteadyPacer::wait_until(std::chrono::nanoseconds since_start) {
  // The workload's own pacing (replaying recorded time), not synchronization.
  std::this_thread::sleep_until(start_ + since_start);
}

TraceReplayer::TraceReplayer(const Trace& trace, DeviceMemory& device, double size_scale, double time_scale)
    : trace_(trace), device_(device), size_scale_(size_scale), time_scale_(time_scale) {}

TraceReplayer::~TraceReplayer() {
  for (auto& [handle, l] : live_) {
    try {
      device_.release(l.ptr);
    } catch (...) {
      // On the way out: the process exit returns the memory anyway.
    }
  }
}

void TraceReplayer::allocate(uint64_t handle, uint64_t bytes, bool preexisting) {
  CUdeviceptr ptr = device_.allocate(bytes);
  ++device_allocs_;
  live_[handle] = Live{ptr, bytes, preexisting};
  live_bytes_ += bytes;
  if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
}

void TraceReplayer::release(uint64_t handle) {
  auto it = live_.find(handle);
  device_.release(it->second.ptr);
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
}

void TraceReplayer::restore_preexisting() {
  for (const PreexistingSegment& p : trace_.preexisting) {
    auto it = live_.find(p.handle);
    if (it != live_.end() && it->second.preexisting) continue;
    allocate(p.handle, scaled_segment_bytes(p.bytes, size_scale_), true);
  }
}

void TraceReplayer::run_loop(Pacer& pacer) {
  pacer.start_loop();
  for (const SegmentEvent& ev : trace_.segments) {
    if (time_scale_ > 0)
      pacer.wait_until(std::chrono::nanoseconds(std::llround((long double)ev.t_us * 1000.0L * time_scale_)));
    if (ev.alloc) allocate(ev.handle, scaled_segment_bytes(ev.bytes, size_scale_), false);
    else release(ev.handle);
  }
  // Back to the pre-existing state: free first, so the loop boundary never raises the peak.
  std::vector<uint64_t> allocated_here;
  for (auto& [handle, l] : live_)
    if (!l.preexisting) allocated_here.push_back(handle);
  for (uint64_t handle : allocated_here) release(handle);
  restore_preexisting();
}

void TraceReplayer::release_all() {
  while (!live_.empty()) release(live_.begin()->first);
}

}  // namespace coloc::workload
