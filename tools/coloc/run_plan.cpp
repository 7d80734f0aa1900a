#include "run_plan.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <tuple>

#include "../../estimator/analytic.h"
#include "../../estimator/input_error.h"
#include "coloc/size.h"

#ifndef COLOC_SAN_RUNTIME
#define COLOC_SAN_RUNTIME ""
#endif

namespace coloc::cli {

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A whole number >= 1 given to `option`; false with a sentence in *error otherwise.
bool positive(const std::string& option, const std::string& text, uint64_t* out, std::string* error) {
  if (text.empty() || text.size() > 12 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      std::stoull(text) == 0) {
    *error = option + " '" + text + "': a whole number, at least 1";
    return false;
  }
  *out = std::stoull(text);
  return true;
}

// --estimate-from: the analytic estimate of the run its options describe (estimator/analytic.h),
// its bytes in *bytes and the note that says it in *note; false with a sentence in *error.
bool estimate_run(const RunOptions& opt, uint64_t* bytes, std::string* note, std::string* error) {
  if (opt.batch.empty()) {
    *error = "--estimate-from needs --batch N (sequences or images per step): the estimate depends on it";
    return false;
  }
  est::RunShape shape;
  if (!positive("--batch", opt.batch, &shape.batch, error)) return false;
  for (auto [option, text, field] : {std::tuple{"--seq", &opt.seq, &shape.seq}, std::tuple{"--image", &opt.image, &shape.image},
                                     std::tuple{"--classes", &opt.classes, &shape.classes}})
    if (!text->empty() && !positive(option, *text, field, error)) return false;
  est::EstimateOptions options;
  if (!opt.dtype.empty()) {
    auto d = est::parse_dtype(opt.dtype);
    if (!d) {
      *error = "--dtype '" + opt.dtype + "': unknown (use fp32, bf16 or fp16)";
      return false;
    }
    options.dtype = *d;
  }
  shape.dtype = options.dtype;  // the model is built with the dtype it is estimated with
  if (!opt.optimizer.empty()) {
    auto o = est::parse_optimizer(opt.optimizer);
    if (!o) {
      *error = "--optimizer '" + opt.optimizer + "': unknown (use sgd, sgd-momentum, adam or adamw)";
      return false;
    }
    options.optimizer = *o;
  }
  if (!opt.allocator.empty()) {
    auto a = est::parse_allocator(opt.allocator);
    if (!a) {
      *error = "--allocator '" + opt.allocator + "': unknown (use pytorch or plain)";
      return false;
    }
    options.allocator = *a;
  }
  if (!opt.device_model.empty()) {
    const est::DeviceProfile* d = est::find_device_profile(opt.device_model);
    if (!d) {
      std::string known;
      for (const est::DeviceProfile& p : est::device_profiles()) known += (known.empty() ? "" : ", ") + std::string(p.name);
      *error = "--device-model '" + opt.device_model + "': unknown (known: " + known + ")";
      return false;
    }
    options.device_model = std::string(d->name);
  }
  try {
    const est::Model model = est::resolve_model(opt.estimate_from, shape);
    *bytes = est::estimate_training(model, options).total_bytes;
  } catch (const est::InputError& e) {
    *error = "--estimate-from '" + opt.estimate_from + "': " + e.what();
    return false;
  } catch (const std::exception& e) {  // not the user's input: still no job without its estimate
    *error = "--estimate-from '" + opt.estimate_from + "': the estimate failed: " + e.what();
    return false;
  }
  if (*bytes == 0) {
    *error = "--estimate-from '" + opt.estimate_from + "': the estimate came to 0 bytes";
    return false;
  }
  // The same estimate, with its breakdown: `coloc estimate` with the same options.
  std::string again = std::string("coloc estimate ") + (exists(opt.estimate_from) ? "--model-file " : "--model ") +
                      opt.estimate_from + " --batch " + opt.batch;
  for (auto [option, text] : {std::pair{"--seq", &opt.seq}, std::pair{"--image", &opt.image},
                              std::pair{"--classes", &opt.classes}, std::pair{"--dtype", &opt.dtype},
                              std::pair{"--optimizer", &opt.optimizer}, std::pair{"--allocator", &opt.allocator},
                              std::pair{"--device-model", &opt.device_model}})
    if (!text->empty()) again += std::string(" ") + option + " " + *text;
  char size[32];
  format_size(*bytes, size, sizeof size);
  *note = "estimate for " + base_name(opt.estimate_from) + " batch " + opt.batch + ": " + size + " per device (" +
          again + " for the breakdown); colocd reserves it at admission unless the job's history says otherwise";
  return true;
}

}  // namespace

