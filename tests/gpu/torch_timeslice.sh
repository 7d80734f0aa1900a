#!/usr/bin/env bash
# Two PyTorch training jobs on one GPU under `coloc policy all timeslice`, one of them capturing
# and replaying a torch.cuda.graphs graph (GLOBAL capture mode): both finish, the capture is not
# disturbed, and each job's report shows its GPU time and the turns it held. Prints each job's
# speed against its speed alone. Exit 77 without a GPU.
set -uo pipefail
B=${1:-build}
command -v nvidia-smi >/dev/null || exit 77
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || exit 77
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$B/bin/colocd" --socket "$dir/sock" --state-dir "$dir/state" & sleep 0.5
export COLOC_SOCKET="$dir/sock"
# Alone first (share: nothing gated), for each job's solo speed.
"$B/bin/coloc" run --job solo-eager -- python3 tests/gpu/torch_train.py --seconds 15 > "$dir/solo-eager.json" || exit 1
"$B/bin/coloc" run --job solo-graph -- python3 tests/gpu/torch_train.py --seconds 15 --cuda-graph > "$dir/solo-graph.json" || exit 1
"$B/bin/coloc" policy all timeslice --quantum 100ms || exit 1
"$B/bin/coloc" run --job ts-eager -- python3 tests/gpu/torch_train.py --seconds 30 > "$dir/eager.json" & a=$!
"$B/bin/coloc" run --job ts-graph --weight 1 -- python3 tests/gpu/torch_train.py --seconds 30 --cuda-graph > "$dir/graph.json" & b=$!
sleep 10; "$B/bin/coloc" status
wait $a; ra=$?; wait $b; rb=$?
for j in solo-eager solo-graph eager graph; do echo "$j: $(cat "$dir/$j.json")"; done
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
r = {j: json.load(open(f"{d}/{j}.json")) for j in ("solo-eager", "solo-graph", "eager", "graph")}
for j in ("eager", "graph"):
    print(f"{j}: {r[j]['steps_per_s']:.1f} steps/s timesliced, {r[j]['steps_per_s'] / r['solo-' + j]['steps_per_s']:.2f} of solo")
PY
"$B/bin/coloc" report ts-eager; "$B/bin/coloc" report ts-graph
[ $ra -eq 0 ] && [ $rb -eq 0 ]
