// coloc/size.h — the one size grammar used everywhere a size is given (environment, CLI,
// config files, model specs).
//
//   "1073741824"   a plain number is bytes
//   "4G" "4GiB"    K M G T and KiB MiB GiB TiB are powers of 1024 (as Slurm reads --mem=4G)
//   "4GB"          KB MB GB TB are powers of 1000
//   "1.5GiB"       decimals are allowed with a unit; the result is rounded down to whole bytes
//   "512 MiB"      one optional space between number and unit; units are case-insensitive
//                  except that a trailing "B" alone (e.g. "100B") means bytes.
//
// Header-only and allocation-free on success: the interposer parses its environment with it.
// Source of the grammar: coloc design notes, "Sizes".
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>

namespace coloc {

/// Result of parse_size(): `bytes` on success, else `error` names what is wrong (a static
/// string, never allocated).
struct SizeParse {
  std::optional<uint64_t> bytes;
  const char* error = nullptr;
  explicit operator bool() const { return bytes.has_value(); }
};

namespace size_detail {
inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }
inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}
}  // namespace size_detail

/// Parses a size in the grammar above. Never throws. Errors: empty, negative, no digits,
/// unknown unit, a fraction without a unit, more than 2^64-1 bytes.
inline SizeParse parse_size(std::string_view s) {
  using namespace size_detail;
  SizeParse r;
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  if (s.empty()) { r.error = "empty size"; return r; }
  if (s.front() == '-') { r.error = "negative size"; return r; }
  if (s.front() == '+') s.remove_prefix(1);

  unsigned __int128 whole = 0;
  size_t i = 0;
  bool digits = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    whole = whole * 10 + unsigned(s[i] - '0');
    digits = true;
    if (whole > UINT64_MAX) { r.error = "size too large (over 2^64-1 bytes)"; return r; }
  }
  unsigned __int128 frac = 0, frac_scale = 1;
  bool has_frac = false;
  if (i < s.size() && s[i] == '.') {
    has_frac = true;
    ++i;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      digits = true;
      if (frac_scale < (unsigned __int128)1000000000000000000ULL) {  // keep 18 digits
        frac = frac * 10 + unsigned(s[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (!digits) { r.error = "no digits in size"; return r; }
  std::string_view unit(s.data() + i, s.size() - i);  // not substr(): it can throw, and the interposer must not
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);

  uint64_t mult = 0;
  struct U { const char* name; uint64_t mult; };
  static constexpr U units[] = {
      {"", 1},         {"b", 1},
      {"k", 1ULL << 10}, {"kib", 1ULL << 10}, {"kb", 1000ULL},
      {"m", 1ULL << 20}, {"mib", 1ULL << 20}, {"mb", 1000000ULL},
      {"g", 1ULL << 30}, {"gib", 1ULL << 30}, {"gb", 1000000000ULL},
      {"t", 1ULL << 40}, {"tib", 1ULL << 40}, {"tb", 1000000000000ULL},
  };
  for (const U& u : units)
    if (iequals(unit, u.name)) { mult = u.mult; break; }
  if (mult == 0) { r.error = "unknown unit (use B, K/KiB, M/MiB, G/GiB, T/TiB, KB, MB, GB or TB)"; return r; }
  if (has_frac && mult == 1) { r.error = "fractional number of bytes"; return r; }

  unsigned __int128 total = whole * mult + (frac * mult) / frac_scale;
  if (total > UINT64_MAX) { r.error = "size too large (over 2^64-1 bytes)"; return r; }
  r.bytes = uint64_t(total);
  return r;
}

/// Parses a memory limit: a size as parse_size(), except 2^64-1 bytes, which is the protocol's
/// no-limit marker (proto::kNoLimit) and would silently mean no limit. Never throws.
inline SizeParse parse_limit(std::string_view s) {
  SizeParse r = parse_size(s);
  if (r && *r.bytes == UINT64_MAX) {
    r.bytes.reset();
    r.error = "2^64-1 bytes is coloc's no-limit marker, not a limit (leave the limit out for none)";
  }
  return r;
}

/// Formats `bytes` for people: "0 B", "512 B", "1.50 KiB", "80.00 GiB" (powers of 1024, two
/// decimals above bytes). Writes at most `cap` bytes including the NUL; returns `buf`.
inline const char* format_size(uint64_t bytes, char* buf, size_t cap) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    std::snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double v = double(bytes);
  int k = 0;
  while (v >= 1024.0 && k < 6) { v /= 1024.0; ++k; }
  std::snprintf(buf, cap, "%.2f %s", v, names[k]);
  return buf;
}

}  // namespace coloc
