"""Suspension on a real GPU: a deterministic PyTorch training job is suspended to host memory by
coloc-ckpt (the driver's checkpoint API) while a second job uses the memory it gave back, then
resumed: its loss curve must equal, bit for bit, that of the same job run without a suspension.

  python3 tests/gpu/torch_suspend.py --ckpt build/bin/coloc-ckpt [--steps 60] [--at 20] [--json F]

The job (the `train` role of this script) trains a small convolutional network on fixed random
data, seeded, with torch.use_deterministic_algorithms(True) and CUBLAS_WORKSPACE_CONFIG set, and
prints one JSON line per step with its loss as the exact float (hex). The orchestrator runs it once
alone; then again, and when it has printed step --at it suspends it (coloc-ckpt suspend), records
the device's free memory (it must have risen by what the job held), starts the other job (the
`fill` role: allocates most of the free memory and runs matmuls for a few seconds), waits for it,
resumes the first (coloc-ckpt resume) and compares the curves. Prints one JSON line with the
checkpoint and restore times; exit 0 when the curves are equal, 1 when not (or a step failed),
77 without PyTorch, CUDA, or a driver with the checkpoint API.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def train(steps):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(64 * 16, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator(device="cpu").manual_seed(99)
    x = torch.randn(256, 3, 64, 64, generator=g).to(dev)
    y = torch.randint(0, 10, (256,), generator=g).to(dev)
    # Memory that the suspension must carry: 1 GiB of the job's own, written once, read at the end.
    ballast = torch.arange(1 << 28, dtype=torch.float32, device=dev)
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(json.dumps({"step": step, "loss": float(loss.item()).hex()}), flush=True)
        time.sleep(0.05)  # leaves the orchestrator time to act between steps
    ok = bool(torch.equal(ballast, torch.arange(1 << 28, dtype=torch.float32, device=dev)))
    print(json.dumps({"ballast_intact": ok}), flush=True)


def fill(seconds):
    import torch
    free, total = torch.cuda.mem_get_info()
    take = int(free * 0.8)
    buf = torch.empty(take // 4, dtype=torch.float32, device="cuda")
    buf.fill_(1.0)
    a = torch.randn(4096, 4096, device="cuda")
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        a = (a @ a).clamp_(-1, 1)
        n += 1
    torch.cuda.synchronize()
    print(json.dumps({"took_bytes": take, "free_before": free, "total": total, "matmuls": n}), flush=True)


def free_bytes():
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.mem_get_info()[0])"],
                         capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip()) if out.returncode == 0 else None


def curve(lines):
    return [json.loads(l)["loss"] for l in lines if l.startswith('{"step"')]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["orchestrate", "train", "fill"], default="orchestrate")
    ap.add_argument("--ckpt", default="build/bin/coloc-ckpt", help="the coloc-ckpt binary")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--at", type=int, default=20, help="suspend after this step")
    ap.add_argument("--fill-seconds", type=float, default=5.0)
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    if a.role == "train":
        return train(a.steps)
    if a.role == "fill":
        return fill(a.fill_seconds)

    try:
        import torch
        if not torch.cuda.is_available():
            sys.exit(77)
    except ImportError:
        sys.exit(77)
    check = subprocess.run([a.ckpt, "--json", "check"], capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        print("no checkpoint API: " + check.stdout + check.stderr)
        sys.exit(77)
    me = [sys.executable, os.path.abspath(__file__)]
    alone = subprocess.run(me + ["--role", "train", "--steps", str(a.steps)], capture_output=True, text=True, timeout=600)
    if alone.returncode != 0:
        sys.exit("the unsuspended run failed: " + alone.stderr[-2000:])
    base = curve(alone.stdout.splitlines())

    free0 = free_bytes()
    job = subprocess.Popen(me + ["--role", "train", "--steps", str(a.steps)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    seen = []
    while True:
        line = job.stdout.readline()
        if not line:
            sys.exit("the job ended before step %d: %s" % (a.at, job.stderr.read()[-2000:]))
        seen.append(line.strip())
        if line.startswith('{"step": %d,' % a.at):
            break
    free_running = free_bytes()
    s = subprocess.run([a.ckpt, "--json", "suspend", "--lock-timeout", "30000", str(job.pid)],
                       capture_output=True, text=True, timeout=600)
    suspended = json.loads(s.stdout) if s.stdout.strip() else {"error": s.stderr}
    free_suspended = free_bytes()
    other = subprocess.run(me + ["--role", "fill", "--fill-seconds", str(a.fill_seconds)], capture_output=True,
                           text=True, timeout=600)
    r = subprocess.run([a.ckpt, "--json", "resume", str(job.pid)], capture_output=True, text=True, timeout=600)
    resumed = json.loads(r.stdout) if r.stdout.strip() else {"error": r.stderr}
    out, err = job.communicate(timeout=600)
    seen += out.splitlines()
    got = curve(seen)
    intact = any('"ballast_intact": true' in l for l in seen)
    result = {
        "steps": a.steps, "suspended_after_step": a.at,
        "free_before": free0, "free_job_running": free_running, "free_job_suspended": free_suspended,
        "suspend": suspended, "resume": resumed,
        "other_job": other.stdout.strip().splitlines()[-1:] if other.returncode == 0 else other.stderr[-2000:],
        "curves_equal": got == base and len(got) == a.steps, "ballast_intact": intact,
        "first_difference": next((i for i, (p, q) in enumerate(zip(base, got)) if p != q), None),
    }
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    ok = s.returncode == 0 and r.returncode == 0 and other.returncode == 0 and result["curves_equal"] and intact
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
