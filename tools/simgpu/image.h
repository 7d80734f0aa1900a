// simgpu/image.h — what cuModuleLoadData accepts, and how cuModuleGetFunction finds a name.
//
// simgpu never runs device code; it only checks that an image is one the driver could load and
// keeps a copy to look names up in:
//   - a fatbin: little-endian magic 0xBA55ED50, then a 16-bit version, a 16-bit header size and a
//     64-bit payload size (the layout nvcc -fatbin writes); image size = header + payload;
//   - an ELF cubin: 64-bit little-endian ELF with e_machine EM_CUDA (190); image size = the end of
//     its section or program header table, whichever is further;
//   - PTX text: NUL-terminated text containing a ".version" directive.
// Anything else is CUDA_ERROR_INVALID_IMAGE. A kernel name is found when the image holds it as a
// NUL-terminated string preceded by a NUL (an ELF string table entry: nvcc --no-compress keeps the
// cubins of a fatbin readable) or, in PTX, after ".entry".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace simgpu {

enum class ImageKind { fatbin, cubin, ptx, invalid };

/// Largest image simgpu accepts (bytes); a header claiming more is treated as garbage.
inline constexpr uint64_t kMaxImageBytes = 1ull << 30;

/// Classifies the image at `data` and returns its size in bytes in *size. Reads only the bytes its
/// headers describe (for PTX, up to the terminating NUL). `data` non-null.
ImageKind classify_image(const void* data, size_t* size);

/// True when `image` (of kind `kind`) defines a kernel named `name` by the rule above.
bool image_has_kernel(ImageKind kind, std::string_view image, std::string_view name);

}  // namespace simgpu
