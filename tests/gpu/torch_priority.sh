#!/usr/bin/env bash
# The priority policy with PyTorch (issue 11): ResNet-50 training as the high-priority job (with
# 20 ms of host time per step, a data loader that leaves the GPU idle part of the time) beside
# GPT-2-small-shaped training as best-effort. Solo, then `share`, then `priority`: prints the
# throughput of each and each job's speed against its solo speed, the controller's state, and
# the reports. Exit 77 without a GPU or torch.
set -uo pipefail
B=${1:-build}
command -v nvidia-smi >/dev/null || exit 77
python3 -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null || exit 77
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$B/bin/colocd" --socket "$dir/sock" --state-dir "$dir/state" & sleep 0.5
export COLOC_SOCKET="$dir/sock"
M=tests/gpu/torch_models.py
HI=(--model resnet50 --host-ms 20)
BE=(--model gpt2)
"$B/bin/coloc" run --job solo-hi --priority high -- python3 $M "${HI[@]}" --seconds 20 > "$dir/solo-hi.json" || exit 1
"$B/bin/coloc" run --job solo-be -- python3 $M "${BE[@]}" --seconds 20 > "$dir/solo-be.json" || exit 1
for mode in share priority; do
  "$B/bin/coloc" policy all $mode || exit 1
  "$B/bin/coloc" run --job $mode-be --priority best-effort -- python3 $M "${BE[@]}" --seconds 45 > "$dir/$mode-be.json" & be=$!
  sleep 8  # the best-effort job's warm-up (a measurement, not a synchronization: both run to the end anyway)
  "$B/bin/coloc" run --job $mode-hi --priority high -- python3 $M "${HI[@]}" --seconds 30 > "$dir/$mode-hi.json" & hi=$!
  sleep 15; "$B/bin/coloc" status; "$B/bin/coloc" policy --json | python3 -c 'import json,sys; [print("control:", d["control"]) for d in json.load(sys.stdin)["devices"]]'
  wait $hi || exit 1; wait $be || exit 1
done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {j: json.load(open(f"{d}/{j}.json")) for j in ("solo-hi", "solo-be", "share-hi", "share-be", "priority-hi", "priority-be")}
print(f"solo: resnet50 {r['solo-hi']['steps_per_s']:.2f} steps/s, gpt2 {r['solo-be']['steps_per_s']:.2f} steps/s")
for m in ("share", "priority"):
    h = r[f"{m}-hi"]["steps_per_s"] / r["solo-hi"]["steps_per_s"]
    b = r[f"{m}-be"]["steps_per_s"] / r["solo-be"]["steps_per_s"]
    print(f"{m:9s} resnet50 (high) {r[m+'-hi']['steps_per_s']:.2f} steps/s = {h:.2f} of solo; "
          f"gpt2 (best-effort) {r[m+'-be']['steps_per_s']:.2f} steps/s = {b:.2f} of solo (its run includes time alone); "
          f"total normalized {h + b:.2f}")
PY
"$B/bin/coloc" report priority-hi; "$B/bin/coloc" report priority-be
