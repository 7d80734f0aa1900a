#include "top_cmd.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <sstream>
#include <vector>

#include "coloc/protocol.h"
#include "daemon_client.h"
#include "format.h"

namespace coloc::cli {

using nlohmann::json;

namespace {

uint64_t num(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return 0;
  if (it->is_number_float()) return it->get<double>() > 0 ? uint64_t(it->get<double>()) : 0;
  if (it->is_number_integer() && it->get<int64_t>() < 0) return 0;
  return it->get<uint64_t>();
}

std::string text(const json& o, const char* key, const std::string& dflt = "-") {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

/// Left-aligned in `w` columns (cut with "~" when longer).
std::string cell(const std::string& s, size_t w) {
  const size_t n = display_width(s);
  if (n <= w) return s + std::string(w - n, ' ');
  std::string out;
  size_t cols = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (cols == w - 1) break;
      ++cols;
    }
    out += s[i];
  }
  return out + "~";
}

/// "0s", "3.2s", "1m04", "2h05".
std::string short_duration(double s) {
  char buf[16];
  if (s < 0.05) return "0s";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02d", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02d", int(s) / 3600, (int(s) % 3600) / 60);
  return buf;
}

/// The job's state on a device, in at most 10 columns.
std::string short_state(const json& job) {
  const std::string mem = text(job, "state", "?"), compute = text(job, "compute_state", "running");
  if (mem == "admission-pending") return "wait-admit";
  if (mem == "waiting") return "wait-mem";
  if (compute == "paused") return "paused";
  if (compute == "waiting-quantum") return "wait-turn";
  return mem;
}

// ANSI SGR colours: the jobs' in-use cells on these backgrounds (their reservation in the same
// colour as text), overhead grey, outside coloc red.
const char* const kJobBg[] = {"42", "44", "45", "46", "43"};
const char* const kJobFg[] = {"32", "34", "35", "36", "33"};

struct Segment {
  uint64_t bytes = 0;
  char glyph = '.';
  std::string sgr;  ///< colour ("" none)
};

/// The bar: `cells` cells, each segment its share of `capacity` (rounded on the running sum, so
/// the cells add up).
std::string bar(const std::vector<Segment>& segs, uint64_t capacity, size_t cells, bool colour) {
  std::string out;
  uint64_t sum = 0;
  size_t drawn = 0;
  for (const Segment& s : segs) {
    sum += s.bytes;
    size_t end = capacity == 0 ? 0 : size_t(std::llround(double(std::min(sum, capacity)) / double(capacity) * double(cells)));
    if (end > cells) end = cells;
    if (end <= drawn) continue;
    if (colour && !s.sgr.empty()) out += "\033[" + s.sgr + "m";
    out += std::string(end - drawn, s.glyph);
    if (colour && !s.sgr.empty()) out += "\033[0m";
    drawn = end;
  }
  if (drawn < cells) out += std::string(cells - drawn, '.');
  return out;
}

}  // namespace

std::string compact_bytes(const json& v) {
  if (!v.is_number()) return "-";
  const double b = v.is_number_float() ? v.get<double>() : double(v.get<uint64_t>());
  char buf[16];
  const double mib = b / (1024.0 * 1024.0), gib = mib / 1024.0;
  if (b <= 0) return "0";
  if (mib < 1) return "<1M";
  if (mib < 1000) std::snprintf(buf, sizeof buf, "%.0fM", mib);
  else if (gib < 99.95) std::snprintf(buf, sizeof buf, "%.1fG", gib);
  else std::snprintf(buf, sizeof buf, "%.0fG", gib);
  return buf;
}

namespace {
/// A job's limit as `coloc status` says it: "none" when it has none.
std::string limit_text(const json& v) { return v.is_null() ? "none" : compact_bytes(v); }
}  // namespace

