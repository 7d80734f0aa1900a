// simgpu/shared_state.h — the state every process on the machine shares: each simulated device's
// capacity and use, which process uses how much, and which context owns each device's engine.
//
// It lives in one file, <SIMGPU_STATE_DIR>/state (mode 0600, directory 0700), mapped MAP_SHARED
// by every process. One process-shared robust mutex guards all of it; a process that dies holding
// it leaves it EOWNERDEAD, and the next locker repairs the books and carries on.
//
// Invariants (checked under the mutex):
//   - device.used == Σ over process slots of slot.bytes[device] <= device.capacity;
//   - a process slot is free (pid 0) or names a process by pid and start time; a slot whose
//     process is gone (or a zombie, or a different process with a reused pid) is dead, and its
//     bytes, context entries and engine ownership are reclaimed: when an allocation would not
//     fit, in meminfo() (at most every 100 ms per process), and when a process claims its slot;
//   - a device's engine owner is -1 or a context entry of that device.
//
// Engine time-sharing: a context with work calls acquire_engine(), which marks its entry runnable
// and blocks (futex on the device's `wake` word, bounded waits that check the owner is alive)
// until it owns the engine. After a slice it calls yield_engine(), which passes ownership to the
// next runnable entry in cyclic order, if any. With nothing queued it calls release_engine().
// Giving the engine up records the device clock (see Context::run_kernel) so that the next owner
// carries on from it: the wake-up latency of a hand-over is not idle device time.
//
// Stopped processes (SIGSTOP, a debugger: state T or t in /proc/PID/stat). A real GPU runs the
// work a stopped process already submitted, around the others' work. Here a stopped process's
// executor cannot run, so the others run its turns on its behalf (proxy turns): each context
// entry publishes the kernel time it has queued (queued_ns, added at submission without the
// mutex) and run itself (own_ns, set as each of its slices begins, begin_slice); whoever picks the
// next owner (yield_engine, release_engine, a waiter taking over) and finds a runnable entry whose
// process is stopped gives it its turn on the device timeline instead: a slice of up to one
// timeslice of its pending time (queued - own - proxy), recorded in the device's proxy table, the
// device clock moved past it. A waiter that finds the owner stopped takes the engine from it after
// the slice it had begun (busy_until). A device left free while a stopped entry has pending time
// is caught up (its turns booked from the clock to now) by the next acquire_engine. When the
// stopped process runs again, its next acquire_engine hands it the slices run for it (credit);
// it completes its kernels on those slices (their trace lines are written then, with the device
// times they ran at) before it takes the engine again. A stopped process alone on a device is
// not noticed (nobody is there to look) and resumes its work where it stopped.
//
// The file carries a magic and layout version; a file made for another SIMGPU_DEVICES
// configuration is re-created when no live process holds it (every user keeps a shared flock on
// it), and is an error otherwise.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"

