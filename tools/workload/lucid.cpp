// tools/workload/lucid.cpp — see lucid.h.
#include "lucid.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "errors.h"

#ifndef COLOC_LUCID_DEFAULT_DIR
#define COLOC_LUCID_DEFAULT_DIR "tools/workload/lucid"
#endif

namespace coloc::workload::lucid {

namespace {

constexpr std::string_view kSoloHeader = "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label";
constexpr std::string_view kPairsHeader =
    "model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,"
    "gpu_util,gmem_util,gmem";

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower((unsigned char)a[i]) != std::tolower((unsigned char)b[i])) return false;
  return true;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// Errors of one line: "name:LINE: column 'speed': ...".
struct Where {
  const std::string& name;
  size_t line;
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(name + ":" + std::to_string(line) + ": " + what);
  }
};

// The columns of a row, by name.
struct Row {
  const Where& at;
  const std::vector<std::string_view>& header;
  const std::vector<std::string_view>& fields;

  std::string_view text(std::string_view column) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == column) return fields[i];
    at.fail("no column '" + std::string(column) + "'");  // not reached: the header was checked
  }
  std::string name(std::string_view column) const {
    std::string_view t = text(column);
    if (t.empty()) at.fail("column '" + std::string(column) + "' is empty");
    return std::string(t);
  }
  double number(std::string_view column, double lo, double hi) const {
    std::string_view t = text(column);
    double v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v))
      at.fail("column '" + std::string(column) + "': '" + std::string(t) + "' is not a number");
    if (v < lo || v > hi) {
      char range[96];
      std::snprintf(range, sizeof range, "%g to %g", lo, hi);
      at.fail("column '" + std::string(column) + "': " + std::string(t) + " is outside " + range);
    }
    return v;
  }
  uint64_t whole(std::string_view column, uint64_t lo, uint64_t hi) const {
    std::string_view t = text(column);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size())
      at.fail("column '" + std::string(column) + "': '" + std::string(t) + "' is not a whole number");
    if (v < lo || v > hi)
      at.fail("column '" + std::string(column) + "': " + std::string(t) + " is outside " + std::to_string(lo) + " to " +
              std::to_string(hi));
    return v;
  }
  JobConfig job(std::string_view suffix) const {
    auto col = [&](const char* c) { return std::string(c) + std::string(suffix); };
    JobConfig j;
    j.model = name(col("model"));
    j.dataset = name(col("dataset"));
    j.batch = whole(col("batchsize"), 1, 1u << 20);
    j.amp = whole(col("amp"), 0, 1) == 1;
    return j;
  }
};

// Calls `row(Where, fields)` for every data line of a CSV whose header must be `header`.
template <class F>
void for_each_row(std::string_view text, const std::string& name, std::string_view header, F&& row) {
  size_t line = 0;
  bool header_seen = false;
  const std::vector<std::string_view> columns = split(header, ',');
  for (size_t start = 0; start < text.size();) {
    size_t nl = text.find('\n', start);
    std::string_view l = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    const Where at{name, line};
    if (!header_seen) {
      if (l != header) at.fail("expected the header '" + std::string(header) + "'");
      header_seen = true;
      continue;
    }
    if (l.empty()) continue;
    std::vector<std::string_view> fields = split(l, ',');
    if (fields.size() != columns.size())
      at.fail("expected " + std::to_string(columns.size()) + " fields, got " + std::to_string(fields.size()));
    row(Row{at, columns, fields});
  }
  if (!header_seen) throw InputError(name + ": empty file (expected the header '" + std::string(header) + "')");
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the Lucid data");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return s.str();
}

}  // namespace

std::string JobConfig::key() const {
  return model + "/" + dataset + "/" + std::to_string(batch) + (amp ? "/amp" : "");
}

bool JobConfig::matches(const JobConfig& o) const {
  return iequal(model, o.model) && iequal(dataset, o.dataset) && batch == o.batch && amp == o.amp;
}

std::vector<Solo> parse_solo(std::string_view text, const std::string& name) {
  std::vector<Solo> out;
  for_each_row(text, name, kSoloHeader, [&](const Row& r) {
    Solo s;
    s.config = r.job("");
    s.speed = r.number("speed", 1e-9, 1e12);
    s.gpu_util = r.number("gpu_util", 0, 100);
    s.gmem_util = r.number("gmem_util", 0, 100);
    s.gmem_mib = r.number("gmem", 0, 1e9);
    s.label = int(r.whole("label", 0, 1000));
    s.line = r.at.line;
    if (const Solo* dup = find(out, s.config))
      r.at.fail(s.config.key() + " is listed twice (also line " + std::to_string(dup->line) + ")");
    out.push_back(std::move(s));
  });
  return out;
}

