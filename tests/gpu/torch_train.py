"""A small, real PyTorch training loop (an MLP on random data) that runs for --seconds, optionally
holding --ballast-gib of extra device memory (to make two jobs together exceed a card). Prints one
JSON line: steps, seconds, steps_per_s, peak_reserved_bytes. Exit 77 without torch/CUDA."""
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

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=20)
ap.add_argument("--ballast-gib", type=float, default=0)
ap.add_argument("--json", default="")
ap.add_argument("--cuda-graph", action="store_true",
                help="capture one training step in a torch.cuda.graphs graph (GLOBAL capture mode) and replay it")
a = ap.parse_args()

torch.manual_seed(0)
ballast = torch.empty(int(a.ballast_gib * (1 << 30)), dtype=torch.uint8, device="cuda") if a.ballast_gib else None
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU()) for _ in range(8)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 4096, device="cuda")
def train_step():
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss


graph = None
if a.cuda_graph:
    # As PyTorch's docs do it: warm up on a side stream, then capture (capture_error_mode "global").
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=False)
            train_step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=False)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="global"):
        train_step()
steps, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < a.seconds:
    if graph is not None:
        graph.replay()
    else:
        opt.zero_grad(set_to_none=True)
        train_step()
    steps += 1
    if steps % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
out = {"steps": steps, "seconds": dt, "steps_per_s": steps / dt, "cuda_graph": graph is not None,
       "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
print(json.dumps(out))
if a.json:
    with open(a.json, "w") as f:
        json.dump(out, f)
