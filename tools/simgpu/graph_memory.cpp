#include "graph_memory.h"

#include <algorithm>

#include "driver.h"

namespace simgpu {

CUresult GraphMemPool::add_block(uint64_t graph_id, uint64_t bytes, uintptr_t* out) {
  const uint64_t size = round_up(bytes, kLargePage);
  if (bytes == 0 || size == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.size = size;
  a.charged = 0;  // the address only: memory is bound at upload or launch
  a.kind = AllocKind::graph;
  std::lock_guard<std::mutex> lk(mu_);
  auto p = device_.memory.allocate(a);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  blocks_[*p] = Block{bytes, size, graph_id};
  *out = *p;
  return CUDA_SUCCESS;
}

CUresult GraphMemPool::add_free(uint64_t graph_id, uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.freer != 0) return CUDA_ERROR_INVALID_VALUE;
  it->second.freer = graph_id;
  it->second.freed_by_owner = graph_id == it->second.owner;
  return CUDA_SUCCESS;
}

void GraphMemPool::graph_destroyed(uint64_t graph_id) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    auto next = std::next(it);
    if (it->second.freer == graph_id && !it->second.freed_by_owner) it->second.freer = 0;
    if (it->second.owner == graph_id) {
      it->second.owner = 0;
      maybe_release_locked(it);
    }
    it = next;
  }
}

uint64_t GraphMemPool::add_exec(const std::vector<uintptr_t>& blocks, bool auto_free) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_exec_++;
  Exec& x = execs_[id];
  x.blocks = blocks;
  x.auto_free = auto_free;
  for (uintptr_t p : blocks)
    if (auto it = blocks_.find(p); it != blocks_.end()) it->second.exec = id;
  return id;
}

void GraphMemPool::exec_destroyed(uint64_t exec_id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = execs_.find(exec_id);
  if (it == execs_.end()) return;
  it->second.destroyed = true;
  it->second.uploaded = false;
  maybe_forget_exec_locked(exec_id);
  settle_locked();
}

bool GraphMemPool::bound_locked(const Block& b) const {
  if (b.live > 0) return true;
  if (b.exec == 0) return false;
  auto it = execs_.find(b.exec);
  return it != execs_.end() && (it->second.pending > 0 || it->second.uploaded);
}

void GraphMemPool::settle_locked() {
  uint64_t bound = 0;
  for (const auto& [p, b] : blocks_)
    if (bound_locked(b)) bound += b.size;
  bound_ = bound;
  used_high_ = std::max(used_high_, bound_);
}

CUresult GraphMemPool::bind_locked(Exec& x) {
  uint64_t need = 0;
  for (uintptr_t p : x.blocks)
    if (auto it = blocks_.find(p); it != blocks_.end() && !bound_locked(it->second)) need += it->second.size;
  const uint64_t unbound = reserved_ - bound_;
  if (need > unbound) {
    const uint64_t grow = need - unbound;
    if (!Driver::get().shared->charge(device_.physical, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    reserved_ += grow;
    reserved_high_ = std::max(reserved_high_, reserved_);
  }
  return CUDA_SUCCESS;
}

CUresult GraphMemPool::upload(uint64_t exec_id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = execs_.find(exec_id);
  if (it == execs_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = bind_locked(it->second); rc != CUDA_SUCCESS) return rc;
  it->second.uploaded = true;
  settle_locked();
  return CUDA_SUCCESS;
}

CUresult GraphMemPool::launch(uint64_t exec_id, std::vector<uintptr_t>* auto_free) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = execs_.find(exec_id);
  if (it == execs_.end()) return CUDA_ERROR_INVALID_VALUE;
  Exec& x = it->second;
  auto_free->clear();
  for (uintptr_t p : x.blocks) {
    auto b = blocks_.find(p);
    if (b == blocks_.end() || b->second.freed_by_owner || b->second.live == 0) continue;
    if (!x.auto_free) return CUDA_ERROR_INVALID_VALUE;  // an allocation of a previous launch is not freed
    auto_free->push_back(p);
  }
  if (CUresult rc = bind_locked(x); rc != CUDA_SUCCESS) return rc;
  ++x.pending;
  x.uploaded = false;  // the launch uses what the upload bound
  for (uintptr_t p : x.blocks)
    if (auto b = blocks_.find(p); b != blocks_.end()) ++b->second.live;
  settle_locked();
  return CUDA_SUCCESS;
}

void GraphMemPool::launch_done(uint64_t exec_id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = execs_.find(exec_id);
  if (it == execs_.end()) return;
  if (it->second.pending > 0) --it->second.pending;
  maybe_forget_exec_locked(exec_id);
  settle_locked();
}

void GraphMemPool::free_in_graph(uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.live == 0) return;
  --it->second.live;
  maybe_release_locked(it);
  settle_locked();
}

CUresult GraphMemPool::free_outside(uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.live == 0 || it->second.freed_by_owner) return CUDA_ERROR_INVALID_VALUE;
  --it->second.live;
  maybe_release_locked(it);
  settle_locked();
  return CUDA_SUCCESS;
}

bool GraphMemPool::range(uintptr_t p, uint64_t n, bool need_live) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  return (it->second.live > 0 || !need_live) && p - it->first <= it->second.bytes && n <= it->second.bytes - (p - it->first);
}

bool GraphMemPool::is_block(uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  return blocks_.count(p) != 0;
}

uint64_t GraphMemPool::block_bytes(uintptr_t p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = blocks_.find(p);
  return it == blocks_.end() ? 0 : it->second.bytes;
}

void GraphMemPool::maybe_release_locked(std::map<uintptr_t, Block>::iterator it) {
  const Block& b = it->second;
  if (b.owner != 0 || b.exec != 0 || b.live > 0) return;
  device_.memory.release(it->first);
  blocks_.erase(it);
}

void GraphMemPool::maybe_forget_exec_locked(uint64_t id) {
  auto it = execs_.find(id);
  if (it == execs_.end() || !it->second.destroyed || it->second.pending > 0) return;
  std::vector<uintptr_t> blocks = std::move(it->second.blocks);
  execs_.erase(it);
  for (uintptr_t p : blocks) {
    auto b = blocks_.find(p);
    if (b == blocks_.end() || b->second.exec != id) continue;
    b->second.exec = 0;
    maybe_release_locked(b);
  }
}

void GraphMemPool::trim() {
  std::lock_guard<std::mutex> lk(mu_);
  settle_locked();
  if (reserved_ > bound_) {
    Driver::get().shared->uncharge(device_.physical, reserved_ - bound_);
    reserved_ = bound_;
  }
}

CUresult GraphMemPool::get_attribute(unsigned attr, cuuint64_t* value) {
  std::lock_guard<std::mutex> lk(mu_);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *value = bound_; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *value = used_high_; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *value = reserved_; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *value = reserved_high_; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult GraphMemPool::set_attribute(unsigned attr, const cuuint64_t* value) {
  std::lock_guard<std::mutex> lk(mu_);
  if (*value != 0) return CUDA_ERROR_INVALID_VALUE;  // a high watermark can only be reset to 0
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: used_high_ = bound_; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: reserved_high_ = reserved_; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace simgpu
