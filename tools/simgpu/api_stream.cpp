// Driver API: streams, events and stream capture (graphs: api_graph.cpp).
#include "capture.h"
#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

// A stream that is not capturing may be synchronized or queried only where the calling thread's
// capture mode allows (capture.h); a capturing one answers CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
CUresult stream_synchronize(CUstream h, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (!s->capture.load(std::memory_order_relaxed))
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = s->ctx->synchronize(*s);
  Driver::get().trim_pools(s->ctx->device);
  return rc;
}

CUresult stream_query(CUstream h, bool per_thread) {
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (!s->capture.load(std::memory_order_relaxed))
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
  return s->ctx->query(*s);
}

CUresult stream_get_ctx(CUstream h, CUcontext* pctx, bool per_thread) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  *pctx = reinterpret_cast<CUcontext>(s->ctx);
  return CUDA_SUCCESS;
}

CUresult stream_get_ctx_v2(CUstream h, CUcontext* pctx, CUgreenCtx* pgreen, bool per_thread) {
  if (!pctx && !pgreen) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(s->ctx);
  if (pgreen) *pgreen = nullptr;  // simgpu has no green contexts
  return CUDA_SUCCESS;
}

// Same context: the context's single queue already orders the wait. Another context: the calling
// thread waits for the event (stronger than the GPU needs, never weaker).
CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool per_thread) {
  if (flags & ~unsigned(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  Event* e = g_events.get(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  return e->ctx == s->ctx ? CUDA_SUCCESS : e->ctx->synchronize(*e);
}

CUresult begin_capture(CUstream h, unsigned mode, bool per_thread) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (s == &s->ctx->null_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream
  Graph* g = g_graphs.create(Driver::get().next_graph_id.fetch_add(1));
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  g->from_capture = true;
  CUresult rc = s->ctx->begin_capture(*s, g, mode);
  if (rc != CUDA_SUCCESS) g_graphs.destroy(g);
  return rc;
}

CUresult end_capture(CUstream h, CUgraph* graph, bool per_thread) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  Graph* g = nullptr;
  CUresult rc = s->ctx->end_capture(*s, &g);
  if (rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
    if (g->from_capture) destroy_graph(g);  // a ...ToGraph capture's graph stays the caller's
    *graph = nullptr;
    return rc;
  }
  if (rc != CUDA_SUCCESS) return rc;
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream h, CUstreamCaptureStatus* status, bool per_thread) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  // The legacy stream synchronizes implicitly with every blocking stream of its context.
  if (s == &s->ctx->null_stream && implicit_capture(*s->ctx, false))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;  // "The blocking stream capture is not invalidated."
  *status = s->ctx->capture_status(*s);
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent ev, CUstream h, bool per_thread) {
  Event* e = g_events.get(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s;
  if (CUresult rc = resolve_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  return e->ctx->record(*e, *s);
}

CUresult event_elapsed(float* ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  Event* a = g_events.get(start);
  Event* b = g_events.get(end);
  if (!a || !b || a->ctx != b->ctx) return CUDA_ERROR_INVALID_HANDLE;
  return a->ctx->elapsed(*a, *b, ms);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!phStream || (Flags & ~unsigned(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    Stream* s = g_streams.create(ctx, Driver::get().next_stream_id.fetch_add(1), Flags);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = reinterpret_cast<CUstream>(s);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Stream* s = g_streams.get(hStream);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    // Queued work refers to the stream by number only and still runs, as on a GPU.
    Graph* g;
    if (CUresult rc = s->ctx->end_capture(*s, &g, true);
        (rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) && g->from_capture)
      destroy_graph(g);
    g_streams.destroy(s);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_synchronize(hStream, false); });
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_synchronize(hStream, true); });
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_query(hStream, false); });
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_query(hStream, true); });
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_get_ctx(hStream, pctx, false); });
}

CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_get_ctx(hStream, pctx, true); });
}

CUresult CUDAAPI cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, false); });
}

CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_get_ctx_v2(hStream, pCtx, pGreenCtx, true); });
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_wait_event(hStream, hEvent, Flags, false); });
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return stream_wait_event(hStream, hEvent, Flags, true); });
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false); });
}

CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true); });
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return begin_capture(hStream, raw(mode), false); });
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return begin_capture(hStream, raw(mode), true); });
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return end_capture(hStream, phGraph, false); });
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return end_capture(hStream, phGraph, true); });
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return is_capturing(hStream, captureStatus, false); });
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return is_capturing(hStream, captureStatus, true); });
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    const unsigned want = unsigned(raw(*mode));
    if (want != CU_STREAM_CAPTURE_MODE_GLOBAL && want != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        want != CU_STREAM_CAPTURE_MODE_RELAXED)
      return CUDA_ERROR_INVALID_VALUE;
    unsigned& mine = thread_capture_mode();
    *mode = CUstreamCaptureMode(mine);
    mine = want;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    constexpr unsigned kFlags = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~kFlags)) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    Context* ctx = current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    Event* e = g_events.create(ctx, Flags);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    *phEvent = reinterpret_cast<CUevent>(e);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return event_record(hEvent, hStream, false); });
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return event_record(hEvent, hStream, true); });
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Event* e = g_events.get(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
    CUresult rc = e->ctx->synchronize(*e);
    Driver::get().trim_pools(e->ctx->device);
    return rc;
  });
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Event* e = g_events.get(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult rc = check_unsafe_call(); rc != CUDA_SUCCESS) return rc;
    return e->ctx->query(*e);
  });
}

CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return event_elapsed(pMilliseconds, hStart, hEnd); });
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return event_elapsed(pMilliseconds, hStart, hEnd); });
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] {
    Event* e = g_events.get(hEvent);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    e->ctx->synchronize(*e);  // a queued record still points at it
    g_events.destroy(e);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
