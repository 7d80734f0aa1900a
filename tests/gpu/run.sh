#!/usr/bin/env bash
# Real-GPU checks (see tests/gpu/README.md). Exit 77 where no NVIDIA GPU exists.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ ! -e /proc/driver/nvidia/version ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: no NVIDIA GPU here: skipped"
  exit 77
fi

OUT=${OUT:-build/gpu-run}
mkdir -p "$OUT"
B=${GPU_BUILD:-.gpu/build}
[ -d "$B" ] || B=build
export LD_LIBRARY_PATH="$PWD/.gpu/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PY=${PYTHON:-python3}
failures=0
step() { echo; echo "=== $* ==="; }
check() { # name, command...: runs with a time bound, records pass/fail
  local name=$1; shift
  if timeout 300 "$@" >"$OUT/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name (rc=$?)"; failures=$((failures+1)); fi
  tail -n 5 "$OUT/$name.log"
}

step "facts"
{ nvidia-smi; cat /proc/driver/nvidia/version 2>/dev/null; uname -a; } > "$OUT/facts.txt" 2>&1
head -n 15 "$OUT/facts.txt"

step "coloc-train on the real driver"
TRACE=tools/workload/traces/transformer-lm-ctx128-fullstep.csv
check train-preset   "$B/bin/coloc-train" --model gpt2-small --batch 8 --iters 20 --progress
check train-trace    "$B/bin/coloc-train" --trace "$TRACE" --loops 2
check train-preset-preload env LD_PRELOAD="$PWD/$B/lib/libcoloc.so" "$B/bin/coloc-train" --model gpt2-small --batch 8 --iters 20
check train-trace-preload  env LD_PRELOAD="$PWD/$B/lib/libcoloc.so" "$B/bin/coloc-train" --trace "$TRACE" --loops 2

step "interposer tests against the real driver"
check interpose-tests env COLOC_TEST_DRIVER=real "$B/tests/coloc-tests" -ts=interpose

step "PyTorch under the preload"
if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check torch-limit env LD_PRELOAD="$PWD/$B/lib/libcoloc.so" COLOC_MEM_LIMIT=8GiB COLOC_EXPECT_LIMIT=8GiB \
        $PY tests/gpu/torch_limit.py
  check torch-speed-plain   $PY tests/gpu/torch_train.py --seconds 20 --json "$OUT/speed-plain.json"
  check torch-speed-preload env LD_PRELOAD="$PWD/$B/lib/libcoloc.so" \
        $PY tests/gpu/torch_train.py --seconds 20 --json "$OUT/speed-preload.json"
else
  echo "no PyTorch with CUDA: PyTorch steps skipped"
fi

step "daemon: the demo and two PyTorch jobs that together exceed the card"
if [ -x "$B/bin/colocd" ]; then
  check demo env COLOC_BUILD="$B" tools/demo/demo.sh "$B"
  check torch-pair tests/gpu/torch_pair.sh "$B"
fi

step "compute: two PyTorch jobs timesliced, one replaying a CUDA graph"
if [ -x "$B/bin/colocd" ]; then
  check torch-timeslice tests/gpu/torch_timeslice.sh "$B"
fi

step "compute: priority isolation with PyTorch (ResNet-50 high, GPT-2 best-effort)"
if [ -x "$B/bin/colocd" ]; then
  check torch-priority tests/gpu/torch_priority.sh "$B"
fi

step "estimation: two PyTorch jobs without --mem, learned, then admitted on their history"
if [ -x "$B/bin/colocd" ]; then
  check torch-history tests/gpu/torch_history.sh "$B"
fi

step "estimation: the context, the cuBLAS workspace, and coloc estimate against PyTorch training peaks"
if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check torch-estimate $PY tests/gpu/torch_estimate.py --coloc "$B/bin/coloc" --json "$OUT/estimate.json"
fi

step "operations: coloc doctor on the real driver, a process outside coloc in status and /metrics, NVML's index"
if [ -x "$B/bin/colocd" ] && $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check ops tests/gpu/ops.sh "$B"
fi

step "simgpu's assumption: how many launches one stream queues before a launch blocks"
if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check queue-depth $PY tests/gpu/queue_depth.py
fi

step "suspension: a deterministic PyTorch job suspended to host memory while another uses the card, then resumed"
if [ -x "$B/bin/coloc-ckpt" ] && $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  check torch-suspend $PY tests/gpu/torch_suspend.py --ckpt "$B/bin/coloc-ckpt" --json "$OUT/suspend.json"
fi

echo; echo "failures: $failures"
exit $((failures > 0))
