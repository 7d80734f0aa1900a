// daemon/engine/client_pages.h — the control and stats pages of one registered client (layouts in
// coloc/pages.h): memfds created, sized, initialised and sealed here, mapped read-write in the
// daemon, and passed to the client with the RegisterReply.
#pragma once

#include <cstdint>

#include "coloc/pages.h"
#include "util/result.h"
#include "util/unique_fd.h"

namespace coloc::engine {

class ClientPages {
 public:
  /// Creates both pages for a daemon run identified by `epoch`. The control page is sealed
  /// against growing, shrinking, further seals and any new writable mapping
  /// (F_SEAL_FUTURE_WRITE); the stats page against growing, shrinking and further seals.
  /// Errors: memfd_create/ftruncate/mmap/fcntl failures. On a kernel without
  /// F_SEAL_FUTURE_WRITE (before 5.1) the control page is created without it and
  /// `future_write_sealed()` is false.
  static Result<ClientPages> create(uint64_t epoch, uint16_t layout = pages::kLayoutVersion);

  ClientPages() = default;
  ClientPages(ClientPages&& o) noexcept;
  ClientPages& operator=(ClientPages&& o) noexcept;
  ~ClientPages();

  pages::ControlPage* control() const { return control_; }
  pages::StatsPage* stats() const { return stats_; }
  /// The descriptors to send; valid until close_fds() (call it once they are sent).
  int control_fd() const { return control_fd_.get(); }
  int stats_fd() const { return stats_fd_.get(); }
  void close_fds();
  bool future_write_sealed() const { return sealed_; }

 private:
  void unmap();
  pages::ControlPage* control_ = nullptr;
  pages::StatsPage* stats_ = nullptr;
  UniqueFd control_fd_;
  UniqueFd stats_fd_;
  bool sealed_ = false;
};

}  // namespace coloc::engine
