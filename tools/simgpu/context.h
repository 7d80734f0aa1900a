// simgpu/context.h — a context and the work it runs: streams, events, captured graphs, and the
// executor thread that drains the context's queue.
//
// Each context has one FIFO of operations, stamped with increasing sequence numbers. Every stream
// of the context enqueues into it, so each stream runs in order (and, more strictly than a GPU
// needs, streams of one context never overlap). The executor thread pops operations one by one:
// a kernel first takes the device's engine (shared with every other context on the machine, see
// shared_state.h), then sleeps until its end, slice by slice: at the end of each
// SIMGPU_TIMESLICE_US slice it hands the engine over if another context is waiting. With nothing
// queued it gives the engine up. Copies and memsets run on the host and do not take the engine.
// While this process is stopped, others run its turns by proxy (shared_state.h); once it runs
// again, the executor first completes its kernels on those turns (credit_), at the device times
// they ran, and only then takes the engine for the rest.
// Synchronize calls wait on a condition variable for the sequence number they need.
//
// Each stream holds at most SIMGPU_QUEUE_DEPTH submissions queued or running (a kernel, a copy,
// a memset, an event record, a cuMemFreeAsync, or a whole graph launch each take one slot); a
// submission into a full stream blocks the calling host thread until the stream's oldest one
// completes, as a real driver's launch into a full stream does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cuda_api.h"
#include "shared_state.h"

