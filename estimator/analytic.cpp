// estimator/analytic.cpp — see analytic.h for what is estimated; every constant below cites its
// source.
//
// The allocator item replays the allocations and frees of the training step (trainer.h) over a
// size-only model of PyTorch's CUDACachingAllocator written here from its rules (see "the caching
// allocator, replayed"), independent of coloc-train's emulated allocator:
// tests/integration/workload/estimate_agreement_test.cpp checks one against the other.
#include "analytic.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "input_error.h"

namespace coloc::est {

namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

// PyTorch c10/cuda/CUDACachingAllocator.cpp, default settings (the same names there):
constexpr uint64_t kMinBlockSize = 512;        // every block is a multiple of 512 B
constexpr uint64_t kSmallSize = 1 * MiB;       // requests up to this come from the small pool
constexpr uint64_t kSmallBuffer = 2 * MiB;     // the small pool's segments
constexpr uint64_t kLargeBuffer = 20 * MiB;    // segments for requests of 1-10 MiB
constexpr uint64_t kMinLargeAlloc = 10 * MiB;  // from here a request gets a segment of its own
constexpr uint64_t kRoundLarge = 2 * MiB;      // ... its size rounded up to 2 MiB

// The driver (plain allocator): cuMemAlloc returns 512 B-aligned memory (simgpu charges each
// allocation rounded to 512 B, tools/simgpu/memory.h); allocations of 2 MiB or more take whole
// 2 MiB pages, the granularity cuMemGetAllocationGranularity reports for device memory. We assume
// smaller ones share pages (as the driver sub-allocates them), so they cost their 512 B rounding.
constexpr uint64_t kDriverGranule = 512;
constexpr uint64_t kDriverPage = 2 * MiB;

// The CUDA context of a process that has run PyTorch's kernels. pytorch/pytorch#86509 (PyTorch
// 1.13, which made CUDA_MODULE_LOADING=LAZY the default) measured, after one tensor operation,
// 666,632,192 B with eager loading and 287,047,680 B with lazy loading; ptrblck in
// pytorch/pytorch#109888 gives "around 400MB" under lazy loading. A training job loads kernels of
// PyTorch, cuDNN and cuBLAS as it runs, so we count the eager figure: a deliberate upper bound,
// the same for every device model until a real-GPU measurement corrects it (docs/gpu-runs.md).
constexpr uint64_t kContextEager = 666632192;
constexpr uint64_t kContextLazyShortScript = 287047680;

// cuBLAS workspaces, PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp: one per cuBLAS handle and
// stream, of CUBLAS_WORKSPACE_CONFIG's default size: ":4096:2:16:8" = 2 × 4096 KiB + 8 × 16 KiB
// (8.125 MiB) before Hopper, ":4096:8" = 8 × 4096 KiB (32 MiB) on sm90. Handles are per thread and
// a training step uses two threads: the forward pass runs on the Python thread, autograd's
// backward on its device thread. They come from the caching allocator and stay.
constexpr uint64_t kCublasWorkspace = 2 * 4096 * KiB + 8 * 16 * KiB;
constexpr uint64_t kCublasWorkspaceSm90 = 8 * 4096 * KiB;
constexpr unsigned kCublasHandles = 2;  // trace_training places one per thread

// Ours: 5% on top of everything counted, for kernels and fragmentation the model does not see.
constexpr unsigned kSafetyPercent = 5;

// Compute capabilities: NVIDIA's list of CUDA GPUs (developer.nvidia.com/cuda-gpus).
constexpr DeviceProfile kProfiles[] = {
    {"A100", 8, 0, "sm80 (Ampere), NVIDIA CUDA GPUs list"},
    {"H100", 9, 0, "sm90 (Hopper), NVIDIA CUDA GPUs list"},
    {"H200", 9, 0, "sm90 (Hopper), NVIDIA CUDA GPUs list"},
    {"A10", 8, 6, "sm86 (Ampere), NVIDIA CUDA GPUs list"},
    {"L4", 8, 9, "sm89 (Ada), NVIDIA CUDA GPUs list"},
    {"L40", 8, 9, "sm89 (Ada), NVIDIA CUDA GPUs list"},
    {"RTX 3090", 8, 6, "sm86 (Ampere), NVIDIA CUDA GPUs list"},
    {"RTX 4090", 8, 9, "sm89 (Ada), NVIDIA CUDA GPUs list"},
    {"RTX 6000 Ada", 8, 9, "sm89 (Ada), NVIDIA CUDA GPUs list"},
    {"V100", 7, 0, "sm70 (Volta), NVIDIA CUDA GPUs list"},
    {"T4", 7, 5, "sm75 (Turing), NVIDIA CUDA GPUs list"},
};

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool icontains(std::string_view hay, std::string_view needle) {
  auto lower = [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); };
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != hay.end();
}

