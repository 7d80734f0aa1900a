// interpose/daemon_broker.cpp — see daemon_broker.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "daemon_broker.h"
#include "estimate.h"

#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "daemon_pages.h"
#include "devices.h"
#include "driver.h"
#include "gate.h"
#include "graph_hooks.h"
#include "tracker.h"
#include "log.h"
#include "no_destroy.h"
#include "coloc/size.h"
#include "options.h"
#include "runtime.h"
#include "signal_wait.h"

namespace coloc::interpose {

namespace {

/// A request's figures as text for the wait and refusal messages: asked, the device's capacity,
/// in use (bytes), and `free_fmt` (one %s) filled with the device's free memory when known.
struct Figures {
  char ask[32], cap[32], use[32], fr[64];
  Figures(uint64_t asked, uint64_t capacity, uint64_t in_use, uint64_t physical_free, const char* free_fmt) {
    format_size(asked, ask, sizeof ask);
    format_size(capacity, cap, sizeof cap);
    format_size(in_use, use, sizeof use);
    fr[0] = '\0';
    if (physical_free != proto::kUnknown) {
      char f[32];
      format_size(physical_free, f, sizeof f);
      std::snprintf(fr, sizeof fr, free_fmt, f);
    }
  }
};

constexpr uint64_t kDefaultWaitNs = 300ull * 1000000000ull;  // the daemon's default wait timeout

constinit NoDestroy<DaemonBroker> g_daemon_broker;
constinit std::atomic<bool> g_on_exit_installed{false};
/// The process was told (and said) that colocd lowered the priority it asked for: once per process,
/// and not again in a forked child that registers anew (it inherits the flag).
constinit std::atomic<bool> g_priority_said{false};

void goodbye_hook(int status, void*) { g_daemon_broker.value.goodbye(status); }

Refusal refusal_of(uint32_t reason) {
  switch (proto::Reason(reason)) {
    case proto::Reason::kOwnLimit: return Refusal::own_limit;
    case proto::Reason::kDeviceFull: return Refusal::device_full;
    case proto::Reason::kDeadlockBroken: return Refusal::deadlock_broken;
    case proto::Reason::kTimeout: return Refusal::timeout;
    case proto::Reason::kCancelled: return Refusal::cancelled;
    case proto::Reason::kUserCap: return Refusal::user_cap;
    case proto::Reason::kJobCancelled: return Refusal::job_cancelled;
    case proto::Reason::kNone:
    case proto::Reason::kBadRequest: break;
  }
  return Refusal::not_admitted;
}

Refusal refusal_of(DaemonLink::Outcome o) {
  switch (o) {
    case DaemonLink::Outcome::stopped: return Refusal::cancelled;
    case DaemonLink::Outcome::timed_out: return Refusal::timeout;
    default: return Refusal::no_daemon;
  }
}

// What the latest refusal of this thread's attach_device or grow was about (describe_refusal).
struct RefusalDetail {
  bool admission = false;       // an Attach (else a Grow)
  int ordinal = -1;             // the device as this process numbers it
  uint64_t asked = 0;           // bytes: admission: the job's footprint or one context; growth: the grant wanted
  uint64_t in_use = 0;          // bytes held on the device (growth)
  uint64_t capacity = 0;        // bytes: the device's memory
  uint64_t physical_free = proto::kUnknown;  // bytes free on the device (cuMemGetInfo), or unknown
  uint64_t waited_ns = 0;       // how long the request waited
};
constinit thread_local RefusalDetail t_refusal;

// The longest wait, in words: "1.5 s (COLOC_WAIT_TIMEOUT)", or colocd's default when the job set
// none: for growth its --wait-timeout; for admission (colocd v13 on) none unless admission_timeout.
void describe_wait_limit(char* out, size_t cap, bool admission, uint16_t version) {
  uint64_t ns = options().wait_timeout_ns;
  if (!ns && admission && version >= 13) {
    std::snprintf(out, cap, "colocd's admission_timeout (none unless set; COLOC_WAIT_TIMEOUT sets the job's own)");
    return;
  }
  if (ns) std::snprintf(out, cap, "%.3g s (COLOC_WAIT_TIMEOUT)", double(ns) / 1e9);
  else
    std::snprintf(out, cap, "colocd's --wait-timeout (%.3g s unless changed; COLOC_WAIT_TIMEOUT sets the job's own)",
                  double(kDefaultWaitNs) / 1e9);
}

const char* priority_word(uint32_t p) {
  switch (proto::Priority(p)) {
    case proto::Priority::kHigh: return "high";
    case proto::Priority::kNormal: return "normal";
    case proto::Priority::kBestEffort: return "best-effort";
  }
  return "normal";
}

// What the queue note's `asks` is, in words (pages::AskSource).
const char* ask_words(uint32_t source) {
  switch (pages::AskSource(source)) {
    case pages::AskSource::kMem: return "its declared footprint, COLOC_MEM_LIMIT / --mem";
    case pages::AskSource::kHistory: return "its footprint from earlier runs, coloc history";
    case pages::AskSource::kEstimate: return "its estimated footprint, COLOC_MEM_ESTIMATE / coloc run --estimate-from";
    case pages::AskSource::kContext: return "one CUDA context: nothing else is known of it";
    case pages::AskSource::kGrowth: return "what its grant must grow by";
    case pages::AskSource::kNone: break;
  }
  return "its request";
}

// Where a waiting request stands, from colocd's queue note: "#2 in line, Queue: behind finetune;
// it asks 2.00 GiB (its footprint from earlier runs, coloc history); estimated start in about 14
// min". False when there is no note to read (colocd older than v13, or none written yet).
bool queue_words(const DaemonLink& link, char* out, size_t cap, pages::QueueNoteValue* note) {
  if (!link.connected() || link.version() < 13) return false;
  if (!pages::read_queue_note(control().queue, note) || note->reason == 0) return false;
  char ask[32], missing[32], start[64];
  format_size(note->asks, ask, sizeof ask);
  format_size(note->missing, missing, sizeof missing);
  if (note->start_ms == 0) {
    std::snprintf(start, sizeof start, "not known");
  } else {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t now_ms = int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
    const double min = double(int64_t(note->start_ms) - now_ms) / 60000.0;
    if (min < 1) std::snprintf(start, sizeof start, "within a minute");
    else if (min < 120) std::snprintf(start, sizeof start, "in about %.0f min", min);
    else std::snprintf(start, sizeof start, "in about %.1f h", min / 60);
  }
  const proto::WaitReason r = proto::WaitReason(note->reason);
  char why[160];
  switch (r) {
    case proto::WaitReason::kPriority:
      std::snprintf(why, sizeof why, "behind %s, of a higher priority", note->behind);
      break;
    case proto::WaitReason::kQueue:
      std::snprintf(why, sizeof why, "behind %s, first in line", note->behind);
      break;
    case proto::WaitReason::kResources:
      std::snprintf(why, sizeof why, "%s missing, held by other jobs", missing);
      break;
    case proto::WaitReason::kOutside:
      std::snprintf(why, sizeof why, "%s missing, used outside coloc", missing);
      break;
    case proto::WaitReason::kUserCap:
      std::snprintf(why, sizeof why, "its user's jobs hold what colocd's max_per_user allows");
      break;
    case proto::WaitReason::kRestart:
      std::snprintf(why, sizeof why, "colocd restarted and waits for its running jobs to come back");
      break;
    case proto::WaitReason::kSuspended:
      std::snprintf(why, sizeof why, "its job is suspended to host memory; it goes on once the job is restored");
      break;
    default:
      std::snprintf(why, sizeof why, "reason %u", note->reason);
  }
  std::snprintf(out, cap, "#%u in line, %s: %s; it asks %s (%s); estimated start %s", note->position,
                proto::wait_reason_name(r), why, ask, ask_words(note->source), start);
  return true;
}

bool same_place(const pages::QueueNoteValue& a, const pages::QueueNoteValue& b) {
  return a.reason == b.reason && a.position == b.position && std::strcmp(a.behind, b.behind) == 0;
}

// What a long wait says (SignalWindow's notice): once, when it has lasted kLongWaitNs; then again
// when colocd's queue note shows its reason, position or the job ahead changed, at most once per
// kQueueNoticeNs.
constexpr uint64_t kQueueNoticeNs = 10'000'000'000ull;
constexpr uint64_t kQueueLookNs = 500'000'000ull;  // how often the note is looked at
struct WaitNotice {
  const DaemonLink* link;
  bool admission;
  int ordinal;
  const unsigned char* uuid;
  uint64_t asked;          // bytes: the footprint asked at admission, or the grant wanted
  bool footprint;          // admission: `asked` is the job's declared limit (else one context)
  bool estimated;          // admission: `asked` is the job's declared estimate (COLOC_MEM_ESTIMATE)
  uint64_t in_use;         // bytes (growth)
  uint64_t capacity;       // bytes
  uint64_t physical_free;  // bytes or kUnknown
  bool said = false;               // the first line is out
  pages::QueueNoteValue note{};    // the queue note it last told (reason 0: none)
  uint64_t note_said_ns = 0;       // when (waited ns)

