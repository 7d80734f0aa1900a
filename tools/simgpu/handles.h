// simgpu/handles.h — driver objects behind opaque CUDA handles.
//
// A handle (CUcontext, CUstream, CUevent, ...) is the address of its object inside a fixed pool of
// cells in static storage. Checking a handle never dereferences an arbitrary pointer: the address
// must fall on a cell of the right pool, and the cell must be live. So a garbage or destroyed
// handle gets CUDA_ERROR_INVALID_HANDLE (or INVALID_CONTEXT), never a crash, and the check takes
// no lock (the launch fast path uses it). Cells are reused only after every never-used cell has
// been handed out, and then oldest-freed first, so a stale handle stays invalid for a long time.
//
// The pool is trivially destructible on purpose: objects stay valid while the process exits and
// executor threads still run.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <utility>

namespace simgpu {

template <class T, uint32_t N>
class HandlePool {
 public:
  constexpr HandlePool() = default;

  /// Constructs a T in a free cell; nullptr when all N cells are live.
  template <class... Args>
  T* create(Args&&... args) {
    uint32_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fresh_ < N) {
        index = fresh_++;
      } else if (free_count_ > 0) {
        index = free_ring_[free_head_];
        free_head_ = (free_head_ + 1) % N;
        --free_count_;
      } else {
        return nullptr;
      }
    }
    T* obj = ::new (static_cast<void*>(cells_[index].bytes)) T(std::forward<Args>(args)...);
    live_[index].store(1, std::memory_order_release);
    return obj;
  }

  /// Destroys a live object made by create().
  void destroy(T* obj) {
    uint32_t index = index_of(obj);
    live_[index].store(0, std::memory_order_release);
    obj->~T();
    std::lock_guard<std::mutex> lock(mu_);
    free_ring_[(free_head_ + free_count_) % N] = index;
    ++free_count_;
  }

  /// The live object whose handle is `handle`, or nullptr.
  T* get(const void* handle) const {
    const uintptr_t p = reinterpret_cast<uintptr_t>(handle);
    const uintptr_t base = reinterpret_cast<uintptr_t>(cells_);
    if (p < base || p >= base + sizeof(cells_) || (p - base) % sizeof(Cell) != 0) return nullptr;
    const uint32_t index = uint32_t((p - base) / sizeof(Cell));
    if (!live_[index].load(std::memory_order_acquire)) return nullptr;
    return std::launder(reinterpret_cast<T*>(const_cast<unsigned char*>(cells_[index].bytes)));
  }

  /// Calls f(T*) for every live object. The caller makes sure none is created or destroyed
  /// concurrently in a way that matters (objects of a context, while it is destroyed).
  template <class F>
  void for_each(F&& f) {
    uint32_t limit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit = fresh_;
    }
    for (uint32_t i = 0; i < limit; ++i)
      if (live_[i].load(std::memory_order_acquire)) f(std::launder(reinterpret_cast<T*>(cells_[i].bytes)));
  }

 private:
  struct alignas(alignof(T) < 16 ? 16 : alignof(T)) Cell {
    unsigned char bytes[sizeof(T)];
  };
  uint32_t index_of(const T* obj) const {
    return uint32_t((reinterpret_cast<uintptr_t>(obj) - reinterpret_cast<uintptr_t>(cells_)) / sizeof(Cell));
  }

  Cell cells_[N] = {};
  std::atomic<uint8_t> live_[N] = {};
  std::mutex mu_;
  uint32_t fresh_ = 0;  // cells [fresh_, N) were never used
  uint32_t free_ring_[N] = {};
  uint32_t free_head_ = 0, free_count_ = 0;
};

}  // namespace simgpu
