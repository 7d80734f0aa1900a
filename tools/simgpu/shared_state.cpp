#include "shared_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "os.h"

namespace simgpu {

using shm::kNone;

namespace {

constexpr uint64_t kOwnerCheckNs = 20'000'000;    // a waiter checks the owner is alive this often
constexpr uint64_t kMeminfoReclaimNs = 100'000'000;  // meminfo() reclaims at most this often

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string describe(const shm::Layout& l) {
  std::string s;
  for (uint32_t i = 0; i < l.device_count && i < uint32_t(kMaxDevices); ++i) {
    if (i) s += ',';
    s += std::string(l.devices[i].name, strnlen(l.devices[i].name, sizeof l.devices[i].name)) + ':' +
         std::to_string(l.devices[i].capacity) + 'B';
  }
  return s;
}

std::string describe(const std::vector<DeviceSpec>& devices) {
  std::string s;
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + devices[i].name + ':' + std::to_string(devices[i].bytes) + 'B';
  return s;
}

bool same_devices(const shm::Layout& l, const std::vector<DeviceSpec>& devices) {
  if (l.device_count != devices.size()) return false;
  for (size_t i = 0; i < devices.size(); ++i)
    if (l.devices[i].capacity != devices[i].bytes ||
        devices[i].name != std::string(l.devices[i].name, strnlen(l.devices[i].name, sizeof l.devices[i].name)))
      return false;
  return true;
}

bool header_ok(const shm::Layout& l) {
  return l.magic == shm::kMagic && l.version == shm::kLayoutVersion && l.size == sizeof(shm::Layout);
}

void init_layout(shm::Layout* l, const std::vector<DeviceSpec>& devices) {
  // The file is fresh (all zero). Fill it in, publish the magic last.
  l->version = shm::kLayoutVersion;
  l->size = sizeof(shm::Layout);
  l->device_count = uint32_t(devices.size());
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&l->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  for (size_t i = 0; i < devices.size(); ++i) {
    shm::Device& d = l->devices[i];
    d.capacity = devices[i].bytes;
    std::snprintf(d.name, sizeof d.name, "%s", devices[i].name.c_str());
    d.owner = kNone;
    for (auto& c : d.contexts) c = shm::ContextEntry{kNone, 0, 0, 0, 0, 0, kNone, 0};
    for (auto& p : d.proxy) p = shm::ProxySlice{kNone, 0, 0, 0};
  }
  // Readers look only after taking the creation flock we hold, which orders these stores.
  l->magic = shm::kMagic;
}

}  // namespace

// Holds the robust mutex; repairs the books when the previous holder died holding it.
class SharedState::Lock {
 public:
  explicit Lock(SharedState& s) : s_(s) { lock(); }
  ~Lock() {
    if (held_) unlock();
  }
  void lock() {
    int rc = pthread_mutex_lock(&s_.layout_->mutex);
    if (rc == EOWNERDEAD) {
      s_.repair_locked();
      pthread_mutex_consistent(&s_.layout_->mutex);
    } else if (rc != 0) {
      // Only reachable if a holder died and its successor failed to mark the mutex consistent,
      // which this code never does; the shared books can no longer be trusted.
      std::fprintf(stderr, "simgpu: the state mutex in %s is unusable (%s)\n", s_.path_.c_str(), std::strerror(rc));
      std::abort();
    }
    held_ = true;
  }
  void unlock() {
    pthread_mutex_unlock(&s_.layout_->mutex);
    held_ = false;
  }

