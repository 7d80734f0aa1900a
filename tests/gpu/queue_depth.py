"""The depth of a stream's queue on the real driver: how many long kernels one stream takes before
a launch blocks the host until a slot frees. simgpu's SIMGPU_QUEUE_DEPTH (default 1024) is an
assumption; this measures what it stands for (tools/simgpu/README.md, "Configuration").

Launches torch.cuda._sleep kernels of --kernel-ms (a spin of a calibrated number of cycles) on
one stream, timing each launch on the host; the first launch that takes more than half a kernel's
duration is where the queue was full: the depth is the number of launches before it. Then, with
that stream still full, it times one launch on a second stream (does each stream have its own
queue?). Prints one JSON line. Exit 0 when blocking was seen, 1 when it was not within
--max-launches, 77 without PyTorch or CUDA. Runs in about depth x kernel-ms (1024 x 5 ms = 5 s)
plus the drain; --max-launches x --kernel-ms bounds it (4096 x 5 ms = 20 s).
"""
import argparse
import json
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--kernel-ms", type=float, default=5.0, help="duration of each kernel (ms, 0.5..100)")
ap.add_argument("--max-launches", type=int, default=4096, help="give up after this many launches (64..100000)")
ap.add_argument("--confirm", type=int, default=8, help="blocking launches to see after the first (1..64)")
args = ap.parse_args()
if not (0.5 <= args.kernel_ms <= 100 and 64 <= args.max_launches <= 100000 and 1 <= args.confirm <= 64):
    ap.error("--kernel-ms 0.5..100, --max-launches 64..100000, --confirm 1..64")

torch.cuda.init()
dev = torch.cuda.current_device()

# Calibrate: cycles per ms of torch.cuda._sleep (a clock64() spin).
torch.cuda._sleep(1000)  # load the kernel
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
probe_cycles = 10_000_000
start.record()
torch.cuda._sleep(probe_cycles)
end.record()
end.synchronize()
cycles_per_ms = probe_cycles / start.elapsed_time(end)
cycles = int(cycles_per_ms * args.kernel_ms)
half_kernel_s = args.kernel_ms / 2e3

s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
times = []
first_block = None
with torch.cuda.stream(s1):
    for i in range(args.max_launches):
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        dt = time.perf_counter() - t0
        times.append(dt)
        if first_block is None and dt > half_kernel_s:
            first_block = i
        if first_block is not None and i >= first_block + args.confirm:
            break
# s1 is full (if it ever was): does a launch on s2 wait for it?
t0 = time.perf_counter()
with torch.cuda.stream(s2):
    torch.cuda._sleep(cycles)
other_stream_s = time.perf_counter() - t0
torch.cuda.synchronize()

blocked_after = times[first_block:] if first_block is not None else []
result = {
    "device": torch.cuda.get_device_name(dev),
    "driver": torch.version.cuda,
    "kernel_ms": args.kernel_ms,
    "cycles_per_ms": round(cycles_per_ms),
    "launches": len(times),
    # The depth: launches that returned at once before the first that waited.
    "depth": first_block,
    "launch_us_before_full_p50": round(1e6 * sorted(times[: first_block or len(times)])[(first_block or len(times)) // 2], 2),
    "launch_ms_when_full": [round(1e3 * t, 3) for t in blocked_after[: args.confirm + 1]],
    "other_stream_launch_ms_while_full": round(1e3 * other_stream_s, 3),
    "ok": first_block is not None,
}
print(json.dumps(result))
sys.exit(0 if result["ok"] else 1)
