#include "util/fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "util/unique_fd.h"

namespace coloc {

Result<void> mkdir_p(const std::string& dir, mode_t mode) {
  if (dir.empty()) return {};
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Error{ENOTDIR, dir + " is not a directory"};
    return {};
  }
  auto slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0)
    if (auto r = mkdir_p(dir.substr(0, slash), mode); !r) return r;
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return Error::from_errno("mkdir " + dir);
  if (::chmod(dir.c_str(), mode) != 0) return Error::from_errno("chmod " + dir);
  return {};
}

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return Error::from_errno("open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno("fstat " + path);
  if (!S_ISREG(st.st_mode)) return Error{EINVAL, path + " is not a regular file"};
  if (uint64_t(st.st_size) > max_bytes)
    return Error{EFBIG, path + " is " + std::to_string(st.st_size) + " bytes, over " + std::to_string(max_bytes)};
  std::string text(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("read " + path);
    if (n == 0) break;  // shorter now than fstat said
    got += size_t(n);
  }
  text.resize(got);
  return text;
}

Result<void> write_all(int fd, const std::string& text, const std::string& path) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno("write " + path);
    off += size_t(n);
  }
  return {};
}

}  // namespace coloc