std::vector<Pair> parse_pairs(std::string_view text, const std::string& name) {
  std::vector<Pair> out;
  for_each_row(text, name, kPairsHeader, [&](const Row& r) {
    Pair p;
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i + 1);
      p.job[i] = r.job(n);
      p.gpu_num[i] = r.whole("gpu_num" + n, 1, 1024);
      p.speed[i] = r.number("speed" + n, 1e-9, 1e3);
    }
    p.gpu_util = r.number("gpu_util", 0, 100);
    p.gmem_util = r.number("gmem_util", 0, 100);
    p.gmem_mib = r.number("gmem", 0, 1e9);
    p.line = r.at.line;
    out.push_back(std::move(p));
  });
  return out;
}

std::vector<Solo> load_solo(const std::string& path) { return parse_solo(read_all(path), path); }
std::vector<Pair> load_pairs(const std::string& path) { return parse_pairs(read_all(path), path); }

std::string default_dir() {
  if (const char* d = std::getenv("COLOC_LUCID_DIR"); d && *d) return d;
  return COLOC_LUCID_DEFAULT_DIR;
}

JobConfig parse_key(std::string_view key) {
  auto bad = [&](const std::string& why) -> InputError {
    return InputError("--lucid '" + std::string(key) + "': " + why + " (expected MODEL/DATASET/BATCH[/amp], e.g. ResNet18/CIFAR-10/32)");
  };
  std::vector<std::string_view> parts = split(key, '/');
  if (parts.size() != 3 && parts.size() != 4) throw bad("wrong number of parts");
  JobConfig j;
  j.model = std::string(parts[0]);
  j.dataset = std::string(parts[1]);
  if (j.model.empty() || j.dataset.empty()) throw bad("empty model or dataset");
  auto [end, ec] = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), j.batch);
  if (parts[2].empty() || ec != std::errc() || end != parts[2].data() + parts[2].size() || j.batch == 0)
    throw bad("batch '" + std::string(parts[2]) + "' is not a whole number >= 1");
  if (parts.size() == 4) {
    if (iequal(parts[3], "amp")) j.amp = true;
    else if (!iequal(parts[3], "fp32")) throw bad("the 4th part must be 'amp' or 'fp32'");
  }
  return j;
}

const Solo* find(const std::vector<Solo>& solos, const JobConfig& config) {
  for (const Solo& s : solos)
    if (s.config.matches(config)) return &s;
  return nullptr;
}

const Solo& lookup(const std::vector<Solo>& solos, std::string_view key) {
  const JobConfig c = parse_key(key);
  if (const Solo* s = find(solos, c)) return *s;
  std::string models;
  for (const Solo& s : solos)
    if (models.find(s.config.model + "/" + s.config.dataset) == std::string::npos)
      models += (models.empty() ? "" : ", ") + s.config.model + "/" + s.config.dataset;
  throw InputError("--lucid '" + std::string(key) + "': no such configuration in lucid-solo.csv (models: " + models +
                   "; batch sizes 32, 64, 128 for most; see tools/workload/README.md)");
}

Duty duty_of(const Solo& solo) {
  return Duty{solo.gpu_util, 1000.0 * double(solo.config.batch) / solo.speed};
}

Limits limits_for(uint64_t timeslice_us) { return Limits{5.0 * double(timeslice_us) / 1000.0, 200}; }

std::string exclusion(const Solo& solo, const Limits& limits) {
  const Duty d = duty_of(solo);
  char buf[160];
  if (d.gpu_util < kMinGpuUtil) {
    std::snprintf(buf, sizeof buf, "gpu_util %.1f%% < 1%%", d.gpu_util);
    return buf;
  }
  if (d.iter_ms < limits.min_period_ms) {
    std::snprintf(buf, sizeof buf, "period %.1f ms < %.0f ms (5 simgpu slices)", d.iter_ms, limits.min_period_ms);
    return buf;
  }
  if (d.iter_ms > limits.max_period_ms) {
    std::snprintf(buf, sizeof buf, "period %.0f ms > %.0f ms (too few iterations in a short run)", d.iter_ms,
                  limits.max_period_ms);
    return buf;
  }
  return "";
}

}  // namespace coloc::workload::lucid
