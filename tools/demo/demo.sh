#!/usr/bin/env bash
# tools/demo/demo.sh — `make demo`, the main job: the same mix of training jobs run twice on one GPU,
# collocated, without coloc (at least one crashes with out-of-memory) and with coloc (colocd +
# `coloc run --mem`: every job completes; one waits to be admitted instead), then a side-by-side
# summary and each job's report.
#
#   tools/demo/demo.sh [BUILD_DIR] [--quick] [--no-monitor] [--out DIR] [--keep]
#
#   --quick       a 36 GiB simulated GPU and one training step per trace (seconds; the tests use it)
#   --no-monitor  do not sample the GPU's total use (sanitizer builds: python cannot load them)
#   --out DIR     where the results go (default BUILD_DIR/demo)
#   --keep        keep the temporary directory (colocd's socket and state; simgpu's state)
#
# The GPU: the real one when /proc/driver/nvidia/version exists, else simgpu with one 80 GiB
# device. The mix, sized from the device's capacity C so that it overflows any card:
#   - the two real Transformer-LM training traces (tools/workload/traces/, 56.9 GiB of segments
#     each at full size), replayed by coloc-train at --size-scale C / 80 GiB;
#   - one preset model job (GPT-2 small, batch 4; --quick: BERT base, batch 4).
# Results go to BUILD_DIR/demo/ (the summary's inputs, the reports, the SVG plots).
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
Usage: tools/demo/demo.sh [BUILD_DIR] [--quick] [--no-monitor] [--out DIR] [--keep]

Runs the same mix of training jobs twice on one GPU: without coloc (at least one crashes with
out-of-memory), then under colocd with `coloc run --mem` (every job completes; one waits to be
admitted instead). Prints a side-by-side summary, a verdict, and each job's report. `make demo`
runs it.

  BUILD_DIR     the build directory (default: build)
  --quick       a 36 GiB simulated GPU and one training step per trace (seconds; the tests use it)
  --no-monitor  do not sample the GPU's total use (sanitizer builds: python cannot load them)
  --out DIR     where the results go (default: BUILD_DIR/demo)
  --keep        keep the temporary directory (colocd's socket and state; simgpu's state)
  -h, --help    this text

The GPU is the real one when /proc/driver/nvidia/version exists, else simgpu with one 80 GiB
device. Exit status: 0 when the demo showed what it should (the verdict says PASS), 1 otherwise,
2 for a bad option.
EOF_USAGE
}

BUILD=build
QUICK=0 MONITOR=1 KEEP=0 OUT=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --no-monitor) MONITOR=0 ;;
    --keep) KEEP=1 ;;
    --out) [ $# -ge 2 ] || { echo "demo: --out needs a directory" >&2; exit 2; }; OUT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
BIN=$BUILD/bin
for f in "$BIN/coloc" "$BIN/colocd" "$BIN/coloc-train" "$BUILD/lib/libcoloc.so"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "demo: $f is missing: run make first" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "demo: python3 is missing (mk/deps.sh installs it)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/coloc-demo.XXXXXX")
OUT=${OUT:-$BUILD/demo}
rm -rf "$OUT/nocoloc" "$OUT/coloc"
mkdir -p "$OUT/nocoloc" "$OUT/coloc"
OUT=$(cd "$OUT" && pwd)
DAEMON=
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
  [ "$KEEP" = 1 ] && echo "demo: kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }

# ---- the GPU ------------------------------------------------------------------------------------
SIM=()          # what a program needs to reach the driver, without coloc
RUN_SIM=()      # coloc run's flag for the same
if [ -e /proc/driver/nvidia/version ]; then
  KIND="the real GPU"
  read -r CAPACITY DEVNAME < <(python3 "$HERE/devmon.py" capacity)
else
  GIB=$([ "$QUICK" = 1 ] && echo 36 || echo 80)
  export SIMGPU_STATE_DIR=$WORK/simgpu
  export SIMGPU_DEVICES="SimGPU-${GIB}G:${GIB}GiB"
  SIM=(env "LD_LIBRARY_PATH=$BUILD/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  RUN_SIM=(--sim)
  KIND="simgpu (no NVIDIA driver here), a simulated GPU"
  CAPACITY=$((GIB << 30)) DEVNAME="SimGPU-${GIB}G"
fi
echo "$CAPACITY $DEVNAME" > "$OUT/device.txt"

# ---- the mix, sized from the capacity -------------------------------------------------------------
# Each trace peaks at 61,111,009,280 bytes x scale, plus at most 2 MiB of rounding per live segment
# (1,010 at most); its limit adds the CUDA context (512 MiB) and rounds up to a GiB.
read -r SCALE TRACE_LIMIT < <(python3 - "$CAPACITY" <<'EOF'
import math, sys
cap = int(sys.argv[1])
scale = cap / (80 << 30)
limit = math.ceil((61111009280 * scale + 1010 * (2 << 20) + (512 << 20)) / (1 << 30))
print(f"{scale:.4f} {limit}GiB")
EOF
)
LOOPS=3
PRESET=(--model gpt2-small --batch 4 --iters 30 --tflops 50)
PRESET_NAME=gpt2-small PRESET_LIMIT=14GiB PRESET_WHAT="GPT-2 small (124M), batch 4, 30 iterations"
if [ "$QUICK" = 1 ]; then
  LOOPS=1
  PRESET=(--model bert-base --batch 4 --iters 10)
  PRESET_NAME=bert-base PRESET_LIMIT=6GiB PRESET_WHAT="BERT base (110M), batch 4, 10 iterations"
fi
NAMES=("$PRESET_NAME" lm-ctx128 lm-ctx256)
LIMITS=("$PRESET_LIMIT" "$TRACE_LIMIT" "$TRACE_LIMIT")
WHAT=("$PRESET_WHAT" "Transformer LM trace, context 128, $LOOPS step(s)"
      "Transformer LM trace, context 256, $LOOPS step(s)")
job_args() {
  case "$1" in
    lm-ctx128) echo --trace "$ROOT/tools/workload/traces/transformer-lm-ctx128-fullstep.csv" --size-scale "$SCALE" --loops "$LOOPS" ;;
    lm-ctx256) echo --trace "$ROOT/tools/workload/traces/transformer-lm-ctx256-fullstep.csv" --size-scale "$SCALE" --loops "$LOOPS" ;;
    *) echo "${PRESET[@]}" ;;
  esac
}
: > "$OUT/jobs.tsv"
for i in 0 1 2; do
  printf '%s\t%s\t%s\n' "${NAMES[$i]}" "${WHAT[$i]}" "${LIMITS[$i]}" >> "$OUT/jobs.tsv"
