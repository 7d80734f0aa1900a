#!/usr/bin/env python3
"""The demo's side-by-side summary (tools/demo/demo.sh writes its inputs).

  summary.py OUT_DIR

OUT_DIR holds jobs.tsv (name, what, limit in bytes), device.txt (capacity, name), and per run
(nocoloc/, coloc/): <job>.json (coloc-train's result line), <job>.rc (exit status), peak.txt (the
device's highest used memory, when measured); coloc/ also <job>.report.json (colocd's report).
Prints the table and the verdict; exits 0 when the demo shows what it should (without coloc at
least one job crashes with out-of-memory, with coloc every job completes), 1 otherwise.
"""
import json
import os
import sys

GiB = 1 << 30


def gib(b):
    return "—" if b is None else f"{b / GiB:.1f} GiB"


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def result_line(path):
    text = read(path, "")
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return {}


def outcome(rc, res):
    if rc == "0":
        return "completed"
    if rc == "3" or res.get("status") == "oom":
        return "CRASHED (OOM)"
    return f"failed (exit {rc})"


def waited(report):
    """Seconds the job waited in all (to be admitted + for memory to grow), from colocd's report."""
    if not report:
        return None
    return sum(d.get("wait_admission_s", 0) + d.get("wait_memory_s", 0) for d in report.get("devices", []))


def waits_of(report):
    """(seconds waiting to be admitted, seconds waiting for memory to grow), from colocd's report."""
    devices = (report or {}).get("devices", [])
    return (sum(d.get("wait_admission_s", 0) for d in devices), sum(d.get("wait_memory_s", 0) for d in devices))


def wait_words(name, report):
    """What the job waited for, worded by what happened: ' (NAME waited 1.2 s to be admitted ...)'."""
    admission, memory = waits_of(report)
    parts = []
    if admission >= 0.05:
        parts.append(f"{admission:.1f} s to be admitted")
    if memory >= 0.05:
        parts.append(f"{memory:.1f} s for memory to grow")
    return f" ({name} waited {' and '.join(parts)} instead of crashing)" if parts else ""


def main():
    out = sys.argv[1]
    jobs = [line.split("\t") for line in read(os.path.join(out, "jobs.tsv"), "").splitlines() if line]
    cap_text = read(os.path.join(out, "device.txt"), "0 ?").split(" ", 1)
    capacity, device = int(cap_text[0]), cap_text[1] if len(cap_text) > 1 else "?"
    runs = {}
    for run in ("nocoloc", "coloc"):
        d = os.path.join(out, run)
        rows = {}
        for name, _what, _limit in jobs:
            report_text = read(os.path.join(d, name + ".report.json"))
            rows[name] = {
                "rc": read(os.path.join(d, name + ".rc"), "?"),
                "res": result_line(os.path.join(d, name + ".json")),
                "report": json.loads(report_text) if report_text else None,
            }
        peak = read(os.path.join(d, "peak.txt"))
        runs[run] = {"rows": rows, "peak": int(peak) if peak else None, "secs": read(os.path.join(d, "seconds.txt"))}

    w = max(len(name) for name, _, _ in jobs) + 2
    print()
    print(f"{'':{w}}{'WITHOUT COLOC':<34}{'WITH COLOC (coloc run --mem)'}")
    print(f"{'job':<{w}}{'result':<16}{'peak':>10}{'':8}{'result':<16}{'peak':>10}{'waited':>10}")
    for name, _what, _limit in jobs:
        a, b = runs["nocoloc"]["rows"][name], runs["coloc"]["rows"][name]
        wait = waited(b["report"])
        print(f"{name:<{w}}{outcome(a['rc'], a['res']):<16}{gib(a['res'].get('peak_bytes')):>10}{'':8}"
              f"{outcome(b['rc'], b['res']):<16}{gib(b['res'].get('peak_bytes')):>10}"
              f"{'—' if wait is None else f'{wait:.1f} s':>10}")
    pa, pb = runs["nocoloc"]["peak"], runs["coloc"]["peak"]
    of = lambda p: "—" if p is None else f"{gib(p)} of {capacity / GiB:.0f}"
    print(f"{'GPU':<{w}}{'total peak':<14}{of(pa):>18}{'':2}{'total peak':<14}{of(pb):>18}")
    if runs["nocoloc"]["secs"] and runs["coloc"]["secs"]:
        print(f"{'':<{w}}{'wall time':<14}{runs['nocoloc']['secs'] + ' s':>18}{'':2}{'wall time':<14}"
              f"{runs['coloc']['secs'] + ' s':>18}")
    alone = sum(runs["coloc"]["rows"][n]["res"].get("peak_bytes") or 0 for n, _, _ in jobs)
    print()
    print(f"  The jobs' peaks add up to {gib(alone)} and the GPU has {capacity / GiB:.0f} GiB: they cannot all run at once.")
    print("  peak: device memory the job held (coloc-train's count, without its CUDA context); total peak: the")
    print("  GPU's used memory, sampled every 0.5 ms; waited: admission + growth, from colocd's report.")

    crashed = [n for n, _, _ in jobs if runs["nocoloc"]["rows"][n]["rc"] != "0"]
    failed = [n for n, _, _ in jobs if runs["coloc"]["rows"][n]["rc"] != "0"]
    n = len(jobs)
    print()
    if crashed and not failed:
        waits = [(name, waited(runs["coloc"]["rows"][name]["report"]) or 0) for name, _, _ in jobs]
        longest = max(waits, key=lambda x: x[1])
        extra = wait_words(longest[0], runs["coloc"]["rows"][longest[0]]["report"]) if longest[1] > 0 else ""
        print(f"Verdict: PASS — without coloc {len(crashed)} of {n} jobs crashed with out-of-memory "
              f"({', '.join(crashed)}); with coloc all {n} completed{extra}.")
        return 0
    if not crashed:
        print(f"Verdict: FAIL — without coloc no job crashed (the mix did not overflow {device}).")
    else:
        print(f"Verdict: FAIL — with coloc {len(failed)} of {n} jobs did not complete ({', '.join(failed)}).")
    return 1


if __name__ == "__main__":
    sys.exit(main())