// ---- the caching allocator, replayed ------------------------------------------------------------
//
// The allocator item comes from replaying the training step's allocations and frees, in
// coloc-train's order (trainer.h; trace_training below), over a model of PyTorch's
// CUDACachingAllocator that keeps block sizes and their segments, no addresses (c10/cuda/CUDACachingAllocator.cpp, default settings, one stream):
//   - a request of b bytes gets a block of b rounded up to 512 B, at least 512 B (round_size);
//   - blocks of at most 1 MiB come from the small pool, larger ones from the large pool;
//   - a request takes the smallest cached free block of its pool that fits (get_free_block: best
//     fit); the rest of it is split off and stays cached when it is at least 512 B (small pool) or
//     more than 1 MiB (large pool), otherwise the request keeps the whole block (should_split);
//   - when no cached block fits, a new segment: 2 MiB (small), 20 MiB for requests under 10 MiB,
//     else the request rounded up to 2 MiB (get_allocation_size);
//   - a freed block goes back to its pool; segments are never returned (the driver does not run
//     out in the model, so release_cached_blocks never runs).
// The model keeps sizes, not addresses: a block knows its segment but not its place in it, so a
// freed block cannot merge with its free neighbours (free_block's try_merge_blocks) while anything
// else in its segment is allocated; once nothing in a segment is allocated, its free blocks become
// the one free block of the segment's size that PyTorch's merges leave. Where PyTorch would merge
// two free neighbours in a segment still in use, the model keeps two blocks and may need a new
// segment: the replay is an upper bound of the real allocator's reserved peak in practice (not a
// theorem: best fit over other blocks could in principle fare worse). Measured against coloc-train's
// emulated allocator, which merges (tests/integration/workload/estimate_agreement_test.cpp, 74
// configurations, three emulated iterations): 0% to +6.8% above, never below (the worst, resnet50
// at batch 1, fp32, sgd: one 20 MiB segment on 294 MiB); most configurations agree to the byte.
// Without even the whole-segment merge (blocks by size alone) it was 0% to +16.4% (mobilenet-v2 at
// batch 4, fp32, sgd; inception-v3 at batch 32, fp32, adam +13.2%).
//
// The reserved peak is the reserved bytes at the end of the replay (nothing is released). The step
// is replayed twice: the second iteration, served from a warm cache, can need segments the first
// did not (best fit splits a different cached block: coloc-train's allocator reserves 62.2 GB in
// llama-1b's first iteration at batch 16, seq 1024, bf16, and 70.2 GB from its second; the replay
// gives the same 70.2 GB). Further iterations add nothing over the agreement sweep.
constexpr int kIterations = 2;

// Bytes the driver charges one cuMemAlloc of `bytes` (> 0), for Allocator::plain.
uint64_t plain_bytes(uint64_t bytes) {
  return bytes >= kDriverPage ? round_up(bytes, kDriverPage) : round_up(bytes, kDriverGranule);
}

// One allocator event of the training step: allocate `bytes` as tensor `id`, or free tensor `id`.
struct Event {
  bool alloc = true;
  uint32_t id = 0;
  uint64_t bytes = 0;
};

// The allocations and frees of training, as the allocator sees them: setup() once, then the steps.
struct Trace {
  std::vector<Event> setup;
  std::vector<Event> first_step;  // the first iteration (also allocates the cuBLAS workspaces)
  std::vector<Event> step;        // every later iteration
  uint32_t ids = 0;               // tensor ids used
};

