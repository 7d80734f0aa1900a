// interpose/memory_hooks.cpp — the handlers of the alloc, release, query and init policies
// (hooks.def): every way a job takes device memory, gives it back, or asks how much there is.
// Stream-ordered allocation and pools are in pool_hooks.cpp.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// Pattern of an allocation (reserve-then-commit, see ledger.h):
//   1. find the device (current context, stream, or the properties passed in); unknown device (no
//      context, bad ordinal, driver not initialised): call the driver and let it answer;
//   2. charge the bytes within the limit (limits.h), or return CUDA_ERROR_OUT_OF_MEMORY without
//      calling the driver;
//   3. call the driver; on failure uncharge and return its result unchanged;
//   4. commit the record. Where the driver's real size is only known afterwards (pitch), charge the
//      difference, and undo the allocation if that passes the limit.
// Pattern of a free: take the record, call the driver, then credit the record (or put it back when
// the driver refused). A free of unknown memory goes to the driver untouched and is counted.
// Out-pointers are read only after the driver returned CUDA_SUCCESS; NULL ones get the driver's own
// error.
#include <cstdint>
#include <optional>

#include "coloc/pages.h"
#include "devices.h"
#include "driver.h"
#include "graph_hooks.h"
#include "handlers.h"
#include "limits.h"
#include "log.h"
#include "pools.h"
#include "preflight.h"
#include "runtime.h"

