#include "config.h"

#include <algorithm>
#include <cctype>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "coloc/size.h"

namespace simgpu {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t i = s.find(sep);
    out.push_back(s.substr(0, i));
    if (i == std::string_view::npos) return out;
    s.remove_prefix(i + 1);
  }
}

// Strict decimal integer in [lo, hi]; no sign, no unit, no spaces inside.
bool parse_integer(std::string_view s, uint64_t lo, uint64_t hi, uint64_t* out) {
  s = trim(s);
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

bool parse_devices(std::string_view spec, std::vector<DeviceSpec>* out, std::string* error) {
  out->clear();
  if (trim(spec).empty()) {
    *error = "SIMGPU_DEVICES is empty (expected e.g. \"H100:80GiB,H100:80GiB\")";
    return false;
  }
  auto entries = split(spec, ',');
  if (entries.size() > size_t(kMaxDevices)) {
    *error = "SIMGPU_DEVICES lists " + std::to_string(entries.size()) + " devices; at most " +
             std::to_string(kMaxDevices) + " are supported";
    return false;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string_view entry = trim(entries[i]);
    std::string where = "SIMGPU_DEVICES entry " + std::to_string(i + 1) + " \"" + std::string(entry) + "\": ";
    if (entry.empty()) {
      *error = where + "empty entry";
      return false;
    }
    DeviceSpec dev{"SimGPU", 0};
    std::string_view size = entry;
    if (size_t colon = entry.find(':'); colon != std::string_view::npos) {
      std::string_view name = trim(entry.substr(0, colon));
      size = entry.substr(colon + 1);
      if (name.empty()) {
        *error = where + "empty device name before ':'";
        return false;
      }
      if (name.size() > kMaxDeviceName) {
        *error = where + "device name longer than " + std::to_string(kMaxDeviceName) + " characters";
        return false;
      }
      if (std::any_of(name.begin(), name.end(), [](char c) { return std::iscntrl((unsigned char)c) != 0; })) {
        *error = where + "device name contains a control character";
        return false;
      }
      dev.name = std::string(name);
    }
    coloc::SizeParse parsed = coloc::parse_size(size);
    if (!parsed) {
      *error = where + parsed.error;
      return false;
    }
    if (*parsed.bytes == 0) {
      *error = where + "a device needs more than 0 bytes";
      return false;
    }
    dev.bytes = *parsed.bytes;
    out->push_back(std::move(dev));
  }
  return true;
}

bool load_config(const EnvLookup& env, unsigned uid, Config* out, std::string* error) {
  Config c;
  if (auto v = env("SIMGPU_DEVICES")) {
    if (!parse_devices(*v, &c.devices, error)) return false;
  } else {
    c.devices = {{"SimGPU", 80ull << 30}};
  }

  auto dir = env("SIMGPU_STATE_DIR");
  c.state_dir = dir && !dir->empty() ? *dir : "/dev/shm/simgpu-" + std::to_string(uid);

  if (auto v = env("SIMGPU_CONTEXT_BYTES")) {
    coloc::SizeParse p = coloc::parse_size(*v);
    if (!p) {
      *error = "SIMGPU_CONTEXT_BYTES \"" + *v + "\": " + p.error;
      return false;
    }
    c.context_bytes = *p.bytes;
  }
  if (auto v = env("SIMGPU_TIMESLICE_US")) {
    uint64_t us;
    if (!parse_integer(*v, 1, 10'000'000, &us)) {
      *error = "SIMGPU_TIMESLICE_US \"" + *v + "\": expected whole microseconds from 1 to 10000000";
      return false;
    }
    c.timeslice_ns = us * 1000;
  }
  if (auto v = env("SIMGPU_KERNEL_NS")) {
    if (!parse_integer(*v, 0, 1'000'000'000'000ull, &c.kernel_ns)) {
      *error = "SIMGPU_KERNEL_NS \"" + *v + "\": expected whole nanoseconds from 0 to 10^12";
      return false;
    }
  }
  if (auto v = env("SIMGPU_QUEUE_DEPTH")) {
    uint64_t depth;
    if (!parse_integer(*v, 1, 1'000'000, &depth)) {
      *error = "SIMGPU_QUEUE_DEPTH \"" + *v + "\": expected a whole number of operations from 1 to 1000000";
      return false;
    }
    c.queue_depth = uint32_t(depth);
  }
  if (auto v = env("SIMGPU_TRACE")) c.trace_path = *v;
  if (auto v = env("SIMGPU_FAST")) {
    std::string_view f = trim(*v);
    if (f == "1") {
      c.fast = true;
    } else if (!(f.empty() || f == "0")) {
      *error = "SIMGPU_FAST \"" + *v + "\": expected 1 or 0";
      return false;
    }
  }
  if (auto v = env("SIMGPU_CHECKPOINT_FAULT")) {
    static constexpr std::string_view kOps[kCheckpointOps] = {"lock", "checkpoint", "restore", "unlock"};
    std::string_view rest = *v;
    while (!trim(rest).empty()) {
      size_t comma = rest.find(',');
      std::string_view item = trim(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      auto bad = [&] {
        *error = "SIMGPU_CHECKPOINT_FAULT entry \"" + std::string(item) +
                 "\": expected OP:stall:MS or OP:fail, OP one of lock, checkpoint, restore, unlock";
        return false;
      };
      size_t colon = item.find(':');
      if (colon == std::string_view::npos) return bad();
      int op = -1;
      for (int i = 0; i < kCheckpointOps; ++i)
        if (item.substr(0, colon) == kOps[i]) op = i;
      if (op < 0) return bad();
      std::string_view what = item.substr(colon + 1);
      if (what == "fail") {
        c.checkpoint_faults[size_t(op)].fail = true;
      } else if (what.substr(0, 6) == "stall:") {
        uint64_t ms;
        if (!parse_integer(std::string(what.substr(6)), 0, 3'600'000, &ms)) return bad();
        c.checkpoint_faults[size_t(op)].stall_ms = uint32_t(ms);
      } else {
        return bad();
      }
    }
  }
  c.visible = env("CUDA_VISIBLE_DEVICES");
  *out = std::move(c);
  return true;
}

Uuid device_uuid(std::string_view state_dir, int physical_index) {
  std::string key(state_dir);
  key.push_back('\0');
  key += std::to_string(physical_index);
  XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  Uuid u;
  for (int i = 0; i < 8; ++i) {
    u[i] = (unsigned char)(h.high64 >> (56 - 8 * i));
    u[8 + i] = (unsigned char)(h.low64 >> (56 - 8 * i));
  }
  return u;
}

std::string format_uuid(const Uuid& u) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(hex[u[i] >> 4]);
    s.push_back(hex[u[i] & 15]);
  }
  return s;
}