 private:
  SharedState& s_;
  bool held_ = false;
};

std::unique_ptr<SharedState> SharedState::open(const std::string& dir, const std::vector<DeviceSpec>& devices,
                                               std::string* error, OpenFailure* why, bool claim) {
  *why = OpenFailure::system;
  std::unique_ptr<SharedState> s(new SharedState);
  s->path_ = dir + "/state";
  s->pid_ = getpid();
  s->start_time_ = process_start_time(s->pid_);
  if (devices.empty() || devices.size() > size_t(kMaxDevices)) {
    *error = "simgpu: need 1 to " + std::to_string(kMaxDevices) + " devices";
    return nullptr;
  }

  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = errno_text("simgpu: cannot create SIMGPU_STATE_DIR " + dir);
    return nullptr;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "simgpu: SIMGPU_STATE_DIR " + dir + " is not a directory";
    return nullptr;
  }
  // The lock file serializes creation and re-creation of the state file.
  std::string lock_path = dir + "/lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    *error = errno_text("simgpu: cannot open " + lock_path);
    return nullptr;
  }
  while (flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } close_lock{lock_fd};

  s->fd_ = ::open(s->path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (s->fd_ < 0 || fstat(s->fd_, &st) != 0) {
    *error = errno_text("simgpu: cannot open " + s->path_);
    return nullptr;
  }
  const size_t size = sizeof(shm::Layout);
  std::string theirs;
  bool usable = false;
  if (size_t(st.st_size) == size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd_, 0);
    if (p == MAP_FAILED) {
      *error = errno_text("simgpu: cannot map " + s->path_);
      return nullptr;
    }
    s->layout_ = static_cast<shm::Layout*>(p);
    if (header_ok(*s->layout_)) {
      usable = same_devices(*s->layout_, devices);
      theirs = "devices " + describe(*s->layout_);
    } else {
      theirs = "another simgpu layout";
    }
  } else if (st.st_size != 0) {
    theirs = "another simgpu layout (" + std::to_string(st.st_size) + " bytes)";
  }

  if (!usable) {
    // Re-create only when no live process holds the file (each user keeps a shared flock).
    if (st.st_size != 0 && flock(s->fd_, LOCK_EX | LOCK_NB) != 0) {
      *why = OpenFailure::mismatch;
      *error = "simgpu: state file " + s->path_ + " is in use by live processes and was made for " + theirs +
               ", but this process has SIMGPU_DEVICES=" + describe(devices) +
               "; use another SIMGPU_STATE_DIR or stop those processes";
      return nullptr;
    }
    if (s->layout_) munmap(s->layout_, size);
    s->layout_ = nullptr;
    if (ftruncate(s->fd_, 0) != 0 || ftruncate(s->fd_, off_t(size)) != 0) {
      *error = errno_text("simgpu: cannot size " + s->path_);
      return nullptr;
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd_, 0);
    if (p == MAP_FAILED) {
      *error = errno_text("simgpu: cannot map " + s->path_);
      return nullptr;
    }
    s->layout_ = static_cast<shm::Layout*>(p);
    init_layout(s->layout_, devices);
  }
  // Held (shared) for the life of the process: marks the file as in use.
  while (flock(s->fd_, LOCK_SH) != 0 && errno == EINTR) {
  }
  if (!claim) return s;
  if (!s->claim_slot(error)) {
    *why = OpenFailure::full;
    return nullptr;
  }
  return s;
}

SharedState::~SharedState() {
  release_process();
  if (layout_) munmap(layout_, sizeof(shm::Layout));
  if (fd_ >= 0) ::close(fd_);
}

bool SharedState::claim_slot(std::string* error) {
  Lock l(*this);
  reclaim_dead_locked();
  for (int i = 0; i < shm::kMaxProcesses; ++i) {
    // A slot with our own pid and start time belongs to the image this process exec'd from.
    shm::Process& p = layout_->processes[i];
    if (p.pid == pid_ && p.start_time == start_time_) reclaim_process_locked(i);
  }
  for (int i = 0; i < shm::kMaxProcesses; ++i) {
    shm::Process& p = layout_->processes[i];
    if (p.pid != 0) continue;
    p.pid = pid_;
    p.start_time = start_time_;
    for (auto& b : p.bytes) b = 0;
    p.checkpoint.op = p.checkpoint.arg = 0;
    p.checkpoint.result = 0;
    p.checkpoint.state = 0;
    p.checkpoint.restore_tid = p.checkpoint.caller = 0;
    p.checkpoint.released = 0;  // ticket and finished go on counting: a waiter's ticket stays unique
    slot_ = i;
    last_reclaim_ns_.store(now_ns(), std::memory_order_relaxed);
    return true;
  }
  *error = "simgpu: all " + std::to_string(shm::kMaxProcesses) + " process slots in " + path_ + " are in use";
  return false;
}

void SharedState::repair_locked() {
  // The previous holder died mid-update. Process slots are the truth for memory; rebuild the
  // per-device sums from them, drop ownership by free entries, then reclaim the dead.
  for (uint32_t d = 0; d < layout_->device_count; ++d) {
    shm::Device& dev = layout_->devices[d];
    uint64_t sum = 0;
    for (auto& p : layout_->processes)
      if (p.pid != 0) sum += p.bytes[d];
    dev.used = sum;
    if (dev.owner != kNone && (dev.owner < 0 || dev.owner >= shm::kMaxContexts || dev.contexts[dev.owner].process == kNone))
      dev.owner = kNone;
  }
  reclaim_dead_locked();
}

