// Driver API: batched copies — cuMemcpyBatchAsync (CUDA 12.8 ABI with failIdx, and _v2 of 13.0)
// and cuMemcpy3DBatchAsync (same two ABIs), each with _ptsz. The whole batch is validated before
// any copy is submitted; copies run in batch order (a valid order: the driver promises none).
// Pointers are read with unified addressing (copy_async.h); a source with
// CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL is read during the call. CUDA array operands are
// CUDA_ERROR_NOT_SUPPORTED.
#include <cstring>
#include <memory>
#include <vector>

#include "copy_async.h"
#include "driver.h"
#include "entry.h"

using namespace simgpu;

namespace {

constexpr size_t kNoIndex = SIZE_MAX;  // *failIdx when an error concerns no single copy

bool valid_order(unsigned order) {
  return order == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}
bool valid_flags(unsigned flags) { return (flags & ~unsigned(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)) == 0; }

// The stream of a batch: never the legacy NULL stream ("Must not be legacy NULL stream").
CUresult batch_stream(CUstream h, bool per_thread, Stream** s) {
  if (CUresult rc = resolve_stream(h, per_thread, s); rc != CUDA_SUCCESS) return rc;
  return *s == &(*s)->ctx->null_stream ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// Reads the source now (DURING_API_CALL): the copy then reads the staged bytes.
void stage(CopyWork& w) {
  const size_t span = strided_span(w.bytes, w.height, w.depth, w.src_pitch, w.src_layer);
  auto buf = std::make_shared<std::vector<unsigned char>>(span);
  std::memcpy(buf->data(), reinterpret_cast<const void*>(w.src), span);
  w.src = reinterpret_cast<uintptr_t>(buf->data());
  w.src_device = false;
  w.staged = std::move(buf);
}

CUresult submit_all(Stream& s, std::vector<CopyWork>& works, const std::vector<bool>& during_call) {
  for (size_t i = 0; i < works.size(); ++i) {
    if (during_call[i]) stage(works[i]);
    if (CUresult rc = submit_copy(s, std::move(works[i])); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
               size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx, CUstream h, bool per_thread) {
  size_t ignored;
  size_t& fail = fail_idx ? *fail_idx : ignored;
  fail = kNoIndex;
  if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attrs_idxs || num_attrs == 0 || num_attrs > count)
    return CUDA_ERROR_INVALID_VALUE;
  if (attrs_idxs[0] != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < num_attrs; ++k) {
    if ((k > 0 && attrs_idxs[k] <= attrs_idxs[k - 1]) || attrs_idxs[k] >= count) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_flags(attrs[k].flags)) return CUDA_ERROR_INVALID_VALUE;
  }
  Stream* s;
  if (CUresult rc = batch_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  std::vector<CopyWork> works;
  std::vector<bool> during_call;
  size_t attr = 0;
  for (size_t i = 0; i < count; ++i) {
    while (attr + 1 < num_attrs && attrs_idxs[attr + 1] <= i) ++attr;
    const unsigned order = unsigned(raw(attrs[attr].srcAccessOrder));
    fail = i;
    if (!valid_order(order)) return CUDA_ERROR_INVALID_VALUE;
    if (sizes[i] == 0) continue;
    CopyWork w;
    w.dst = uintptr_t(dsts[i]);
    w.src = uintptr_t(srcs[i]);
    w.bytes = sizes[i];
    if (CUresult rc = classify_pointer(w.dst, w.bytes, &w.dst_device); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = classify_pointer(w.src, w.bytes, &w.src_device); rc != CUDA_SUCCESS) return rc;
    works.push_back(std::move(w));
    during_call.push_back(order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL);
  }
  fail = kNoIndex;
  return submit_all(*s, works, during_call);
}

// One pointer operand of a 3D batch copy: its first byte, row pitch and layer size.
CUresult operand(const CUmemcpy3DOperand& o, const CUextent3D& e, CopyWork& w, bool src) {
  const unsigned type = unsigned(raw(o.type));
  if (type == CU_MEMCPY_OPERAND_TYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
  if (type != CU_MEMCPY_OPERAND_TYPE_POINTER) return CUDA_ERROR_INVALID_VALUE;
  const auto& p = o.op.ptr;
  if ((p.rowLength && p.rowLength < e.width) || (p.layerHeight && p.layerHeight < e.height))
    return CUDA_ERROR_INVALID_VALUE;
  const size_t pitch = p.rowLength ? p.rowLength : e.width;  // elements of 1 byte
  const size_t layer = pitch * (p.layerHeight ? p.layerHeight : e.height);
  bool device;
  if (CUresult rc = classify_pointer(uintptr_t(p.ptr), strided_span(e.width, e.height, e.depth, pitch, layer), &device);
      rc != CUDA_SUCCESS)
    return rc;
  (src ? w.src : w.dst) = uintptr_t(p.ptr);
  (src ? w.src_device : w.dst_device) = device;
  (src ? w.src_pitch : w.dst_pitch) = pitch;
  (src ? w.src_layer : w.dst_layer) = layer;
  return CUDA_SUCCESS;
}

CUresult batch_3d(size_t num_ops, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx, unsigned long long flags,
                  CUstream h, bool per_thread) {
  size_t ignored;
  size_t& fail = fail_idx ? *fail_idx : ignored;
  fail = kNoIndex;
  if (num_ops == 0 || !ops || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  if (CUresult rc = batch_stream(h, per_thread, &s); rc != CUDA_SUCCESS) return rc;
  std::vector<CopyWork> works(num_ops);
  std::vector<bool> during_call(num_ops);
  for (size_t i = 0; i < num_ops; ++i) {
    const CUDA_MEMCPY3D_BATCH_OP& op = ops[i];
    fail = i;
    if (op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_order(unsigned(raw(op.srcAccessOrder))) || !valid_flags(op.flags)) return CUDA_ERROR_INVALID_VALUE;
    CopyWork& w = works[i];
    w.bytes = op.extent.width;
    w.height = op.extent.height;
    w.depth = op.extent.depth;
    if (CUresult rc = operand(op.src, op.extent, w, true); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = operand(op.dst, op.extent, w, false); rc != CUDA_SUCCESS) return rc;
    during_call[i] = unsigned(raw(op.srcAccessOrder)) == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  }
  fail = kNoIndex;
  return submit_all(*s, works, during_call);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                    CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                                    CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, false); });
}

CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                         CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                         size_t* failIdx, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, true); });
}

CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                       CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, false); });
}

CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                            CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, true); });
}

CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                      unsigned long long flags, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch_3d(numOps, opList, failIdx, flags, hStream, false); });
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                           unsigned long long flags, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch_3d(numOps, opList, failIdx, flags, hStream, true); });
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                                         CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch_3d(numOps, opList, nullptr, flags, hStream, false); });
}

CUresult CUDAAPI cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                              unsigned long long flags, CUstream hStream) {
  static constinit CallCounter calls{__func__};
  return enter(calls, [&] { return batch_3d(numOps, opList, nullptr, flags, hStream, true); });
}

}  // extern "C"
