#!/usr/bin/env python3
"""checkpoint_bench — simgpu's checkpoint API: checkpoint and restore time against bytes.

For each size (default 256 MiB, 1 GiB, 4 GiB: CI machines have 24 GiB of RAM), one cuprobe
allocates the size on one simulated device and fills it (every page committed, as a real job's
tensors are), then waits; another cuprobe locks it, checkpoints it, restores it and unlocks it,
three times (the driver's calls through cuCheckpointProcess*, as coloc-ckpt makes them). The
target then checks that every float came back. Prints a table with the first cycle and the median
of the three, and what PCIe predicts for 40 GiB on a real GPU, and writes JSON (--out).

The first cycle is the one a suspension pays: the job wrote its memory in 4 KiB pages, which the
checkpoint gives back one by one, and the restore brings the memory back in 2 MiB pages, so the
later cycles run on huge pages both ways.

On simgpu device memory is host memory, so a checkpoint is a host-to-host copy plus giving the
device pages back, and a restore the copy back into freshly faulted pages: the figures measure
this machine's memory bandwidth and page-fault rate, not a GPU. On a real GPU both directions
cross PCIe (or C2C on Grace): bytes / link bandwidth is the floor.
A benchmark, not a test: it reports, and fails only when a run cannot be made.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Effective host<->device copy bandwidth of one x16 link, GB/s (10^9 B/s): about 80% of the
# raw rate, which is what pinned cudaMemcpy reaches in practice (NVIDIA's bandwidthTest on
# PCIe Gen4 x16 reports 24-26 GB/s of 31.5; Gen5 x16 about 50-55 of 63).
PCIE = {"gen4_x16": 25.0, "gen5_x16": 50.0}


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": os.uname().release}


def parse_size(s):
    units = {"MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


def lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_size(build, size, cycles):
    tmp = tempfile.mkdtemp(prefix="ckpt-bench.")
    env = dict(os.environ)
    env.update({
        "LD_LIBRARY_PATH": os.path.join(build, "sim"),
        "SIMGPU_STATE_DIR": os.path.join(tmp, "state"),
        "SIMGPU_DEVICES": "80GiB",
        "SIMGPU_CONTEXT_BYTES": "512MiB",
    })
    probe = os.path.join(build, "tests/bin/cuprobe")
    ready, go = os.path.join(tmp, "ready"), os.path.join(tmp, "go")
    target = subprocess.Popen(
        [probe, "init", "ctx", "alloc", size, "x", "fill", "x", "1.25", "sync", "touch", ready,
         "hold-file", go, "check", "x", "1.25"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not os.path.exists(ready):
        if target.poll() is not None:
            sys.exit("checkpoint_bench: the target exited: " + target.stderr.read())
        time.sleep(0.01)
    pid = str(target.pid)
    steps = ["init"]
    for _ in range(cycles):
        steps += ["ckpt-lock", pid, "60000", "ckpt-checkpoint", pid, "ckpt-restore", pid, "ckpt-unlock", pid]
    caller = subprocess.run([probe] + steps, env=env, capture_output=True, text=True, timeout=600)
    got = lines(caller.stdout)
    open(go, "w").close()
    out, err = target.communicate(timeout=600)
    bad = [s for s in got if s.get("rc") != 0]
    if caller.returncode != 0 or len(got) != 1 + 4 * cycles or bad:
        sys.exit("checkpoint_bench: the checkpoint calls failed: " + caller.stdout + caller.stderr)
    last = lines(out)[-1] if lines(out) else {}
    ckpt = [s["ms"] for s in got if s["step"] == "ckpt-checkpoint"]
    rest = [s["ms"] for s in got if s["step"] == "ckpt-restore"]
    lock = [s["ms"] for s in got if s["step"] == "ckpt-lock"]
    b = parse_size(size)
    return {
        "size": size, "bytes": b, "cycles": cycles,
        "lock_ms": statistics.median(lock),
        "checkpoint_ms": statistics.median(ckpt), "restore_ms": statistics.median(rest),
        "checkpoint_ms_all": ckpt, "restore_ms_all": rest,
        "checkpoint_gbps": b / 1e9 / (statistics.median(ckpt) / 1e3),
        "restore_gbps": b / 1e9 / (statistics.median(rest) / 1e3),
        "data_intact": bool(last.get("ok")),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="256MiB,1GiB,4GiB")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--out", default="build/bench/checkpoint.json")
    a = ap.parse_args()
    rows = []
    print("  %-8s %8s %17s %17s %14s %8s %11s %8s  %s" % (
        "size", "lock ms", "1st checkpoint ms", "1st restore ms", "checkpoint ms", "GB/s", "restore ms", "GB/s", "data"))
    for size in a.sizes.split(","):
        r = run_size(a.build, size, a.cycles)
        rows.append(r)
        print("  %-8s %8.2f %17.1f %17.1f %14.1f %8.2f %11.1f %8.2f  %s" % (
            size, r["lock_ms"], r["checkpoint_ms_all"][0], r["restore_ms_all"][0], r["checkpoint_ms"],
            r["checkpoint_gbps"], r["restore_ms"], r["restore_gbps"], "intact" if r["data_intact"] else "CORRUPT"),
            flush=True)
    forty = 40 * (1 << 30)
    pred = {k: forty / 1e9 / v for k, v in PCIE.items()}
    print("  40 GiB on a real GPU, bytes / effective PCIe bandwidth, each way: " +
          ", ".join("%s %.1f s" % (k, v) for k, v in pred.items()))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"machine": machine(), "sizes": rows, "pcie_gbps": PCIE,
                   "predicted_40GiB_s_each_way": pred}, f, indent=2)
    print("  wrote " + a.out)
    if not all(r["data_intact"] for r in rows):
        sys.exit("checkpoint_bench: data did not survive a checkpoint")


if __name__ == "__main__":
    main()
