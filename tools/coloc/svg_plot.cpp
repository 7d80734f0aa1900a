#include "svg_plot.h"

#include "format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace coloc::cli {

using nlohmann::json;

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters, even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') o += ' ';
        else o += c;
    }
  }
  return o;
}

double nice_step(double max, int target) {
  if (!(max > 0)) return 1;
  double raw = max / std::max(target, 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

namespace {

constexpr double kWidth = 1060, kPanelHeight = 430;
constexpr double kLeft = 86, kRight = 280, kTop = 56, kBottom = 58;
const char* kUseColour = "#1f77b4";
const char* kLimitColour = "#d62728";
const char* kPredictColour = "#9467bd";  // the online prediction of the peak (estimator/online.h)
const char* kCapacityColour = "#4d4d4d";
const char* kWaitColour = "#f2a900";
const char* kOomColour = "#c00000";
const char* kTurnColour = "#2e8b57";
constexpr double kLaneHeight = 18, kLaneGap = 10, kLanesTop = 44, kLanesBottom = 50;

/// The time axis every panel and the turn lanes share: `tmax` seconds, in seconds or minutes.
struct TimeAxis {
  double tscale, xstep, xtop;
  bool minutes;
  explicit TimeAxis(double tmax) {
    minutes = tmax > 600;
    tscale = minutes ? 60 : 1;
    xstep = nice_step(tmax / tscale, 8);
    xtop = std::ceil(tmax / tscale / xstep) * xstep;
  }
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string label_num(double v) {
  char b[32];
  if (std::fabs(v - std::round(v)) < 1e-9) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%g", v);
  return b;
}

struct Unit {
  double bytes;
  const char* name;
};
Unit unit_for(double max_bytes) {
  if (max_bytes >= double(1ull << 30)) return {double(1ull << 30), "GiB"};
  if (max_bytes >= double(1ull << 20)) return {double(1ull << 20), "MiB"};
  return {1024.0, "KiB"};
}

std::string bytes_label(double b) {
  Unit u = unit_for(b);
  char s[32];
  std::snprintf(s, sizeof s, "%.2f %s", b / u.bytes, u.name);
  return s;
}

double get_num(const json& j, const char* k, double dflt = 0) {
  auto it = j.find(k);
  return (it != j.end() && it->is_number()) ? it->get<double>() : dflt;
}

/// "1 allocation", "2 allocations".
std::string count_of(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// Places text labels so that none overlaps another (or a marker): each label tries its candidate
/// positions in order and is dropped when every one collides. Sizes are estimates from the font
/// size (SVG has no text metrics without a renderer); a little slack keeps neighbours apart.
class LabelPlacer {
 public:
  struct Box {
    double x0, y0, x1, y1;
  };
  /// `anchor`: 's' start, 'm' middle, 'e' end; (x, y) is the text's anchor point on its baseline.
  static Box text_box(double x, double y, char anchor, const std::string& text, double font_px) {
    const double w = double(text.size()) * font_px * 0.6;
    const double x0 = anchor == 's' ? x : anchor == 'm' ? x - w / 2 : x - w;
    return {x0 - 2, y - font_px, x0 + w + 2, y + 3};
  }
  /// Marks an area as taken (a marker, a label placed without choice).
  void block(const Box& b) { taken_.push_back(b); }
  /// Places the text of text_box(*x, y, anchor, text, font_px): moved sideways into the area when
  /// it sticks out (*x is updated), then taken when it overlaps nothing taken. False: no place.
  bool take(double* x, double y, char anchor, const std::string& text, double font_px) {
    Box b = text_box(*x, y, anchor, text, font_px);
    double dx = b.x0 < area_.x0 ? area_.x0 - b.x0 : b.x1 > area_.x1 ? area_.x1 - b.x1 : 0;
    b.x0 += dx;
    b.x1 += dx;
    if (b.x0 < area_.x0 || b.x1 > area_.x1 || b.y0 < area_.y0 || b.y1 > area_.y1) return false;
    for (const Box& t : taken_)
      if (b.x0 < t.x1 && t.x0 < b.x1 && b.y0 < t.y1 && t.y0 < b.y1) return false;
    taken_.push_back(b);
    *x += dx;
    return true;
  }
  explicit LabelPlacer(Box area) : area_(area) {}

 private:
  Box area_;
  std::vector<Box> taken_;
};

/// One device panel at vertical offset `y0`.
void panel(std::ostringstream& o, const json& d, double duration, double y0) {
  const double pw = kWidth - kLeft - kRight, ph = kPanelHeight - kTop - kBottom;
  const double px = kLeft, py = y0 + kTop;
  const json& tl = d.value("timeline", json::object());
  std::vector<double> ts, bs;
  if (tl.contains("t_s") && tl.contains("bytes"))
    for (size_t i = 0; i < tl["t_s"].size() && i < tl["bytes"].size(); ++i) {
      ts.push_back(tl["t_s"][i].get<double>());
      bs.push_back(tl["bytes"][i].get<double>());
    }
  const double capacity = get_num(d, "capacity");
  const bool has_limit = d.contains("limit") && d["limit"].is_number();
  const double limit = has_limit ? d["limit"].get<double>() : 0;
  const double peak = get_num(d, "peak");
  const bool has_prediction = d.contains("predicted_peak") && d["predicted_peak"].is_number();
  const double predicted = has_prediction ? d["predicted_peak"].get<double>() : 0;

  double tmax = std::max(duration, 1e-3);
  for (double t : ts) tmax = std::max(tmax, t);
  for (const json& w : d.value("waits", json::array())) tmax = std::max(tmax, get_num(w, "end_s"));
  for (const json& e : d.value("oom_events", json::array())) tmax = std::max(tmax, get_num(e, "t_s"));
  double ymax_bytes = std::max({capacity, limit, peak, predicted, 1.0});
  for (double b : bs) ymax_bytes = std::max(ymax_bytes, b);
  for (const json& e : d.value("oom_events", json::array()))
    ymax_bytes = std::max(ymax_bytes, std::min(get_num(e, "in_use") + double(oom_request_bytes(e)),
                                               capacity > 0 ? capacity : 1e300));
  const Unit u = unit_for(ymax_bytes);
  const double ystep = nice_step(ymax_bytes * 1.04 / u.bytes, 6);
  const double ytop = std::ceil(ymax_bytes * 1.04 / u.bytes / ystep) * ystep;  // in units
  const TimeAxis axis(tmax);
  const bool minutes = axis.minutes;
  const double tscale = axis.tscale, xstep = axis.xstep, xtop = axis.xtop;  // xtop: in seconds or minutes

  auto X = [&](double t) { return px + (t / tscale) / xtop * pw; };
  auto Y = [&](double bytes) { return py + ph - (bytes / u.bytes) / ytop * ph; };

  // Panel title.
  o << "<text x='" << num(px) << "' y='" << num(y0 + 30) << "' class='h2'>Device " << xml_escape(d.value("uuid", "?"))
    << "</text>\n";
  o << "<text x='" << num(px) << "' y='" << num(y0 + 47) << "' class='sub'>peak " << xml_escape(bytes_label(peak))
    << (has_limit ? " of a " + xml_escape(bytes_label(limit)) + " limit" : " (no limit)") << " · device "
    << xml_escape(bytes_label(capacity)) << " · " << count_of(d.value("allocations", 0LL), "allocation", "allocations") << ", "
    << d.value("failures", 0) << " failed · waited " << num(get_num(d, "wait_memory_s")) << " s for memory, "
    << num(get_num(d, "wait_admission_s")) << " s for admission</text>\n";

  // Plot area and grid.
  o << "<rect x='" << num(px) << "' y='" << num(py) << "' width='" << num(pw) << "' height='" << num(ph)
    << "' fill='#fafafa' stroke='#bbbbbb'/>\n";
  for (double v = 0; v <= ytop + 1e-9; v += ystep) {
    double y = py + ph - v / ytop * ph;
    o << "<line x1='" << num(px) << "' y1='" << num(y) << "' x2='" << num(px + pw) << "' y2='" << num(y)
      << "' class='grid'/>\n";
    o << "<text x='" << num(px - 8) << "' y='" << num(y + 4) << "' class='tick' text-anchor='end'>" << label_num(v)
      << "</text>\n";
  }
  for (double v = 0; v <= xtop + 1e-9; v += xstep) {
    double x = px + v / xtop * pw;
    o << "<line x1='" << num(x) << "' y1='" << num(py) << "' x2='" << num(x) << "' y2='" << num(py + ph)
      << "' class='grid'/>\n";
    o << "<text x='" << num(x) << "' y='" << num(py + ph + 18) << "' class='tick' text-anchor='middle'>"
      << label_num(v) << "</text>\n";
  }
  o << "<text x='" << num(px + pw / 2) << "' y='" << num(py + ph + 42) << "' class='axis' text-anchor='middle'>time since the job started ("
    << (minutes ? "min" : "s") << ")</text>\n";
  o << "<text transform='translate(" << num(px - 58) << "," << num(py + ph / 2)
    << ") rotate(-90)' class='axis' text-anchor='middle'>device memory (" << u.name << ")</text>\n";

  // Labels inside the plot never overlap: each takes its place in this order (capacity, limit,
  // peak, waits, refusals) and moves, or is dropped, when its place is taken.
  LabelPlacer labels({px, py, px + pw, py + ph + 1});

  // Waiting periods: shaded bands behind the curve (labelled after the lines and the peak).
  std::vector<std::pair<double, std::string>> band_labels;
  for (const json& w : d.value("waits", json::array())) {
    double x0 = X(get_num(w, "start_s")), x1 = X(get_num(w, "end_s"));
    bool adm = w.value("kind", "") == "admission";
    o << "<rect x='" << num(x0) << "' y='" << num(py) << "' width='" << num(std::max(x1 - x0, 1.5)) << "' height='"
      << num(ph) << "' fill='" << kWaitColour << "' fill-opacity='" << (adm ? "0.35" : "0.22")
      << "'><title>waiting for " << xml_escape(w.value("kind", "memory")) << " from +" << num(get_num(w, "start_s"))
      << " s to +" << num(get_num(w, "end_s")) << " s: " << xml_escape(w.value("outcome", "")) << "</title></rect>\n";
    if (x1 - x0 > 70) band_labels.emplace_back((x0 + x1) / 2, "waiting for " + w.value("kind", "memory"));
  }

  // Bytes in use: a step curve, filled below.
  if (!ts.empty()) {
    std::ostringstream line;
    line << "M" << num(X(ts[0])) << "," << num(Y(bs[0]));
    for (size_t i = 1; i < ts.size(); ++i) line << " H" << num(X(ts[i])) << " V" << num(Y(bs[i]));
    const std::string l = line.str();
    o << "<path d='" << l << " V" << num(Y(0)) << " H" << num(X(ts[0])) << " Z' fill='" << kUseColour
      << "' fill-opacity='0.18' stroke='none'/>\n";
    o << "<path d='" << l << "' fill='none' stroke='" << kUseColour << "' stroke-width='2'/>\n";
  } else {
    o << "<text x='" << num(px + pw / 2) << "' y='" << num(py + ph / 2) << "' class='sub' text-anchor='middle'>no samples</text>\n";
  }

  // Capacity and limit.
  auto hline = [&](double bytes, const char* colour, const std::string& text) {
    double y = Y(bytes);
    o << "<line x1='" << num(px) << "' y1='" << num(y) << "' x2='" << num(px + pw) << "' y2='" << num(y) << "' stroke='"
      << colour << "' stroke-width='1.6' stroke-dasharray='7 4'/>\n";
    // Above the line at the right end, else below it, else further left; dropped when all are taken
    // (the legend still names the line).
    for (auto [dx, dy] : {std::pair{0.0, -5.0}, {0.0, 14.0}, {-pw / 2, -5.0}, {-pw / 2, 14.0}}) {
      double x = px + pw - 6 + dx;
      if (labels.take(&x, y + dy, 'e', text, 12)) {
        o << "<text x='" << num(x) << "' y='" << num(y + dy) << "' class='lbl' fill='" << colour
          << "' text-anchor='end'>" << xml_escape(text) << "</text>\n";
        break;
      }
    }
  };
  if (capacity > 0) hline(capacity, kCapacityColour, "device capacity " + bytes_label(capacity));
  if (has_limit) hline(limit, kLimitColour, "job limit " + bytes_label(limit));
  if (has_prediction) hline(predicted, kPredictColour, "predicted peak " + bytes_label(predicted));

  // The peak.
  if (!ts.empty() && peak > 0) {
    size_t at = 0;
    for (size_t i = 0; i < bs.size(); ++i)
      if (bs[i] > bs[at]) at = i;
    double yp = Y(std::max(peak, bs[at]));
    const double xp = X(ts[at]);
    o << "<circle cx='" << num(xp) << "' cy='" << num(yp) << "' r='4' fill='" << kUseColour
      << "'><title>peak " << xml_escape(bytes_label(peak)) << "</title></circle>\n";
    labels.block({xp - 5, yp - 5, xp + 5, yp + 5});
    const std::string text = "peak " + bytes_label(peak);
    struct Spot {
      double dx, dy;
      char anchor;
    };
    for (Spot s : {Spot{7, -7, 's'}, Spot{-7, -7, 'e'}, Spot{7, 16, 's'}, Spot{-7, 16, 'e'}}) {
      double x = xp + s.dx;
      if (labels.take(&x, yp + s.dy, s.anchor, text, 12)) {
        o << "<text x='" << num(x) << "' y='" << num(yp + s.dy) << "' class='lbl' fill='" << kUseColour
          << "' text-anchor='" << (s.anchor == 's' ? "start" : "end") << "'>" << xml_escape(text) << "</text>\n";
        break;
      }
    }
  }
  for (auto [xb, text] : band_labels)
    if (labels.take(&xb, py + 16, 'm', text, 11))
      o << "<text x='" << num(xb) << "' y='" << num(py + 16) << "' class='band' text-anchor='middle'>"
        << xml_escape(text) << "</text>\n";

  // Refused allocations: the markers first (labels keep off them), then one label each where it fits.
  const json ooms = d.value("oom_events", json::array());
  std::vector<std::pair<double, double>> marks;
  for (const json& e : ooms) {
    marks.emplace_back(X(get_num(e, "t_s")), Y(std::min(get_num(e, "in_use"), ytop * u.bytes)));
    labels.block({marks.back().first - 7, marks.back().second - 7, marks.back().first + 7, marks.back().second + 7});
  }
  for (size_t i = 0; i < ooms.size(); ++i) {
    const json& e = ooms[i];
    const auto [x, y] = marks[i];
    std::string reason = e.value("reason", "?");
    o << "<g><title>+" << num(get_num(e, "t_s")) << " s: refused (" << xml_escape(reason) << ") — asked "
      << xml_escape(bytes_label(double(oom_request_bytes(e)))) << " with " << xml_escape(bytes_label(get_num(e, "in_use")))
      << " in use</title>";
    o << "<path d='M" << num(x - 6) << "," << num(y - 6) << " L" << num(x + 6) << "," << num(y + 6) << " M" << num(x + 6)
      << "," << num(y - 6) << " L" << num(x - 6) << "," << num(y + 6) << "' stroke='" << kOomColour
      << "' stroke-width='3' stroke-linecap='round'/>";
    const std::string text = "OOM: " + reason;
    for (double dy : {-11.0, 20.0, -24.0, 33.0}) {
      double xl = x;
      if (labels.take(&xl, y + dy, 'm', text, 11)) {
        o << "<text x='" << num(xl) << "' y='" << num(y + dy) << "' class='oom' text-anchor='middle'>"
          << xml_escape(text) << "</text>";
        break;
      }
    }
    o << "</g>\n";
  }

  // Legend.
  const double lx = px + pw + 22;
  double ly = py + 8;
  const int entries = 4 + (has_limit ? 1 : 0) + (has_prediction ? 1 : 0);
  o << "<rect x='" << num(lx - 10) << "' y='" << num(ly - 8) << "' width='" << num(kRight - 30)
    << "' height='" << num(27.0 * entries + 15) << "' rx='6' fill='#ffffff' stroke='#cccccc'/>\n";
  auto entry = [&](const std::string& swatch, const std::string& text) {
    o << swatch << "<text x='" << num(lx + 34) << "' y='" << num(ly + 14) << "' class='leg'>" << text << "</text>\n";
    ly += 27;
  };
  entry("<rect x='" + num(lx) + "' y='" + num(ly + 4) + "' width='26' height='12' fill='" + kUseColour +
            "' fill-opacity='0.25' stroke='" + kUseColour + "' stroke-width='2'/>",
        "bytes in use");
  if (has_limit)  // a job without a limit has no limit line to explain
    entry("<line x1='" + num(lx) + "' y1='" + num(ly + 10) + "' x2='" + num(lx + 26) + "' y2='" + num(ly + 10) +
              "' stroke='" + kLimitColour + "' stroke-width='2' stroke-dasharray='7 4'/>",
          "job limit");
  if (has_prediction)  // the online prediction, once the job's iteration period was stable
    entry("<line x1='" + num(lx) + "' y1='" + num(ly + 10) + "' x2='" + num(lx + 26) + "' y2='" + num(ly + 10) +
              "' stroke='" + kPredictColour + "' stroke-width='2' stroke-dasharray='7 4'/>",
          "predicted peak");
  entry("<line x1='" + num(lx) + "' y1='" + num(ly + 10) + "' x2='" + num(lx + 26) + "' y2='" + num(ly + 10) +
            "' stroke='" + kCapacityColour + "' stroke-width='2' stroke-dasharray='7 4'/>",
        "device capacity");
  entry("<rect x='" + num(lx) + "' y='" + num(ly + 3) + "' width='26' height='14' fill='" + kWaitColour +
            "' fill-opacity='0.3'/>",
        "waiting (memory, admission)");
  entry("<path d='M" + num(lx + 7) + "," + num(ly + 4) + " L" + num(lx + 19) + "," + num(ly + 16) + " M" + num(lx + 19) +
            "," + num(ly + 4) + " L" + num(lx + 7) + "," + num(ly + 16) + "' stroke='" + kOomColour +
            "' stroke-width='3' stroke-linecap='round'/>",
        "refused allocation (OOM)");
}

/// The turns [[start_s, end_s], ...] of a device's report entry (malformed entries skipped).
std::vector<std::pair<double, double>> turns_of(const json& d) {
  std::vector<std::pair<double, double>> v;
  auto it = d.find("turns");
  if (it == d.end() || !it->is_array()) return v;
  for (const json& t : *it)
    if (t.is_array() && t.size() == 2 && t[0].is_number() && t[1].is_number())
      v.emplace_back(t[0].get<double>(), std::max(t[0].get<double>(), t[1].get<double>()));
  return v;
}

/// The latest time anything of the report shows (s): every panel and the lanes share it.
double time_extent(const json& r, const json& devices) {
  double tmax = std::max(get_num(r, "duration_s"), 1e-3);
  for (const json& d : devices) {
    const json& tl = d.value("timeline", json::object());
    if (tl.contains("t_s") && tl["t_s"].is_array())
      for (const json& t : tl["t_s"])
        if (t.is_number()) tmax = std::max(tmax, t.get<double>());
    for (const json& w : d.value("waits", json::array())) tmax = std::max(tmax, get_num(w, "end_s"));
    for (const json& e : d.value("oom_events", json::array())) tmax = std::max(tmax, get_num(e, "t_s"));
    for (auto [a, b] : turns_of(d)) tmax = std::max(tmax, b);
  }
  return tmax;
}

/// Devices that have turns (the job held a timesliced device at least once).
std::vector<const json*> laned(const json& devices) {
  std::vector<const json*> v;
  for (const json& d : devices)
    if (!turns_of(d).empty()) v.push_back(&d);
  return v;
}

double lanes_height(size_t lanes) {
  return lanes ? kLanesTop + double(lanes) * (kLaneHeight + kLaneGap) + kLanesBottom : 0;
}

/// Under the memory panels: one lane per timesliced device, a filled bar for each of the job's
/// turns (when it held the device), on the panels' time axis; the device's short UUID, its turns
/// and GPU time to the right.
void turn_lanes(std::ostringstream& o, const std::vector<const json*>& lanes, double tmax, double y0) {
  const double pw = kWidth - kLeft - kRight, px = kLeft;
  const TimeAxis axis(tmax);
  auto X = [&](double t) { return px + (t / axis.tscale) / axis.xtop * pw; };
  const double py = y0 + kLanesTop, ph = double(lanes.size()) * (kLaneHeight + kLaneGap) - kLaneGap;
  o << "<g class='turn-lanes'>\n";
  o << "<text x='" << num(px) << "' y='" << num(y0 + 20) << "' class='h2'>When the job held each timesliced device</text>\n";
  o << "<text x='" << num(px) << "' y='" << num(y0 + 36) << "' class='sub'>a bar per turn (merged where the report "
       "ran out of room); between turns other jobs had the device</text>\n";
  for (double v = 0; v <= axis.xtop + 1e-9; v += axis.xstep) {
    const double x = px + v / axis.xtop * pw;
    o << "<line x1='" << num(x) << "' y1='" << num(py - 4) << "' x2='" << num(x) << "' y2='" << num(py + ph + 4)
      << "' class='grid'/>\n";
    o << "<text x='" << num(x) << "' y='" << num(py + ph + 20) << "' class='tick' text-anchor='middle'>"
      << label_num(v) << "</text>\n";
  }
  o << "<text x='" << num(px + pw / 2) << "' y='" << num(py + ph + 40)
    << "' class='axis' text-anchor='middle'>time since the job started (" << (axis.minutes ? "min" : "s") << ")</text>\n";
  for (size_t i = 0; i < lanes.size(); ++i) {
    const json& d = *lanes[i];
    const double y = py + double(i) * (kLaneHeight + kLaneGap);
    const std::string uuid = d.value("uuid", "?");
    o << "<g class='turn-lane'><title>" << xml_escape(uuid) << "</title>\n";
    o << "<rect x='" << num(px) << "' y='" << num(y) << "' width='" << num(pw) << "' height='" << num(kLaneHeight)
      << "' fill='#f0f0f0' stroke='#cccccc'/>\n";
    for (auto [a, b] : turns_of(d))
      o << "<rect class='turn' x='" << num(X(a)) << "' y='" << num(y + 1) << "' width='" << num(std::max(X(b) - X(a), 1.0))
        << "' height='" << num(kLaneHeight - 2) << "' fill='" << kTurnColour << "'><title>held the device from +" << num(a)
        << " s to +" << num(b) << " s</title></rect>\n";
    const uint64_t n = d.value("turns_count", uint64_t(0));
    o << "<text x='" << num(px + pw + 12) << "' y='" << num(y + 13) << "' class='leg'>" << xml_escape(short_uuid(uuid))
      << " · " << xml_escape(count_of((long long)n, "turn", "turns")) << " · GPU " << num(get_num(d, "gpu_time_s"))
      << " s</text>\n";
    o << "</g>\n";
  }
  o << "</g>\n";
}

}  // namespace

std::string render_svg(const json& r) {
  const json devices = r.value("devices", json::array());
  const size_t n = std::max<size_t>(devices.size(), 1);
  const bool away = r.value("complete", false) && r.value("ended_while_daemon_away", false);
  const double header = away ? 82 : 64;  // a line more: when the job ended
  const std::vector<const json*> lanes = laned(devices);
  const double height = header + kPanelHeight * double(n) + lanes_height(lanes.size()) + 10;
  std::ostringstream o;
  o << "<?xml version='1.0' encoding='UTF-8'?>\n";
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << num(kWidth) << "' height='" << num(height)
    << "' viewBox='0 0 " << num(kWidth) << " " << num(height) << "' font-family='Helvetica, Arial, sans-serif'>\n";
  o << "<title>coloc report: job " << xml_escape(r.value("job", "?")) << "</title>\n";
  o << "<style>.h1{font-size:20px;font-weight:bold;fill:#222}.h2{font-size:15px;font-weight:bold;fill:#222}"
       ".sub{font-size:12px;fill:#555}.tick{font-size:11px;fill:#555}.axis{font-size:12px;fill:#333}"
       ".lbl{font-size:12px;font-weight:bold}.leg{font-size:12px;fill:#333}.band{font-size:11px;fill:#8a6100}"
       ".oom{font-size:11px;font-weight:bold;fill:#c00000}.grid{stroke:#e3e3e3;stroke-width:1}</style>\n";
  o << "<rect width='100%' height='100%' fill='#ffffff'/>\n";
  std::string status;
  if (!r.value("complete", false)) status = "still running";
  else if (r.contains("exit_status") && r["exit_status"].is_number()) status = "exit status " + r["exit_status"].dump();
  else if (r.contains("exit_signal") && r["exit_signal"].is_number()) status = "killed by signal " + r["exit_signal"].dump();
  else status = "exit status unknown";
  // Its duration: exact, or for a job that ended while colocd was away, a range.
  std::string ran = num(get_num(r, "duration_s")) + " s";
  if (away && r.contains("duration_max_s") && r["duration_max_s"].is_number())
    ran = num(get_num(r, "duration_s")) + "\u2013" + num(std::max(get_num(r, "duration_s"), get_num(r, "duration_max_s"))) + " s";
  else if (away)
    ran = "at least " + ran;
  std::string command = r.value("command", "");
  if (command.size() > 96) command = command.substr(0, 93) + "...";
  o << "<text x='" << num(kLeft) << "' y='28' class='h1'>Job " << xml_escape(r.value("job", "?")) << " — memory over time</text>\n";
  o << "<text x='" << num(kLeft) << "' y='48' class='sub'>" << xml_escape(r.value("user", "?")) << " · "
    << xml_escape(r.value("priority", "")) << " priority · " << xml_escape(ran) << " · "
    << xml_escape(status) << " · " << xml_escape(command) << "</text>\n";
  if (away)
    o << "<text x='" << num(kLeft) << "' y='66' class='sub'>ended while colocd was away, "
      << xml_escape(away_span_text(r)) << " (it ran " << xml_escape(ran_text(r)) << ")</text>\n";
  const double tmax = time_extent(r, devices);  // one time axis for every panel and the lanes
  for (size_t i = 0; i < devices.size(); ++i) panel(o, devices[i], tmax, header + kPanelHeight * double(i));
  if (!lanes.empty()) turn_lanes(o, lanes, tmax, header + kPanelHeight * double(n));
  if (devices.empty())
    o << "<text x='" << num(kLeft) << "' y='" << num(header + 40) << "' class='sub'>This job never used a device.</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace coloc::cli