namespace simgpu {

namespace shm {

inline constexpr uint64_t kMagic = 0x31305550474d4953ull;  // "SIMGPU01"
/// Bump whenever the layout below changes.
inline constexpr uint32_t kLayoutVersion = 4;
inline constexpr int kMaxProcesses = 1024;
inline constexpr int kMaxContexts = 256;  ///< context entries per device, over all processes
inline constexpr int32_t kNone = -1;

inline constexpr int kMaxProxySlices = 4096;  ///< proxy turns a device holds uncollected

struct ContextEntry {
  int32_t process;    ///< process slot index, kNone when the entry is free
  uint32_t runnable;  ///< 1 while the context has work and wants (or holds) the engine
  uint64_t queued_ns; ///< kernel time submitted so far (ns; __atomic adds by its process, no mutex)
  uint64_t own_ns;    ///< kernel time it ran itself, counting the slice it has begun (ns)
  uint64_t proxy_ns;  ///< kernel time run on its behalf while its process was stopped (ns)
  uint64_t runnable_ns;  ///< when it last became runnable (CLOCK_MONOTONIC): proxy turns start later
  int32_t last_proxy;    ///< its latest slice in Device::proxy (merged into when contiguous), or kNone
  uint32_t stopped;      ///< 1: seen stopped; it collects its proxy slices at its next acquire
};

/// A slice of the device run on behalf of a stopped context entry; entry kNone when unused.
struct ProxySlice {
  int32_t entry;
  uint32_t reserved;
  uint64_t start_ns, end_ns;  ///< on the device's timeline (CLOCK_MONOTONIC)
};

struct Device {
  uint64_t capacity;  ///< bytes
  uint64_t used;      ///< bytes charged by all processes
  char name[kMaxDeviceName + 1];
  int32_t owner;                ///< context entry owning the engine, or kNone
  std::atomic<uint32_t> wake;   ///< futex word, bumped on every ownership change
  uint64_t clock_ns;            ///< the device's clock when its last owner gave it up (CLOCK_MONOTONIC)
  uint64_t busy_until;          ///< end of the slice the owner has begun (begin_slice)
  ContextEntry contexts[kMaxContexts];
  ProxySlice proxy[kMaxProxySlices];
};

/// A process's checkpoint channel (checkpoint.h): a caller in another process posts one request
/// at a time; the process's restore thread carries it out and posts the result.
struct CheckpointChannel {
  std::atomic<uint32_t> ticket;    ///< futex: bumped by a caller posting a request (under the mutex)
  std::atomic<uint32_t> finished;  ///< futex: the ticket of the last request carried out
  uint32_t op;                     ///< the request (checkpoint::Op)
  uint32_t arg;                    ///< its argument (lock: the timeout, ms; 0 none)
  int32_t result;                  ///< CUresult of request `finished`
  uint32_t state;                  ///< CUprocessState, written by the restore thread
  int32_t restore_tid;             ///< the restore thread's tid; 0 until it runs
  int32_t caller;                  ///< pid of the caller whose request is pending or running; 0 none
  uint32_t released;               ///< 1 while checkpointed: the process holds no device
  uint32_t reserved;
};

struct Process {
  int32_t pid;          ///< 0 when free
  uint32_t reserved;
  uint64_t start_time;  ///< process_start_time(pid) when the slot was claimed
  uint64_t bytes[kMaxDevices];
  CheckpointChannel checkpoint;
};

struct Layout {
  uint64_t magic;
  uint32_t version;
  uint32_t size;          ///< sizeof(Layout)
  uint32_t device_count;
  uint32_t reserved;
  pthread_mutex_t mutex;  ///< process-shared, robust
  Device devices[kMaxDevices];
  Process processes[kMaxProcesses];
};

}  // namespace shm

/// Capacity and use of one device, as cuMemGetInfo reports them.
struct MemInfo {
  uint64_t capacity = 0;
  uint64_t used = 0;
};

/// One process's use of a device, as NVML's nvmlDeviceGetComputeRunningProcesses reports it.
struct ProcessUse {
  int32_t pid = 0;
  uint64_t bytes = 0;  ///< its contexts plus its allocations on the device
};

/// Why SharedState::open failed.
enum class OpenFailure {
  system,    ///< a system call failed (directory, file, mapping)
  mismatch,  ///< the file is in use with another device configuration
  full,      ///< every process slot is taken
};

class SharedState {
 public:
  /// Opens (creating if needed) the state in `dir` for `devices`, then claims a process slot for
  /// the calling process, unless `claim` is false: then it only observes (meminfo() works,
  /// charge() fails, add_context() returns -1), as the simulated NVML does — a process may hold
  /// libcuda.so.1's state and NVML's at once, and only the former owns its slot. Returns null with
  /// a one-line *error on failure (cannot create the directory or file, the file is in use with
  /// another device configuration, every slot taken).
  static std::unique_ptr<SharedState> open(const std::string& dir, const std::vector<DeviceSpec>& devices,
                                           std::string* error, OpenFailure* why, bool claim = true);
  ~SharedState();
  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;