namespace coloc::interpose {

namespace {

uint64_t mul_sat(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Records a charged allocation the driver made; if the ledger cannot store the record (out of host
// memory), undoes the allocation and returns CUDA_ERROR_OUT_OF_MEMORY.
template <class Undo>
CUresult keep(const Key& key, const Record& rec, Undo&& undo) {
  if (ledger().commit(key, rec)) return CUDA_SUCCESS;
  undo();
  charge_failed(rec.slot, rec.bytes, CUDA_SUCCESS);
  logf(LogLevel::error, "out of host memory for the ledger: an allocation of %llu bytes was undone",
       (unsigned long long)rec.bytes);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// cuMemAlloc, cuMemAlloc_v2, cuMemAllocManaged: `bytes` on the current context's device.
template <Fn id, Fn free_id, class Ptr, class... Rest>
CUresult device_alloc(Ptr* dptr, uint64_t bytes, Rest... rest) {
  Where w = devices().current();
  if (w.slot < 0) return call<id>(dptr, bytes, rest...);
  if (CUresult r = charge(w.slot, bytes, kFnName[index(id)]); r != CUDA_SUCCESS) return r;
  CUresult r = call_charged(w.slot, bytes, [&] { return call<id>(dptr, bytes, rest...); });
  if (r != CUDA_SUCCESS) {
    charge_failed(w.slot, bytes, r);
    return r;
  }
  Ptr p = *dptr;
  Record rec{bytes, reinterpret_cast<uint64_t>(w.ctx), kNoPool, uint16_t(w.slot), Kind::allocation};
  return keep(Key{uint64_t(p), Space::devptr}, rec, [&] { call<free_id>(p); });
}

// cuMemAllocPitch, cuMemAllocPitch_v2: charge width x height first, then the pitch the driver chose.
template <Fn id, Fn free_id, class Ptr, class Size>
CUresult pitch_alloc(Ptr* dptr, Size* pitch, Size width, Size height, unsigned int elem) {
  Where w = devices().current();
  if (w.slot < 0) return call<id>(dptr, pitch, width, height, elem);
  const char* what = kFnName[index(id)];
  uint64_t estimate = mul_sat(width, height);
  if (CUresult r = charge(w.slot, estimate, what); r != CUDA_SUCCESS) return r;
  CUresult r = call_charged(w.slot, estimate, [&] { return call<id>(dptr, pitch, width, height, elem); });
  if (r != CUDA_SUCCESS) {
    charge_failed(w.slot, estimate, r);
    return r;
  }
  Ptr p = *dptr;
  uint64_t actual = mul_sat(*pitch, height);
  uint64_t bytes = estimate;
  if (actual > estimate) {
    if (charge(w.slot, actual - estimate, what) != CUDA_SUCCESS) {  // the padding passes the limit
      call<free_id>(p);
      ledger().uncharge(w.slot, estimate);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    bytes = actual;
  } else if (actual < estimate) {
    ledger().uncharge(w.slot, estimate - actual);
    bytes = actual;
  }
  Record rec{bytes, reinterpret_cast<uint64_t>(w.ctx), kNoPool, uint16_t(w.slot), Kind::allocation};
  return keep(Key{uint64_t(p), Space::devptr}, rec, [&] { call<free_id>(p); });
}

// Any free: take the record, call the driver, credit or restore. `stream`: the stream key of a
// stream-ordered free (free_site(); pools.h).
template <class Driver>
CUresult release_record(const Key& key, Driver&& driver_free, const PoolShadow::FreeSite& site = {}) {
  std::optional<Record> rec = ledger().take(key);
  CUresult r = driver_free();
  if (!rec) {
    ledger().count_untracked_free(devices().current().slot);
    return r;
  }
  if (r != CUDA_SUCCESS) {
    ledger().restore(key, *rec);
    return r;
  }
  if (rec->pool != kNoPool) ledger().pool_release(*rec, site.stream, site.ctx);
  else ledger().release(*rec);
  if (rec->slot != kNoSlot) after_free(rec->slot);
  return r;
}

// ---- arrays -------------------------------------------------------------------------------------

// Bytes per texel of a CUarray_format as numerator/denominator (planar YUV formats carry
// subsampled chroma), or per 4x4 block for the block-compressed formats. Source: the format list
// of cuda.h (CUarray_format_enum) and the layouts its comments name.
struct TexelSize {
  uint32_t num, den;
  bool block4x4;  // num/den bytes per 4x4 block
};

std::optional<TexelSize> texel_size(CUarray_format f, unsigned channels) {
  uint32_t c = channels ? channels : 1;
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return TexelSize{1 * c, 1, false};
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
      return TexelSize{2 * c, 1, false};
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
      return TexelSize{4 * c, 1, false};
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: return TexelSize{1, 1, false};
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: return TexelSize{2, 1, false};
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: return TexelSize{4, 1, false};
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: return TexelSize{2, 1, false};
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: return TexelSize{4, 1, false};
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: return TexelSize{8, 1, false};
    case CU_AD_FORMAT_UNORM_INT_101010_2: return TexelSize{4, 1, false};
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB: case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
      return TexelSize{8, 1, true};
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB: case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB: case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16: case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
      return TexelSize{16, 1, true};
    case CU_AD_FORMAT_NV12: return TexelSize{3, 2, false};   // 8-bit 4:2:0
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: return TexelSize{3, 1, false};  // 16-bit 4:2:0
    case CU_AD_FORMAT_NV16: case CU_AD_FORMAT_YUY2: return TexelSize{2, 1, false};  // 8-bit 4:2:2
    case CU_AD_FORMAT_P210: case CU_AD_FORMAT_P216: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216:
      return TexelSize{4, 1, false};  // 16-bit 4:2:2
    case CU_AD_FORMAT_AYUV: case CU_AD_FORMAT_Y410: return TexelSize{4, 1, false};
    case CU_AD_FORMAT_Y416: return TexelSize{8, 1, false};
    case CU_AD_FORMAT_Y444_PLANAR8: case CU_AD_FORMAT_YUV444_8bit_SemiPlanar: return TexelSize{3, 1, false};
    case CU_AD_FORMAT_Y444_PLANAR10: case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: return TexelSize{6, 1, false};
    default: return std::nullopt;
  }
}

// Bytes of one w x h x d level in format f; the driver's own padding is not visible through the
// API, so this is the size of the data (documented as an estimate in interpose/README.md).
// Unknown formats: 16 bytes per channel per texel, more than any known format needs.
uint64_t level_bytes(CUarray_format f, unsigned channels, uint64_t w, uint64_t h, uint64_t d) {
  w = w ? w : 1;
  h = h ? h : 1;
  d = d ? d : 1;
  std::optional<TexelSize> t = texel_size(f, channels);
  if (!t) return mul_sat(mul_sat(mul_sat(w, h), d), 16ull * (channels ? channels : 1));
  uint64_t units = t->block4x4 ? mul_sat(mul_sat((w + 3) / 4, (h + 3) / 4), d) : mul_sat(mul_sat(w, h), d);
  return mul_sat(units, t->num) / t->den;
}

uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR& a, unsigned levels) {
  // Deferred-mapping arrays own no memory: it is mapped later from cuMemCreate handles (VMM).
  if (a.Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) return 0;
  uint64_t w = a.Width, h = a.Height, d = a.Depth, sum = 0;
  bool layered = a.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);  // depth counts layers
  for (unsigned l = 0; l < (levels ? levels : 1); ++l) {
    sum = add_sat(sum, level_bytes(a.Format, a.NumChannels, w, h, d));
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : 1;
    if (!layered) d = d > 1 ? d / 2 : 1;
  }
  return sum;
}

template <class Desc>
CUDA_ARRAY3D_DESCRIPTOR as_3d(const Desc& a) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = a.Width;
  d.Height = a.Height;
  d.Format = a.Format;
  d.NumChannels = a.NumChannels;
  if constexpr (requires { a.Depth; }) {
    d.Depth = a.Depth;
    d.Flags = a.Flags;
  }
  return d;
}

// cuArrayCreate*, cuArray3DCreate*, cuMipmappedArrayCreate: `bytes` on the current device.
template <Fn id, Fn destroy_id, Space space, class Handle, class Desc, class... Rest>
CUresult array_alloc(Handle* handle, const Desc* desc, uint64_t bytes, Rest... rest) {
  Where w = devices().current();
  if (w.slot < 0 || !desc) return call<id>(handle, desc, rest...);
  if (CUresult r = charge(w.slot, bytes, kFnName[index(id)]); r != CUDA_SUCCESS) return r;
  CUresult r = call_charged(w.slot, bytes, [&] { return call<id>(handle, desc, rest...); });
  if (r != CUDA_SUCCESS) {
    charge_failed(w.slot, bytes, r);
    return r;
  }
  Handle h = *handle;
  Record rec{bytes, reinterpret_cast<uint64_t>(w.ctx), kNoPool, uint16_t(w.slot), Kind::array};
  return keep(Key{reinterpret_cast<uint64_t>(h), space}, rec, [&] { call<destroy_id>(h); });
}

// ---- queries ------------------------------------------------------------------------------------

// The job's view: total = min(limit, physical); free = min(total - used, physical free), never
// below zero, where used counts the job's other processes too. Without a limit the driver's answer is left exactly as it was.
template <class T>
void job_view(int slot, T* free, T* total) {
  uint64_t limit = limit_of(slot);
  if (limit == kNoLimit) return;
  uint64_t phys_total = total ? uint64_t(*total) : devices().info(slot).total_bytes;
  uint64_t phys_free = free ? uint64_t(*free) : phys_total;
  uint64_t t = limit < phys_total ? limit : phys_total;
  // The job's view: what this process holds, and what the job's other processes hold of the same
  // limit (standalone: their shares; broker.h).
  uint64_t used = ledger().in_use(slot);
  uint64_t others = broker().job_others(slot);
  used = used > UINT64_MAX - others ? UINT64_MAX : used + others;
  uint64_t f = t > used ? t - used : 0;
  if (f > phys_free) f = phys_free;
  if (total) *total = T(t);  // t <= *total, so it fits T
  if (free) *free = T(f);
}

template <Fn id, class T>
CUresult mem_get_info(T* free, T* total) {
  CUresult r = call<id>(free, total);
  if (r != CUDA_SUCCESS) return r;
  Where w = devices().current();
  if (w.slot < 0) return r;
  refresh_pools(w.slot);  // pools give memory back at synchronize calls we do not see
  job_view(w.slot, free, total);
  return r;
}

template <Fn id, class T>
CUresult device_total_mem(T* bytes, CUdevice dev) {
  CUresult r = call<id>(bytes, dev);
  if (r != CUDA_SUCCESS || !bytes) return r;
  // Looking at a device does not attach it (no admission for a query): a device the process does
  // not use shows the limit it would get.
  int slot = devices().find_slot(dev);
  if (slot >= 0) {
    job_view<T>(slot, nullptr, bytes);
  } else if (uint64_t limit = broker().unattached_limit(dev); limit < uint64_t(*bytes)) {
    *bytes = T(limit);
  }
  return r;
}

}  // namespace

// ---- alloc --------------------------------------------------------------------------------------

namespace alloc {

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  return device_alloc<Fn::cuMemAlloc, Fn::cuMemFree>(dptr, bytesize);
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return device_alloc<Fn::cuMemAlloc_v2, Fn::cuMemFree_v2>(dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  CUresult r = device_alloc<Fn::cuMemAllocManaged, Fn::cuMemFree_v2>(dptr, bytesize, flags);
  // The checkpoint API refuses a process with managed memory: colocd must not lock this one.
  if (r == CUDA_SUCCESS) preflight::note(pages::kUsedManaged);
  return r;
}

CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes) {
  return pitch_alloc<Fn::cuMemAllocPitch, Fn::cuMemFree>(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  return pitch_alloc<Fn::cuMemAllocPitch_v2, Fn::cuMemFree_v2>(dptr, pPitch, WidthInBytes, Height,
                                                                ElementSizeBytes);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  // Only device-located memory is device memory; host-located handles are remembered (so their
  // release is not "untracked") but charge nothing.
  bool on_device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  Refusal why = Refusal::none;
  int slot = on_device ? devices().attach(prop->location.id, &why) : -1;
  if (on_device && slot < 0 && why != Refusal::none) return CUDA_ERROR_OUT_OF_MEMORY;  // not admitted
  if (on_device && slot < 0) return call<Fn::cuMemCreate>(handle, size, prop, flags);
  uint64_t bytes = on_device ? size : 0;
  if (on_device) {
    if (CUresult r = charge(slot, bytes, "cuMemCreate"); r != CUDA_SUCCESS) return r;
  }
  CUresult r = on_device ? call_charged(slot, bytes, [&] { return call<Fn::cuMemCreate>(handle, size, prop, flags); })
                         : call<Fn::cuMemCreate>(handle, size, prop, flags);
  if (r != CUDA_SUCCESS) {
    if (on_device) charge_failed(slot, bytes, r);
    return r;
  }
  if (!prop) return r;  // cannot happen (the driver rejects a NULL prop); nothing to remember
  CUmemGenericAllocationHandle h = *handle;
  Record rec{bytes, 0, kNoPool, on_device ? uint16_t(slot) : kNoSlot, Kind::vmm};
  return keep(Key{h, Space::vmm}, rec, [&] { call<Fn::cuMemRelease>(h); });
}

CUresult cuArrayCreate(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* pAllocateArray) {
  uint64_t bytes = pAllocateArray ? array3d_bytes(as_3d(*pAllocateArray), 1) : 0;
  return array_alloc<Fn::cuArrayCreate, Fn::cuArrayDestroy, Space::array>(pHandle, pAllocateArray, bytes);
}

CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  uint64_t bytes = pAllocateArray ? array3d_bytes(as_3d(*pAllocateArray), 1) : 0;
  return array_alloc<Fn::cuArrayCreate_v2, Fn::cuArrayDestroy, Space::array>(pHandle, pAllocateArray, bytes);
}

CUresult cuArray3DCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* pAllocateArray) {
  uint64_t bytes = pAllocateArray ? array3d_bytes(as_3d(*pAllocateArray), 1) : 0;
  return array_alloc<Fn::cuArray3DCreate, Fn::cuArrayDestroy, Space::array>(pHandle, pAllocateArray, bytes);
}

CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  uint64_t bytes = pAllocateArray ? array3d_bytes(*pAllocateArray, 1) : 0;
  return array_alloc<Fn::cuArray3DCreate_v2, Fn::cuArrayDestroy, Space::array>(pHandle, pAllocateArray, bytes);
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                                unsigned int numMipmapLevels) {
  uint64_t bytes = pMipmappedArrayDesc ? array3d_bytes(*pMipmappedArrayDesc, numMipmapLevels) : 0;
  return array_alloc<Fn::cuMipmappedArrayCreate, Fn::cuMipmappedArrayDestroy, Space::mipmap>(
      pHandle, pMipmappedArrayDesc, bytes, numMipmapLevels);
}

}  // namespace alloc

// ---- release ------------------------------------------------------------------------------------

namespace release {

CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  return release_record(Key{dptr, Space::devptr}, [&] { return call<Fn::cuMemFree>(dptr); });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return release_record(Key{dptr, Space::devptr}, [&] { return call<Fn::cuMemFree_v2>(dptr); });
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return release_record(Key{dptr, Space::devptr}, [&] { return call<Fn::cuMemFreeAsync>(dptr, hStream); },
                        free_site(hStream, false));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return release_record(Key{dptr, Space::devptr}, [&] { return call<Fn::cuMemFreeAsync_ptsz>(dptr, hStream); },
                        free_site(hStream, true));
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return release_record(Key{handle, Space::vmm}, [&] { return call<Fn::cuMemRelease>(handle); });
}