bool SharedState::reclaim_dead_locked() {
  bool any = false;
  for (int i = 0; i < shm::kMaxProcesses; ++i) {
    shm::Process& p = layout_->processes[i];
    if (p.pid == 0 || i == slot_ || process_alive(p.pid, p.start_time)) continue;
    reclaim_process_locked(i);
    any = true;
  }
  return any;
}

void SharedState::reclaim_process_locked(int slot) {
  shm::Process& p = layout_->processes[slot];
  for (uint32_t d = 0; d < layout_->device_count; ++d) {
    shm::Device& dev = layout_->devices[d];
    dev.used -= std::min(dev.used, p.bytes[d]);
    p.bytes[d] = 0;
    bool changed = false;
    for (int e = 0; e < shm::kMaxContexts; ++e) {
      if (dev.contexts[e].process != slot) continue;
      reset_entry_locked(dev, e, kNone);
      changed = true;
    }
    if (dev.owner != kNone && dev.contexts[dev.owner].process == kNone) {
      dev.owner = next_runnable_locked(dev, dev.owner);
      changed = true;
    }
    if (changed) wake(dev);
  }
  p.pid = 0;
  p.start_time = 0;
  p.checkpoint.caller = 0;  // a request it never carried out is dropped
  p.checkpoint.released = 0;
  futex_wake_all(&p.checkpoint.finished);  // its callers look again, and find it gone
}

int SharedState::next_runnable_locked(shm::Device& d, int after) {
  for (int k = 1; k <= shm::kMaxContexts; ++k) {
    int j = (after + k) % shm::kMaxContexts;
    if (d.contexts[j].process != kNone && d.contexts[j].runnable) return j;
  }
  return kNone;
}

void SharedState::wake(shm::Device& d) {
  d.wake.fetch_add(1, std::memory_order_release);
  futex_wake_all(&d.wake);
}

bool SharedState::charge(int device, uint64_t bytes) {
  Lock l(*this);
  if (slot_ < 0) return false;
  shm::Device& d = layout_->devices[device];
  if (bytes > d.capacity - d.used) {
    if (!reclaim_dead_locked() || bytes > d.capacity - d.used) return false;
  }
  d.used += bytes;
  layout_->processes[slot_].bytes[device] += bytes;
  return true;
}

void SharedState::uncharge(int device, uint64_t bytes) {
  Lock l(*this);
  if (slot_ < 0) return;
  uint64_t& mine = layout_->processes[slot_].bytes[device];
  uint64_t b = std::min(bytes, mine);
  mine -= b;
  layout_->devices[device].used -= std::min(b, layout_->devices[device].used);
}

void SharedState::reclaim_dead_if_due_locked() {
  uint64_t now = now_ns();
  if (now - last_reclaim_ns_.load(std::memory_order_relaxed) >= kMeminfoReclaimNs) {
    reclaim_dead_locked();
    last_reclaim_ns_.store(now, std::memory_order_relaxed);
  }
}

MemInfo SharedState::meminfo(int device) {
  Lock l(*this);
  reclaim_dead_if_due_locked();
  const shm::Device& d = layout_->devices[device];
  return {d.capacity, d.used};
}

std::vector<ProcessUse> SharedState::processes(int device) {
  std::vector<ProcessUse> out;
  Lock l(*this);
  reclaim_dead_if_due_locked();
  const shm::Device& d = layout_->devices[device];
  std::vector<bool> has_context(shm::kMaxProcesses, false);
  for (const shm::ContextEntry& e : d.contexts)
    if (e.process >= 0 && e.process < shm::kMaxProcesses) has_context[size_t(e.process)] = true;
  for (int i = 0; i < shm::kMaxProcesses; ++i) {
    const shm::Process& p = layout_->processes[i];
    if (p.pid != 0 && !p.checkpoint.released && (has_context[size_t(i)] || p.bytes[device] > 0))
      out.push_back({p.pid, p.bytes[device]});
  }
  return out;
}

uint64_t SharedState::charged_by_me(int device) {
  Lock l(*this);
  return slot_ < 0 ? 0 : layout_->processes[slot_].bytes[device];
}

int SharedState::add_context(int device) {
  Lock l(*this);
  if (slot_ < 0) return -1;
  shm::Device& d = layout_->devices[device];
  for (int e = 0; e < shm::kMaxContexts; ++e) {
    if (d.contexts[e].process != kNone) continue;
    reset_entry_locked(d, e, slot_);
    return e;
  }
  return -1;
}

