// simgpu/graph_memory.h — a device's graph memory pool: what backs the allocations of graph
// memory nodes (cuGraphAddMemAllocNode, cuGraphAddNode_v2 with CU_GRAPH_NODE_TYPE_MEM_ALLOC,
// cuMemAllocAsync recorded by stream capture), as the CUDA driver keeps one per device.
//
// Model (tools/simgpu/README.md, "Graph memory"):
// - An allocation node gets a fixed address when it is created (a block: its size rounded up to
//   2 MiB, reserved in the device's arena, charging nothing). The address stays reserved while the
//   node's graph, an executable graph made from it, or a live allocation at it exists.
// - Physical memory comes from the pool. A block is *bound* (holds pool memory) while its
//   executable graph is uploaded or has a launch scheduled or running, and while its allocation is
//   live (launched and not yet freed by a free node, cuMemFreeAsync or cuMemFree).
// - cuGraphUpload and cuGraphLaunch bind the executable graph's unbound blocks. When the pool's
//   unbound reserve (reserved − bound) cannot hold them, the pool grows by the difference, charged
//   on the device (shared state); a device that cannot hold it makes the call fail with
//   CUDA_ERROR_OUT_OF_MEMORY, and nothing is bound or enqueued.
// - Memory stays reserved when blocks unbind; cuDeviceGraphMemTrim gives back all of it that is
//   not bound. Graph launches never trim.
// - CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT is the bound memory; RESERVED_MEM_CURRENT what the pool
//   holds (and charges); the HIGH attributes are their high watermarks (reset by setting 0).
// Thread-safe; lock order: Context::mu → this pool's mutex → Arena mutex → shared state.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "cuda_api.h"

namespace simgpu {

struct DeviceState;

class GraphMemPool {
 public:
  explicit GraphMemPool(DeviceState& dev) : device_(dev) {}
  GraphMemPool(const GraphMemPool&) = delete;
  GraphMemPool& operator=(const GraphMemPool&) = delete;

  /// A new allocation node of `bytes` (> 0) in graph `graph_id`: reserves its address (*out).
  /// CUDA_ERROR_OUT_OF_MEMORY when the address space is exhausted or the size overflows.
  CUresult add_block(uint64_t graph_id, uint64_t bytes, uintptr_t* out);
  /// A free node for `p` in graph `graph_id`. CUDA_ERROR_INVALID_VALUE when `p` is not the address
  /// of an allocation node, or a graph already frees it (its own graph, or another one).
  CUresult add_free(uint64_t graph_id, uintptr_t p);
  /// Graph `graph_id` was destroyed: its blocks keep their addresses while an executable graph or a
  /// live allocation uses them; free nodes it held no longer count.
  void graph_destroyed(uint64_t graph_id);

  /// Registers an executable graph holding `blocks` (addresses from add_block); returns its id.
  uint64_t add_exec(const std::vector<uintptr_t>& blocks, bool auto_free);
  /// The executable graph was destroyed; what it binds is released once its launches ran.
  void exec_destroyed(uint64_t exec_id);
  /// cuGraphUpload: binds the exec's blocks (growing the pool if needed). CUDA_ERROR_OUT_OF_MEMORY
  /// when the device cannot hold the growth.
  CUresult upload(uint64_t exec_id);
  /// cuGraphLaunch, before anything is enqueued: CUDA_ERROR_INVALID_VALUE when an allocation of a
  /// previous launch that the graph does not free is still live and the exec was not instantiated
  /// with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (then *auto_free lists the blocks the
  /// launch must free first, in stream order); CUDA_ERROR_OUT_OF_MEMORY when the pool cannot grow.
  /// On success the exec has one more launch scheduled and its allocations are live.
  CUresult launch(uint64_t exec_id, std::vector<uintptr_t>* auto_free);
  /// The launch finished (its last node ran).
  void launch_done(uint64_t exec_id);
  /// A free node ran for `p` (or the launch's automatic free): the allocation is no longer live.
  void free_in_graph(uintptr_t p);
  /// cuMemFree / cuMemFreeAsync (when the stream reaches it) of `p`: CUDA_ERROR_INVALID_VALUE when
  /// `p` is not a live graph allocation or its own graph frees it.
  CUresult free_outside(uintptr_t p);
  /// True when [p, p+n) lies in one graph allocation that is live (`need_live`), or whose address
  /// is reserved (work submitted now may run once a launch made it live).
  bool range(uintptr_t p, uint64_t n, bool need_live);
  /// True when `p` is the address of an allocation node's block.
  bool is_block(uintptr_t p);
  /// The block's device (this pool's) and requested size, for node parameters; 0 if not a block.
  uint64_t block_bytes(uintptr_t p);

  /// cuDeviceGraphMemTrim: gives back every reserved byte that is not bound.
  void trim();
  /// cuDeviceGetGraphMemAttribute / SetAttribute (`attr` a CUgraphMem_attribute).
  CUresult get_attribute(unsigned attr, cuuint64_t* value);
  CUresult set_attribute(unsigned attr, const cuuint64_t* value);

 private:
  struct Block {
    uint64_t bytes = 0;     ///< as requested
    uint64_t size = 0;      ///< reserved address span and bound memory: bytes rounded up to 2 MiB
    uint64_t owner = 0;     ///< graph id of its allocation node (0: that graph is gone)
    uint64_t freer = 0;     ///< graph id of the graph that frees it (0: none)
    bool freed_by_owner = false;
    uint64_t exec = 0;      ///< the executable graph that holds it (0: none)
    uint32_t live = 0;      ///< launches whose allocation here is not freed yet
  };
  struct Exec {
    std::vector<uintptr_t> blocks;
    bool auto_free = false;
    bool uploaded = false;
    bool destroyed = false;
    uint32_t pending = 0;  ///< launches scheduled or running
  };
  bool bound_locked(const Block& b) const;
  void settle_locked();                       // recompute bound_, used_high_
  CUresult bind_locked(Exec& x);              // grow for x's unbound blocks
  void maybe_release_locked(std::map<uintptr_t, Block>::iterator it);
  void maybe_forget_exec_locked(uint64_t id);

  DeviceState& device_;
  std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;
  std::map<uint64_t, Exec> execs_;
  uint64_t next_exec_ = 1;
  uint64_t reserved_ = 0, reserved_high_ = 0, bound_ = 0, used_high_ = 0;
};

}  // namespace simgpu
