// interpose/daemon_link.h — this process's connection to colocd: registration, requests and their
// replies, one-way messages, and reconnecting after the daemon restarts.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// One SOCK_SEQPACKET connection per process (include/coloc/wire.h), registered on the thread that
// called cuInit. Then:
//
//   - A thread with a request (Attach, Grow) sends it and waits for its reply. The waiting threads
//     read the socket themselves, one at a time (leader/follower): the leader polls the socket and
//     its own eventfd, hands every reply it reads to the request with the same seq (waking that
//     request's thread through its eventfd), and when its own reply has come, wakes a follower to
//     take over. A reply costs one wake-up of the requesting thread, as in a single-threaded
//     client.
//   - A background thread, "coloc-link", watches the socket for a hang-up only (it never reads),
//     so the daemon going away is noticed at once even when nobody is waiting. It marks the
//     requests in flight as lost (their threads re-send them after the reconnect, with new seqs)
//     and reconnects with back-off (wire::Backoff), re-registering with the exact ledger
//     (LinkOwner::fill_register, kRegResume) and switching to the new pages (LinkOwner::adopt)
//     before anything else is sent. It blocks every signal (it is never chosen for the
//     application's signals), calls no CUDA function, takes no lock the exit path needs, and is
//     detached: exit() ends it wherever it is. It leaves on its own when every other thread of the
//     process has exited (the application ended its main thread with pthread_exit and has no
//     other thread left), so it never keeps a process alive. A forked child has no such thread (fork copies only the caller); the child
//     drops the parent's connection unread.
//
// Threads that send take the connection's read lock only around the send; the link thread takes
// the write lock only to mark a loss and to install a new connection, and closes an old socket
// only under the reader mutex (no leader can be using it), so a descriptor number of ours is never
// reused under the application.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "coloc/protocol.h"
#include "mutex.h"
#include "signal_wait.h"

namespace coloc::interpose {

/// What the link needs from its owner (the daemon broker) to (re-)register.
class LinkOwner {
 public:
  /// Fills a Register message: job, limit, priority, on_full, timeout, command line; with
  /// `resume`, also kRegResume and the exact ledger read from the pages now. Must not block.
  virtual void fill_register(bool resume, proto::RegisterMsg* m) = 0;
  /// The daemon registered us: map its pages (control fd, then stats fd: owned by the callee) and
  /// take the reply's settings. False when the pages cannot be used (the connection is dropped).
  virtual bool adopt(const proto::RegisterReplyMsg& reply, int control_fd, int stats_fd, bool resume) = 0;
  /// Whether the process holds a grant on some device (one is attached): what it can run on while
  /// the daemon is away. Must not block or take a lock.
  virtual bool holds_grants() const = 0;
  /// The connection was lost (the daemon died or hung up): called on the thread that noticed,
  /// once per loss, before the reconnect. Must not block or take a lock.
  virtual void on_lost() = 0;

 protected:
  ~LinkOwner() = default;
};

/// A reply to a request.
union LinkReply {
  proto::AttachReplyMsg attach;
  proto::GrowReplyMsg grow;
};

class DaemonLink {
 public:
  /// How a request ended.
  enum class Outcome : uint8_t {
    replied,    ///< the daemon answered (*reply holds it), possibly after a Cancel of ours
    lost,       ///< the connection went away before the answer: re-send after the reconnect
    stopped,    ///< SIGINT/SIGTERM, and no answer came to our Cancel (the connection is gone)
    timed_out,  ///< the deadline passed, likewise
    closed,     ///< no connection and none will come (not started, exiting, or a forked child)
  };

  constexpr DaemonLink() = default;

  /// Connects to `path` and registers, on the calling thread; then starts the link thread.
  /// With `retry`, keeps trying (back-off) until `deadline_ns` (CLOCK_MONOTONIC) while the daemon
  /// is absent; else tries once. A daemon that is there but busy — its listen queue full for the
  /// connect timeout (10 s), no answer to the Register within 10 s, or the connection closed
  /// unanswered — is not absent: 0 is returned, one warning says so, and the link thread keeps
  /// trying in the background (as after a restart: admission and growth wait for it). Returns 0;
  /// -EINTR when SIGINT/SIGTERM ended the wait; -ETIMEDOUT; or another -errno, with a sentence in
  /// why[cap] (e.g. the daemon's refusal).
  int start(const char* path, bool retry, uint64_t deadline_ns, LinkOwner* owner, SignalWindow& w, char* why,
            size_t cap);

