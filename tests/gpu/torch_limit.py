"""Under LD_PRELOAD=libcoloc.so with COLOC_MEM_LIMIT: PyTorch sees the limit and gets an ordinary
OutOfMemoryError past it. Exit 0 when both hold, 1 otherwise, 77 without torch/CUDA."""
import json
import os
import sys

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse(s):
    s = s.strip().upper().replace("IB", "")
    return int(float(s.rstrip("KMGT")) * UNITS[s[-1] if s[-1] in "KMGT" else ""])


limit = parse(os.environ["COLOC_EXPECT_LIMIT"])
free, total = torch.cuda.mem_get_info()
result = {"limit": limit, "total": total, "free": free}
chunks, oom = [], None
try:
    for _ in range(100000):
        chunks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:  # the ordinary PyTorch OOM, not a crash
    oom = type(e).__name__
result["allocated_before_oom"] = len(chunks) * (256 << 20)
result["oom"] = oom
del chunks
torch.cuda.empty_cache()
x = torch.ones(1 << 20, device="cuda")  # still usable after the OOM
result["usable_after_oom"] = float(x.sum().item()) == float(1 << 20)
ok = total == limit and oom == "OutOfMemoryError" and result["allocated_before_oom"] <= limit and result["usable_after_oom"]
result["ok"] = ok
print(json.dumps(result))
sys.exit(0 if ok else 1)
