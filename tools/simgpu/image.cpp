#include "image.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace simgpu {

namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr uint16_t kEmCuda = 190;

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool is_ptx_char(unsigned char c) { return c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f); }

}  // namespace

ImageKind classify_image(const void* data, size_t* size) {
  const auto* p = static_cast<const unsigned char*>(data);
  *size = 0;
  if (load<uint32_t>(p) == kFatbinMagic) {
    uint16_t header = load<uint16_t>(p + 6);
    uint64_t payload = load<uint64_t>(p + 8);
    if (header < 16 || payload > kMaxImageBytes) return ImageKind::invalid;
    *size = size_t(header + payload);
    return ImageKind::fatbin;
  }
  if (std::memcmp(p, "\x7f" "ELF", 4) == 0) {
    // e_ident: class 2 = 64-bit, data 1 = little-endian.
    if (p[4] != 2 || p[5] != 1 || load<uint16_t>(p + 18) != kEmCuda) return ImageKind::invalid;
    uint64_t phoff = load<uint64_t>(p + 32), shoff = load<uint64_t>(p + 40);
    uint16_t phentsize = load<uint16_t>(p + 54), phnum = load<uint16_t>(p + 56);
    uint16_t shentsize = load<uint16_t>(p + 58), shnum = load<uint16_t>(p + 60);
    if (phoff > kMaxImageBytes || shoff > kMaxImageBytes) return ImageKind::invalid;
    uint64_t end = 64;
    if (phnum) end = std::max<uint64_t>(end, phoff + uint64_t(phentsize) * phnum);
    if (shnum) end = std::max<uint64_t>(end, shoff + uint64_t(shentsize) * shnum);
    *size = size_t(end);
    return ImageKind::cubin;
  }
  // PTX: printable text up to a NUL, with a .version directive. Refuse at the first byte that is
  // not text, so binary garbage is never scanned far.
  size_t n = 0;
  while (n < kMaxImageBytes && p[n] != 0) {
    if (!is_ptx_char(p[n])) return ImageKind::invalid;
    ++n;
  }
  if (n == kMaxImageBytes) return ImageKind::invalid;
  std::string_view text(reinterpret_cast<const char*>(p), n);
  if (text.find(".version") == std::string_view::npos) return ImageKind::invalid;
  *size = n + 1;
  return ImageKind::ptx;
}

bool image_has_kernel(ImageKind kind, std::string_view image, std::string_view name) {
  if (name.empty() || name.find('\0') != std::string_view::npos) return false;
  if (kind == ImageKind::ptx) {
    for (size_t at = image.find(".entry"); at != std::string_view::npos; at = image.find(".entry", at + 1)) {
      size_t i = at + 6;
      if (i >= image.size() || (image[i] != ' ' && image[i] != '\t')) continue;
      while (i < image.size() && (image[i] == ' ' || image[i] == '\t')) ++i;
      if (image.compare(i, name.size(), name) != 0) continue;
      size_t end = i + name.size();
      if (end < image.size() && (image[end] == '(' || image[end] == ' ' || image[end] == '\t' ||
                                 image[end] == '\n' || image[end] == '\r'))
        return true;
    }
    return false;
  }
  std::string needle;
  needle.push_back('\0');
  needle.append(name);
  needle.push_back('\0');
  return image.find(needle) != std::string_view::npos;
}

}  // namespace simgpu
