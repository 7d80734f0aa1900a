// estimator/analytic.cpp — see analytic.h for what is estimated; every constant below cites its
// source.
//
// The allocator item is a model of PyTorch's CUDACachingAllocator for the allocation pattern of one
// training step (trainer.h), computed from the allocator's documented rules and the lifetimes of
// the tensors, not by running an allocator: tests/integration/workload/estimate_agreement_test.cpp
// checks it against the emulated allocator coloc-train runs.
#include "analytic.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

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
constexpr unsigned kCublasHandles = 2;

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

// ---- the caching allocator, analytically -------------------------------------------------------
//
// A tensor of b bytes gets a block of b rounded up to 512 B (at least 512). Blocks of at most
// 1 MiB are cut from 2 MiB segments, blocks under 10 MiB from 20 MiB segments (a block that would
// leave at most 1 MiB takes the rest too: it is not split), larger ones get a segment of their own
// rounded up to 2 MiB. So a tensor accounts for its block's share of a segment filled with blocks
// like it: 2 MiB / ⌊2 MiB / block⌋, 20 MiB / ⌊20 MiB / block⌋, or its own segment. Freed blocks
// stay cached and segments are not returned, so the reserved peak is what the first iteration
// needed (later ones are served from the cache, with one exception below).
//
//   small pool:  blocks split and merge at 512 B, so any freed space serves any later small
//                request: the pool holds the most small blocks live at one moment, in 2 MiB
//                segments.
//   large pool:  a freed block serves a later request of its own size; a request of another size
//                takes a new segment (best fit may split a larger free block instead, which saves
//                memory now and fragments later: we count the conservative case). For each block
//                size the pool holds the most blocks of that size live at one moment.
//   later iterations: when a request's own size is taken, best fit splits the largest free
//                segment for it, and the largest tensor then needs a segment more (observed on
//                coloc-train's allocator: llama-1b batch 16 seq 1024 bf16 reserves 62.2 GB in its
//                first iteration and 70.2 GB from its second, one 8016 MiB segment more). Counted
//                once, for the largest per-iteration tensor in the large pool.
//
// The moments that matter are the backward pass's: while layer i's backward runs, the tensors
// live are the persistent ones, the saved tensors of layers 0..i, the gradient of layer i's output
// and of its input, the temporary of its largest saved tensor and its library workspace. Every
// forward moment holds a subset of the first backward moment's tensors.

struct Share {
  bool small = false;   // from the small pool
  uint64_t bytes = 0;   // the reserved memory the tensor accounts for
};

Share caching_share(uint64_t bytes) {
  const uint64_t block = round_up(std::max<uint64_t>(bytes, 1), kMinBlockSize);
  if (block <= kSmallSize) return {true, ceil_div(kSmallBuffer, kSmallBuffer / block)};
  if (block < kMinLargeAlloc) return {false, ceil_div(kLargeBuffer, kLargeBuffer / block)};
  return {false, round_up(block, kRoundLarge)};
}

uint64_t plain_bytes(uint64_t bytes) {
  return bytes >= kDriverPage ? round_up(bytes, kDriverPage) : round_up(std::max<uint64_t>(bytes, 1), kDriverGranule);
}

// The tensors of one training step, as the allocator sees them.
struct StepTensors {
  std::vector<uint64_t> persistent;               // setup(): weights, masters, gradients, state; workspaces
  std::vector<std::vector<uint64_t>> saved;       // per layer: its saved tensors
  std::vector<std::vector<uint64_t>> transient;   // per layer: what its backward adds to them
};