  /// True while registered with a live daemon.
  bool connected() const { return state_.load(std::memory_order_acquire) == kConnected; }
  /// True when a reconnect may still come (the daemon went away; the link thread is trying).
  bool reconnecting() const { return state_.load(std::memory_order_acquire) == kLost; }
  /// The protocol version this link speaks (an older daemon's, after it refused ours).
  uint16_t version() const { return version_.load(std::memory_order_relaxed); }
  /// The daemon's grant step in bytes (from the latest RegisterReply).
  uint64_t grant_step() const { return grant_step_.load(std::memory_order_relaxed); }

  /// Sends an Attach or Grow and waits for its reply. A stop signal or `deadline_ns` (0 = none)
  /// sends a Cancel and waits (up to 5 s more, not interruptible) for the reply that must follow.
  Outcome request(const proto::AttachMsg& m, LinkReply* reply, SignalWindow& w, uint64_t deadline_ns);
  Outcome request(const proto::GrowMsg& m, LinkReply* reply, SignalWindow& w, uint64_t deadline_ns);

  /// Waits until the link is connected again. replied = connected; stopped, timed_out, closed.
  Outcome wait_connected(SignalWindow& w, uint64_t deadline_ns);

  /// One-way messages (Shrink, DriverOom, Goodbye, ContextFootprint): sent at once when
  /// connected, else dropped. Never blocks (MSG_DONTWAIT; a full socket buffer drops the message).
  /// True when sent (a ContextFootprint to a daemon older than v5 is never sent).
  bool post(const proto::ShrinkMsg& m);
  bool post(const proto::DriverOomMsg& m);
  bool post(const proto::GoodbyeMsg& m);
  bool post(const proto::ContextFootprintMsg& m);

  /// At exit, after the Goodbye: nothing more is sent; requests end as `closed`.
  void close_for_exit();
  /// In a forked child: drops the parent's connection without writing to it, makes every lock
  /// new, forgets every request. The child may start() its own.
  void reset_in_child();

  /// The link thread's body (public for pthread_create's trampoline).
  void run();

 private:
  enum : uint8_t { kIdle, kConnected, kLost, kClosed };
  static constexpr int kMaxPending = proto::kMaxDevices * 4;  // the daemon parks at most 64 per client
  // A request's entry: waiting (for a connection to send on), sent, done (reply copied), lost (the
  // connection went away after it was sent).
  enum : uint32_t { kEntryFree, kEntryWaiting, kEntrySent, kEntryDone, kEntryLost };

  struct Pending {
    std::atomic<uint32_t> state{kEntryFree};
    uint32_t seq = 0;
    int efd = -1;  // eventfd written when the entry changes (or it should lead); kept for reuse
    LinkReply reply{};
  };

  template <class T>
  Outcome request_impl(const T& m, LinkReply* reply, SignalWindow& w, uint64_t deadline_ns);
  template <class T>
  bool post_impl(const T& m);
  Pending* acquire();
  void release(Pending* p);
  void notify(Pending* p);
  bool wait_entry(Pending* p, SignalWindow& w, uint64_t deadline_ns, bool interruptible);
  void read_replies(int fd);       // the leader: every datagram waiting on the socket
  void hand_over(const Pending* leaving);  // wakes another waiting request to lead
  int register_on(int fd, bool resume, SignalWindow* w, uint64_t deadline_ns, char* why, size_t cap);
  /// Starts the link thread (0, or -errno with why[cap]).
  int start_thread(char* why, size_t cap);
  /// colocd is there but busy (`what`): the link thread registers in the background, as after a
  /// restart; meanwhile admission and growth wait for it.
  int start_busy(const char* what, char* why, size_t cap);
  void dispatch(const proto::Message& m);
  void lose(const char* why);
  bool reconnect();
  bool last_thread() const;

  std::atomic<uint8_t> state_{kIdle};
  std::atomic<int> fd_{-1};
  uint64_t fd_ino_ = 0, fd_dev_ = 0;  // identity of our socket (written by the thread that installs fd_)
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint64_t> grant_step_{64ull << 20};
  std::atomic<uint16_t> version_{proto::kVersion};
  std::atomic<uint64_t> lost_at_ns_{0};  // CLOCK_MONOTONIC ns when the connection was last lost
  std::atomic<bool> registered_{false};  // registered once: a reconnect re-registers the ledger (kRegResume)
  LinkOwner* owner_ = nullptr;
  char path_[108] = {};
  pthread_rwlock_t conn_lock_ = PTHREAD_RWLOCK_INITIALIZER;
  Mutex table_mutex_;
  Mutex reader_mutex_;  // held by the thread reading the socket (the leader)
  Pending pending_[kMaxPending];
};

}  // namespace coloc::interpose