CUresult cuArrayDestroy(CUarray hArray) {
  return release_record(Key{reinterpret_cast<uint64_t>(hArray), Space::array},
                        [&] { return call<Fn::cuArrayDestroy>(hArray); });
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return release_record(Key{reinterpret_cast<uint64_t>(hMipmappedArray), Space::mipmap},
                        [&] { return call<Fn::cuMipmappedArrayDestroy>(hMipmappedArray); });
}

}  // namespace release

// ---- query --------------------------------------------------------------------------------------

namespace query {

CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) { return mem_get_info<Fn::cuMemGetInfo>(free, total); }

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) { return mem_get_info<Fn::cuMemGetInfo_v2>(free, total); }

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) { return device_total_mem<Fn::cuDeviceTotalMem>(bytes, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  return device_total_mem<Fn::cuDeviceTotalMem_v2>(bytes, dev);
}

}  // namespace query

// ---- init ---------------------------------------------------------------------------------------

namespace init {

namespace {
// COLOC_MEM_LIMIT_<n> for an ordinal this process does not have (CUDA_VISIBLE_DEVICES renumbers
// them) limits nothing: said once per process.
void warn_unknown_ordinals() {
  static constinit std::atomic<bool> done{false};
  if (done.exchange(true, std::memory_order_relaxed)) return;
  int count = 0;
  if (call<Fn::cuDeviceGetCount>(&count) != CUDA_SUCCESS) return;
  const Options& o = options();
  for (int n = count < 0 ? 0 : count; n < kMaxOrdinals; ++n)
    if (o.has_ordinal_limit[n])
      logf(LogLevel::warn,
           "COLOC_MEM_LIMIT_%d is set, but this process sees %d device(s) (ordinals 0..%d, as CUDA_VISIBLE_DEVICES "
           "numbers them): it limits nothing",
           n, count, count - 1);
}
}  // namespace

// Malformed settings are reported here, in the processes that use CUDA, once each. Registration
// with the daemon comes next: COLOC_REQUIRE_DAEMON without a daemon fails cuInit before the driver
// is initialised, so the process cannot use the GPU outside coloc.
CUresult cuInit(unsigned int Flags) {
  runtime::report_option_errors();
  if (!broker().on_init()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = call<Fn::cuInit>(Flags);
  if (rc == CUDA_SUCCESS) warn_unknown_ordinals();
  return rc;
}

}  // namespace init

}  // namespace coloc::interpose