// The training step of trainer.h, in its order. Setup: every parameter tensor's weights, fp32
// masters (16-bit dtypes), gradients, optimizer state. Step: forward, each layer's saved tensors;
// the loss's gradient; backward, last layer first: the gradient of its input, the temporary of its
// largest saved tensor, its cuDNN workspace (libraries), then the workspace, the temporary, its
// saved tensors and the gradient of its output are freed. With libraries, the two cuBLAS
// workspaces (CublasHandlePool.cpp: one per handle, handles per thread) are allocated at the first
// matmul of each thread and kept: the forward thread's after the saved tensors of the first layer
// that runs one, the autograd thread's in the backward of the last such layer. A layer runs a
// matmul when it has FLOPs and no cuDNN workspace (convolutions have one; linear layers, attention
// and classifiers do not); a model without such a layer gets both at its first layer's forward and
// last layer's backward.
Trace trace_training(const Model& model, uint64_t e, bool mixed, unsigned states, bool libs, uint64_t cublas_one) {
  Trace t;
  const auto& layers = model.layers;
  const size_t n = layers.size();
  auto param_tensors = [&](uint64_t bytes_per_elem) {
    for (const Layer& l : layers)
      for (uint64_t count : l.params) t.setup.push_back({true, t.ids++, count * bytes_per_elem});
  };
  param_tensors(e);                                    // weights
  if (mixed) param_tensors(4);                         // fp32 masters
  param_tensors(e);                                    // gradients
  for (unsigned s = 0; s < states; ++s) param_tensors(4);  // momentum / Adam's moments

  size_t fwd_mm = n, bwd_mm = n;
  for (size_t i = 0; i < n; ++i)
    if (layers[i].forward_flops > 0 && layers[i].workspace_bytes == 0) {
      if (fwd_mm == n) fwd_mm = i;
      bwd_mm = i;
    }
  if (fwd_mm == n) fwd_mm = 0, bwd_mm = n - 1;

  for (int iteration = 0; iteration < 2; ++iteration) {
    std::vector<Event>& ev = iteration == 0 ? t.first_step : t.step;
    const bool cublas = libs && iteration == 0;
    uint32_t id = t.ids;  // the step's tensors: ids from here
    std::vector<std::vector<uint32_t>> saved(n);
    for (size_t i = 0; i < n; ++i) {
      for (uint64_t b : layers[i].saved_bytes) {
        saved[i].push_back(id);
        ev.push_back({true, id++, b});
      }
      if (cublas && i == fwd_mm) ev.push_back({true, id++, cublas_one});
    }
    uint32_t grad_out = id++;
    ev.push_back({true, grad_out, layers.back().output_bytes});
    for (size_t i = n; i-- > 0;) {
      const uint32_t grad_in = id++;
      if (i > 0) ev.push_back({true, grad_in, layers[i - 1].output_bytes});
      const uint32_t scratch = id++;
      ev.push_back({true, scratch, layers[i].largest_saved()});
      const uint32_t ws = id++;
      if (libs) ev.push_back({true, ws, layers[i].workspace_bytes});
      if (cublas && i == bwd_mm) ev.push_back({true, id++, cublas_one});
      if (libs) ev.push_back({false, ws, 0});
      ev.push_back({false, scratch, 0});
      for (uint32_t s : saved[i]) ev.push_back({false, s, 0});
      ev.push_back({false, grad_out, 0});
      grad_out = grad_in;
    }
    t.ids = id;
  }
  return t;
}

// A block handed out by a replay: its size (0 = none) and, for the caching allocator, its segment.
struct Block {
  uint64_t size = 0;
  uint32_t segment = 0;
};