// Reserved bytes at the peak under PyTorch's allocator (the model above).
uint64_t caching_reserved(const StepTensors& t) {
  uint64_t small_persistent = 0;
  std::map<uint64_t, uint64_t> large_persistent;  // share -> tensors
  for (uint64_t b : t.persistent) {
    if (b == 0) continue;  // an empty tensor allocates nothing
    const Share s = caching_share(b);
    if (s.small) small_persistent += s.bytes;
    else ++large_persistent[s.bytes];
  }
  // Saved tensors accumulate from layer 0 up, so the most live at layer i's backward is the
  // running sum up to i plus that layer's transients.
  uint64_t small_cum = 0, small_peak = 0, largest = 0;
  std::map<uint64_t, uint64_t> cum, most;  // share -> live saved tensors so far / most at once
  for (size_t i = 0; i < t.saved.size(); ++i) {
    for (uint64_t b : t.saved[i]) {
      if (b == 0) continue;
      const Share s = caching_share(b);
      if (s.small) {
        small_cum += s.bytes;
      } else {
        ++cum[s.bytes];
        largest = std::max(largest, s.bytes);
      }
    }
    uint64_t small_now = small_cum;
    std::map<uint64_t, uint64_t> extra;
    for (uint64_t b : t.transient[i]) {
      if (b == 0) continue;
      const Share s = caching_share(b);
      if (s.small) {
        small_now += s.bytes;
      } else {
        ++extra[s.bytes];
        largest = std::max(largest, s.bytes);
      }
    }
    small_peak = std::max(small_peak, small_now);
    for (auto [share, n] : extra) most[share] = std::max(most[share], cum[share] + n);
  }
  for (auto [share, n] : cum) most[share] = std::max(most[share], n);

  uint64_t reserved = round_up(small_persistent + small_peak, kSmallBuffer);
  for (auto [share, n] : large_persistent) reserved += share * n;
  for (auto [share, n] : most) reserved += share * n;
  return reserved + largest;  // + the largest per-iteration segment once more (later iterations)
}

// Bytes held from the driver at the peak with one cuMemAlloc per tensor, freed at once.
uint64_t plain_reserved(const StepTensors& t) {
  uint64_t persistent = 0, cum = 0, peak = 0;
  for (uint64_t b : t.persistent)
    if (b) persistent += plain_bytes(b);
  for (size_t i = 0; i < t.saved.size(); ++i) {
    for (uint64_t b : t.saved[i])
      if (b) cum += plain_bytes(b);
    uint64_t now = cum;
    for (uint64_t b : t.transient[i])
      if (b) now += plain_bytes(b);
    peak = std::max(peak, now);
  }
  return persistent + peak;
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
  StepTensors t;
  t.saved.resize(n);
  t.transient.resize(n);
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
    t.saved[i] = l.saved_bytes;
    t.transient[i] = {l.output_bytes, grad_in, l.largest_saved()};
    if (libs) t.transient[i].push_back(l.workspace_bytes);
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

  // Persistent tensors, one per parameter tensor, in Trainer::setup's order.
  auto each_param = [&](uint64_t bytes_per_elem) {
    for (const Layer& l : layers)
      for (uint64_t count : l.params) t.persistent.push_back(count * bytes_per_elem);
  };
  each_param(e);
  if (mixed) each_param(4);
  each_param(e);
  for (unsigned s = 0; s < states; ++s) each_param(4);
  const uint64_t cublas_one = device->sm_major >= 9 ? kCublasWorkspaceSm90 : kCublasWorkspace;
  const uint64_t cublas = libs ? kCublasHandles * cublas_one : 0;
  if (libs)
    for (unsigned h = 0; h < kCublasHandles; ++h) t.persistent.push_back(cublas_one);

  const uint64_t weights = params * e, gradients = params * e;
  const uint64_t masters = mixed ? params * 4 : 0;
  const uint64_t state = params * 4 * states;
  const uint64_t requested = weights + gradients + masters + state + activations + cublas + cudnn;
  const uint64_t reserved = options.allocator == Allocator::pytorch ? caching_reserved(t) : plain_reserved(t);
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
          ? "PyTorch CUDACachingAllocator rules: 512 B blocks, 2 MiB / 20 MiB segments, own segments rounded to 2 MiB, "
            "cached blocks reused by their size, one more segment of the largest tensor for later iterations"
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
