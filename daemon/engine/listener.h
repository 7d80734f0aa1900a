// daemon/engine/listener.h — colocd's listening socket and its accept path: who gets a
// connection, and what happens when a peer tries to take them all.
//
//   - Every accepted peer is identified at once (SO_PEERCRED). A peer that is neither root nor in
//     the admin group ("exempt") may hold at most cap() connections at a time, registered or not
//     (`max_per_user`, and at most a quarter of the descriptor limit); past that, a new one is
//     closed as soon as it is accepted.
//   - Accept never spins. At the descriptor limit (EMFILE/ENFILE) the listener lets go of a
//     descriptor it keeps in reserve, accepts one connection with it and keeps it only if the peer
//     is exempt (asking the server to close one unregistered connection of a non-exempt peer, to
//     win the reserve back); a non-exempt one is closed. When no descriptor can be had at all, it
//     stops watching the socket until a connection closes (or the next check()).
//   - The socket is the listener's: if its path is deleted or replaced under a running colocd
//     (a cleanup script, tmpfiles), the directory's inotify watch, or check() on the sample timer,
//     notices and the socket is bound again at the same path with the same mode; connections
//     already queued on the old socket are still accepted.
//   - A socket handed over by systemd (socket activation, engine/systemd.h) is the service
//     manager's, not the listener's: it is adopted as it is (mode, backlog), never bound again and
//     never unlinked, since the socket unit keeps it open across colocd's restarts and connections
//     queue on it meanwhile. If its path is deleted or replaced, the listener says so (once per
//     change) and goes on accepting on the socket it holds.
//   - Lines a peer can cause (refusals, the limit) go through log::limited.
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/event_loop.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine {

/// The figures `coloc status --json` shows under "connections".
struct ListenerCounters {
  uint64_t accepted = 0;        ///< connections accepted and handed to the server
  uint64_t refused_cap = 0;     ///< closed at once: the peer's uid was at max_per_user
  uint64_t refused_limit = 0;   ///< closed at once at the descriptor limit (non-exempt peer)
  uint64_t paused = 0;          ///< times accepting stopped for want of any descriptor
  uint64_t rebinds = 0;         ///< times the socket was bound again after it went missing
};

class Listener {
 public:
  struct Settings {
    std::string path;               ///< the socket's path
    mode_t mode = 0666;             ///< its mode (any user may connect; requests are checked per peer)
    size_t max_per_user = 1024;     ///< connections one non-exempt uid may hold (>= 1)
    std::optional<gid_t> admin_gid; ///< members are exempt, as root is
  };
  /// A new connection: its socket (non-blocking, close-on-exec), the peer, whether it is exempt.
  using OnAccept = std::function<void(UniqueFd fd, const ucred& peer, bool exempt)>;
  /// At the descriptor limit, for an exempt peer: close one connection that has not registered,
  /// of a non-exempt peer, now (the descriptor must be free on return). True when one was closed.
  using MakeRoom = std::function<bool()>;

  /// Binds `settings.path` (a stale socket there is replaced; a live colocd or any other file is an
  /// error), creates missing parent directories (0755), and starts watching it in `loop`.
  /// With `inherited` (a listening socket systemd passed), adopts that socket instead, made
  /// non-blocking and close-on-exec: nothing is bound, created or chmod'ed, and settings().path
  /// becomes the path it is bound to (when it has one; a different --socket is logged). Errors:
  /// `inherited` is not a listening AF_UNIX SOCK_SEQPACKET socket (check_listen_socket).
  static Result<std::unique_ptr<Listener>> open(Settings settings, EventLoop& loop, OnAccept on_accept,
                                                MakeRoom make_room, UniqueFd inherited = UniqueFd());
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Called after each batch of accepts (the server settles what they caused: a connection
  /// closed to make room may have freed memory for a waiter).
  void set_after_events(std::function<void()> f) { after_events_ = std::move(f); }
  /// A connection of `uid` (handed out by OnAccept) is closed: its count drops, and a paused
  /// listener watches the socket again.
  void connection_closed(uid_t uid);
  /// Periodic: binds the socket again if its path no longer names it (an inherited socket: says
  /// so, once per change, and binds nothing); resumes a paused accept.
  void check();
  /// Removes the socket's path if it still names our socket (at a clean stop). Never for an
  /// inherited socket: its path is the socket unit's.
  void unlink_path();
  /// Whether the socket came from the service manager (socket activation).
  bool inherited() const { return inherited_; }

  /// Whether `peer` is exempt from the caps (root, or a member of the admin group). `fd` is the
  /// peer's connection (for SO_PEERGROUPS when the admin group is not its primary group).
  bool exempt(int fd, const ucred& peer) const;
  size_t connections_of(uid_t uid) const;

  /// Open connections per uid (handed out and not yet closed).
  const std::map<uid_t, size_t>& per_uid() const { return per_uid_; }
  const ListenerCounters& counters() const { return counters_; }
  const Settings& settings() const { return settings_; }
  /// The per-user cap in effect: max_per_user, but at most a quarter of the descriptor limit
  /// less 64 (at least 8), so that no one user alone can bring colocd to its limit.
  size_t cap() const { return cap_; }
  /// colocd's settings were reloaded (SIGHUP): the per-user cap (>= 1; cap() is recomputed against
  /// the descriptor limit) and the admin group whose members are exempt. Connections a user holds
  /// beyond a lower cap stay; new ones wait until they are under it.
  void set_limits(size_t max_per_user, std::optional<gid_t> admin_gid);

 private:
  Listener(Settings s, EventLoop& loop, OnAccept a, MakeRoom m)
      : settings_(std::move(s)), loop_(loop), on_accept_(std::move(a)), make_room_(std::move(m)) {}
  Result<void> bind_socket();
  Result<void> adopt_socket(UniqueFd fd);
  void watch_directory();
  void on_directory_event();
  void on_readable(int fd);
  /// Takes one accepted descriptor: identifies the peer, applies the per-uid cap, hands it out.
  void take(int fd, bool at_limit);
  /// EMFILE/ENFILE: one connection through the reserve; false when accepting must pause.
  bool at_descriptor_limit(int listen_fd);
  void pause();
  void resume();
  void rebind(const char* why);
  bool reopen_reserve();

  Settings settings_;
  EventLoop& loop_;
  OnAccept on_accept_;
  MakeRoom make_room_;
  std::function<void()> after_events_;
  UniqueFd fd_;                   ///< the listening socket
  EventLoop::Token token_ = 0;
  ino_t inode_ = 0;               ///< the socket file's inode, as bound
  dev_t dev_ = 0;
  UniqueFd reserve_;              ///< a descriptor kept for the accept at the descriptor limit
  UniqueFd inotify_;
  EventLoop::Token inotify_token_ = 0;
  bool paused_ = false;
  bool inherited_ = false;        ///< the socket is systemd's (adopt_socket)
  bool inherited_path_ok_ = true; ///< an inherited socket's path still names what it named at adoption
  std::map<uid_t, size_t> per_uid_;
  ListenerCounters counters_;
  size_t fd_limit_ = 0;           ///< RLIMIT_NOFILE's soft limit (for messages)
  size_t cap_ = 0;                ///< cap()
};

/// Whether `fd` is what colocd listens on: an AF_UNIX SOCK_SEQPACKET socket in the listening
/// state. The error says what it is instead ("is a SOCK_STREAM socket (ListenStream=) ...", "is
/// not a socket", "is not listening") and, for a socket unit, which line to use.
Result<void> check_listen_socket(int fd);

/// Raises the soft RLIMIT_NOFILE to the hard limit. Returns the limit in effect.
size_t raise_descriptor_limit();

}  // namespace coloc::engine
