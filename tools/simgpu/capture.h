// simgpu/capture.h — stream capture modes and what they forbid (cuThreadExchangeStreamCaptureMode,
// the `mode` of cuStreamBeginCapture_v2 / cuStreamBeginCaptureToGraph), and implicit
// synchronization with the legacy default stream during capture.
//
// As cuda.h documents for cuThreadExchangeStreamCaptureMode, a thread whose own mode is
//   GLOBAL        may not make potentially unsafe API calls while it has a capture of its own
//                 not begun RELAXED, or while any other thread has a capture begun GLOBAL;
//   THREAD_LOCAL  may not while it has a capture of its own not begun RELAXED;
//   RELAXED       may always.
// simgpu's potentially unsafe calls are cuEventQuery, cuEventSynchronize, cuStreamQuery and
// cuStreamSynchronize (on a stream that is not capturing), cuCtxSynchronize (and _v2): a forbidden
// call returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that forbade it.
// An invalidated capture stays on its stream (cuStreamIsCapturing: INVALIDATED), refuses work
// (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), and cuStreamEndCapture ends it with that error.
//
// The registry below is a leaf lock (taken under Context::mu, never the other way round); the
// flag it sets on a stream is atomic, so invalidating another context's capture needs no lock of
// that context.
#pragma once

#include <cstdint>

#include "cuda_api.h"

namespace simgpu {

class Context;
struct Stream;

/// The calling thread's stream capture interaction mode (CU_STREAM_CAPTURE_MODE_GLOBAL at first).
unsigned& thread_capture_mode();
/// A number naming the calling thread for the life of the process.
uint64_t thread_token();

/// Registers the capture `s` just began (mode and thread already set on `s`). Caller holds
/// s.ctx->mu.
void capture_started(Stream& s);
/// Forgets the capture of `s` (it ended, or the stream goes away). Caller holds s.ctx->mu.
void capture_ended(Stream& s);
/// Forgets every capture of the streams of `ctx` (the context is being destroyed).
void forget_captures(const Context& ctx);

/// A potentially unsafe API call by the calling thread: CUDA_SUCCESS when its capture mode allows
/// it, else CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED after invalidating the captures that forbid it.
CUresult check_unsafe_call();
/// Work, an event record or a query on the legacy default stream of `ctx`: true when a blocking
/// stream of `ctx` is capturing (which the caller answers with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT),
/// after invalidating those captures when `invalidate` (cuStreamIsCapturing does not).
bool implicit_capture(const Context& ctx, bool invalidate = true);
/// True when any stream of the process is capturing (one relaxed load).
bool any_capture();

}  // namespace simgpu
