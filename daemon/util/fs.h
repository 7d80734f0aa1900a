// daemon/util/fs.h — small file-system helpers of the daemon.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

#include "util/result.h"

namespace coloc {

/// Creates `dir` and its missing parents with `mode` (an existing directory is left as it is).
/// Errors: ENOTDIR when a component is not a directory; the failing mkdir/chmod otherwise.
Result<void> mkdir_p(const std::string& dir, mode_t mode);

/// Writes all of `text` to `fd` (retrying short writes and EINTR). Errors name `path`.
Result<void> write_all(int fd, const std::string& text, const std::string& path);

/// The whole text of the regular file `path`, at most `max_bytes` long. Opened without blocking,
/// so that a FIFO or a device placed where a file is expected neither blocks nor fills memory.
/// Errors (naming `path`): the open's errno, EINVAL "not a regular file", EFBIG over `max_bytes`,
/// a read's errno.
Result<std::string> read_regular_file(const std::string& path, size_t max_bytes);

}  // namespace coloc