done

printf '\ncoloc demo: %s jobs share %s: %s, %.0f GiB\n\n' "${#NAMES[@]}" "$KIND" "$DEVNAME" \
  "$(python3 -c "print($CAPACITY / 2**30)")"
printf '  %-12s %-50s %s\n' JOB WHAT "LIMIT (--mem)"
for i in 0 1 2; do printf '  %-12s %-50s %s\n' "${NAMES[$i]}" "${WHAT[$i]}" "${LIMITS[$i]}"; done
echo

# ---- the device's total use, sampled while a run goes ---------------------------------------------
MON=
start_monitor() {  # $1 = run directory
  MON=
  [ "$MONITOR" = 1 ] || return 0
  rm -f "$WORK/stop"
  if [ ${#SIM[@]} -eq 0 ] && command -v nvidia-smi >/dev/null; then
    (peak=0; while [ ! -e "$WORK/stop" ]; do
       u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
       [ -n "$u" ] && [ "$u" -gt "$peak" ] && peak=$u
       sleep 0.05
     done; echo $((peak * 1048576)) > "$1/peak.txt") &
  else
    "${SIM[@]}" SIMGPU_CONTEXT_BYTES=0 python3 "$HERE/devmon.py" watch "$WORK/stop" "$1/peak.txt" &
  fi
  MON=$!
}
stop_monitor() {
  [ -n "$MON" ] || return 0
  touch "$WORK/stop"
  wait "$MON" || true
}

# ---- run 1: without coloc ------------------------------------------------------------------------
echo "Run 1: without coloc. The three jobs start together and share the GPU as they are..."
start_monitor "$OUT/nocoloc"
T0=$(now)
PIDS=()
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2046
  ( set +e; "${SIM[@]}" "$BIN/coloc-train" $(job_args "$name") --job "$name" > "$OUT/nocoloc/$name.json" \
      2> "$OUT/nocoloc/$name.err"; echo $? > "$OUT/nocoloc/$name.rc" ) &
  PIDS+=($!)
done
wait "${PIDS[@]}"
secs "$T0" "$(now)" > "$OUT/nocoloc/seconds.txt"
stop_monitor

# ---- run 2: with coloc ---------------------------------------------------------------------------
echo "Run 2: with coloc. colocd keeps the books; each job starts with coloc run --mem..."
SOCK=$WORK/colocd.sock
# colocd reads each device's free memory through NVML: on simgpu, the simulated one in $BUILD/sim.
"${SIM[@]}" "$BIN/colocd" --socket "$SOCK" --state-dir "$WORK/state" --log-level info 2> "$OUT/colocd.log" &
DAEMON=$!
export COLOC_SOCKET=$SOCK
for _ in $(seq 200); do "$BIN/coloc" status >/dev/null 2>&1 && break; sleep 0.05; done
"$BIN/coloc" status >/dev/null || { echo "demo: colocd did not start; its log:" >&2; cat "$OUT/colocd.log" >&2; exit 1; }
start_monitor "$OUT/coloc"
T0=$(now)
PIDS=()
for i in 0 1 2; do
  name=${NAMES[$i]}
  # shellcheck disable=SC2046
  ( set +e; "$BIN/coloc" run "${RUN_SIM[@]}" --mem "${LIMITS[$i]}" --job "$name" -- \
      "$BIN/coloc-train" $(job_args "$name") > "$OUT/coloc/$name.json" 2> "$OUT/coloc/$name.err"
    echo $? > "$OUT/coloc/$name.rc" ) &
  PIDS+=($!)
done
wait "${PIDS[@]}"
secs "$T0" "$(now)" > "$OUT/coloc/seconds.txt"
stop_monitor

# The reports (written when each job's last process leaves), with their SVG plots.
for name in "${NAMES[@]}"; do
  for _ in $(seq 200); do compgen -G "$WORK/state/reports/$name-*.json" >/dev/null && break; sleep 0.05; done
  f=$(compgen -G "$WORK/state/reports/$name-*.json" | head -1 || true)
  [ -n "$f" ] && cp "$f" "$OUT/coloc/$name.report.json"
done

set +e
python3 "$HERE/summary.py" "$OUT"
VERDICT=$?
set -e

echo
echo "Reports (coloc report JOB; plots: memory over time with the limit and the device's capacity):"
for name in "${NAMES[@]}"; do
  [ -f "$OUT/coloc/$name.report.json" ] || { echo "  $name: no report"; continue; }
  id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['job'])" "$OUT/coloc/$name.report.json")
  echo
  "$BIN/coloc" report "$id" --svg "$OUT/$name.svg" | sed 's/^/  /'
done
echo
echo "Everything is in $OUT (summary inputs, reports, SVGs, colocd.log)."
exit $VERDICT