// PyTorch's caching allocator over sizes and segments (the rules above). Sizes in bytes.
class CachingReplay {
 public:
  /// The block a request of `bytes` (> 0) gets, from the cache or a new segment.
  Block allocate(uint64_t bytes) {
    const uint64_t size = bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);  // round_size
    const bool small = size <= kSmallSize;
    Pool& pool = small ? small_ : large_;
    Block b;
    if (auto it = pool.lower_bound({size, 0}); it != pool.end()) {  // get_free_block: best fit
      b = {it->first, it->second};
      pool.erase(it);
      take(segments_[b.segment].free, b.size);
    } else {  // alloc_block: a new segment of get_allocation_size
      b.size = small ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer : round_up(size, kRoundLarge);
      b.segment = uint32_t(segments_.size());
      segments_.push_back({b.size, small, 0, {}});
      reserved_ += b.size;
    }
    const uint64_t rest = b.size - size;
    if (small ? rest >= kMinBlockSize : rest > kSmallSize) {  // should_split
      cache({rest, b.segment});
      b.size = size;
    }
    ++segments_[b.segment].allocated;
    return b;
  }
  /// Returns a block allocate() gave to the cache; the last one of its segment makes the segment
  /// one free block again.
  void free(const Block& b) {
    Segment& s = segments_[b.segment];
    if (--s.allocated > 0) {
      cache(b);
      return;
    }
    Pool& pool = s.small ? small_ : large_;
    for (uint64_t f : s.free) pool.erase(pool.find({f, b.segment}));
    s.free.clear();
    cache({s.size, b.segment});
  }
  /// Bytes of segments held from the driver.
  uint64_t reserved() const { return reserved_; }

 private:
  // Free blocks by size, then segment (PyTorch orders ties by address; segments in their order).
  using Pool = std::multiset<std::pair<uint64_t, uint32_t>>;
  struct Segment {
    uint64_t size = 0;
    bool small = false;
    uint32_t allocated = 0;       // blocks handed out
    std::vector<uint64_t> free;   // sizes of its cached free blocks
  };
  static void take(std::vector<uint64_t>& v, uint64_t size) {
    auto it = std::find(v.begin(), v.end(), size);
    *it = v.back();
    v.pop_back();
  }
  void cache(const Block& b) {
    Segment& s = segments_[b.segment];
    (s.small ? small_ : large_).insert({b.size, b.segment});
    s.free.push_back(b.size);
  }

  Pool small_, large_;
  std::vector<Segment> segments_;
  uint64_t reserved_ = 0;
};

// Runs `events` on `alloc`, whose allocate(bytes) returns the Block that free() later takes back.
template <class A>
void replay(A& alloc, const std::vector<Event>& events, std::vector<Block>& blocks) {
  for (const Event& ev : events) {
    if (ev.alloc) {
      blocks[ev.id] = ev.bytes == 0 ? Block{} : alloc.allocate(ev.bytes);  // an empty tensor allocates nothing
    } else if (blocks[ev.id].size != 0) {
      alloc.free(blocks[ev.id]);
      blocks[ev.id] = {};
    }
  }
}

// Reserved bytes at the peak under PyTorch's caching allocator: the replay's segments.
uint64_t caching_reserved(const Trace& t) {
  CachingReplay a;
  std::vector<Block> blocks(t.ids);
  replay(a, t.setup, blocks);
  replay(a, t.first_step, blocks);
  for (int i = 1; i < kIterations; ++i) replay(a, t.step, blocks);
  return a.reserved();
}

// One cuMemAlloc per tensor, freed at once: the most bytes held at any moment of the replay.
struct PlainReplay {
  uint64_t live = 0, peak = 0;
  Block allocate(uint64_t bytes) {
    const uint64_t b = plain_bytes(bytes);
    live += b;
    peak = std::max(peak, live);
    return {b, 0};
  }
  void free(const Block& b) { live -= b.size; }
};

uint64_t plain_reserved(const Trace& t) {
  PlainReplay a;
  std::vector<Block> blocks(t.ids);
  replay(a, t.setup, blocks);
  replay(a, t.first_step, blocks);
  replay(a, t.step, blocks);
  return a.peak;
}

std::string mib_text(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", double(bytes) / double(MiB));
  std::string s = buf;
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s + " MiB";
}

}  // namespace

const char* allocator_name(Allocator a) { return a == Allocator::pytorch ? "pytorch" : "plain"; }

std::optional<Allocator> parse_allocator(std::string_view s) {
  if (s == "pytorch") return Allocator::pytorch;
  if (s == "plain") return Allocator::plain;
  return std::nullopt;
}