  static uint64_t say(void* ctx, uint64_t waited_ns) {
    WaitNotice& n = *static_cast<WaitNotice*>(ctx);
    char place[320];
    pages::QueueNoteValue now{};
    // An admission says where it stands in the queue (a growth keeps its figures: in use, free).
    const bool placed = n.admission && queue_words(*n.link, place, sizeof place, &now);
    if (n.said) {  // a later look: only a new place, and not more often than kQueueNoticeNs
      if (!placed || (n.note.reason != 0 && same_place(now, n.note)) || waited_ns - n.note_said_ns < kQueueNoticeNs)
        return kQueueLookNs;
      logf(LogLevel::warn, "job %s, still waiting after %.0f s: now %s", options().job, double(waited_ns) / 1e9, place);
      n.note = now;
      n.note_said_ns = waited_ns;
      return kQueueLookNs;
    }
    n.said = true;
    if (placed) {
      n.note = now;
      n.note_said_ns = waited_ns;
    }
    char id[41];
    format_uuid(n.uuid, id);
    const Figures fig(n.asked, n.capacity, n.in_use, n.physical_free, ", %s free on the device now");
    const char *ask = fig.ask, *cap = fig.cap, *use = fig.use, *fr = fig.fr;
    char why[384];
    if (!n.link->connected())
      std::snprintf(why, sizeof why, "colocd is away (restarting), and the %s waits for it to come back",
                    n.admission ? "admission" : "growth");
    else if (placed)
      std::snprintf(why, sizeof why, "%s; the device has %s", place, cap);
    else if (n.admission && n.footprint)
      std::snprintf(why, sizeof why, "colocd has no room for it yet: it asks %s (its declared footprint, COLOC_MEM_LIMIT / "
                    "--mem) of the device's %s", ask, cap);
    else if (n.admission && n.estimated)  // its history, when colocd has one, comes first
      std::snprintf(why, sizeof why, "colocd has no room for it yet: it asks %s (its estimated footprint, "
                    "COLOC_MEM_ESTIMATE / coloc run --estimate-from), or its footprint from earlier runs (coloc "
                    "history), of the device's %s", ask, cap);
    else if (n.admission)  // without --mem colocd may hold the footprint it knows from the job's earlier runs
      std::snprintf(why, sizeof why, "colocd has no room for it yet: it asks %s (one CUDA context), or its footprint "
                    "from earlier runs (coloc history), of the device's %s", ask, cap);
    else
      std::snprintf(why, sizeof why, "colocd has no room for it yet: %s in use, of the device's %s%s", use, cap, fr);
    char what[96];
    if (n.admission) std::snprintf(what, sizeof what, "admission on device %d", n.ordinal);
    else std::snprintf(what, sizeof what, "memory on device %d: its grant to grow to %s", n.ordinal, ask);
    char most[200];
    if (n.admission && !options().wait_timeout_ns && n.link->version() >= 13) {
      std::snprintf(most, sizeof most, "it waits until it is admitted (COLOC_WAIT_TIMEOUT, or colocd's "
                                       "admission_timeout when set, ends the wait with CUDA_ERROR_OUT_OF_MEMORY)");
    } else {
      char limit[160];
      describe_wait_limit(limit, sizeof limit, n.admission, n.link->version());
      std::snprintf(most, sizeof most, "it waits up to %s, then fails with CUDA_ERROR_OUT_OF_MEMORY", limit);
    }
    logf(LogLevel::warn, "job %s has waited %.1f s for %s (%s): %s; %s; `coloc status` shows who holds the device",
         options().job, double(waited_ns) / 1e9, what, id, why, most);
    return n.admission ? kQueueLookNs : 0;
  }
};

uint64_t round_up(uint64_t v, uint64_t step) {
  if (step == 0) return v;
  uint64_t r = v % step;
  return r == 0 || v > UINT64_MAX - (step - r) ? v : v + (step - r);
}

}  // namespace

DaemonBroker& daemon_broker() { return g_daemon_broker.value; }

void DaemonBroker::set_socket(const char* path) {
  size_t n = std::strlen(path);
  if (n >= sizeof socket_) n = sizeof socket_ - 1;
  std::memcpy(socket_, path, n);
  socket_[n] = '\0';
}

// ---- registration -------------------------------------------------------------------------------

void DaemonBroker::fill_register(bool resume, proto::RegisterMsg* m) {
  const Options& o = options();
  m->limit = o.mem_limit == 0 ? 1 : o.mem_limit;  // the protocol has no zero limit; 1 byte admits nothing
  m->priority = uint8_t(o.priority);
  m->on_full = uint8_t(o.on_full);
  m->wait_timeout_ns = o.wait_timeout_ns;
  if (o.job_set) {  // the job's name, with what the protocol does not allow replaced
    for (size_t i = 0; i < sizeof m->job - 1 && o.job[i]; ++i) {
      auto c = static_cast<unsigned char>(o.job[i]);
      m->job[i] = (c > 0x20 && c < 0x7f && c != '/' && c != '\\') ? char(c) : '_';
    }
  }
  m->cmdline_hash = cmdline_.hash;
  m->env_hash = env_hash_;
  m->flags = uint16_t(m->flags | proto::kRegEnvHash);
  if (o.mem_estimate > 0) {  // (v10) its analytic estimate: the encoder leaves it out for an older colocd
    m->estimate = o.mem_estimate;
    m->flags = uint16_t(m->flags | proto::kRegEstimate);
  }
  if (o.step[0]) {  // (v11) its step within the job (COLOC_STEP): the encoder leaves it out for an older colocd
    proto::set_string(m->step, o.step);
    m->flags = uint16_t(m->flags | proto::kRegStep);
  }
  std::memcpy(m->cmdline, cmdline_.text, sizeof m->cmdline);
  if (!resume) return;

  // The exact ledger, slot i as entry i. A grant the dead daemon wrote for an Attach whose reply
  // never came is on the old control page: keep it.
  {
    MutexLock g(attach_mutex_);
    if (attach_pending_) {
      for (int s = 0; s < kMaxDevices; ++s) {
        const pages::ControlSlot& c = control().slots[s];
        if (c.attached.load(std::memory_order_acquire) && std::memcmp(c.uuid, attach_uuid_, 16) == 0 &&
            recorded_slot(attach_uuid_) < 0) {
          record_slot(s, attach_uuid_, attach_capacity_, attach_cap_);
          break;
        }
      }
    }
  }
  m->flags = uint16_t(m->flags | proto::kRegResume);
  // The job's limit as the daemon last said it (its replies), not the registration's request:
  // after registration the daemon's limit is the job's. A slot's limit on the control page is
  // min(the job's limit, the cap there), so it is never above the job's: one that is above the
  // last reply was raised by a live `coloc set`. (A live lowering shows in each ledger entry's
  // limit, and colocd keeps it on those devices.)
  uint64_t last = job_limit_.load(std::memory_order_relaxed);
  for (int s = 0; s < kMaxDevices; ++s)
    if (slots_[s].attached.load(std::memory_order_acquire)) {
      uint64_t shown = control().slots[s].limit.load(std::memory_order_relaxed);
      if (shown != kNoLimit && last != kNoLimit && shown > last) last = shown;
      if (shown == kNoLimit) last = kNoLimit;
    }
  m->limit = last == 0 ? 1 : last;
  uint32_t prio = control().priority.load(std::memory_order_relaxed);
  if (prio <= uint32_t(proto::Priority::kHigh)) m->priority = uint8_t(prio);  // a live `coloc set` survives
  uint32_t n = 0;
  while (n < uint32_t(kMaxDevices) && slots_[n].attached.load(std::memory_order_acquire)) ++n;
  for (uint32_t i = n; i < uint32_t(kMaxDevices); ++i)
    if (slots_[i].attached.load(std::memory_order_acquire))
      logf(LogLevel::error, "device slot %u is not contiguous with the others: it is left out of the ledger", i);
  m->n_ledger = n;
  for (uint32_t i = 0; i < n; ++i) {
    proto::LedgerEntry& e = m->ledger[i];
    std::memcpy(e.device.uuid, slots_[i].uuid, 16);
    e.device.capacity = slots_[i].capacity;
    e.device.physical_free = proto::kUnknown;
    e.in_use = stats().slots[i].in_use.load(std::memory_order_seq_cst);
    e.grant = control().slots[i].grant.load(std::memory_order_seq_cst);
    uint64_t peak = stats().slots[i].peak.load(std::memory_order_relaxed);
    e.peak = peak > e.in_use ? peak : e.in_use;
    e.limit = control().slots[i].limit.load(std::memory_order_relaxed);
    if (e.limit == 0) e.limit = 1;
    e.cap = slots_[i].cap;
    e.overhead = control().slots[i].overhead.load(std::memory_order_relaxed);  // 0 in older pages
    if (e.overhead > e.device.capacity) e.overhead = 0;
  }
}

bool DaemonBroker::adopt(const proto::RegisterReplyMsg& reply, int control_fd, int stats_fd, bool resume) {
  int rc = daemon_pages::adopt(control_fd, stats_fd);
  if (rc != 0) {
    logf(LogLevel::error, "cannot map colocd's pages: %s",
         rc == -EPROTO ? "they are not the layout this library knows" : std::strerror(-rc));
    return false;
  }
  for (auto& r : released_) r.store(0, std::memory_order_relaxed);  // a release was of the old pages' gates
  gate_override_.store(false, std::memory_order_release);  // the new daemon's gates hold from here on
  job_limit_.store(reply.limit, std::memory_order_relaxed);
  if (!resume && registered_limit_.load(std::memory_order_relaxed) == 0)
    registered_limit_.store(reply.limit, std::memory_order_relaxed);
  const Options& o = options();
  if (!resume && o.job_set && std::strncmp(reply.job, o.job, sizeof reply.job) != 0) {
    char filed[sizeof reply.job + 1] = {};
    std::memcpy(filed, reply.job, sizeof reply.job);
    logf(LogLevel::warn,
         "COLOC_JOB '%s' is not a job id as it stands (printable characters without spaces, '/' or '\\', at most "
         "63): colocd files this process under job '%s'",
         o.job, filed);
  }
  // Priority high is granted, not taken (protocol v8): colocd registered the job lower than
  // COLOC_PRIORITY asked (`coloc run` sets the granted one, so its processes never get here).
  if (!resume && (reply.priority_flags & proto::kPriorityLowered) && reply.granted_priority != 0 &&
      !g_priority_said.exchange(true, std::memory_order_acq_rel)) {
    char filed[sizeof reply.job + 1] = {};
    std::memcpy(filed, reply.job, sizeof reply.job);
    const char* asked = proto::priority_name(o.priority);
    logf(LogLevel::warn,
         "COLOC_PRIORITY=%s: priority %s is for root and the members of colocd's admin and high-priority groups; "
         "job %s runs as %s",
         asked, asked, filed, proto::priority_name(proto::Priority(reply.granted_priority - 1)));
  }
  if (!resume) own_cap_.store(kNoLimit, std::memory_order_relaxed);  // (a forked child registering anew)
  if (!resume && o.mem_limit != kNoLimit && o.mem_limit != reply.limit) {
    // The process joined a job whose limit is not the one its COLOC_MEM_LIMIT asked for (another
    // process of the job registered it first). The environment can only lower what the daemon
    // says: a lower value holds for this process alone; a higher one is ignored. Both are said.
    char own[32], job[32];
    format_size(o.mem_limit, own, sizeof own);
    if (reply.limit == kNoLimit) std::snprintf(job, sizeof job, "none");
    else format_size(reply.limit, job, sizeof job);
    char filed[sizeof reply.job + 1] = {};
    std::memcpy(filed, reply.job, sizeof reply.job);
    if (o.mem_limit < reply.limit) {
      own_cap_.store(o.mem_limit, std::memory_order_relaxed);
      logf(LogLevel::warn,
           "COLOC_MEM_LIMIT=%s is lower than the limit of job %s, which this process joins (%s): this process is "
           "held to %s on each device; the job's limit stays %s",
           own, filed, job, own, job);
    } else {
      logf(LogLevel::warn,
           "COLOC_MEM_LIMIT=%s is higher than the limit of job %s, which this process joins (%s): ignored; the "
           "job's limit holds (`coloc set --mem` raises it)",
           own, filed, job);
    }
  }
  if (resume)
    for (int s = 0; s < kMaxDevices; ++s)
      if (slots_[s].attached.load(std::memory_order_acquire)) set_floor(s);
  return true;
}

void DaemonBroker::register_now() {
  const Options& o = options();
  wire::read_cmdline(&cmdline_);
  env_hash_ = wire::env_fingerprint([](const char* n) { return ::getenv(n); });
  SignalWindow w;
  uint64_t deadline = monotonic_ns() + (o.require_daemon ? wait_deadline() - monotonic_ns() : 0);
  char why[256] = {};
  int rc = link_.start(socket_, o.require_daemon, deadline, this, w, why, sizeof why);
  if (rc == 0) {
    mode_.store(Mode::daemon, std::memory_order_release);
    if (!g_on_exit_installed.exchange(true, std::memory_order_acq_rel)) on_exit(goodbye_hook, nullptr);
    logf(LogLevel::info, "registered with colocd at %s", socket_);
    return;
  }
  // The pages may be mapped already (a failure after the registration): take private copies, so
  // that standalone limits can be written.
  daemon_pages::privatize();
  if (o.require_daemon) {
    logf(LogLevel::error,
         "COLOC_REQUIRE_DAEMON=%s and no coloc daemon at %s (%s%s): cuInit returns CUDA_ERROR_NOT_INITIALIZED",
         o.require_daemon_text, socket_, why, rc == -ETIMEDOUT ? ", waited COLOC_WAIT_TIMEOUT" : "");
    mode_.store(Mode::failed, std::memory_order_release);
    return;
  }
  logf(LogLevel::warn, "no coloc daemon at %s (%s): running with standalone limits from the environment", socket_,
       why);
  mode_.store(Mode::standalone, std::memory_order_release);
}

DaemonBroker::Mode DaemonBroker::registered_mode() {
  Mode m = mode_.load(std::memory_order_acquire);
  if (m != Mode::unregistered) return m;
  MutexLock g(register_mutex_);
  m = mode_.load(std::memory_order_acquire);
  if (m != Mode::unregistered) return m;
  register_now();
  return mode_.load(std::memory_order_acquire);
}

bool DaemonBroker::on_init() { return registered_mode() != Mode::failed; }

uint64_t DaemonBroker::wait_deadline() const {
  uint64_t t = options().wait_timeout_ns;
  return monotonic_ns() + (t ? t : kDefaultWaitNs);
}

// ---- slots --------------------------------------------------------------------------------------

void DaemonBroker::record_slot(int slot, const unsigned char uuid[16], uint64_t capacity, uint64_t cap) {
  SlotRecord& r = slots_[slot];
  std::memcpy(r.uuid, uuid, 16);
  r.capacity = capacity;
  r.cap = cap;
  r.footprint_claimed.store(false, std::memory_order_relaxed);
  r.attached.store(true, std::memory_order_release);
}

bool DaemonBroker::wants_footprint(int slot) {
  if (slot < 0 || slot >= kMaxDevices || mode_.load(std::memory_order_acquire) != Mode::daemon) return false;
  if (link_.version() < 5 || !link_.connected()) return false;  // an older daemon has no use for it
  SlotRecord& r = slots_[slot];
  if (!r.attached.load(std::memory_order_acquire)) return false;
  return !r.footprint_claimed.exchange(true, std::memory_order_acq_rel);
}

void DaemonBroker::context_footprint(int slot, uint64_t physical_free) {
  if (slot < 0 || slot >= kMaxDevices || physical_free > slots_[slot].capacity) return;
  proto::ContextFootprintMsg f;
  std::memset(&f, 0, sizeof f);
  f.slot = uint32_t(slot);
  f.physical_free = physical_free;
  f.in_use = stats().slots[slot].in_use.load(std::memory_order_seq_cst);
  if (f.in_use == proto::kUnknown) return;
  (void)link_.post(f);  // dropped when the daemon is away: the books then lack this overhead
}

bool DaemonBroker::holds_grants() const {
  for (const SlotRecord& r : slots_)
    if (r.attached.load(std::memory_order_acquire)) return true;
  return false;
}

int DaemonBroker::recorded_slot(const unsigned char uuid[16]) const {
  for (int s = 0; s < kMaxDevices; ++s)
    if (slots_[s].attached.load(std::memory_order_acquire) && std::memcmp(slots_[s].uuid, uuid, 16) == 0) return s;
  return -1;
}

void DaemonBroker::set_floor(int slot) {
  uint64_t step = link_.grant_step();
  uint64_t grant = control().slots[slot].grant.load(std::memory_order_relaxed);
  surplus_floor(slot).store(grant > 2 * step ? grant - 2 * step : 0, std::memory_order_relaxed);
}

uint64_t DaemonBroker::physical_free(int slot) {
  if (devices().known_current_slot() != slot) return proto::kUnknown;
  size_t free = 0, total = 0;
  if (call<Fn::cuMemGetInfo_v2>(&free, &total) != CUDA_SUCCESS) return proto::kUnknown;
  return free <= slots_[slot].capacity ? uint64_t(free) : proto::kUnknown;
}

int DaemonBroker::attach_device(const DeviceInfo& d, Refusal* why) {
  *why = Refusal::none;
  Mode m = registered_mode();
  if (m == Mode::standalone) return local_.attach_device(d, why);
  if (m != Mode::daemon || d.total_bytes == 0) {
    *why = Refusal::not_admitted;
    return -1;
  }
  if (int s = recorded_slot(d.uuid); s >= 0) return s;

  proto::AttachMsg a;
  std::memset(&a, 0, sizeof a);
  a.n_devices = 1;
  std::memcpy(a.devices[0].device.uuid, d.uuid, 16);
  a.devices[0].device.capacity = d.total_bytes;
  a.devices[0].device.physical_free = proto::kUnknown;  // no context there yet to ask
  uint64_t request = options().context_bytes;
  a.devices[0].request = request < d.total_bytes ? request : d.total_bytes;
  // COLOC_MEM_LIMIT_<n>: the job's limit (and reservation) on this device is the smaller, when
  // this process is the one that admits the job there.
  const uint64_t dev_cap = device_cap_for_ordinal(options(), d.ordinal);
  a.devices[0].cap = dev_cap == kNoLimit ? 0 : dev_cap;
  {
    MutexLock g(attach_mutex_);
    attach_pending_ = true;
    std::memcpy(attach_uuid_, d.uuid, 16);
    attach_capacity_ = d.total_bytes;
    attach_cap_ = a.devices[0].cap;
  }

  uint64_t footprint = job_limit_.load(std::memory_order_relaxed);
  if (dev_cap < footprint) footprint = dev_cap;  // what the job reserves here
  const bool declared = footprint != kNoLimit && footprint > a.devices[0].request;
  // Without a limit, its declared estimate (Register v10) is what colocd reserves, unless its history.
  const uint64_t estimate = options().mem_estimate < d.total_bytes ? options().mem_estimate : d.total_bytes;
  const bool estimated = !declared && footprint == kNoLimit && estimate > a.devices[0].request &&
                         link_.version() >= 10;
  t_refusal = RefusalDetail{true, d.ordinal, declared ? footprint : estimated ? estimate : a.devices[0].request, 0,
                            d.total_bytes, proto::kUnknown, 0};
  WaitNotice notice{&link_, true, d.ordinal, d.uuid, t_refusal.asked, declared, estimated, 0, d.total_bytes,
                    proto::kUnknown};
  SignalWindow w;
  w.set_notice(kLongWaitNs, &WaitNotice::say, &notice);
  const uint64_t t0 = monotonic_ns(), deadline = wait_deadline();
  uint64_t waited = 0;
  int slot = -1;
  for (;;) {
    if (!link_.connected()) {  // the daemon restarts: admission waits for it
      if (options().on_full == proto::OnFull::kFail) {
        *why = Refusal::no_daemon;
        break;
      }
      DaemonLink::Outcome o = link_.wait_connected(w, deadline);
      if (o != DaemonLink::Outcome::replied) {
        *why = refusal_of(o);
        break;
      }
    }
    if ((slot = recorded_slot(d.uuid)) >= 0) break;  // granted just before the daemon died
    LinkReply r;
    DaemonLink::Outcome o = link_.request(a, &r, w, 0);
    if (o == DaemonLink::Outcome::lost) continue;
    if (o != DaemonLink::Outcome::replied) {
      *why = refusal_of(o);
      break;
    }
    waited = r.attach.waited_ns;
    if (r.attach.outcome == uint32_t(proto::Outcome::kGranted) && r.attach.n_devices == 1 &&
        r.attach.devices[0].slot < uint32_t(kMaxDevices)) {
      slot = int(r.attach.devices[0].slot);
      MutexLock g(attach_mutex_);  // a re-registration may be adopting the same slot
      if (recorded_slot(d.uuid) < 0) record_slot(slot, d.uuid, d.total_bytes, a.devices[0].cap);
    } else {
      *why = refusal_of(r.attach.reason);
    }
    break;
  }
  {
    MutexLock g(attach_mutex_);
    attach_pending_ = false;
  }
  t_refusal.waited_ns = monotonic_ns() - t0;
  if (waited > t_refusal.waited_ns) t_refusal.waited_ns = waited;
  if (slot < 0) return -1;
  // COLOC_MEM_LIMIT was the registration's request; from now on the daemon's limit (control page)
  // is the job's, and only a per-device COLOC_MEM_LIMIT_<n> caps it here (coloc set can raise it).
  local_limit(slot).store(own_cap(d.ordinal), std::memory_order_relaxed);
  set_floor(slot);
  estimate::start();  // admitted by colocd: from now on it reads this process's prediction
  // The daemon's measure of the wait, or ours when the daemon was away meanwhile.
  uint64_t total = monotonic_ns() - t0;
  if (waited < total && total - waited > 50000000ull) waited = total;
  stats().slots[slot].wait_admission_ns.fetch_add(waited, std::memory_order_relaxed);
  if (w.noticed())  // the wait was announced: say that it is over
    logf(LogLevel::warn, "job %s admitted on device %d after waiting %.1f s", options().job, d.ordinal,
         double(waited) / 1e9);
  else if (waited > 1000000ull)
    logf(LogLevel::info, "admitted on device %d after waiting %.2f s", d.ordinal, double(waited) / 1e9);
  return slot;
}

uint64_t DaemonBroker::job_others(int slot) {
  Mode m = mode_.load(std::memory_order_acquire);
  if (m == Mode::standalone) return local_.job_others(slot);
  if (m != Mode::daemon) return 0;
  return control().slots[slot].job_others.load(std::memory_order_relaxed);
}

void DaemonBroker::at_exit() { local_.at_exit(); }  // standalone: leave the job's shared limit

uint64_t DaemonBroker::unattached_limit(int ordinal) {
  if (mode_.load(std::memory_order_acquire) == Mode::standalone) return local_.unattached_limit(ordinal);
  uint64_t env = own_cap(ordinal);
  uint64_t job = job_limit_.load(std::memory_order_relaxed);
  return env < job ? env : job;
}

uint64_t DaemonBroker::own_cap(int ordinal) const {
  uint64_t dev = device_cap_for_ordinal(options(), ordinal);
  uint64_t own = own_cap_.load(std::memory_order_relaxed);
  return dev < own ? dev : own;
}

// ---- memory -------------------------------------------------------------------------------------

Refusal DaemonBroker::grow(int slot, uint64_t wanted) {
  Mode m = mode_.load(std::memory_order_acquire);
  if (m == Mode::standalone) return local_.grow(slot, wanted);
  if (m != Mode::daemon) return Refusal::no_daemon;
  // Past a limit only the environment sets (lower than the daemon's): refused here, unrecorded.
  uint64_t local = local_limit(slot).load(std::memory_order_relaxed);
  if (wanted > local && local < control().slots[slot].limit.load(std::memory_order_relaxed)) return Refusal::own_limit;
  const DeviceInfo& dev = devices().info(slot);
  t_refusal = RefusalDetail{false, dev.ordinal, wanted, stats().slots[slot].in_use.load(std::memory_order_relaxed),
                            slots_[slot].capacity, proto::kUnknown, 0};
  WaitNotice notice{&link_, false, dev.ordinal, slots_[slot].uuid, wanted, false, false, t_refusal.in_use,
                    slots_[slot].capacity, proto::kUnknown};
  SignalWindow w;
  w.set_notice(kLongWaitNs, &WaitNotice::say, &notice);
  const uint64_t t0 = monotonic_ns(), deadline = wait_deadline();
  uint64_t parked = 0;
  bool reconnected = false;  // the wait was for colocd to come back, not for memory
  Refusal result = Refusal::none;
  for (;;) {
    const pages::ControlSlot& c = control().slots[slot];
    if (wanted <= c.grant.load(std::memory_order_seq_cst) && wanted <= limit_of(slot)) break;  // raised meanwhile
    if (!link_.connected()) {  // the daemon restarts: growth waits for it (or fails, --on-full fail)
      if (options().on_full == proto::OnFull::kFail) {
        result = Refusal::no_daemon;
        break;
      }
      DaemonLink::Outcome o = link_.wait_connected(w, deadline);
      if (o != DaemonLink::Outcome::replied) result = refusal_of(o);
      else reconnected = true;
      break;  // connected again: the caller retries on the resumed grant, and asks again if need be
    }
    proto::GrowMsg g;
    std::memset(&g, 0, sizeof g);
    g.slot = uint32_t(slot);
    g.need = wanted == 0 ? 1 : (wanted >= proto::kUnknown ? proto::kUnknown - 1 : wanted);
    g.in_use = stats().slots[slot].in_use.load(std::memory_order_seq_cst);
    if (g.in_use == proto::kUnknown) g.in_use = proto::kUnknown - 1;
    g.physical_free = physical_free(slot);
    t_refusal.in_use = g.in_use;
    t_refusal.physical_free = notice.physical_free = g.physical_free;
    notice.in_use = g.in_use;
    LinkReply r;
    DaemonLink::Outcome o = link_.request(g, &r, w, 0);
    if (o == DaemonLink::Outcome::lost) continue;
    if (o != DaemonLink::Outcome::replied) {
      result = refusal_of(o);
      break;
    }
    parked = r.grow.waited_ns;
    job_limit_.store(r.grow.limit, std::memory_order_relaxed);  // the job's limit now (coloc set)
    if (r.grow.outcome == uint32_t(proto::Outcome::kGranted)) set_floor(slot);
    else result = refusal_of(r.grow.reason);
    break;
  }
  // Time parked in the daemon; or all of it, when the daemon was away.
  uint64_t total = monotonic_ns() - t0;
  uint64_t waited = parked;
  if (waited < total && total - waited > 50000000ull) waited = total;
  if (waited) stats().slots[slot].wait_memory_ns.fetch_add(waited, std::memory_order_relaxed);
  t_refusal.waited_ns = waited;
  if (w.noticed() && result == Refusal::none && reconnected)  // the wait was announced: say that it is over
    logf(LogLevel::warn, "job %s: colocd is back after %.1f s; the allocation on device %d asks it again",
         options().job, double(waited) / 1e9, dev.ordinal);
  else if (w.noticed() && result == Refusal::none)
    logf(LogLevel::warn, "job %s got the memory on device %d after waiting %.1f s", options().job, dev.ordinal,
         double(waited) / 1e9);
  return result;
}

void DaemonBroker::surplus(int slot, uint64_t in_use) {
  if (mode_.load(std::memory_order_acquire) == Mode::standalone) return local_.surplus(slot, in_use);
  if (mode_.load(std::memory_order_acquire) != Mode::daemon || !link_.connected()) return;
  uint64_t step = link_.grant_step();
  uint64_t grant = control().slots[slot].grant.load(std::memory_order_seq_cst);
  if (grant <= in_use || grant - in_use <= 2 * step) {
    set_floor(slot);
    return;
  }
  uint64_t keep = round_up(in_use, step) + step;
  proto::ShrinkMsg s;
  std::memset(&s, 0, sizeof s);
  s.slot = uint32_t(slot);
  s.grant = keep;
  s.in_use = in_use;
  if (link_.post(s)) surplus_floor(slot).store(keep > 2 * step ? keep - 2 * step : 0, std::memory_order_relaxed);
}

bool DaemonBroker::driver_oom(int slot, uint64_t request, uint64_t charged, int attempt) {
  Mode m = mode_.load(std::memory_order_acquire);
  if (m == Mode::standalone) return local_.driver_oom(slot, request, charged, attempt);
  if (m != Mode::daemon) return false;
  if (attempt == 0) {
    proto::DriverOomMsg o;
    std::memset(&o, 0, sizeof o);
    o.slot = uint32_t(slot);
    o.request = request;
    // What the process holds without the failed request: its charge is still on the stats page
    // (reserve, call the driver, then commit or give back), and the daemon adds `request` itself.
    uint64_t in_use = stats().slots[slot].in_use.load(std::memory_order_relaxed);
    o.in_use = in_use > charged ? in_use - charged : 0;
    if (o.in_use == proto::kUnknown) o.in_use = proto::kUnknown - 1;
    o.physical_free = physical_free(slot);
    link_.post(o);
    uint64_t grant = control().slots[slot].grant.load(std::memory_order_relaxed);
    logf(LogLevel::info,
         "the driver is out of memory on device slot %d (request %llu bytes, in use %llu bytes without it, grant "
         "%llu bytes): told colocd",
         slot, (unsigned long long)o.request, (unsigned long long)o.in_use, (unsigned long long)grant);
    if (!oom_warned_.exchange(true, std::memory_order_relaxed)) {
      char id[41], req[32], use[32], gr[32];
      format_uuid(devices().info(slot).uuid, id);
      format_size(request, req, sizeof req);
      format_size(o.in_use, use, sizeof use);
      format_size(grant, gr, sizeof gr);
      logf(LogLevel::warn,
           "the driver ran out of memory inside coloc's grant on device %d (%s): a request of %s with %s in use "
           "and %s granted; memory is used outside coloc or by another process (colocd was told; warned once "
           "per process)",
           devices().info(slot).ordinal, id, req, use, gr);
    }
  }
  // Under the wait policy, try again for a moment: the usual cause is a process that just died,
  // whose memory the driver frees a little after colocd noticed the death and granted it to us.
  static constexpr uint64_t kRetryMs[] = {5, 10, 20, 40, 80, 160, 320, 500, 500, 500, 500};
  if (options().on_full != proto::OnFull::kWait || attempt >= int(sizeof kRetryMs / sizeof kRetryMs[0])) return false;
  SignalWindow w;
  return w.sleep(kRetryMs[attempt] * 1000000ull);
}

void DaemonBroker::describe_refusal(int slot, Refusal why, char* out, size_t cap) {
  if (cap == 0) return;
  out[0] = '\0';
  if (mode_.load(std::memory_order_acquire) == Mode::standalone) return local_.describe_refusal(slot, why, out, cap);
  if (mode_.load(std::memory_order_acquire) != Mode::daemon) return;
  const RefusalDetail& t = t_refusal;
  const Figures fig(t.asked, t.capacity, t.in_use, t.physical_free, ", %s free on the device");
  const char *ask = fig.ask, *cap_s = fig.cap, *use = fig.use, *fr = fig.fr;
  // What was asked, in words: admission asks the job's footprint (or one context), growth a grant.
  char asked[160];
  if (t.admission)
    std::snprintf(asked, sizeof asked, "it asked %s of the device's %s", ask, cap_s);
  else
    std::snprintf(asked, sizeof asked, "it asked for a grant of %s with %s in use, of the device's %s%s", ask, use,
                  cap_s, fr);
  switch (why) {
    case Refusal::own_limit: {
      // A limit the daemon changed since registration (coloc set --mem): say so, when it is the
      // limit that refused (not a lower COLOC_MEM_LIMIT_<n>, this process's or the one the job's
      // limit on the device came from: then the slot's limit is below the job's).
      uint64_t reg = registered_limit_.load(std::memory_order_relaxed);
      uint64_t job = job_limit_.load(std::memory_order_relaxed);
      uint64_t now = slot >= 0 ? control().slots[slot].limit.load(std::memory_order_relaxed) : job;
      if (slot >= 0 && limit_of(slot) == now && now < job) {
        // The job's limit on this device is a per-device cap: say where it comes from.
        char is[32], whole[32];
        format_size(now, is, sizeof is);
        if (job == kNoLimit) std::snprintf(whole, sizeof whole, "none");
        else format_size(job, whole, sizeof whole);
        std::snprintf(out, cap,
                      "; the job's limit on this device is %s, the COLOC_MEM_LIMIT_<n> of the process that brought the "
                      "job here (its limit elsewhere: %s)",
                      is, whole);
        return;
      }
      if (reg == 0 || now == reg || (slot >= 0 && (limit_of(slot) != now || now < job))) return;
      char was[32], is[32];
      if (reg == kNoLimit) std::snprintf(was, sizeof was, "none");
      else format_size(reg, was, sizeof was);
      if (now == kNoLimit) std::snprintf(is, sizeof is, "none");
      else format_size(now, is, sizeof is);
      std::snprintf(out, cap, "; the job's limit was changed from %s to %s by `coloc set --mem` while it ran", was,
                    is);
      return;
    }
    case Refusal::device_full:
      std::snprintf(out, cap,
                    "; %s, and colocd had no room for it (COLOC_ON_FULL=fail, or it can never fit); `coloc status` "
                    "shows what is free and who holds the rest",
                    asked);
      return;
    case Refusal::timeout:
    {
      char most[160];
      describe_wait_limit(most, sizeof most, t.admission, link_.version());
      std::snprintf(out, cap, "; waited %.1f s (at most %s); %s", double(t.waited_ns) / 1e9, most, asked);
      return;
    }
    case Refusal::deadlock_broken:
      std::snprintf(out, cap,
                    "; every job on device %d was waiting for memory, so colocd refused one to break the deadlock: "
                    "the lowest priority (this job's: %s), then a job without progress since its admission, then "
                    "the newest; give it a declared footprint (coloc run --mem SIZE, or COLOC_MEM_LIMIT) so it "
                    "is admitted with a reservation its growth never waits for, or run it later",
                    t.ordinal, priority_word(control().priority.load(std::memory_order_relaxed)));
      return;
    case Refusal::user_cap:
      std::snprintf(out, cap, "; %s, past the user's cap on grants (colocd --max-per-user)", asked);
      return;
    case Refusal::no_daemon:
      std::snprintf(out, cap, "; colocd is away (restarting) and COLOC_ON_FULL=fail does not wait for it");
      return;
    case Refusal::job_cancelled:
      std::snprintf(out, cap, "; the job was cancelled (`coloc cancel`, its report says by whom), so colocd grants "
                              "it nothing new");
      return;
    default: return;
  }
}

// The slot of a launch or copy into `stream`: its context's (the current context's for the
// default streams); -1 when the context is one the hooks never saw.
// `*ctx`: that context (null when the driver did not say), so the tracker need not ask again.
static int slot_of_stream(CUstream stream, CUcontext* ctx) {
  const bool default_stream = stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  *ctx = nullptr;
  const CUresult r = default_stream ? call<Fn::cuCtxGetCurrent>(ctx) : call<Fn::cuStreamGetCtx>(stream, ctx);
  if (r != CUDA_SUCCESS) *ctx = nullptr;
  return *ctx ? devices().known_slot_of(*ctx) : -1;
}

// Whether a launch into `stream` would only be captured (or fail for a capture elsewhere).
static bool gate_capturing(CUstream stream, bool per_thread) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult cr = per_thread ? call<Fn::cuStreamIsCapturing_ptsz>(stream, &cs) : call<Fn::cuStreamIsCapturing>(stream, &cs);
  return cr == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT || (cr == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE);
}

