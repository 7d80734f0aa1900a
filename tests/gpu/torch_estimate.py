"""Real-GPU check of `coloc estimate` (issue 13): measures, on this card, what the estimator's
constants stand for, and the peak of real PyTorch training to compare the estimate with.

  context      device memory a process holds after one small tensor op (no tensors left), from
               NVML's per-process usage if pynvml is there, else mem_get_info's used delta; run
               twice, CUDA_MODULE_LOADING=LAZY and EAGER (each in a fresh subprocess)
  cublas       torch.cuda.memory_reserved() growth from the first fp32 matmul (the cuBLAS workspace
               PyTorch allocates through its caching allocator), with the allocated bytes of the
               operands and result subtracted
  train        peak device memory (used by the process: NVML, else mem_get_info) and PyTorch's
               max_memory_reserved over 6 training steps of ResNet-50 (torchvision, batch 32, fp32,
               SGD with momentum, 224x224) and of GPT-2 small (Hugging Face GPT2LMHeadModel if
               transformers is installed; batch 8, 512 tokens, AdamW), beside `coloc estimate --json` for the same settings

Prints one JSON object (also to --json). Exit 77 without torch/CUDA."""
import argparse
import json
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

ap = argparse.ArgumentParser()
ap.add_argument("--coloc", default="", help="the coloc binary, for coloc estimate")
ap.add_argument("--json", default="")
ap.add_argument("--part", default="", help=argparse.SUPPRESS)  # internal: one measurement per process
a = ap.parse_args()


def used_by_me():
    """Bytes this process holds on device 0: NVML's per-process figure, else total - free."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory), "nvml"
    except Exception:
        pass
    free, total = torch.cuda.mem_get_info(0)
    return int(total - free), "mem_get_info"


def part_context():
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    used, how = used_by_me()
    return {"bytes": used, "how": how, "loading": os.environ.get("CUDA_MODULE_LOADING", "")}


def part_cublas():
    a_ = torch.randn(512, 512, device="cuda")
    b_ = torch.randn(512, 512, device="cuda")
    before = torch.cuda.memory_reserved()
    alloc_before = torch.cuda.memory_allocated()
    c = a_ @ b_
    torch.cuda.synchronize()
    grew = torch.cuda.memory_reserved() - before
    result = torch.cuda.memory_allocated() - alloc_before - c.numel() * 4
    return {"reserved_growth": grew, "workspace_allocated": result,
            "capability": list(torch.cuda.get_device_capability(0))}


def part_train(model_name):
    torch.manual_seed(0)
    if model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().cuda()
        x = torch.randn(32, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (32,), device="cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        step = lambda: loss_fn(model(x), y)
    else:
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError:
            return {"skipped": "no transformers package"}
        model = GPT2LMHeadModel(GPT2Config()).cuda()  # GPT-2 small: 12 layers, 768 wide
        model.train()
        x = torch.randint(0, 50257, (8, 512), device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step = lambda: model(input_ids=x, labels=x).loss
    peak_used = 0
    for _ in range(6):
        opt.zero_grad(set_to_none=True)
        loss = step()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        peak_used = max(peak_used, used_by_me()[0])
    return {"peak_used": peak_used, "max_reserved": torch.cuda.max_memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated(), "how": used_by_me()[1]}


if a.part:
    kind, _, arg = a.part.partition(":")
    out = {"context": part_context, "cublas": part_cublas}.get(kind, lambda: part_train(arg))()
    print(json.dumps(out))
    sys.exit(0)


def sub(part, env=None):
    e = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, __file__, "--part", part], capture_output=True, text=True, env=e, timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:
        return {"error": (r.stderr or r.stdout)[-500:]}


def estimate(args):
    if not a.coloc:
        return None
    r = subprocess.run([a.coloc, "estimate", "--json", "--device-model", torch.cuda.get_device_name(0)] + args,
                       capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except Exception:
        return {"error": r.stderr.strip()}


res = {
    "device": torch.cuda.get_device_name(0),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "context_lazy": sub("context", {"CUDA_MODULE_LOADING": "LAZY"}),
    "context_eager": sub("context", {"CUDA_MODULE_LOADING": "EAGER"}),
    "cublas": sub("cublas"),
    "resnet50": sub("train:resnet50"),
    "resnet50_estimate": estimate(["--model", "resnet50", "--batch", "32", "--optimizer", "sgd-momentum"]),
    "gpt2": sub("train:gpt2"),
    "gpt2_estimate": estimate(["--model", "gpt2-small", "--batch", "8", "--seq", "512", "--optimizer", "adamw"]),
}
text = json.dumps(res, indent=2)
print(text)
if a.json:
    with open(a.json, "w") as f:
        f.write(text + "\n")