std::span<const DeviceProfile> device_profiles() { return kProfiles; }

const DeviceProfile* find_device_profile(std::string_view nvml_name) {
  // The longest name that occurs wins: "NVIDIA A100-SXM4-80GB" is an A100, not an A10.
  const DeviceProfile* best = nullptr;
  for (const DeviceProfile& p : kProfiles)
    if (icontains(nvml_name, p.name) && (!best || p.name.size() > best->name.size())) best = &p;
  return best;
}

const EstimateItem* Estimate::item(std::string_view key) const {
  for (const EstimateItem& i : items)
    if (i.key == key) return &i;
  return nullptr;
}

Estimate estimate_training(const Model& model, const EstimateOptions& options) {
  const DeviceProfile* device = find_device_profile(options.device_model);
  if (device == nullptr) {
    std::string known;
    for (const DeviceProfile& p : kProfiles) known += (known.empty() ? "" : ", ") + std::string(p.name);
    throw InputError("unknown device model '" + options.device_model + "' (known: " + known + ")");
  }
  if (model.layers.empty()) throw InputError(model.name + ": the model has no layers");
  {
    // Every item below is a 64-bit sum; refuse a model whose sizes could wrap one (no device
    // holds 2^60 bytes): 16 B per parameter at most (weights, gradients, masters, 2 moments), and
    // each layer's saved tensors, output and input gradients counted twice over.
    using u128 = unsigned __int128;
    u128 params = 0, bytes = 0;
    for (const Layer& l : model.layers) {
      for (uint64_t c : l.params) params += c;
      for (uint64_t b : l.saved_bytes) bytes += u128(b) * 2;
      bytes += u128(l.output_bytes) * 2 + l.workspace_bytes;
    }
    if (params * 16 + bytes > u128(1) << 60)
      throw InputError(model.name + ": too large to estimate: its parameters and activations come to over 2^60 bytes");
  }

  Estimate est;
  const uint64_t params = model.param_count();
  est.params = params;
  const uint64_t e = dtype_bytes(options.dtype);
  const bool mixed = options.dtype != DType::fp32;
  const unsigned states = options.optimizer == Optimizer::sgd ? 0 : options.optimizer == Optimizer::sgd_momentum ? 1 : 2;
  const bool libs = options.libraries;
  const auto& layers = model.layers;
  const size_t n = layers.size();

  // Activations at each layer's backward (trainer.h): saved tensors of layers 0..i, the gradient of
  // layer i's output (allocated by the backward of layer i+1, or the loss's for the last layer),
  // the gradient of its input, the temporary of its largest saved tensor; its workspace apart.
  uint64_t saved_so_far = 0;
  size_t peak = n - 1;
  uint64_t peak_total = 0;
  est.layers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = layers[i];
    saved_so_far += l.saved_total();
    const uint64_t grad_in = i > 0 ? layers[i - 1].output_bytes : 0;
    est.layers[i].layer = l.name;
    est.layers[i].bytes = saved_so_far + l.output_bytes + grad_in + l.largest_saved();
    est.layers[i].workspace_bytes = libs ? l.workspace_bytes : 0;
  }
  // The backward runs from the last layer; on a tie the first reached holds the peak.
  for (size_t i = n; i-- > 0;) {
    const uint64_t total = est.layers[i].bytes + est.layers[i].workspace_bytes;
    if (total > peak_total) {
      peak_total = total;
      peak = i;
    }
  }
  est.peak_layer = layers[peak].name;
  const uint64_t activations = est.layers[peak].bytes;
  const uint64_t cudnn = est.layers[peak].workspace_bytes;

  const uint64_t cublas_one = device->sm_major >= 9 ? kCublasWorkspaceSm90 : kCublasWorkspace;
  const uint64_t cublas = libs ? kCublasHandles * cublas_one : 0;
  const Trace trace = trace_training(model, e, mixed, states, libs, cublas_one);

  const uint64_t weights = params * e, gradients = params * e;
  const uint64_t masters = mixed ? params * 4 : 0;
  const uint64_t state = params * 4 * states;
  const uint64_t requested = weights + gradients + masters + state + activations + cublas + cudnn;
  const uint64_t reserved = options.allocator == Allocator::pytorch ? caching_reserved(trace) : plain_reserved(trace);
  const uint64_t allocator = reserved > requested ? reserved - requested : 0;

  const std::string dt = dtype_name(options.dtype);
  auto add = [&](const char* key, std::string label, uint64_t bytes, std::string note) {
    est.items.push_back({key, std::move(label), bytes, std::move(note)});
  };
  add("weights", "weights (" + dt + ")", weights,
      std::to_string(e) + " B per parameter, one tensor per parameter tensor (Trainer::setup)");
  add("gradients", "gradients (" + dt + ")", gradients,
      std::to_string(e) + " B per parameter, kept allocated between steps as coloc-train does (zero_grad("
      "set_to_none=True) would free them after each step: ours is the conservative count)");
  add("master_weights", mixed ? "fp32 master weights (mixed precision)" : "fp32 master weights (none in fp32)", masters,
      mixed ? "4 B per parameter: mixed precision keeps an fp32 copy (Micikevicius et al. 2018)"
            : "fp32 training keeps no second copy");
  const char* state_what = states == 0 ? "sgd: no state" : states == 1 ? "sgd-momentum: 1 fp32 buffer" : "adam: 2 fp32 moments";
  add("optimizer_state", std::string("optimizer state (") + state_what + ")", state,
      std::to_string(4 * states) + " B per parameter, as torch.optim keeps it (momentum_buffer; exp_avg, exp_avg_sq)");
  add("activations", "activations (peak at " + est.peak_layer + " backward)", activations,
      "saved tensors of layers up to " + est.peak_layer + ", the gradients of its output and input and the "
      "temporary of its largest saved tensor, in coloc-train's order (trainer.h)");
  add("allocator", std::string("allocator (") + allocator_name(options.allocator) + ": rounding and segments)", allocator,
      options.allocator == Allocator::pytorch
          ? "the training step replayed over PyTorch CUDACachingAllocator's rules: 512 B blocks, best fit from the "
            "cache, splits, 2 MiB / 20 MiB segments, own segments rounded to 2 MiB; freed blocks merged only once "
            "their whole segment is free (an upper bound); peak reserved less the items counted apart"
          : "one cuMemAlloc per tensor: 512 B rounding, 2 MiB pages from 2 MiB up (assumed driver granularity)");
  add("cuda_context", "CUDA context (PyTorch, cuDNN, cuBLAS kernels loaded)", kContextEager,
      "666,632,192 B, eager module loading (pytorch/pytorch#86509): a deliberate upper bound; a short script under "
      "lazy loading shows ~" + std::to_string(kContextLazyShortScript / 1000000) + " MB" +
          (options.lazy_loading ? " (CUDA_MODULE_LOADING=LAZY is set, but training loads most kernels)" : "") +
          "; to be corrected from a real-GPU measurement (docs/gpu-runs.md)");
  add("cublas_workspace",
      "cuBLAS workspaces (" + std::to_string(libs ? kCublasHandles : 0) + " x " + mib_text(cublas_one) + ", sm" +
          std::to_string(device->sm_major) + std::to_string(device->sm_minor) + ")",
      cublas,
      libs ? "one per handle and stream, CUBLAS_WORKSPACE_CONFIG default " +
                 std::string(device->sm_major >= 9 ? ":4096:8" : ":4096:2:16:8") +
                 " (PyTorch CublasHandlePool.cpp); forward and backward threads have a handle each"
           : "left out (library workspaces not counted)");
  add("cudnn_workspace", "cuDNN workspace (at " + est.peak_layer + " backward)", cudnn,
      "the peak layer's convolution workspace, live at the peak moment (0 for layers without one)");
  uint64_t sum = 0;
  for (const EstimateItem& i : est.items) sum += i.bytes;
  const uint64_t margin = ceil_div(sum * kSafetyPercent, 100);
  add("safety_margin", "safety margin (5%, ours: covers kernels and fragmentation this model does not see)", margin,
      "5% of the sum above, rounded up; a margin we chose, not a measurement");
  est.total_bytes = sum + margin;
  return est;
}

}  // namespace coloc::est