std::string top_frame(const json& s, const TopView& view) {
  const size_t width = std::max<size_t>(view.width, 60);
  std::ostringstream o;
  const std::string bold = view.colour ? "\033[1m" : "", reset = view.colour ? "\033[0m" : "";
  auto line = [&](const std::string& l) { o << fit_text(l, width) << "\n"; };
  const json d = s.value("daemon", json::object());
  const json devices = devices_by_index(s.value("devices", json::array()));
  const json jobs = s.value("jobs", json::array());
  size_t waiting = 0;
  for (const json& j : jobs) waiting += text(j, "state") != "running";
  {
    std::string title = "coloc top · colocd " + text(d, "version", "?") + " pid " + text(d, "pid", "?") + " · " +
                        std::to_string(jobs.size()) + (jobs.size() == 1 ? " job" : " jobs");
    if (waiting) title += ", " + std::to_string(waiting) + " waiting";
    if (!view.clock.empty()) title += " · " + view.clock;
    const std::string right = view.interactive ? "q quits" : "";
    const size_t tw = display_width(title);
    if (!right.empty() && tw + 2 + right.size() <= width) title += std::string(width - tw - right.size(), ' ') + right;
    o << bold << fit_text(title, width) << reset << "\n";
  }
  if (devices.empty()) {
    line("");
    line("No devices yet (colocd lists the devices NVML shows, and those its jobs create a context on).");
    return o.str();
  }
  for (const json& dev : devices) {
    const uint64_t capacity = num(dev, "capacity");
    line("");
    std::string index = dev.contains("index") && dev["index"].is_number() ? dev["index"].dump() : "-";
    // At most 6+40+2+15+2+11 = 76 columns with a one-digit index: the policy in its short form,
    // so the capacity is not cut off at 80 ("timeslice, quantum 100 ms" would push it out).
    std::string head = "GPU " + index + "  " + text(dev, "uuid", "?") + "  " + short_policy_text(dev.value("policy", json())) +
                       "  " + compact_bytes(dev.value("capacity", json())) + " total";
    o << bold << fit_text(head, width) << reset << "\n";
    // The bar: each job's in use (its letter) then its reservation beyond that (the letter in
    // lower case), the driver overhead (~), outside coloc (#), free (.), the headroom (-) last.
    const json djobs = dev.value("jobs", json::array());
    std::vector<Segment> segs;
    uint64_t in_use = 0, reserved = 0;
    for (size_t i = 0; i < djobs.size(); ++i) {
      const char key = i < 26 ? char('A' + i) : '*';
      const uint64_t u = num(djobs[i], "in_use"), r = num(djobs[i], "reserved");
      const uint64_t extra = r > u ? r - u : 0;
      in_use += u;
      reserved += extra;
      segs.push_back({u, key, kJobBg[i % 5]});
      segs.push_back({extra, char(key == '*' ? '*' : key - 'A' + 'a'), kJobFg[i % 5]});
    }
    const uint64_t overhead = num(dev, "driver_overhead"), outside = num(dev, "outside"), headroom = num(dev, "headroom");
    segs.push_back({overhead, '~', "100"});
    segs.push_back({outside, '#', "41"});
    const uint64_t taken = in_use + reserved + overhead + outside;
    const uint64_t free_bytes = capacity > taken + headroom ? capacity - taken - headroom : 0;
    segs.push_back({free_bytes, '.', ""});
    segs.push_back({headroom, '-', "2"});
    o << "  [" << bar(segs, capacity, width - 4, view.colour) << "]\n";
    // The legend with the figures (at most 66 and 58 columns).
    line("  A-Z in use " + compact_bytes(json(in_use)) + "  a-z reserved " + compact_bytes(json(reserved)) +
         "  ~ driver overhead " + compact_bytes(json(overhead)));
    line("  # outside coloc " + compact_bytes(json(outside)) + "  . free " + compact_bytes(json(free_bytes)) +
         "  - headroom " + compact_bytes(json(headroom)));
    if (djobs.empty()) {
      line("  no jobs");
    } else {
      // 3 + job+1 + 8+1 + 10+1 + 6+1 + 6+1 + 6+1 + 6+1 + 6+1 + 5 = job + 65 columns at most: the JOB column
      // takes the longest id where the terminal has room (so an id can be copied into `coloc
      // pause`), at least 14 columns (79 in all) and never past the terminal's width.
      size_t job_w = 14;
      for (const json& j : djobs) job_w = std::max(job_w, display_width(text(j, "job", "?")));
      job_w = std::min(job_w, std::max<size_t>(14, width > 66 ? width - 66 : 14));
      auto row = [&](const std::vector<std::string>& c) {
        std::string r = "   " + cell(c[0], job_w) + " " + cell(c[1], 8) + " " + cell(c[2], 10) + " " + cell(c[3], 6) + " " +
                        cell(c[4], 6) + " " + cell(c[5], 6) + " " + cell(c[6], 6) + " " + cell(c[7], 6) + " " + cell(c[8], 5);
        while (r.back() == ' ') r.pop_back();
        return r;
      };
      line(row({"JOB", "USER", "STATE", "LIMIT", "IN USE", "PEAK", "PRED", "WAITED", "SHARE"}));
      for (size_t i = 0; i < djobs.size(); ++i) {
        const json& j = djobs[i];
        const char key = i < 26 ? char('A' + i) : '*';
        const std::string share = job_share_text(dev, j);  // "-" where the device is not timesliced
        const std::string waited =
            j.contains("waited_s") && j["waited_s"].is_number() ? short_duration(j["waited_s"].get<double>()) : "-";
        std::string r = row({text(j, "job", "?"), text(j, "user", "?"), short_state(j), limit_text(j.value("limit", json())),
                             compact_bytes(j.value("in_use", json())), compact_bytes(j.value("peak", json())),
                             compact_bytes(j.value("predicted_peak", json())), waited, share});
        r[1] = key;
        if (view.colour) r = " \033[" + std::string(kJobFg[i % 5]) + ";1m" + key + "\033[0m" + r.substr(2);
        o << r << "\n";
        // A waiting job: where it stands in the device's queue, and why (its reason).
        if (j.contains("queue") && j["queue"].is_object())
          line("     " + queue_sentence(j["queue"], int64_t(::time(nullptr))));
      }
    }
    o << outside_processes_text(dev, width);
  }
  return o.str();
}