  // ---- memory (device = physical index) ----
  /// Charges `bytes` to this process on `device` if they fit (reclaiming dead processes first
  /// when they do not). False: out of memory.
  bool charge(int device, uint64_t bytes);
  /// Returns bytes charged earlier.
  void uncharge(int device, uint64_t bytes);
  /// Capacity and use of `device`, after reclaiming dead processes (at most every 100 ms).
  MemInfo meminfo(int device);
  /// Bytes this process has charged on `device`.
  uint64_t charged_by_me(int device);
  /// The live processes using `device` (a context entry there, or bytes charged there), in slot
  /// order, each with the bytes it has charged there; dead processes are reclaimed first (at most
  /// every 100 ms, as in meminfo()).
  std::vector<ProcessUse> processes(int device);

  // ---- engine time-sharing ----
  /// A slice of the device's timeline (ns, CLOCK_MONOTONIC).
  struct Interval {
    uint64_t start_ns, end_ns;
  };
  /// The longest turn of a context (SIMGPU_TIMESLICE_US), used for proxy turns. Set once after open.
  void set_timeslice_ns(uint64_t ns) { timeslice_ns_ = ns; }
  /// Adds `ns` of kernel time to what `entry` has queued (no lock; called at submission).
  /// Takes a context entry on `device` for one of this process's contexts; -1 when all taken.
  int add_context(int device);
  /// Frees the entry (giving up the engine if it owned it).
  void remove_context(int device, int entry);
  void add_queued_ns(int device, int entry, uint64_t ns);
  /// Marks the entry runnable and blocks until it owns the engine: returns true and sets *clock_ns
  /// to the device clock its previous owner left (ns, CLOCK_MONOTONIC; 0 if none). Returns false
  /// without the engine when turns were run on the entry's behalf while its process was stopped:
  /// they are appended to *credit in device order; the caller completes its work on them and
  /// calls again.
  bool acquire_engine(int device, int entry, uint64_t* clock_ns, std::vector<Interval>* credit);
  /// The owner begins a slice that ends at `until_ns`, having run `own_ns` of kernel time in all
  /// once it ends. False when the engine was taken from it (its process was seen stopped): the
  /// slice must not run; the caller acquires again.
  bool begin_slice(int device, int entry, uint64_t until_ns, uint64_t own_ns);
  /// True while `entry` owns the engine and was not seen stopped since it last acquired it (or this
  /// process's slot is released: run unowned).
  bool owns_engine(int device, int entry);
  /// Called by the owner at the end of a slice, its clock at `clock_ns`: gives stopped entries
  /// their turns (proxy), then hands the engine to the next runnable entry in cyclic order, if
  /// any, and returns true (the caller stays runnable and must acquire again); returns false when
  /// nobody else wants it, with *resume_ns the clock to carry on from (past any proxy turns).
  bool yield_engine(int device, int entry, uint64_t clock_ns, uint64_t* resume_ns);
  /// The entry has nothing queued: not runnable, and the engine goes to the next runnable entry.
  void release_engine(int device, int entry, uint64_t clock_ns);