void SharedState::remove_context(int device, int entry) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  if (slot_ < 0 || d.contexts[entry].process != slot_) return;
  reset_entry_locked(d, entry, kNone);
  if (d.owner == entry) {
    d.owner = next_runnable_locked(d, entry);
    wake(d);
  }
}

void SharedState::add_queued_ns(int device, int entry, uint64_t ns) {
  __atomic_fetch_add(&layout_->devices[device].contexts[entry].queued_ns, ns, __ATOMIC_RELAXED);
}

void SharedState::reset_entry_locked(shm::Device& d, int entry, int32_t process) {
  if (d.contexts[entry].last_proxy != kNone)
    for (auto& p : d.proxy)
      if (p.entry == entry) p = shm::ProxySlice{kNone, 0, 0, 0};
  shm::ContextEntry& e = d.contexts[entry];
  e.process = process;
  e.runnable = 0;
  __atomic_store_n(&e.queued_ns, 0, __ATOMIC_RELAXED);
  e.own_ns = e.proxy_ns = e.runnable_ns = 0;
  e.last_proxy = kNone;
  e.stopped = 0;
}

bool SharedState::entry_stopped_locked(const shm::Device& d, int entry) {
  const int32_t slot = d.contexts[entry].process;
  if (slot == kNone || slot == slot_) return false;  // this process runs
  return process_stopped(layout_->processes[slot].pid);
}

bool SharedState::proxy_turn_locked(shm::Device& d, int entry) {
  shm::ContextEntry& e = d.contexts[entry];
  const uint64_t queued = __atomic_load_n(&e.queued_ns, __ATOMIC_RELAXED);
  const uint64_t done = e.own_ns + e.proxy_ns;
  if (queued <= done) return false;
  const uint64_t len = std::min(timeslice_ns_, queued - done);
  const uint64_t start = std::max(d.clock_ns, e.runnable_ns);
  shm::ProxySlice* last = e.last_proxy != kNone ? &d.proxy[e.last_proxy] : nullptr;
  if (last && last->entry == entry && last->end_ns == start) {
    last->end_ns = start + len;  // contiguous with its previous turn: one slice
  } else {
    int free_slice = -1;
    for (int i = 0; i < shm::kMaxProxySlices; ++i)
      if (d.proxy[i].entry == kNone) {
        free_slice = i;
        break;
      }
    if (free_slice < 0) return false;  // full: its work waits until it runs again
    d.proxy[free_slice] = shm::ProxySlice{entry, 0, start, start + len};
    e.last_proxy = free_slice;
  }
  e.proxy_ns += len;
  e.stopped = 1;
  d.clock_ns = start + len;
  return true;
}

int SharedState::next_turn_locked(shm::Device& d, int after) {
  for (int k = 1; k <= shm::kMaxContexts; ++k) {
    const int j = (after + k) % shm::kMaxContexts;
    if (d.contexts[j].process == kNone || !d.contexts[j].runnable) continue;
    if (!entry_stopped_locked(d, j)) return j;
    d.contexts[j].stopped = 1;
    proxy_turn_locked(d, j);
  }
  return kNone;
}

void SharedState::catch_up_locked(shm::Device& d, uint64_t now, int also) {
  std::vector<int> stopped;
  for (int j = 0; j < shm::kMaxContexts; ++j)
    if (d.contexts[j].process != kNone && d.contexts[j].runnable && (j == also || entry_stopped_locked(d, j)))
      stopped.push_back(j);
  bool any = true;
  while (any && d.clock_ns < now) {
    any = false;
    for (int j : stopped) {
      if (d.clock_ns >= now) break;
      any = proxy_turn_locked(d, j) || any;
    }
  }
}

