#include "engine/client_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1
#endif

namespace coloc::engine {

namespace {

Result<UniqueFd> make_memfd(const char* name) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Error::from_errno(std::string("memfd_create ") + name);
  UniqueFd f(fd);
  if (::ftruncate(fd, off_t(pages::kPageSize)) != 0) return Error::from_errno(std::string("ftruncate ") + name);
  return f;
}

Result<void*> map_rw(int fd, const char* name) {
  void* p = ::mmap(nullptr, pages::kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Error::from_errno(std::string("mmap ") + name);
  return p;
}

}  // namespace

Result<ClientPages> ClientPages::create(uint64_t epoch, uint16_t layout) {
  ClientPages p;
  auto cfd = make_memfd("coloc-control");
  if (!cfd) return cfd.error();
  auto sfd = make_memfd("coloc-stats");
  if (!sfd) return sfd.error();
  p.control_fd_ = std::move(cfd.value());
  p.stats_fd_ = std::move(sfd.value());
  auto cmap = map_rw(p.control_fd_.get(), "control page");
  if (!cmap) return cmap.error();
  p.control_ = new (cmap.value()) pages::ControlPage{};
  auto smap = map_rw(p.stats_fd_.get(), "stats page");
  if (!smap) return smap.error();
  p.stats_ = new (smap.value()) pages::StatsPage{};

  p.control_->magic = pages::kControlMagic;
  p.control_->layout_version = layout;
  p.control_->slot_count = pages::kSlots;
  p.control_->epoch = epoch;
  p.control_->gate.store(uint32_t(pages::GateState::kRun), std::memory_order_relaxed);
  for (auto& s : p.control_->slots) s.limit.store(proto::kNoLimit, std::memory_order_relaxed);
  p.stats_->magic = pages::kStatsMagic;
  p.stats_->layout_version = layout;
  p.stats_->slot_count = pages::kSlots;

  // Seal. Our own writable mappings stay usable; nobody can create a new writable one.
  const int size_seals = F_SEAL_SHRINK | F_SEAL_GROW;
  if (::fcntl(p.control_fd_.get(), F_ADD_SEALS, size_seals | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0) {
    p.sealed_ = true;
  } else if (errno == EINVAL) {
    if (::fcntl(p.control_fd_.get(), F_ADD_SEALS, size_seals | F_SEAL_SEAL) != 0)
      return Error::from_errno("seal the control page");
  } else {
    return Error::from_errno("seal the control page");
  }
  if (::fcntl(p.stats_fd_.get(), F_ADD_SEALS, size_seals | F_SEAL_SEAL) != 0) return Error::from_errno("seal the stats page");
  return p;
}

ClientPages::ClientPages(ClientPages&& o) noexcept
    : control_(std::exchange(o.control_, nullptr)),
      stats_(std::exchange(o.stats_, nullptr)),
      control_fd_(std::move(o.control_fd_)),
      stats_fd_(std::move(o.stats_fd_)),
      sealed_(o.sealed_) {}

ClientPages& ClientPages::operator=(ClientPages&& o) noexcept {
  if (this != &o) {
    unmap();
    control_ = std::exchange(o.control_, nullptr);
    stats_ = std::exchange(o.stats_, nullptr);
    control_fd_ = std::move(o.control_fd_);
    stats_fd_ = std::move(o.stats_fd_);
    sealed_ = o.sealed_;
  }
  return *this;
}

ClientPages::~ClientPages() { unmap(); }

void ClientPages::close_fds() {
  control_fd_.reset();
  stats_fd_.reset();
}

void ClientPages::unmap() {
  if (control_) ::munmap(control_, pages::kPageSize);
  if (stats_) ::munmap(stats_, pages::kPageSize);
  control_ = nullptr;
  stats_ = nullptr;
}

}  // namespace coloc::engine