  // ---- the checkpoint channel (checkpoint.h; the caller's side, then the target's) ----
  /// Where a process with pid `pid` is: its slot and start time; false when no live process with
  /// that pid holds a slot.
  bool find_process(pid_t pid, int* slot, uint64_t* start_time);
  /// Posts request `op` (argument `arg`) to the process in `slot`: false while another caller's
  /// request is pending or running there (wait on the channel's `finished` and try again), or when
  /// the slot no longer belongs to (`pid`, `start_time`) (*gone set). Sets *ticket.
  bool post_checkpoint(int slot, pid_t pid, uint64_t start_time, uint32_t op, uint32_t arg, uint32_t* ticket,
                       bool* gone);
  /// The channel of `slot`, for futex waits on its `finished` word.
  shm::CheckpointChannel& channel(int slot) { return layout_->processes[slot].checkpoint; }
  /// The result of request `ticket` posted to the process (`pid`, `start_time`) in `slot`, even
  /// when that process has exited since: false when it is not finished yet, with *gone set when
  /// the process left its slot without finishing it.
  bool checkpoint_result(int slot, pid_t pid, uint64_t start_time, uint32_t ticket, int32_t* result, bool* gone);
  /// The checkpoint state (CUprocessState) and restore thread id of live process `pid`; false
  /// when no live process with that pid holds a slot.
  bool checkpoint_info(pid_t pid, uint32_t* state, int32_t* tid);
  /// Target side: blocks until a request newer than `seen` is posted to this process; sets *op, *arg.
  uint32_t next_checkpoint_request(uint32_t seen, uint32_t* op, uint32_t* arg);
  /// Target side: posts the result of request `ticket` and the state the process is now in, and
  /// frees the channel for the next caller.
  void finish_checkpoint_request(uint32_t ticket, int32_t result, uint32_t state);
  /// Target side: the restore thread runs as `tid`; the process is in `state`.
  void set_checkpoint_identity(int32_t tid, uint32_t state);
  /// Target side (checkpoint): gives back every byte this process has charged, on every device,
  /// and hides it from processes(); returns the bytes per physical device.
  std::vector<uint64_t> release_devices();
  /// Target side (restore): charges `bytes` (per physical device) back, all or nothing, and shows
  /// the process again. False: some device has no room (nothing charged).
  bool recharge_devices(const std::vector<uint64_t>& bytes);

  /// Gives everything of this process back (bytes, context entries, engines) and frees its slot.
  /// Later calls do nothing. Called at exit.
  void release_process();

  int process_slot() const { return slot_; }
  const std::string& path() const { return path_; }
  /// The mapped file, for tests that check the books or play a process dying mid-update.
  shm::Layout* layout() const { return layout_; }

 private:
  SharedState() = default;
  class Lock;
  bool claim_slot(std::string* error);  // false: every slot taken
  void repair_locked();
  bool reclaim_dead_locked();
  // reclaim_dead_locked(), at most every kMeminfoReclaimNs (meminfo and processes read often).
  void reclaim_dead_if_due_locked();
  void reclaim_process_locked(int slot);
  int next_runnable_locked(shm::Device& d, int after);
  // The next runnable entry after `after` in cyclic order whose process is not stopped, giving
  // each stopped one passed on the way a proxy turn; kNone when none.
  int next_turn_locked(shm::Device& d, int after);
  // Whether the entry's process (another than this one) is stopped.
  bool entry_stopped_locked(const shm::Device& d, int entry);
  // Runs one turn of `entry` by proxy at the device clock; false when it has nothing pending or
  // the proxy table is full.
  bool proxy_turn_locked(shm::Device& d, int entry);
  // With the device free: books the turns of stopped runnable entries (and of `also`, whose
  // process was stopped until now) from the device clock up to `now`.
  void catch_up_locked(shm::Device& d, uint64_t now, int also);
  // If `entry` was seen stopped: catches up a free device, hands over its proxy slices (appended
  // to *credit), clears the mark. True when any slice was handed over.
  bool collect_locked(shm::Device& d, int entry, std::vector<Interval>* credit);
  // Frees the proxy slices of `entry` (its context is gone) and resets its counters.
  void reset_entry_locked(shm::Device& d, int entry, int32_t process);
  void wake(shm::Device& d);

  shm::Layout* layout_ = nullptr;
  int fd_ = -1;
  int slot_ = -1;  // this process's slot; -1 once released
  pid_t pid_ = 0;
  uint64_t start_time_ = 0;
  std::atomic<uint64_t> last_reclaim_ns_{0};
  uint64_t timeslice_ns_ = 2'000'000;
  std::string path_;
};

}  // namespace simgpu