namespace {

// The hex digits of a "GPU-…" entry, lower-cased and without dashes; empty if malformed.
std::string uuid_digits(std::string_view entry) {
  std::string out;
  for (char c : entry.substr(4)) {
    if (c == '-') continue;
    if (!std::isxdigit((unsigned char)c)) return {};
    out.push_back(char(std::tolower((unsigned char)c)));
  }
  return out;
}

}  // namespace

std::vector<int> apply_visible_devices(std::string_view spec, const std::vector<Uuid>& uuids) {
  std::vector<int> visible;
  if (trim(spec).empty()) return visible;
  std::vector<std::string> digits;
  for (const Uuid& u : uuids) {
    std::string d = format_uuid(u).substr(4);
    d.erase(std::remove(d.begin(), d.end(), '-'), d.end());
    digits.push_back(d);
  }
  for (std::string_view raw : split(spec, ',')) {
    std::string_view entry = trim(raw);
    int index = -1;
    uint64_t n;
    if (parse_integer(entry, 0, uint64_t(uuids.size()) - (uuids.empty() ? 0 : 1), &n) && !uuids.empty()) {
      index = int(n);
    } else if (entry.size() > 4 && (entry.substr(0, 4) == "GPU-" || entry.substr(0, 4) == "gpu-")) {
      std::string want = uuid_digits(entry);
      int matches = 0;
      for (size_t i = 0; !want.empty() && i < digits.size(); ++i)
        if (digits[i].compare(0, want.size(), want) == 0) {
          index = int(i);
          ++matches;
        }
      if (matches != 1) index = -1;
    }
    if (index < 0 || std::find(visible.begin(), visible.end(), index) != visible.end()) break;
    visible.push_back(index);
  }
  return visible;
}

}  // namespace simgpu