uint64_t parse_wait_timeout(const std::string& text) {
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t\n");
  if (b == std::string::npos) return 0;
  const std::string t = text.substr(b, e - b + 1);
  size_t i = 0;
  bool digits = false;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, digits = true;
  if (i < t.size() && t[i] == '.')
    for (++i; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]));) ++i, digits = true;
  if (!digits) return 0;
  const std::string unit = t.substr(i);
  static const std::map<std::string, double> ns_per = {{"", 1e9}, {"s", 1e9}, {"ms", 1e6}, {"us", 1e3},
                                                       {"ns", 1},   {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}};
  auto it = ns_per.find(unit);
  if (it == ns_per.end()) return 0;
  const double ns = std::strtod(t.substr(0, i).c_str(), nullptr) * it->second;
  return ns >= 1.8e19 ? 0 : uint64_t(ns);
}

bool parse_signal(const std::string& text, int* sig, std::string* error) {
  std::string t;
  for (char c : text) t.push_back(char(std::toupper(static_cast<unsigned char>(c))));
  if (t.rfind("SIG", 0) == 0) t = t.substr(3);
  if (!t.empty() && t.size() <= 2 && std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const int n = std::stoi(t);
    if (n >= 1 && n <= int(proto::kMaxSignal)) {
      *sig = n;
      return true;
    }
  } else if (!t.empty()) {
    for (int n = 1; n <= int(proto::kMaxSignal); ++n)
      if (const char* name = ::sigabbrev_np(n); name && t == name) {
        *sig = n;
        return true;
      }
  }
  *error = "--signal '" + text + "': not a signal (a name such as TERM, INT, KILL or USR1, or a number from 1 to " +
           std::to_string(proto::kMaxSignal) + ")";
  return false;
}

bool parse_duration_option(const std::string& option, const std::string& text, uint64_t* ns, std::string* error) {
  *ns = parse_wait_timeout(text);
  if (*ns != 0) return true;
  // 0 is also what parse_wait_timeout says of text that is not a duration: a zero is all zeros.
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t\n");
  const std::string t = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  const size_t units = t.find_first_not_of("0.");
  const std::string digits = t.substr(0, units == std::string::npos ? t.size() : units);
  if (!digits.empty() && digits.find('0') != std::string::npos && std::count(digits.begin(), digits.end(), '.') <= 1 &&
      parse_wait_timeout("1" + t.substr(digits.size())) != 0)
    return true;
  *error = option + " '" + text + "': not a duration (a number of seconds, or with a unit: 500ms, 10s, 2m, 1h, 2d)";
  return false;
}

bool parse_weight(const std::string& text, uint32_t* out, std::string* error) {
  const std::string range = std::to_string(proto::kMinWeight) + " to " + std::to_string(proto::kMaxWeight);
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    *error = "--weight '" + text + "': a whole number from " + range;
    return false;
  }
  const unsigned long w = std::stoul(text);
  if (w < proto::kMinWeight || w > proto::kMaxWeight) {
    *error = "--weight " + text + ": out of range (" + range + ": the job's quanta per round under timeslice)";
    return false;
  }
  *out = uint32_t(w);
  return true;
}

bool parse_quantum(const std::string& text, uint32_t* ms, std::string* error) {
  const uint64_t ns = parse_wait_timeout(text);
  const std::string range = std::to_string(proto::kMinQuantumMs) + "ms to " + std::to_string(proto::kMaxQuantumMs / 1000) + "s";
  if (ns == 0) {
    *error = "--quantum '" + text + "': a duration above 0, such as 50ms, 100ms or 1s (" + range + ")";
    return false;
  }
  if (ns % 1'000'000 != 0 || ns / 1'000'000 < proto::kMinQuantumMs || ns / 1'000'000 > proto::kMaxQuantumMs) {
    *error = "--quantum '" + text + "': whole milliseconds from " + range + " (a bare number is seconds)";
    return false;
  }
  *ms = uint32_t(ns / 1'000'000);
  return true;
}