namespace {

termios g_saved{};
volatile sig_atomic_t g_raw = 0;
volatile sig_atomic_t g_resized = 0;

constexpr char kEnter[] = "\033[?1049h\033[?25l";  // alternate screen, cursor hidden
constexpr char kLeave[] = "\033[?25h\033[?1049l";

void restore_terminal() {
  if (!g_raw) return;
  ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved);
  (void)!::write(STDOUT_FILENO, kLeave, sizeof kLeave - 1);
  g_raw = 0;
}

void on_quit_signal(int sig) {
  restore_terminal();  // tcsetattr and write are async-signal-safe
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_winch(int) { g_resized = 1; }

size_t terminal_width(size_t* rows) {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    if (rows) *rows = ws.ws_row;
    return ws.ws_col;
  }
  if (rows) *rows = 0;
  return 80;
}

std::string clock_text() {
  char buf[16];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

/// colocd's status, or *error.
bool fetch(const std::string& socket, json* out, std::string* error) {
  proto::AdminMsg m;
  std::memset(&m, 0, sizeof m);
  m.op = uint32_t(proto::AdminOp::kStatus);
  Answer a = admin_request(socket, m, 2000);
  if (a.kind != Answer::Kind::kOk) {
    *error = a.text;
    return false;
  }
  *out = json::parse(a.text, nullptr, false);
  if (out->is_discarded() || !out->is_object()) {
    *error = "colocd sent an answer that is not JSON";
    return false;
  }
  return true;
}

}  // namespace

