// coloc/version.h — the one release version of coloc, printed by `colocd --version` and
// `coloc --version` together with the wire protocol's version (coloc/protocol.h).
//
// The release version names what was installed (0.MINOR.PATCH: the minor follows the issue
// that last changed what an admin or a user sees); the protocol version is what decides whether
// a libcoloc.so, a coloc CLI and a colocd can talk (a daemon accepts proto::kMinVersion..kVersion).
// Header-only, no allocation: the interposer may include it.
#pragma once

#include <cstdio>

#include "coloc/protocol.h"

namespace coloc {

/// The release version, "MAJOR.MINOR.PATCH".
inline constexpr const char* kReleaseVersion = "0.14.0";

/// Writes the one line `--version` prints into `buf` (NUL-terminated, cut to `size`):
///   "coloc 0.14.0 (protocol 11)"                       for a client (`daemon` false)
///   "colocd 0.14.0 (protocol 11, accepts 1 to 11)"     for the daemon (`daemon` true)
/// `program` is the name in front. Returns `buf`.
inline const char* version_line(char* buf, size_t size, const char* program, bool daemon) {
  if (daemon)
    std::snprintf(buf, size, "%s %s (protocol %u, accepts %u to %u)", program, kReleaseVersion,
                  unsigned(proto::kVersion), unsigned(proto::kMinVersion), unsigned(proto::kVersion));
  else
    std::snprintf(buf, size, "%s %s (protocol %u)", program, kReleaseVersion, unsigned(proto::kVersion));
  return buf;
}

}  // namespace coloc