namespace simgpu {

struct DeviceState;
struct Event;
struct Graph;

enum class KernelKind : uint8_t {
  generic,  ///< runs SIMGPU_KERNEL_NS
  spin,     ///< coloc_spin(unsigned long long ns): runs `ns`
  fill,     ///< coloc_fill(float* p, unsigned long long n, float v): sets p[0..n) = v
};

struct KernelWork {
  const char* name = nullptr;  ///< interned for the life of the process
  KernelKind kind = KernelKind::generic;
  uint64_t duration_ns = 0;
  uintptr_t fill_ptr = 0;
  uint64_t fill_count = 0;  ///< floats
  float fill_value = 0;
  uint64_t launch_id = 0;  ///< assigned when submitted (graph nodes get a new one per launch)
};
struct CopyWork {
  uintptr_t dst = 0, src = 0;
  size_t bytes = 0;  ///< per row
  bool dst_device = false, src_device = false;  ///< which sides are device memory (checked again when run)
  // 2D and 3D copies: `height` rows of `bytes` in each of `depth` layers; row y of layer z starts
  // at z * layer + y * pitch on each side.
  size_t height = 1, depth = 1;
  size_t dst_pitch = 0, src_pitch = 0, dst_layer = 0, src_layer = 0;
  /// A source read during the call (CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL): `src` points here.
  std::shared_ptr<const std::vector<unsigned char>> staged;
};
struct MemsetWork {
  uintptr_t dst = 0;
  uint32_t value = 0;
  uint8_t element = 1;  ///< bytes per element: 1 (D8), 2 (D16) or 4 (D32)
  size_t count = 0;     ///< elements (per row)
  size_t height = 1;    ///< rows (cuMemsetD2D*), `pitch` bytes apart
  size_t pitch = 0;
};
/// The bytes from the first to the last a strided access touches: rows of `row` bytes, `height`
/// per layer `pitch` apart, `depth` layers `layer` apart (0 when any count is 0).
inline size_t strided_span(size_t row, size_t height, size_t depth, size_t pitch, size_t layer) {
  if (!row || !height || !depth) return 0;
  return (depth - 1) * layer + (height - 1) * pitch + row;
}
struct EventWork {
  Event* event = nullptr;
};
struct FreeWork {
  uintptr_t ptr = 0;          ///< cuMemFreeAsync: freed when the stream reaches it
  CUmemoryPool pool = nullptr;  ///< a pool block's pool (MemPool::begin_free), else null
  uint64_t generation = 0;    ///< of the pool block
};
struct GraphFreeWork {
  DeviceState* device = nullptr;  ///< whose graph memory pool (graph_memory.h) holds the block
  uintptr_t ptr = 0;              ///< a mem-free node (or an automatic free on launch) of a graph allocation
};
struct GraphEndWork {
  DeviceState* device = nullptr;
  uint64_t exec = 0;  ///< GraphMemPool exec id: this launch of it finished
};
using Work = std::variant<KernelWork, CopyWork, MemsetWork, EventWork, FreeWork, GraphFreeWork, GraphEndWork>;

class Context;

struct Stream {
  Stream(Context* c, uint32_t i, unsigned f) : ctx(c), id(i), flags(f) {}
  Context* const ctx;
  const uint32_t id;  ///< 0 legacy default stream, 1 per-thread default stream, then per process
  const unsigned flags;
  uint64_t last_seq = 0;  ///< sequence number of the last operation enqueued here (ctx->mu)
  /// Graph being captured into, or null. Written under ctx->mu; read without it by the launch
  /// fast path.
  std::atomic<Graph*> capture{nullptr};
  // The capture in progress (capture.h), set when it begins (under ctx->mu):
  unsigned capture_mode = 0;     ///< CU_STREAM_CAPTURE_MODE_* it was begun with
  uint64_t capture_thread = 0;   ///< thread_token() of the thread that began it
  std::atomic<bool> capture_invalid{false};  ///< invalidated: refuses work, ends with an error
};

struct Event {
  Event(Context* c, unsigned f) : ctx(c), flags(f) {}
  Context* const ctx;
  const unsigned flags;  ///< CU_EVENT_* flags
  // Guarded by ctx->mu:
  uint64_t seq = 0;      ///< operation that records it (0: never recorded)
  uint64_t time_ns = 0;  ///< when that operation ran
};

struct GraphNode;

/// A graph: its kernels, copies, memsets and memory-free nodes in the order they were captured
/// or added (a valid order of its dependencies), and its memory-allocation nodes.
struct Graph {
  explicit Graph(uint64_t graph_id) : id(graph_id) {}
  const uint64_t id;  ///< unique for the process (graph memory pools name graphs by it)
  std::vector<Work> nodes;
  std::vector<uintptr_t> allocs;      ///< addresses of its allocation nodes' blocks
  DeviceState* mem_device = nullptr;  ///< the device of its memory nodes (one per graph in simgpu)
  std::vector<GraphNode*> handles;    ///< nodes made by the node-creation API (destroyed with it)
  uint32_t live_execs = 0;            ///< executable graphs made from it that are not destroyed
  bool from_capture = false;          ///< made by cuStreamBeginCapture (not ...ToGraph)
};
/// A node made by cuGraphAddMemAllocNode / AddMemFreeNode / AddNode (captured nodes have none).
struct GraphNode {
  GraphNode(Graph* g, CUgraphNodeType t, uintptr_t p) : graph(g), type(t), ptr(p) {}
  Graph* const graph;
  const CUgraphNodeType type;
  const uintptr_t ptr;  ///< the allocation it makes or frees
};
struct GraphExec {
  std::vector<Work> nodes;
  bool has_effects = false;  ///< holds copies, memsets, fills or memory nodes (SIMGPU_FAST still runs those)
  uint64_t source = 0;       ///< Graph::id it was made from
  DeviceState* mem_device = nullptr;  ///< device of its graph memory, or null when it has none
  uint64_t mem_exec = 0;     ///< its id in that device's GraphMemPool
};

class Context {
 public:
  /// `engine_entry`: this context's entry in the shared engine table of its device.
  Context(DeviceState& device, uint32_t id, bool primary, unsigned flags, int engine_entry);
  /// Waits for queued work, stops the executor thread, frees the engine entry.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  DeviceState& device;
  const uint32_t id;  ///< per-process number, 1, 2, ... (the trace's `context`)
  const bool primary;
  const unsigned flags;
  Stream null_stream{this, 0, 0};        ///< NULL / CU_STREAM_LEGACY
  Stream per_thread_stream{this, 1, 0};  ///< CU_STREAM_PER_THREAD, and NULL for _ptsz calls

  /// Enqueues `w` on `s`, or appends it to the graph `s` is capturing. Capture accepts kernels,
  /// copies, memsets and graph memory frees; other work gets CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
  /// which invalidates the capture. An invalidated capture gets CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  /// work on the legacy stream while a blocking stream captures, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.
  CUresult submit(Stream& s, Work w);
  /// Enqueues every node of `g` on `s` in order (or appends them to `s`'s capture). An exec with
  /// graph memory is bound first (GraphMemPool::launch: CUDA_ERROR_OUT_OF_MEMORY or
  /// CUDA_ERROR_INVALID_VALUE enqueue nothing) and cannot be launched into a capture
  /// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
  CUresult launch_graph(Stream& s, const GraphExec& g);
  /// True when nothing is queued or running.
  bool idle();

