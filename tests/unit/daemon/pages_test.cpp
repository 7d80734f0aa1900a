// The shared pages: sizes and seals. The daemon writes the control page and the client cannot
// make it writable; the client writes the stats page and cannot change its size.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "coloc/wire.h"
#include "engine/client_pages.h"

using coloc::engine::ClientPages;
namespace pages = coloc::pages;

TEST_SUITE("daemon") {

TEST_CASE("pages: the daemon's writes show on the client's read-only mapping; the client's stats reach the daemon") {
  auto p = ClientPages::create(42);
  REQUIRE_MESSAGE(p.ok(), p.error().message());
  ClientPages& cp = p.value();
  CHECK(cp.future_write_sealed());
  coloc::wire::Pages mapped;
  REQUIRE(coloc::wire::map_pages(::dup(cp.control_fd()), ::dup(cp.stats_fd()), &mapped) == 0);
  CHECK(mapped.control->epoch == 42);
  CHECK(mapped.control->gate.load() == uint32_t(pages::GateState::kRun));
  CHECK(mapped.control->slots[3].limit.load() == coloc::proto::kNoLimit);
  cp.control()->slots[3].grant.store(123);
  CHECK(mapped.control->slots[3].grant.load() == 123);
  mapped.stats->slots[2].in_use.store(77);
  CHECK(cp.stats()->slots[2].in_use.load() == 77);
  coloc::wire::unmap_pages(&mapped);
}

TEST_CASE("pages: the control page cannot be made writable, resized or unsealed") {
  auto p = ClientPages::create(1);
  REQUIRE(p.ok());
  int fd = p.value().control_fd();
  errno = 0;
  CHECK(::mmap(nullptr, pages::kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  CHECK(errno == EPERM);
  void* ro = ::mmap(nullptr, pages::kPageSize, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(::mprotect(ro, pages::kPageSize, PROT_READ | PROT_WRITE) == -1);
  CHECK(errno == EACCES);
  ::munmap(ro, pages::kPageSize);
  char byte = 1;
  CHECK(::pwrite(fd, &byte, 1, 0) == -1);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, 0) == -1);
  CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);  // F_SEAL_SEAL: no more changes to the seals
  int seals = ::fcntl(fd, F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK));
  CHECK((seals & F_SEAL_GROW));
  CHECK((seals & F_SEAL_SEAL));
}

TEST_CASE("pages: the stats page is writable but cannot shrink under the daemon") {
  auto p = ClientPages::create(1);
  REQUIRE(p.ok());
  int fd = p.value().stats_fd();
  void* rw = ::mmap(nullptr, pages::kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(rw != MAP_FAILED);
  if (rw != MAP_FAILED) ::munmap(rw, pages::kPageSize);
  CHECK(::ftruncate(fd, 0) == -1);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, 2 * pages::kPageSize) == -1);
}

TEST_CASE("pages: a page of the wrong size or kind is refused by the client") {
  auto p = ClientPages::create(1);
  REQUIRE(p.ok());
  coloc::wire::Pages mapped;
  // Swapped descriptors: the magic numbers do not match.
  CHECK(coloc::wire::map_pages(::dup(p.value().stats_fd()), ::dup(p.value().control_fd()), &mapped) != 0);
  int small = ::memfd_create("small", MFD_CLOEXEC);
  REQUIRE(small >= 0);
  REQUIRE(::ftruncate(small, 100) == 0);
  CHECK(coloc::wire::map_pages(small, ::dup(p.value().stats_fd()), &mapped) == -EPROTO);
  CHECK(mapped.control == nullptr);
}

}  // TEST_SUITE