GateTicket DaemonBroker::gate_wait(uint32_t, CUstream stream, bool per_thread) {
  return pass_gate(stream, per_thread, false);
}

GateTicket DaemonBroker::copy_wait(CUstream stream, bool per_thread) { return pass_gate(stream, per_thread, true); }

GateTicket DaemonBroker::pass_gate(CUstream stream, bool per_thread, bool copy) {
  if (mode_.load(std::memory_order_acquire) != Mode::daemon || gate_override_.load(std::memory_order_acquire)) return {};
  CUcontext ctx = nullptr;
  int slot = slot_of_stream(stream, &ctx);
  // A context the hooks never saw (so no slot is known, and finding one could wait for an
  // admission inside a launch): the first closed gate holds it (a pause closes every slot).
  for (int s = 0; s < kMaxDevices && (slot < 0 || slot >= kMaxDevices); ++s)
    if (control().gates[s].state.load(std::memory_order_acquire) != uint32_t(pages::GateState::kRun)) slot = s;
  if (slot < 0 || slot >= kMaxDevices) return {};
  const pages::SlotGate& g = control().gates[slot];
  uint32_t state = g.state.load(std::memory_order_acquire);
  if (state == uint32_t(pages::GateState::kRun) || state >= pages::kGateStates) return {};
  // A copy waits only for another job's turn (timeslice), and is tracked in the holder's (kWindow):
  // a pause and the window hold launches only.
  if (copy && state == uint32_t(pages::GateState::kPaused)) return {};
  // A capture in progress is never disturbed: the launch only records into the graph. The driver
  // is asked only while a capture begun through our hooks has not ended (graph_hooks.h: every
  // cuStreamBeginCapture* goes through them; a launch into the legacy stream that a GLOBAL capture
  // elsewhere makes fail is such a case too), so a holder that never captures pays no query.
  if (g_active_captures.load(std::memory_order_relaxed) > 0 && gate_capturing(stream, per_thread)) return {};
  const uint64_t released = released_[slot].load(std::memory_order_acquire);
  if (released && released == ((uint64_t(1) << 32) | g.seq.load(std::memory_order_acquire))) return {};
  pages::TrackStats& ts = stats().track[slot];
  // Going in kWindow: counted in `launching` until the launch is tracked, then the gate read again
  // (pages.h: StatsPage::launching), so the daemon's drain never misses it.
  auto go_tracked = [&] {
    stats().launching.fetch_add(1, std::memory_order_seq_cst);
    if (g.state.load(std::memory_order_seq_cst) == uint32_t(pages::GateState::kWindow)) return true;
    stats().launching.fetch_sub(1, std::memory_order_seq_cst);
    return false;
  };
  const uint64_t window = control().compute[slot].window_ns.load(std::memory_order_relaxed);
  if (state == uint32_t(pages::GateState::kWindow) && (copy || !tracker().over_window(slot, window)) && go_tracked())
    return {slot, true, ctx};  // the holder, under its window: go (tracked)
  const uint64_t t0 = monotonic_ns();
  // The time waited goes to the cause of each part of the wait (a holder over its window whose
  // turn then ends waits first for the window, then for a quantum); the launch counts once under
  // each cause it waited for.
  pages::GateStats& gs = stats().gates[slot];
  uint32_t cur = state;
  uint64_t since = t0;
  bool counted[pages::kGateStates] = {};
  auto account = [&](uint32_t next, uint64_t at) {
    if (next == cur) return;
    if (cur < pages::kGateStates && cur != uint32_t(pages::GateState::kRun)) {
      gs.wait_ns[cur].fetch_add(at - since, std::memory_order_relaxed);
      if (!counted[cur]) gs.waits[cur].fetch_add(1, std::memory_order_relaxed);
      counted[cur] = true;
    }
    cur = next;
    since = at;
  };
  bool track = false;
  ts.waiting.fetch_add(1, std::memory_order_seq_cst);  // the job wants the device (the scheduler reads it)
  ts.last_launch_ns.store(t0, std::memory_order_relaxed);
  tracker().nudge();  // a closed gate: what is left unmarked gets its marks for the handover
  // A window wait (one spell of kWindow while over the window) lasts at most 4 windows (about a
  // quantum under timeslice), and at least 50 ms: work queued behind something that this thread
  // itself must do (a host callback, a stream wait on a value it sets) would otherwise never
  // complete, where the driver alone would have queued the launch. The floor matters for the
  // priority policy's small windows (0.25-2 ms): 4 of them is shorter than one long kernel, so
  // without it a throttled job's queue would grow past its window by a kernel every few ms. (A
  // wait at a closed gate, TIMESLICE or PAUSED, is not capped: the daemon opens it.)
  constexpr uint64_t kWindowCapFloorNs = 50'000'000;
  const uint64_t window_cap_ns = window ? std::max<uint64_t>(4 * window, kWindowCapFloorNs) : 0;
  {
    SignalWindow w;
    for (;;) {
      if (gate_override_.load(std::memory_order_acquire)) break;
      const uint32_t seq = g.seq.load(std::memory_order_acquire);
      state = g.state.load(std::memory_order_acquire);
      if (state == uint32_t(pages::GateState::kRun)) break;
      if (state < pages::kGateStates) account(state, monotonic_ns());
      const std::atomic<uint32_t>* word = &g.seq;
      uint32_t expected = seq;
      if (state == uint32_t(pages::GateState::kWindow)) {
        // Over the window: wait for a completion (the tracker wakes its word), or a gate change
        // (seen at the latest after a slice).
        expected = tracker().done_word().load(std::memory_order_acquire);
        const uint64_t win = control().compute[slot].window_ns.load(std::memory_order_relaxed);
        const bool capped = window_cap_ns && monotonic_ns() - since >= window_cap_ns;
        if ((copy || capped || !tracker().over_window(slot, win)) && go_tracked()) {
          track = true;
          break;
        }
        if (g.state.load(std::memory_order_acquire) != uint32_t(pages::GateState::kWindow)) continue;
        word = &tracker().done_word();
      }
      if (w.wait_futex(word, expected, SignalWindow::kSliceMs) < 0) {  // SIGINT/SIGTERM: launches proceed
        released_[slot].store((uint64_t(1) << 32) | seq, std::memory_order_release);
        break;
      }
    }
  }
  const uint64_t t1 = monotonic_ns();
  account(uint32_t(pages::GateState::kRun), t1);  // the last part
  ts.last_launch_ns.store(t1, std::memory_order_relaxed);
  ts.waiting.fetch_sub(1, std::memory_order_seq_cst);
  if (counted[uint32_t(pages::GateState::kWindow)]) ts.window_waits.fetch_add(1, std::memory_order_relaxed);
  return {slot, track, ctx};
}

