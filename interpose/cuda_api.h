// interpose/cuda_api.h — cuda.h as libcoloc.so sees it.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// __CUDA_API_VERSION_INTERNAL makes cuda.h declare every real export name, each ABI under its own
// symbol (cuMemAlloc and cuMemAlloc_v2, cuLaunchKernel and cuLaunchKernel_ptsz) instead of mapping
// the plain names onto the newest ABI. The hooks are defined against those declarations, so the
// compiler checks every signature in hooks.def. Include this header, never <cuda.h>, in interpose/.
#pragma once

#if defined(__cuda_cuda_h__) && !defined(__CUDA_API_VERSION_INTERNAL)
#error "interpose/cuda_api.h must be included before any other inclusion of <cuda.h>"
#endif
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
