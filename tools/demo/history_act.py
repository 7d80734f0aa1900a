#!/usr/bin/env python3
"""The demo's third act: act 1's mix again, every job with plain `coloc run` (no --mem).

  history_act.py OUT_DIR

OUT_DIR holds jobs.tsv (name, what, act 1's --mem) and device.txt (capacity, name), as act 1 wrote
them, and history/: per job <job>.rc (exit status), <job>.json (coloc-train's result line) and
<job>.report.json (colocd's report). Prints where each job's reservation came from (--mem, its
history, its online prediction, or nothing), its peak, what it waited, and a verdict; exits 0 when
every job completed and colocd knew each footprint before the job allocated (history), 1 otherwise.
"""
import json
import os
import sys

from summary import gib, read, result_line  # act 1's: the same files, the same words

SOURCE_WORDS = {
    "mem": "--mem",
    "history": "history",
    "online": "online prediction",
    "none": "nothing (grew by grants)",
}


def main():
    out = sys.argv[1]
    jobs = [line.split("\t") for line in read(os.path.join(out, "jobs.tsv"), "").splitlines() if line]
    d = os.path.join(out, "history")
    rows = []
    for name, _what, _limit in jobs:
        text = read(os.path.join(d, name + ".report.json"))
        report = json.loads(text) if text else None
        dev = (report or {}).get("devices", [{}])
        dev = dev[0] if dev else {}
        rows.append({
            "name": name,
            "rc": read(os.path.join(d, name + ".rc"), "?"),
            "res": result_line(os.path.join(d, name + ".json")),
            "source": dev.get("reservation_source", "none") if report else None,
            "reservation": dev.get("reservation"),
            "peak": dev.get("peak"),
            "predicted": dev.get("predicted_peak"),
            "waited": (dev.get("wait_admission_s", 0), dev.get("wait_memory_s", 0)),
        })

    w = max(len(r["name"]) for r in rows) + 2
    print()
    print(f"{'job':<{w}}{'result':<12}{'reservation':>12}  {'from':<26}{'peak':>10}{'predicted':>11}{'waited':>16}")
    for r in rows:
        result = "completed" if r["rc"] == "0" else ("CRASHED (OOM)" if r["res"].get("status") == "oom" else f"exit {r['rc']}")
        src = "no report" if r["source"] is None else SOURCE_WORDS.get(r["source"], r["source"])
        adm, mem = r["waited"]
        waited = f"{adm:.1f} s admission" if adm >= 0.05 else (f"{mem:.1f} s memory" if mem >= 0.05 else "—")
        print(f"{r['name']:<{w}}{result:<12}{gib(r['reservation']):>12}  {src:<26}{gib(r['peak']):>10}"
              f"{gib(r['predicted']):>11}{waited:>16}")
    print()
    print("  reservation: what colocd held for the job from its admission on; from: where that came from")
    print("  (--mem, the job's history of earlier runs, or its own online prediction once its iterations")
    print("  repeated); peak: the job's device memory at its highest, as colocd counted it (its CUDA")
    print("  context included, so a little above act 1's peak column); predicted: the online prediction")
    print("  of its peak from its iteration pattern (— when the job ended before its iterations were seen")
    print("  to repeat, e.g. a trace replayed once).")

    failed = [r["name"] for r in rows if r["rc"] != "0"]
    unknown = [r["name"] for r in rows if r["source"] != "history"]
    print()
    if not failed and not unknown:
        waits = [r for r in rows if r["waited"][0] >= 0.05]
        extra = (f"; {', '.join(r['name'] for r in waits)} waited to be admitted on its known footprint"
                 if waits else "")
        print(f"Verdict: PASS — no --mem anywhere, and all {len(rows)} jobs completed: each was admitted on its "
              f"footprint from history, learned in act 1{extra}.")
        return 0
    if failed:
        print(f"Verdict: FAIL — without --mem {len(failed)} of {len(rows)} jobs did not complete ({', '.join(failed)}).")
    else:
        words = ", ".join(f"{r['name']} from {SOURCE_WORDS.get(r['source'], r['source'])}"
                          for r in rows if r["name"] in unknown)
        print(f"Verdict: FAIL — every job completed, but not every footprint came from history ({words}).")
    return 1


if __name__ == "__main__":
    sys.exit(main())