bool SharedState::collect_locked(shm::Device& d, int entry, std::vector<Interval>* credit) {
  shm::ContextEntry& e = d.contexts[entry];
  if (!e.stopped) return false;
  if (d.owner == kNone) catch_up_locked(d, now_ns(), entry);
  const size_t before = credit->size();
  for (auto& p : d.proxy) {
    if (p.entry != entry) continue;
    credit->push_back({p.start_ns, p.end_ns});
    p = shm::ProxySlice{kNone, 0, 0, 0};
  }
  std::sort(credit->begin() + ptrdiff_t(before), credit->end(),
            [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  e.last_proxy = kNone;
  e.stopped = 0;
  return credit->size() > before;
}

bool SharedState::acquire_engine(int device, int entry, uint64_t* clock_ns, std::vector<Interval>* credit) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  *clock_ns = 0;
  if (slot_ < 0 || d.contexts[entry].process != slot_) return true;  // released at exit: run unowned
  if (collect_locked(d, entry, credit)) return false;
  if (!d.contexts[entry].runnable) {
    d.contexts[entry].runnable = 1;
    d.contexts[entry].runnable_ns = now_ns();
  }
  uint64_t last_check = now_ns();
  for (;;) {
    if (d.owner == kNone) {
      catch_up_locked(d, now_ns(), kNone);  // stopped entries' work ran while the device was free
      d.owner = entry;
    }
    if (d.owner == entry) {
      *clock_ns = d.clock_ns;
      return true;
    }
    uint32_t seen = d.wake.load(std::memory_order_acquire);
    l.unlock();
    futex_wait(&d.wake, seen, kOwnerCheckNs);
    l.lock();
    if (slot_ < 0 || d.contexts[entry].process != slot_) return true;
    if (collect_locked(d, entry, credit)) return false;  // this process was stopped while waiting
    uint64_t now = now_ns();
    if (now - last_check >= kOwnerCheckNs && d.owner != kNone) {
      last_check = now;
      const int owner = d.owner;
      int owner_slot = d.contexts[owner].process;
      if (owner_slot == kNone) {
        d.owner = kNone;  // an owner entry nobody holds: take over on the next turn
        continue;
      }
      const shm::Process& p = layout_->processes[owner_slot];
      if (owner_slot != slot_ && !process_alive(p.pid, p.start_time)) {
        reclaim_process_locked(owner_slot);
      } else if (entry_stopped_locked(d, owner)) {
        // A stopped owner keeps the device no longer than the slice it began; its later turns
        // are run by proxy.
        d.clock_ns = std::max(d.clock_ns, d.busy_until);
        d.contexts[owner].stopped = 1;
        d.owner = next_turn_locked(d, owner);
        wake(d);
      }
    }
  }
}

bool SharedState::begin_slice(int device, int entry, uint64_t until_ns, uint64_t own_ns) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  if (slot_ < 0 || d.contexts[entry].process != slot_) return true;  // released at exit: run unowned
  // Marked stopped: the engine was taken from it, even if the round robin has given it back since.
  if (d.owner != entry || d.contexts[entry].stopped) return false;
  d.busy_until = until_ns;
  d.contexts[entry].own_ns = own_ns;
  return true;
}

bool SharedState::owns_engine(int device, int entry) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  return slot_ < 0 || d.contexts[entry].process != slot_ || (d.owner == entry && !d.contexts[entry].stopped);
}

bool SharedState::yield_engine(int device, int entry, uint64_t clock_ns, uint64_t* resume_ns) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  *resume_ns = clock_ns;
  if (slot_ < 0 || d.contexts[entry].process != slot_) return false;
  // Lost it (e.g. reclaimed as dead by mistake, or taken while this process was stopped, even if
  // given back since): acquire again.
  if (d.owner != entry || d.contexts[entry].stopped) return true;
  d.clock_ns = std::max(d.clock_ns, clock_ns);
  int next = next_turn_locked(d, entry);
  if (next == kNone || next == entry) {
    *resume_ns = d.clock_ns;
    return false;
  }
  d.owner = next;
  wake(d);
  return true;
}

void SharedState::release_engine(int device, int entry, uint64_t clock_ns) {
  Lock l(*this);
  shm::Device& d = layout_->devices[device];
  if (slot_ < 0 || d.contexts[entry].process != slot_) return;
  d.contexts[entry].runnable = 0;
  if (d.owner == entry) {
    d.clock_ns = std::max(d.clock_ns, clock_ns);
    d.owner = next_turn_locked(d, entry);
    wake(d);
  }
}

bool SharedState::find_process(pid_t pid, int* slot, uint64_t* start_time) {
  Lock l(*this);
  for (int i = 0; i < shm::kMaxProcesses; ++i) {
    const shm::Process& p = layout_->processes[i];
    if (p.pid != pid || pid == 0) continue;
    if (!process_alive(p.pid, p.start_time)) return false;
    *slot = i;
    *start_time = p.start_time;
    return true;
  }
  return false;
}

bool SharedState::post_checkpoint(int slot, pid_t pid, uint64_t start_time, uint32_t op, uint32_t arg,
                                  uint32_t* ticket, bool* gone) {
  Lock l(*this);
  shm::Process& p = layout_->processes[slot];
  *gone = p.pid != pid || p.start_time != start_time;
  if (*gone) return false;
  shm::CheckpointChannel& c = p.checkpoint;
  if (c.caller != 0) return false;
  c.caller = pid_;
  c.op = op;
  c.arg = arg;
  *ticket = c.ticket.load(std::memory_order_relaxed) + 1;
  c.ticket.store(*ticket, std::memory_order_release);
  futex_wake_all(&c.ticket);
  return true;
}

