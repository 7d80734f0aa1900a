#include "util/fs.h"

#include <unistd.h>

#include <cerrno>

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