CLI::App* TopCommand::add_to(CLI::App& app) {
  cmd_ = app.add_subcommand("top", "A live view of the node: per device a memory bar (jobs, reservations, driver "
                                   "overhead, outside coloc), the jobs, and the processes outside coloc");
  cmd_->add_flag("--once", once_, "Print one frame (80 columns) and exit, for scripts");
  cmd_->footer("Keys: q quits. Colour unless NO_COLOR is set or the output is not a terminal.\n"
               "Exit codes: 0 ok, 3 daemon unreachable (--once).");
  return cmd_;
}

int TopCommand::run(const std::string& socket) const {
  const bool tty_out = ::isatty(STDOUT_FILENO) == 1;
  const char* no_colour = std::getenv("NO_COLOR");
  const bool colour = tty_out && !(no_colour && *no_colour);
  if (once_) {
    json s;
    std::string error;
    if (!fetch(socket, &s, &error)) {
      std::fprintf(stderr, "coloc: %s\n", error.c_str());
      return 3;
    }
    TopView v;
    v.colour = colour;
    try {
      std::cout << top_frame(s, v) << std::flush;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "coloc: colocd's status is not what this coloc reads: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  const bool live = tty_out && ::isatty(STDIN_FILENO) == 1;
  if (live) {
    if (::tcgetattr(STDIN_FILENO, &g_saved) != 0) return 1;
    termios raw = g_saved;
    raw.c_lflag &= tcflag_t(~(ICANON | ECHO));  // ISIG stays: ^C is a SIGINT, handled below
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    struct sigaction sa {};
    sa.sa_handler = on_quit_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &sa, nullptr);
    sa.sa_handler = on_winch;  // no SA_RESTART: poll wakes up to redraw
    ::sigaction(SIGWINCH, &sa, nullptr);
    if (::tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0) return 1;
    g_raw = 1;
    (void)!::write(STDOUT_FILENO, kEnter, sizeof kEnter - 1);
  }
  for (;;) {
    size_t rows = 0;
    TopView v;
    v.width = live ? terminal_width(&rows) : 80;
    v.colour = colour;
    v.clock = clock_text();
    v.interactive = live;
    json s;
    std::string error, frame;
    if (fetch(socket, &s, &error)) {
      try {
        frame = top_frame(s, v);
      } catch (const std::exception& e) {  // a status of another shape (a colocd of another version)
        frame = "coloc top · " + v.clock + "\n\ncolocd's status is not what this coloc reads: " + e.what() + "\n";
      }
    } else frame = "coloc top · " + v.clock + "\n\n" + fit_text(error, std::max<size_t>(v.width, 60)) + "\n(trying again every second)\n";
    if (live) {
      // Home, each line cleared to its end, the rest of the screen cleared; cut to the rows.
      std::string out = "\033[H";
      std::istringstream in(frame);
      size_t n = 0;
      for (std::string l; std::getline(in, l);) {
        if (rows && n + 1 >= rows) break;
        out += l + "\033[K\r\n";
        ++n;
      }
      out += "\033[J";
      (void)!::write(STDOUT_FILENO, out.data(), out.size());
    } else {
      std::cout << frame << "\n" << std::flush;
    }
    // Wait a second for a key (or a resize).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    bool quit = false;
    while (!quit) {
      if (g_resized) {
        g_resized = 0;
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      pollfd p{STDIN_FILENO, POLLIN, 0};
      int rc = ::poll(&p, live ? 1 : 0, int(left));
      if (rc < 0 && errno == EINTR) continue;
      if (rc > 0) {
        char buf[64];
        ssize_t k = ::read(STDIN_FILENO, buf, sizeof buf);
        if (k == 0 && !live) break;
        for (ssize_t i = 0; i < k; ++i) quit |= buf[i] == 'q' || buf[i] == 'Q';
      }
    }
    if (quit) break;
  }
  restore_terminal();
  return 0;
}

}  // namespace coloc::cli