bool parse_target_slowdown(const std::string& text, uint32_t* pct, std::string* error) {
  const std::string range = std::to_string(proto::kMinTargetPct) + "% to " + std::to_string(proto::kMaxTargetPct) + "%";
  std::string t = text;
  if (!t.empty() && t.back() == '%') t.pop_back();
  if (t.empty() || t.size() > 9 ||
      !std::all_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    *error = "--target-slowdown '" + text + "': a whole percentage from " + range + ", such as 5%";
    return false;
  }
  const unsigned long v = std::stoul(t);
  if (v < proto::kMinTargetPct || v > proto::kMaxTargetPct) {
    *error = "--target-slowdown " + text + ": out of range (" + range +
             ": the most a high-priority job may be slowed against running alone)";
    return false;
  }
  *pct = uint32_t(v);
  return true;
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string random_suffix() {
  unsigned char b[3] = {0, 0, 0};
  if (::getrandom(b, sizeof b, 0) != ssize_t(sizeof b)) {
    unsigned v = unsigned(::getpid()) * 2654435761u;
    b[0] = uint8_t(v);
    b[1] = uint8_t(v >> 8);
    b[2] = uint8_t(v >> 16);
  }
  char out[8];
  std::snprintf(out, sizeof out, "%02x%02x%02x", b[0], b[1], b[2]);
  return out;
}

bool plan_run(const RunOptions& opt, const std::map<std::string, std::string>& env, const std::string& exe_dir,
              const std::string& suffix, RunPlan* plan, std::string* error) {
  if (opt.command.empty()) {
    *error = "nothing to run: give a command after --";
    return false;
  }
  RunPlan p;
  p.env = env;
  // --estimate-from: the job's estimate, when it declares no limit (--mem is its footprint).
  const std::pair<const char*, const std::string*> shape_options[] = {
      {"--batch", &opt.batch},         {"--seq", &opt.seq},           {"--image", &opt.image},
      {"--classes", &opt.classes},     {"--dtype", &opt.dtype},       {"--optimizer", &opt.optimizer},
      {"--allocator", &opt.allocator}, {"--device-model", &opt.device_model}};
  if (opt.estimate_from.empty()) {
    for (auto [option, text] : shape_options)
      if (!text->empty()) {
        *error = std::string(option) + " describes the run --estimate-from estimates: give --estimate-from MODEL "
                 "(a preset or a model file) too, or leave it out";
        return false;
      }
    p.env.erase("COLOC_MEM_ESTIMATE");  // coloc run's options declare the job, not an inherited variable
  } else if (!opt.mem.empty()) {
    *error = "--estimate-from with --mem: --mem already declares the job's footprint (its limit, reserved at "
             "admission); give one of them";
    return false;
  } else {
    std::string note;
    if (!estimate_run(opt, &p.estimate, &note, error)) return false;
    p.env["COLOC_MEM_ESTIMATE"] = std::to_string(p.estimate);
    p.notes.push_back(note);
  }
  if (!opt.mem.empty()) {
    SizeParse s = parse_limit(opt.mem);
    if (!s) {
      *error = "--mem '" + opt.mem + "': " + s.error;
      return false;
    }
    if (*s.bytes == 0) {
      *error = "--mem must be more than 0";
      return false;
    }
    p.env["COLOC_MEM_LIMIT"] = std::to_string(*s.bytes);
    p.limit = *s.bytes;
    // A job is admitted at its first context, which costs memory itself: a limit below that admits
    // nothing. Said here, before the job starts (the library says it again when it refuses).
    uint64_t context = kDefaultContextBytes;
    if (auto it = env.find("COLOC_CONTEXT_BYTES"); it != env.end())
      if (SizeParse c = parse_size(it->second); c) context = *c.bytes;
    if (*s.bytes < context) {
      char lim[32], ctx[32];
      format_size(*s.bytes, lim, sizeof lim);
      format_size(context, ctx, sizeof ctx);
      p.notes.push_back(std::string("--mem ") + lim + " is less than one CUDA context: coloc counts " + ctx +
                        " per context (COLOC_CONTEXT_BYTES; simgpu's contexts cost 512 MiB), and a CUDA context "
                        "alone takes a few hundred MiB on real GPUs. The job's first context will fail with "
                        "CUDA_ERROR_OUT_OF_MEMORY: give --mem at least " + ctx + " plus what the job allocates.");
    }
  } else {
    p.env.erase("COLOC_MEM_LIMIT");
  }
  proto::Priority prio = proto::Priority::kNormal;
  if (!opt.priority.empty() && !proto::parse_priority(opt.priority.c_str(), &prio)) {
    *error = "--priority '" + opt.priority + "': use high, normal or best-effort";
    return false;
  }
  p.env["COLOC_PRIORITY"] = proto::priority_name(prio);
  p.priority = prio;
  std::string on_full = opt.on_full.empty() ? "wait" : opt.on_full;
  if (on_full != "wait" && on_full != "fail") {
    *error = "--on-full '" + opt.on_full + "': use wait or fail";
    return false;
  }
  p.env["COLOC_ON_FULL"] = on_full;
  p.on_full = on_full == "fail" ? proto::OnFull::kFail : proto::OnFull::kWait;
  if (auto it = env.find("COLOC_WAIT_TIMEOUT"); it != env.end()) p.wait_timeout_ns = parse_wait_timeout(it->second);
  if (!opt.wait_timeout.empty()) {  // --wait-timeout wins over the environment
    p.wait_timeout_ns = parse_wait_timeout(opt.wait_timeout);
    if (p.wait_timeout_ns == 0) {
      *error = "--wait-timeout '" + opt.wait_timeout + "': a duration above 0, such as 250ms, 30s, 5m or 1h";
      return false;
    }
    p.env["COLOC_WAIT_TIMEOUT"] = opt.wait_timeout;
  }

  if (!opt.weight.empty() && !parse_weight(opt.weight, &p.weight, error)) return false;

  std::string name = opt.job.empty() ? base_name(opt.command.front()) : opt.job;
  bool rewritten = false;
  if (opt.job.empty()) {  // a name from the command: make it fit
    std::string clean;
    for (char c : name) clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    rewritten = clean != name || clean.size() > 40 || clean.empty();
    name = clean.substr(0, 40);
    if (name.empty()) name = "job";
  } else {
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
        *error = "--job '" + name + "': use letters, digits, '.', '_' and '-'";
        return false;
      }
    if (name.empty() || name.size() > 40) {
      *error = "--job '" + name + "': between 1 and 40 characters";
      return false;
    }
  }
  p.job_id = name + "-" + suffix;
  if (rewritten)
    p.notes.insert(p.notes.begin(), "job name " + p.job_id + " (the command's name '" + base_name(opt.command.front()) +
                                        "' holds characters a job name cannot: only letters, digits, '.', '_' and '-' "
                                        "are kept, at most 40; --job NAME chooses one)");
  p.env["COLOC_JOB"] = p.job_id;
  p.env["COLOC_SOCKET"] = opt.socket;

  // libcoloc.so next to us: <prefix>/bin/coloc -> <prefix>/lib/libcoloc.so (build tree and installs).
  std::string lib;
  for (const std::string& cand : {exe_dir + "/../lib/libcoloc.so", exe_dir + "/../lib/coloc/libcoloc.so", exe_dir + "/libcoloc.so"})
    if (exists(cand)) {
      lib = cand;
      break;
    }
  if (lib.empty()) {
    *error = "cannot find libcoloc.so next to coloc (looked in " + exe_dir + "/../lib, " + exe_dir + "/../lib/coloc and " + exe_dir + ")";
    return false;
  }
  std::string preload = lib;
  if (std::string(COLOC_SAN_RUNTIME).size()) preload = std::string(COLOC_SAN_RUNTIME) + ":" + lib;  // sanitizer builds
  if (auto it = env.find("LD_PRELOAD"); it != env.end() && !it->second.empty()) preload += ":" + it->second;
  p.env["LD_PRELOAD"] = preload;

  if (opt.sim) {
    std::string sim = exe_dir + "/../sim";
    if (!exists(sim + "/libcuda.so.1")) {
      // An installed coloc has no simgpu next to it: make install leaves the test tools out.
      *error = "--sim: simgpu's libcuda.so.1 is not in " + sim +
               " (simgpu is a test tool that make install leaves out): run the build tree's coloc "
               "(build/bin/coloc run --sim), or put simgpu's directory (build/sim) on LD_LIBRARY_PATH and "
               "leave out --sim";
      return false;
    }
    auto it = env.find("LD_LIBRARY_PATH");
    p.env["LD_LIBRARY_PATH"] = it != env.end() && !it->second.empty() ? sim + ":" + it->second : sim;
  }
  p.argv = opt.command;
  *plan = std::move(p);
  return true;
}

}  // namespace coloc::cli
