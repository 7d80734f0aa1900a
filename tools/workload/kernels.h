// The embedded fatbin of tools/workload/kernels.cu (sm_80, sm_90 SASS + compute_90 PTX).
// Link $(KERNELS_OBJ) to get it. Pass `coloc_kernels_fatbin` to cuModuleLoadData.
#pragma once

#include <cstddef>

extern "C" {
/// Start of the fatbin image (8-byte aligned, as cuModuleLoadData requires).
extern const unsigned char coloc_kernels_fatbin[];
/// Size of the image in bytes.
extern const size_t coloc_kernels_fatbin_size;
}