void DaemonBroker::launched(const GateTicket& t, CUstream stream, bool per_thread, CUresult rc) {
  tracker().launched(t.slot, stream, per_thread, rc, t.ctx);
  stats().launching.fetch_sub(1, std::memory_order_release);  // tracked: the drain sees it from here on
}

void DaemonBroker::on_lost() {
  gate_override_.store(true, std::memory_order_release);
  for (pages::SlotGate& g : control().gates)  // FUTEX_WAKE needs no write access to the page
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g.seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void DaemonBroker::flush_launches() {
  if (mode_.load(std::memory_order_acquire) != Mode::daemon) return;
  uint64_t total = total_launches();
  uint64_t prev = launches_flushed_.load(std::memory_order_relaxed);
  if (total <= prev) return;
  int slot = devices().known_current_slot();
  if (slot < 0 || slot >= kMaxDevices || !slots_[slot].attached.load(std::memory_order_acquire)) {
    slot = -1;
    for (int s = 0; s < kMaxDevices && slot < 0; ++s)
      if (slots_[s].attached.load(std::memory_order_acquire)) slot = s;
  }
  if (slot < 0) return;  // nothing attached yet: counted at the next flush
  if (!launches_flushed_.compare_exchange_strong(prev, total, std::memory_order_relaxed)) return;  // racing flush
  stats().slots[slot].launches.fetch_add(total - prev, std::memory_order_relaxed);
}

// ---- exit and fork ------------------------------------------------------------------------------

void DaemonBroker::goodbye(int status) {
  if (mode_.load(std::memory_order_acquire) != Mode::daemon) return;
  flush_launches();
  proto::GoodbyeMsg g;
  std::memset(&g, 0, sizeof g);
  g.exit_status = status & 0xff;  // what the parent's waitpid sees
  g.has_status = 1;
  link_.post(g);
  mode_.store(Mode::exiting, std::memory_order_release);
  link_.close_for_exit();
}

void DaemonBroker::after_fork_child() {
  daemon_pages::privatize();
  tracker().after_fork_child();
  link_.reset_in_child();
  register_mutex_.reinit_in_child();
  attach_mutex_.reinit_in_child();
  attach_pending_ = false;
  launches_flushed_.store(0, std::memory_order_relaxed);
  oom_warned_.store(false, std::memory_order_relaxed);
  Mode m = mode_.load(std::memory_order_relaxed);
  if (m == Mode::standalone) local_.after_fork_child();  // the parent's job shares are the parent's
  if (m != Mode::daemon && m != Mode::exiting) return;  // standalone, failed, inherited: as the parent
  bool any = false;
  for (const SlotRecord& r : slots_) any |= r.attached.load(std::memory_order_relaxed);
  mode_.store(any ? Mode::inherited : Mode::unregistered, std::memory_order_relaxed);
}

}  // namespace coloc::interpose
