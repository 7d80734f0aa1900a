#include "context.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "capture.h"
#include "driver.h"
#include "memory.h"
#include "os.h"

namespace simgpu {

Context::Context(DeviceState& dev, uint32_t ctx_id, bool is_primary, unsigned ctx_flags, int engine_entry)
    : device(dev), id(ctx_id), primary(is_primary), flags(ctx_flags), engine_entry_(engine_entry) {}

Context::~Context() {
  {
    std::unique_lock<std::mutex> lk(mu);
    done_cv_.wait(lk, [&] { return completed_ + 1 == next_seq_; });
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (executor_.joinable()) executor_.join();
  if (holding_) Driver::get().shared->release_engine(device.physical, engine_entry_, clock_ns_);
  Driver::get().shared->remove_context(device.physical, engine_entry_);
}

uint64_t Context::enqueue_locked(Stream& s, Work w, bool frees_slot) {
  if (!executor_.joinable()) executor_ = std::thread([this] { run_executor(); });
  const uint64_t seq = next_seq_++;
  // Published for proxy turns while this process is stopped (shared_state.h).
  if (auto* k = std::get_if<KernelWork>(&w)) Driver::get().shared->add_queued_ns(device.physical, engine_entry_, k->duration_ns);
  queue_.push_back(Op{std::move(w), seq, s.id, now_ns(), frees_slot});
  s.last_seq = seq;
  return seq;
}

bool Context::take_slot_locked(std::unique_lock<std::mutex>& lk, Stream& s) {
  const uint32_t depth = Driver::get().config.queue_depth;
  slot_cv_.wait(lk, [&] {
    if (s.capture.load(std::memory_order_relaxed)) return true;
    auto it = slots_.find(s.id);
    return it == slots_.end() || it->second < depth;
  });
  if (s.capture.load(std::memory_order_relaxed)) return false;
  ++slots_[s.id];
  return true;
}

void Context::give_slot_locked(const Stream& s) {
  auto it = slots_.find(s.id);
  if (it == slots_.end()) return;
  if (--it->second == 0) slots_.erase(it);
  slot_cv_.notify_all();
}

CUresult Context::submit(Stream& s, Work w) {
  std::unique_lock<std::mutex> lk(mu);
  if (take_slot_locked(lk, s) && (&s == &null_stream && implicit_capture(*this))) {
    give_slot_locked(s);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (Graph* g = s.capture.load(std::memory_order_relaxed)) {
    if (s.capture_invalid.load(std::memory_order_relaxed)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (!std::holds_alternative<KernelWork>(w) && !std::holds_alternative<CopyWork>(w) &&
        !std::holds_alternative<MemsetWork>(w) && !std::holds_alternative<GraphFreeWork>(w)) {
      s.capture_invalid.store(true, std::memory_order_relaxed);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    g->nodes.push_back(std::move(w));
    return CUDA_SUCCESS;
  }
  if (auto* k = std::get_if<KernelWork>(&w)) k->launch_id = Driver::get().next_launch_id.fetch_add(1);
  enqueue_locked(s, std::move(w), true);
  lk.unlock();
  work_cv_.notify_one();
  return CUDA_SUCCESS;
}

CUresult Context::launch_graph(Stream& s, const GraphExec& g) {
  std::unique_lock<std::mutex> lk(mu);
  const bool slot = take_slot_locked(lk, s);
  if (Graph* cap = s.capture.load(std::memory_order_relaxed)) {
    if (s.capture_invalid.load(std::memory_order_relaxed)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (g.mem_device) {
      s.capture_invalid.store(true, std::memory_order_relaxed);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    cap->nodes.insert(cap->nodes.end(), g.nodes.begin(), g.nodes.end());
    return CUDA_SUCCESS;
  }
  if (&s == &null_stream && implicit_capture(*this)) {
    if (slot) give_slot_locked(s);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  if (g.mem_device) {
    std::vector<uintptr_t> auto_free;
    if (CUresult rc = g.mem_device->graph_pool.launch(g.mem_exec, &auto_free); rc != CUDA_SUCCESS) {
      if (slot) give_slot_locked(s);
      return rc;
    }
    for (uintptr_t p : auto_free) enqueue_locked(s, GraphFreeWork{g.mem_device, p}, false);
  }
  // The whole launch takes one slot, freed when its last op completes.
  const size_t ops = g.nodes.size() + (g.mem_device ? 1 : 0);
  if (ops == 0) {
    if (slot) give_slot_locked(s);
    return CUDA_SUCCESS;
  }
  size_t n = 0;
  for (const Work& node : g.nodes) {
    Work w = node;
    if (auto* k = std::get_if<KernelWork>(&w)) k->launch_id = Driver::get().next_launch_id.fetch_add(1);
    enqueue_locked(s, std::move(w), ++n == ops);
  }
  if (g.mem_device) enqueue_locked(s, GraphEndWork{g.mem_device, g.mem_exec}, true);
  lk.unlock();
  work_cv_.notify_one();
  return CUDA_SUCCESS;
}

bool Context::idle() {
  std::lock_guard<std::mutex> lk(mu);
  return completed_ + 1 == next_seq_;
}

CUresult Context::synchronize() {
  std::unique_lock<std::mutex> lk(mu);
  const uint64_t target = next_seq_ - 1;
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  return sticky_;
}

CUresult Context::synchronize(Stream& s) {
  std::unique_lock<std::mutex> lk(mu);
  if (s.capture.load(std::memory_order_relaxed)) {
    s.capture_invalid.store(true, std::memory_order_relaxed);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  const uint64_t target = s.last_seq;
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  return sticky_;
}

CUresult Context::query(Stream& s) {
  std::lock_guard<std::mutex> lk(mu);
  if (s.capture.load(std::memory_order_relaxed)) {
    s.capture_invalid.store(true, std::memory_order_relaxed);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (&s == &null_stream && implicit_capture(*this)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (sticky_ != CUDA_SUCCESS) return sticky_;
  return completed_ >= s.last_seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Context::record(Event& e, Stream& s) {
  std::unique_lock<std::mutex> lk(mu);
  const bool slot = take_slot_locked(lk, s);
  if (s.capture.load(std::memory_order_relaxed)) {
    if (s.capture_invalid.load(std::memory_order_relaxed)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    s.capture_invalid.store(true, std::memory_order_relaxed);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (&s == &null_stream && implicit_capture(*this)) {
    if (slot) give_slot_locked(s);
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  e.seq = enqueue_locked(s, EventWork{&e}, true);
  lk.unlock();
  work_cv_.notify_one();
  return CUDA_SUCCESS;
}

CUresult Context::synchronize(Event& e) {
  std::unique_lock<std::mutex> lk(mu);
  const uint64_t target = e.seq;
  done_cv_.wait(lk, [&] { return completed_ >= target; });
  return sticky_;
}

CUresult Context::query(Event& e) {
  std::lock_guard<std::mutex> lk(mu);
  if (sticky_ != CUDA_SUCCESS) return sticky_;
  return completed_ >= e.seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult Context::elapsed(Event& start, Event& end, float* ms) {
  std::lock_guard<std::mutex> lk(mu);
  if ((start.flags | end.flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (start.seq == 0 || end.seq == 0) return CUDA_ERROR_INVALID_HANDLE;  // never recorded
  if (completed_ < start.seq || completed_ < end.seq) return CUDA_ERROR_NOT_READY;
  *ms = float((double(end.time_ns) - double(start.time_ns)) / 1e6);
  return CUDA_SUCCESS;
}

CUresult Context::begin_capture(Stream& s, Graph* g, unsigned mode) {
  std::lock_guard<std::mutex> lk(mu);
  if (s.capture.load(std::memory_order_relaxed)) return CUDA_ERROR_ILLEGAL_STATE;
  s.capture_mode = mode;
  s.capture_thread = thread_token();
  s.capture_invalid.store(false, std::memory_order_relaxed);
  s.capture = g;
  capture_started(s);
  return CUDA_SUCCESS;
}

CUresult Context::end_capture(Stream& s, Graph** g, bool any_thread) {
  std::lock_guard<std::mutex> lk(mu);
  Graph* cap = s.capture.load(std::memory_order_relaxed);
  if (!cap) return CUDA_ERROR_ILLEGAL_STATE;
  if (!any_thread && s.capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && s.capture_thread != thread_token())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  *g = cap;
  s.capture.store(nullptr, std::memory_order_relaxed);
  capture_ended(s);
  return s.capture_invalid.exchange(false, std::memory_order_relaxed) ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                                                      : CUDA_SUCCESS;
}

CUstreamCaptureStatus Context::capture_status(Stream& s) {
  std::lock_guard<std::mutex> lk(mu);
  if (!s.capture.load(std::memory_order_relaxed)) return CU_STREAM_CAPTURE_STATUS_NONE;
  return s.capture_invalid.load(std::memory_order_relaxed) ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                           : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

// The device's clock may lag the host's by up to this much: waking up late from a sleep (a busy
// host) does not lengthen a kernel or open a gap in the device's timeline, but time the host
// really spends (filling memory, being descheduled for long) does count.
constexpr uint64_t kMaxLagNs = 2'000'000;

void Context::run_executor() {
  SharedState& shared = *Driver::get().shared;
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    if (queue_.empty() && holding_) {
      // Nothing queued: give the engine up at once.
      shared.release_engine(device.physical, engine_entry_, clock_ns_);
      holding_ = false;
    }
    if (queue_.empty()) credit_.clear(), credit_next_ = 0;  // more proxy time than work: unused
    work_cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything ran
    Op op = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    execute(op);
    lk.lock();
    if (auto* ev = std::get_if<EventWork>(&op.work); ev && ev->event->seq == op.seq) ev->event->time_ns = clock_ns_;
    completed_ = op.seq;
    done_cv_.notify_all();
    if (op.frees_slot) {
      auto it = slots_.find(op.stream);
      if (it != slots_.end() && --it->second == 0) slots_.erase(it);
      slot_cv_.notify_all();
    }
  }
}

void Context::execute(Op& op) {
  Driver& drv = Driver::get();
  auto fault = [&] {
    std::lock_guard<std::mutex> lk(mu);
    if (sticky_ == CUDA_SUCCESS) sticky_ = CUDA_ERROR_ILLEGAL_ADDRESS;
  };
  // On this context's timeline an operation starts after the one before it and after it was
  // submitted; while proxy turns remain (this process was stopped), the host's clock is no bound.
  const bool replay = credit_next_ < credit_.size();
  clock_ns_ = std::max({clock_ns_, op.submitted_ns, replay ? 0 : now_ns() - kMaxLagNs});
  if (auto* k = std::get_if<KernelWork>(&op.work)) {
    if (k->kind == KernelKind::fill && !drv.device_range_live(k->fill_ptr, k->fill_count * sizeof(float))) {
      fault();  // the buffer was freed after the launch: an illegal address on a GPU
      own_ns_ += k->duration_ns;  // counted as run, so that proxy turns do not run it
      return;
    }
    run_kernel(*k, op.stream);
    return;
  }
  if (auto* c = std::get_if<CopyWork>(&op.work)) {
    const size_t dst_span = strided_span(c->bytes, c->height, c->depth, c->dst_pitch, c->dst_layer);
    const size_t src_span = strided_span(c->bytes, c->height, c->depth, c->src_pitch, c->src_layer);
    if ((c->dst_device && !drv.device_range_live(c->dst, dst_span)) ||
        (c->src_device && !drv.device_range_live(c->src, src_span))) {
      fault();
      return;
    }
    for (size_t z = 0; z < c->depth; ++z)
      for (size_t y = 0; y < c->height; ++y)
        std::memmove(reinterpret_cast<void*>(c->dst + z * c->dst_layer + y * c->dst_pitch),
                     reinterpret_cast<const void*>(c->src + z * c->src_layer + y * c->src_pitch), c->bytes);
  } else if (auto* m = std::get_if<MemsetWork>(&op.work)) {
    if (!drv.device_range_live(m->dst, strided_span(m->count * m->element, m->height, 1, m->pitch, 0))) {
      fault();
      return;
    }
    for (size_t y = 0; y < m->height; ++y) fill_memory(m->dst + y * m->pitch, m->value, m->element, m->count);
  } else if (auto* f = std::get_if<FreeWork>(&op.work)) {
    if (!f->pool) drv.free_device_memory(f->ptr);
    else if (MemPool* pool = g_mem_pools.get(f->pool)) pool->finish_free(f->ptr, f->generation);
  } else if (auto* gf = std::get_if<GraphFreeWork>(&op.work)) {
    gf->device->graph_pool.free_in_graph(gf->ptr);
  } else if (auto* ge = std::get_if<GraphEndWork>(&op.work)) {
    ge->device->graph_pool.launch_done(ge->exec);
  }
  // Copies and memsets take the host time they took; an event record takes none.
  if (!replay) clock_ns_ = std::max(clock_ns_, now_ns() - kMaxLagNs);
}

void Context::run_kernel(const KernelWork& k, uint32_t stream) {
  Driver& drv = Driver::get();
  SharedState& shared = *drv.shared;
  const uint64_t slice = drv.config.timeslice_ns;
  uint64_t remaining = k.duration_ns;
  bool started = false;
  auto trace = [&](uint64_t start, uint64_t end) {
    if (drv.trace.enabled()) drv.trace.write({drv.pid, device.physical, id, stream, k.launch_id, k.name, start, end});
  };
  for (;;) {
    if (credit_next_ < credit_.size()) {
      // Device time run for this context while its process was stopped: the kernel ran then.
      SharedState::Interval& c = credit_[credit_next_];
      const uint64_t start = std::max(c.start_ns, clock_ns_);
      if (start >= c.end_ns) {
        ++credit_next_;
        continue;
      }
      const uint64_t end = start + std::min(remaining, c.end_ns - start);
      if (!started && k.kind == KernelKind::fill)
        fill_memory(k.fill_ptr, std::bit_cast<uint32_t>(k.fill_value), 4, k.fill_count);
      started = true;
      remaining -= end - start;
      clock_ns_ = end;
      c.start_ns = end;
      trace(start, end);
      if (remaining == 0) {
        sleep_until_ns(end);  // not complete before the device's clock reaches its end
        return;
      }
      continue;
    }
    if (!holding_) {
      uint64_t left = 0;
      if (!shared.acquire_engine(device.physical, engine_entry_, &left, &credit_)) continue;  // credit first
      holding_ = true;
      // Carry on where the last owner stopped, if that is after this kernel could start.
      clock_ns_ = std::max({clock_ns_, left, now_ns() - kMaxLagNs});
      slice_end_ns_ = clock_ns_ + slice;
    } else {
      clock_ns_ = std::max(clock_ns_, now_ns() - kMaxLagNs);
      if (clock_ns_ >= slice_end_ns_) {
        uint64_t resume = clock_ns_;
        if (shared.yield_engine(device.physical, engine_entry_, clock_ns_, &resume)) {
          holding_ = false;  // preempted: the kernel continues in the next slice this context gets
          continue;
        }
        clock_ns_ = std::max(clock_ns_, resume);  // after the turns run for stopped processes
        slice_end_ns_ = clock_ns_ + slice;
      }
    }
    const uint64_t start = clock_ns_;
    // slice_end_ns_ > start here; saturate instead of overflowing on huge durations.
    const uint64_t until = remaining >= slice_end_ns_ - start ? slice_end_ns_ : start + remaining;
    if (!shared.begin_slice(device.physical, engine_entry_, until, own_ns_ + (until - start))) {
      holding_ = false;  // taken from this process while it was stopped
      continue;
    }
    if (!started && k.kind == KernelKind::fill)
      fill_memory(k.fill_ptr, std::bit_cast<uint32_t>(k.fill_value), 4, k.fill_count);
    started = true;
    sleep_until_ns(until);
    const uint64_t now = now_ns();
    uint64_t end = std::max(until, now - kMaxLagNs);
    // Woken late: if the process was stopped meanwhile, the engine may have been taken after
    // this slice, which then ended on time.
    if (end > until && !shared.owns_engine(device.physical, engine_entry_)) {
      end = until;
      holding_ = false;
    }
    const uint64_t ran = std::min(remaining, end - start);
    remaining -= ran;
    own_ns_ += ran;
    clock_ns_ = end;
    trace(start, end);
    if (remaining == 0) return;
  }
}

}  // namespace simgpu