  /// Waits until all work submitted so far ran. Returns the context's sticky error, if any.
  CUresult synchronize();
  /// Waits until the work submitted to `s` so far ran.
  CUresult synchronize(Stream& s);
  /// CUDA_SUCCESS when the work submitted to `s` ran, else CUDA_ERROR_NOT_READY.
  CUresult query(Stream& s);

  /// Records `e` (an event of this context) on `s`.
  CUresult record(Event& e, Stream& s);
  /// Waits until `e`'s last record ran (at once if never recorded).
  CUresult synchronize(Event& e);
  CUresult query(Event& e);
  /// Milliseconds between two completed events of this context; see cuEventElapsedTime for errors.
  CUresult elapsed(Event& start, Event& end, float* ms);

  /// Stream capture (cuStreamBeginCapture / EndCapture / IsCapturing), begun by the calling
  /// thread in `mode` (capture.h).
  CUresult begin_capture(Stream& s, Graph* g, unsigned mode);
  /// Ends the capture of `s` and hands its graph to *g: CUDA_ERROR_ILLEGAL_STATE when none,
  /// CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (capture goes on) when a capture not begun RELAXED is
  /// ended by another thread (unless `any_thread`: the stream is being destroyed), and
  /// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (capture ended, *g still set for the caller to free)
  /// when it was invalidated.
  CUresult end_capture(Stream& s, Graph** g, bool any_thread = false);
  /// NONE, ACTIVE or INVALIDATED.
  CUstreamCaptureStatus capture_status(Stream& s);

  std::mutex mu;  ///< guards the queue, and the fields of this context's streams and events

 private:
  struct Op {
    Work work;
    uint64_t seq;
    uint32_t stream;
    uint64_t submitted_ns;  ///< when the host submitted it (CLOCK_MONOTONIC)
    bool frees_slot;        ///< the last op of a submission: completing it frees a slot of `stream`
  };
  /// Enqueues `w` on `s`; `frees_slot` marks the last op of a submission that took a slot.
  uint64_t enqueue_locked(Stream& s, Work w, bool frees_slot);
  /// Blocks (releasing mu) until `s` has a free slot (SIMGPU_QUEUE_DEPTH), then takes it. A
  /// capturing stream queues nothing and takes none (returns false then; true when one was taken).
  bool take_slot_locked(std::unique_lock<std::mutex>& lk, Stream& s);
  /// Gives back a slot taken by take_slot_locked whose submission was refused.
  void give_slot_locked(const Stream& s);
  void run_executor();
  void execute(Op& op);
  void run_kernel(const KernelWork& k, uint32_t stream);
  CUresult sticky_locked() const { return sticky_; }

  std::condition_variable work_cv_, done_cv_, slot_cv_;
  std::deque<Op> queue_;
  /// Slots taken per stream id (submissions queued or running); absent means none.
  std::unordered_map<uint32_t, uint32_t> slots_;
  uint64_t next_seq_ = 1;
  uint64_t completed_ = 0;  ///< every operation with seq <= completed_ ran
  CUresult sticky_ = CUDA_SUCCESS;
  bool stopping_ = false;
  std::thread executor_;

  // Touched only by the executor thread (and by the destructor after it stopped), except
  // clock_ns_, which run_executor reads under mu for event times.
  const int engine_entry_;
  bool holding_ = false;       ///< owns the device's engine
  uint64_t clock_ns_ = 0;      ///< this context's device timeline: end of its last operation
  uint64_t slice_end_ns_ = 0;  ///< end of the current slice, on that timeline
  uint64_t own_ns_ = 0;        ///< kernel time this context ran itself (SharedState::begin_slice)
  /// Device time run for this context by proxy while its process was stopped, not yet used by
  /// its kernels (SharedState::acquire_engine), in device order.
  std::vector<SharedState::Interval> credit_;
  size_t credit_next_ = 0;     ///< the first interval of credit_ not used up
};

}  // namespace simgpu
