#!/usr/bin/env bash
# Two PyTorch training jobs under `coloc run` whose memory together exceeds the card: with colocd
# the second waits for admission instead of crashing, and both finish. Exit 77 without a GPU.
set -uo pipefail
B=${1:-build}
command -v nvidia-smi >/dev/null || exit 77
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || exit 77
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n1)
each_gib=$(( total_mib * 6 / 10 / 1024 ))          # 60% of the card each: together 120%
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$B/bin/colocd" --socket "$dir/sock" --state-dir "$dir/state" & sleep 0.5
export COLOC_SOCKET="$dir/sock"
"$B/bin/coloc" run --mem "$((each_gib + 4))GiB" --job torch-a -- python3 tests/gpu/torch_train.py --seconds 30 --ballast-gib "$each_gib" > "$dir/a.json" & a=$!
"$B/bin/coloc" run --mem "$((each_gib + 4))GiB" --job torch-b -- python3 tests/gpu/torch_train.py --seconds 30 --ballast-gib "$each_gib" > "$dir/b.json" & b=$!
wait $a; ra=$?; wait $b; rb=$?
echo "job a: rc=$ra $(cat "$dir/a.json")"; echo "job b: rc=$rb $(cat "$dir/b.json")"
ls "$dir/state/reports" 2>/dev/null
[ $ra -eq 0 ] && [ $rb -eq 0 ]