bool SharedState::checkpoint_result(int slot, pid_t pid, uint64_t start_time, uint32_t ticket, int32_t* result,
                                    bool* gone) {
  Lock l(*this);
  const shm::Process& p = layout_->processes[slot];
  const uint32_t finished = p.checkpoint.finished.load(std::memory_order_acquire);
  // A result stays readable after its process exits (an unlocked process may exit at once): the
  // slot's counters are never reset, so `finished == ticket` is this request's result.
  if (finished == ticket) {
    *result = p.checkpoint.result;
    *gone = false;
    return true;
  }
  *gone = p.pid != pid || p.start_time != start_time;
  if (*gone || int32_t(finished - ticket) < 0) return false;
  // `finished` moves past `ticket` only after another caller posts and that request completes; a
  // waiter reads its result as soon as it is woken, so this is not seen in practice.
  *result = 999;  // CUDA_ERROR_UNKNOWN
  return true;
}

bool SharedState::checkpoint_info(pid_t pid, uint32_t* state, int32_t* tid) {
  Lock l(*this);
  for (const shm::Process& p : layout_->processes) {
    if (p.pid != pid || pid == 0) continue;
    if (!process_alive(p.pid, p.start_time)) return false;
    *state = p.checkpoint.state;
    *tid = p.checkpoint.restore_tid;
    return true;
  }
  return false;
}

uint32_t SharedState::next_checkpoint_request(uint32_t seen, uint32_t* op, uint32_t* arg) {
  for (;;) {
    shm::CheckpointChannel* c;
    {
      Lock l(*this);
      if (slot_ < 0) return seen;
      c = &layout_->processes[slot_].checkpoint;
      uint32_t t = c->ticket.load(std::memory_order_acquire);
      if (t != seen && c->caller != 0) {
        *op = c->op;
        *arg = c->arg;
        return t;
      }
      seen = t;
    }
    futex_wait(&c->ticket, seen, 1'000'000'000);
  }
}

void SharedState::finish_checkpoint_request(uint32_t ticket, int32_t result, uint32_t state) {
  Lock l(*this);
  if (slot_ < 0) return;
  shm::CheckpointChannel& c = layout_->processes[slot_].checkpoint;
  c.result = result;
  c.state = state;
  c.caller = 0;
  c.finished.store(ticket, std::memory_order_release);
  futex_wake_all(&c.finished);
}

void SharedState::set_checkpoint_identity(int32_t tid, uint32_t state) {
  Lock l(*this);
  if (slot_ < 0) return;
  layout_->processes[slot_].checkpoint.restore_tid = tid;
  layout_->processes[slot_].checkpoint.state = state;
}

std::vector<uint64_t> SharedState::release_devices() {
  std::vector<uint64_t> out(layout_->device_count, 0);
  Lock l(*this);
  if (slot_ < 0) return out;
  shm::Process& p = layout_->processes[slot_];
  for (uint32_t d = 0; d < layout_->device_count; ++d) {
    out[d] = p.bytes[d];
    layout_->devices[d].used -= std::min(p.bytes[d], layout_->devices[d].used);
    p.bytes[d] = 0;
  }
  p.checkpoint.released = 1;
  return out;
}

bool SharedState::recharge_devices(const std::vector<uint64_t>& bytes) {
  Lock l(*this);
  if (slot_ < 0) return false;
  auto fits = [&] {
    for (uint32_t d = 0; d < layout_->device_count && d < bytes.size(); ++d)
      if (bytes[d] > layout_->devices[d].capacity - layout_->devices[d].used) return false;
    return true;
  };
  if (!fits() && (!reclaim_dead_locked() || !fits())) return false;
  shm::Process& p = layout_->processes[slot_];
  for (uint32_t d = 0; d < layout_->device_count && d < bytes.size(); ++d) {
    layout_->devices[d].used += bytes[d];
    p.bytes[d] += bytes[d];
  }
  p.checkpoint.released = 0;
  return true;
}

void SharedState::release_process() {
  if (!layout_) return;
  Lock l(*this);
  if (slot_ < 0) return;
  reclaim_process_locked(slot_);
  slot_ = -1;
}

}  // namespace simgpu
