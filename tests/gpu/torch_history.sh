#!/usr/bin/env bash
# Estimation on a real GPU (issue 12): two PyTorch training scripts with NO --mem. First each runs
# alone: colocd learns its footprint (its online prediction, then its run history). Then both run
# together, each 60% of the card: the second is admitted on its known footprint only when the first
# is done, instead of both growing into each other; both finish. Prints each report's peak,
# predicted peak, reservation and where it came from. Exit 77 without a GPU.
set -uo pipefail
B=${1:-build}
command -v nvidia-smi >/dev/null || exit 77
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || exit 77
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n1)
each_gib=$(( total_mib * 6 / 10 / 1024 ))          # 60% of the card each: together 120%
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$B/bin/colocd" --socket "$dir/sock" --state-dir "$dir/state" 2> "$dir/colocd.log" & sleep 0.5
export COLOC_SOCKET="$dir/sock"
job() {  # NAME SECONDS: one training script under plain coloc run (no --mem)
  "$B/bin/coloc" run --job "$1" -- python3 tests/gpu/torch_train.py --seconds "$2" --ballast-gib "$each_gib"
}
show() {  # the report of job NAME: peak, prediction, reservation and its source
  python3 - "$dir/state/reports" "$1" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}-*.json")):
    r = json.load(open(f))
    for d in r["devices"]:
        p = d.get("prediction") or {}
        print(f"  {r['job']}: exit {r['exit_status']}, peak {d['peak'] / 2**30:.2f} GiB, predicted "
              f"{(d.get('predicted_peak') or 0) / 2**30:.2f} GiB ({p.get('state')}, period {p.get('period_ms')} ms), "
              f"reservation {d['reservation'] / 2**30:.2f} GiB from {d.get('reservation_source')}, "
              f"waited {d['wait_admission_s']:.1f} s to be admitted")
PY
}
echo "learning: each script alone"
job learn-a 20 > "$dir/la.json" || exit 1
job learn-b 20 > "$dir/lb.json" || exit 1
show learn-a; show learn-b
"$B/bin/coloc" history
echo "together, admitted on their history"
job again-a 30 > "$dir/a.json" & a=$!
sleep 2
job again-b 30 > "$dir/b.json" & b=$!
wait $a; ra=$?; wait $b; rb=$?
show again-a; show again-b
grep -c "from history" "$dir/colocd.log" >/dev/null || true
[ $ra -eq 0 ] && [ $rb -eq 0 ] || exit 1
# Both admitted on history; the second waited for the first.
python3 - "$dir/state/reports" <<'PY'
import glob, json, sys
src = [d["reservation_source"] for f in glob.glob(f"{sys.argv[1]}/again-*.json") for d in json.load(open(f))["devices"]]
sys.exit(0 if src and all(s == "history" for s in src) else 1)
PY
