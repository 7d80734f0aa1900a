#!/usr/bin/env bash
# tools/demo/demo.sh — `make demo`, the main job, in three acts on one GPU.
#
# Act 1, memory: the same mix of training jobs run twice, collocated, without coloc (at least one
# crashes with out-of-memory) and with coloc (colocd + `coloc run --mem`: every job completes; one
# waits to be admitted instead), then a side-by-side summary and each job's report.
# Act 3, history (tools/demo/history_act.py prints it): act 1's mix once more, every job with plain
# `coloc run`, no --mem: colocd admits each on the footprint its history learned in act 1 (no job
# crashes), and says where each reservation came from.
# Act 2, compute (tools/demo/compute_act.py prints it): a high-priority training job beside two
# GPU-hungry best-effort ones (Lucid-calibrated duty cycles, coloc-train --lucid), under `coloc
# policy all share`, then `priority`; each job's speed against its speed alone; then two GPU-hungry
# jobs under `timeslice` with weights 2:1 and the GPU shares they got.
#
#   tools/demo/demo.sh [BUILD_DIR] [--quick] [--act memory|history|compute] [--no-monitor] [--out DIR] [--keep]
#
#   --quick       a 36 GiB simulated GPU and one training step per trace (seconds; the tests use it);
#                 acts 1 and 3 only, unless --act compute asks for act 2
#   --act ACT     only that act (memory: act 1; history: acts 1 and 3, since 3 reruns 1's jobs;
#                 compute: act 2, about 25 s)
#   --no-monitor  do not sample the GPU's total use (sanitizer builds: python cannot load them)
#   --out DIR     where the results go (default BUILD_DIR/demo)
#   --keep        keep the temporary directory (colocd's socket and state; simgpu's state)
#
# The GPU: the real one when /proc/driver/nvidia/version exists, else simgpu with one 80 GiB
# device. The mix, sized from the device's capacity C so that it overflows any card:
#   - the two real Transformer-LM training traces (tools/workload/traces/, 56.9 GiB of segments
#     each at full size), replayed by coloc-train at --size-scale C / 80 GiB;
#   - one preset model job (GPT-2 small, batch 4; --quick: BERT base, batch 4).
# Results go to BUILD_DIR/demo/ (the summary's inputs, the reports, the SVG plots; act 2's in compute/).
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
Usage: tools/demo/demo.sh [BUILD_DIR] [--quick] [--act memory|history|compute] [--no-monitor] [--out DIR] [--keep]

Three acts on one GPU; `make demo` runs them all.
Act 1, memory: the same mix of training jobs twice, without coloc (at least one crashes with
out-of-memory), then under colocd with `coloc run --mem` (every job completes; one waits to be
admitted instead). Prints a side-by-side summary, a verdict, and each job's report.
Act 3, history: act 1's mix again, every job with plain `coloc run` and no --mem: colocd admits
each on the footprint its history learned in act 1, so none crashes; prints where each job's
reservation came from (--mem, history, online prediction) and a verdict.
Act 2, compute: a high-priority training job beside two GPU-hungry best-effort ones, under the
share policy, then priority (--target-slowdown 5%): each job's speed against its speed alone and
a verdict; then two GPU-hungry jobs timesliced with weights 2:1, their GPU shares and a verdict.

  BUILD_DIR     the build directory (default: build)
  --quick       a 36 GiB simulated GPU and one training step per trace (seconds; the tests use it);
                acts 1 and 3 only, unless --act compute asks for act 2
  --act ACT     only that act: memory (act 1), history (act 3, after act 1, which it reruns) or
                compute (act 2, about 25 seconds)
  --no-monitor  do not sample the GPU's total use (sanitizer builds: python cannot load them)
  --out DIR     where the results go (default: BUILD_DIR/demo)
  --keep        keep the temporary directory (colocd's socket and state; simgpu's state)
  -h, --help    this text

The GPU is the real one when /proc/driver/nvidia/version exists, else simgpu with one 80 GiB
device. Exit status: 0 when the demo showed what it should (every verdict says PASS), 1 otherwise,
2 for a bad option.
EOF_USAGE
}

BUILD=build
QUICK=0 MONITOR=1 KEEP=0 OUT='' ACT=''
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --act)
      [ $# -ge 2 ] || { echo "demo: --act needs memory, history or compute" >&2; exit 2; }
      case "$2" in
        memory|compute) ACT=$2 ;;
        history) ACT="memory history" ;;  # act 3 reruns act 1's jobs on what act 1 taught colocd
        *) echo "demo: --act $2: memory, history or compute" >&2; exit 2 ;;
      esac
      shift ;;
    --no-monitor) MONITOR=0 ;;
    --keep) KEEP=1 ;;
    --out) [ $# -ge 2 ] || { echo "demo: --out needs a directory" >&2; exit 2; }; OUT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "demo: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
# Act 2 takes about 25 s of wall time, too long for the tests' --quick runs.
ACTS=${ACT:-$([ "$QUICK" = 1 ] && echo "memory history" || echo "memory history compute")}

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
mkdir -p "$OUT"
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

# ---- colocd, in the temporary directory (started once, by the first act that needs it) -----------
start_daemon() {
  [ -z "$DAEMON" ] || return 0
  SOCK=$WORK/colocd.sock
  # Setting policies, priority high and weights above 1 need root or colocd's admin group.
  local admin=()
  [ "$(id -u)" = 0 ] || admin=(--admin-group "$(id -gn)")
  # colocd reads each device's free memory through NVML: on simgpu, the simulated one in $BUILD/sim.
  "${SIM[@]}" "$BIN/colocd" --socket "$SOCK" --state-dir "$WORK/state" --log-level info "${admin[@]}" \
    2> "$OUT/colocd.log" &
  DAEMON=$!
  export COLOC_SOCKET=$SOCK
  for _ in $(seq 200); do "$BIN/coloc" status >/dev/null 2>&1 && break; sleep 0.05; done
  "$BIN/coloc" status >/dev/null || { echo "demo: colocd did not start; its log:" >&2; cat "$OUT/colocd.log" >&2; exit 1; }
}

# The report colocd wrote for the job named $1 (when its last process left), copied to $2.
copy_report() {
  local f
  for _ in $(seq 200); do compgen -G "$WORK/state/reports/$1-*.json" >/dev/null && break; sleep 0.05; done
  f=$(compgen -G "$WORK/state/reports/$1-*.json" | head -1 || true)
  [ -n "$f" ] && cp "$f" "$2"
  return 0
}

# Each act prints its verdicts and sets VERDICT to 1 when one says FAIL (the exit status).
VERDICT=0

# ==== act 1: memory =================================================================================
memory_act() {
  rm -rf "$OUT/nocoloc" "$OUT/coloc"
  mkdir -p "$OUT/nocoloc" "$OUT/coloc"

  # ---- the mix, sized from the capacity -----------------------------------------------------------
  # Each trace peaks at 61,111,009,280 bytes x scale, plus at most 2 MiB of rounding per live
  # segment (1,010 at most); its limit adds the CUDA context (512 MiB) and rounds up to a GiB.
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
  : > "$OUT/jobs.tsv"
  for i in 0 1 2; do
    printf '%s\t%s\t%s\n' "${NAMES[$i]}" "${WHAT[$i]}" "${LIMITS[$i]}" >> "$OUT/jobs.tsv"
  done

  printf '\ncoloc demo, act 1 (memory): %s jobs share %s: %s, %.0f GiB\n\n' "${#NAMES[@]}" "$KIND" "$DEVNAME" \
    "$(python3 -c "print($CAPACITY / 2**30)")"
  printf '  %-12s %-50s %s\n' JOB WHAT "LIMIT (--mem)"
  for i in 0 1 2; do printf '  %-12s %-50s %s\n' "${NAMES[$i]}" "${WHAT[$i]}" "${LIMITS[$i]}"; done
  echo

  # ---- run 1: without coloc -----------------------------------------------------------------------
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

  # ---- run 2: with coloc --------------------------------------------------------------------------
  echo "Run 2: with coloc. colocd keeps the books; each job starts with coloc run --mem..."
  start_daemon
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
  for name in "${NAMES[@]}"; do copy_report "$name" "$OUT/coloc/$name.report.json"; done

  python3 "$HERE/summary.py" "$OUT" || VERDICT=1

  echo
  echo "Reports (coloc report JOB; plots: memory over time with the limit and the device's capacity):"
  for name in "${NAMES[@]}"; do
    [ -f "$OUT/coloc/$name.report.json" ] || { echo "  $name: no report"; continue; }
    id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['job'])" "$OUT/coloc/$name.report.json")
    echo
    "$BIN/coloc" report "$id" --svg "$OUT/$name.svg" | sed 's/^/  /'
  done
}

# ==== act 3: history ================================================================================
# Act 1's jobs again, with plain `coloc run`: the same commands (coloc's own options are not part
# of a job's fingerprint), so colocd knows each footprint from act 1's runs.
history_act() {
  rm -rf "$OUT/history"
  mkdir -p "$OUT/history"
  local t0 name
  t0=$(now)
  printf '\ncoloc demo, act 3 (history): act 1'"'"'s jobs again, each with plain coloc run, no --mem\n\n'
  "$BIN/coloc" history | sed 's/^/  /'
  echo
  echo "Run 3: the three jobs start together; colocd admits each on the footprint its history holds..."
  start_daemon
  PIDS=()
  for name in "${NAMES[@]}"; do
    # shellcheck disable=SC2046
    ( set +e; "$BIN/coloc" run "${RUN_SIM[@]}" --job "rerun-$name" -- \
        "$BIN/coloc-train" $(job_args "$name") > "$OUT/history/$name.json" 2> "$OUT/history/$name.err"
      echo $? > "$OUT/history/$name.rc" ) &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"
  for name in "${NAMES[@]}"; do copy_report "rerun-$name" "$OUT/history/$name.report.json"; done
  python3 "$HERE/history_act.py" "$OUT" || VERDICT=1
  echo
  echo "Act 3 took $(secs "$t0" "$(now)") s."
}

job_args() {
  case "$1" in
    lm-ctx128) echo --trace "$ROOT/tools/workload/traces/transformer-lm-ctx128-fullstep.csv" --size-scale "$SCALE" --loops "$LOOPS" ;;
    lm-ctx256) echo --trace "$ROOT/tools/workload/traces/transformer-lm-ctx256-fullstep.csv" --size-scale "$SCALE" --loops "$LOOPS" ;;
    *) echo "${PRESET[@]}" ;;
  esac
}

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

# ==== act 2: compute ================================================================================
# The cast: duty cycles Lucid measured for real jobs alone on a real GPU (tools/workload/lucid;
# coloc-train --lucid: PCT% of each period of MS on the device).
HIGH_LUCID=ResNet18/CIFAR-10/32        # 58.7% of 18.1 ms: leaves the GPU idle part of each iteration
BE1_LUCID=MobileNetV3/ImageNet/128     # 100% of 38.2 ms: GPU-hungry
BE2_LUCID=MobileNetV2/CIFAR-10/128     # 98.8% of 36.4 ms: GPU-hungry
SOLO_S=3 BE_SOLO_S=2                   # each job alone: the speed to compare with
HIGH_S=5                               # the high-priority job beside the others, per mode
BE_S=$((HIGH_S + 2))                   # they start first and end after it
TS_S=3                                 # the timeslice run
# The timeslice run's jobs: real training's launch pattern (coloc-train --pattern async: a forward
# and backward pass of mixed kernels queued on two streams, the host synchronizing every 4
# iterations), the case where a job's first burst used to escape the gate.
TS_WORK="async --streams 2 --sync-every 4"

# Stamps each line of stdin with the wall clock (bash's own: no process per line).
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }

# One coloc-train job under coloc run: run_job DIR NAME SECONDS WORK [coloc run options...], WORK a
# Lucid configuration (its duty cycle: --lucid) or "async [OPTIONS]" (--pattern async OPTIONS).
# DIR/NAME.json: its result line; DIR/NAME.err: its stderr (--progress: a line per iteration),
# stamped; DIR/NAME.rc: its exit status. The job's coloc id is <run>-NAME-<suffix>.
run_job() {
  local dir=$1 name=$2 seconds=$3 lucid=$4 work
  shift 4
  if [ "${lucid%% *}" = async ]; then
    read -r -a work <<< "--pattern $lucid"
  else
    work=(--lucid "$lucid" --lucid-dir "$ROOT/tools/workload/lucid")
  fi
  set +e
  { "$BIN/coloc" run "${RUN_SIM[@]}" "$@" --job "$(basename "$dir")-$name" -- "$BIN/coloc-train" \
      "${work[@]}" --duration "$seconds" --progress 2>&1 1>&3 3>&-
    echo $? > "$dir/$name.rc"; } 3> "$dir/$name.json" | stamp > "$dir/$name.err"
  set -e
}

# The share or priority run: the best-effort jobs start, and once colocd shows both running (pids,
# a device) the high-priority job runs HIGH_S seconds beside them.
mix() {
  local dir=$C/$1 high
  mkdir -p "$dir"
  run_job "$dir" mobilenetv3 "$BE_S" "$BE1_LUCID" --priority best-effort &
  local b1=$!
  run_job "$dir" mobilenetv2 "$BE_S" "$BE2_LUCID" --priority best-effort &
  local b2=$!
  python3 "$HERE/compute_act.py" wait "$BIN/coloc" 30 "$1-mobilenetv3" "$1-mobilenetv2" || true
  run_job "$dir" resnet18 "$HIGH_S" "$HIGH_LUCID" --priority high &
  high=$!
  if [ "$1" = priority ]; then
    python3 "$HERE/compute_act.py" control "$BIN/coloc" "$high" "$dir/control.json" || true
  fi
  wait "$high" "$b1" "$b2"
}

compute_act() {
  C=$OUT/compute
  rm -rf "$C"
  mkdir -p "$C/solo" "$C/timeslice"
  printf '%s\t%s\t%s\n' resnet18 high "$HIGH_LUCID" mobilenetv3 best-effort "$BE1_LUCID" \
    mobilenetv2 best-effort "$BE2_LUCID" > "$C/cast.tsv"
  printf '%s\t%s\t%s\n' heavy 2 "$TS_WORK" light 1 "$TS_WORK" > "$C/timeslice.tsv"
  local t0
  t0=$(now)

  printf '\ncoloc demo, act 2 (compute): a high-priority job beside two best-effort ones on %s, under\n' "$DEVNAME"
  echo "the share policy, then priority; then two jobs timesliced 2:1. Duty cycles: Lucid's measurements of"
  echo "real training jobs (coloc-train --lucid)."
  echo
  start_daemon
  "$BIN/coloc" policy all share >/dev/null
  echo "Alone: each job by itself (resnet18 ${SOLO_S} s, the others ${BE_SOLO_S} s), its speed to compare with..."
  run_job "$C/solo" resnet18 "$SOLO_S" "$HIGH_LUCID" --priority high
  run_job "$C/solo" mobilenetv3 "$BE_SOLO_S" "$BE1_LUCID" --priority best-effort
  run_job "$C/solo" mobilenetv2 "$BE_SOLO_S" "$BE2_LUCID" --priority best-effort
  python3 "$HERE/compute_act.py" cast "$C" || VERDICT=1

  echo "Run 3: coloc policy all share (no gating). The best-effort jobs start; once they run, resnet18"
  echo "       (coloc run --priority high) runs ${HIGH_S} s beside them..."
  mix share
  echo "Run 4: coloc policy all priority --target-slowdown 5%. The same again..."
  "$BIN/coloc" policy all priority --target-slowdown 5% >/dev/null
  mix priority
  python3 "$HERE/compute_act.py" priority "$C" || VERDICT=1

  echo
  echo "Run 5: coloc policy all timeslice (exclusive turns of 100 ms). Two GPU-hungry jobs with real"
  echo "       training's launch pattern (coloc-train --pattern $TS_WORK: mixed kernels queued"
  echo "       ahead of the device) start together for ${TS_S} s: heavy with coloc run --weight 2, light"
  echo "       with the default weight 1..."
  "$BIN/coloc" policy all timeslice >/dev/null
  run_job "$C/timeslice" heavy "$TS_S" "$TS_WORK" --weight 2 &
  local a=$!
  run_job "$C/timeslice" light "$TS_S" "$TS_WORK" --weight 1 &
  wait "$a" $!
  for name in heavy light; do copy_report "timeslice-$name" "$C/timeslice/$name.report.json"; done
  python3 "$HERE/compute_act.py" timeslice "$C" || VERDICT=1
  "$BIN/coloc" policy all share >/dev/null
  echo
  echo "Act 2 took $(secs "$t0" "$(now)") s."
}

# ==== the acts ======================================================================================
for act in $ACTS; do
  case "$act" in
    memory) memory_act ;;
    history) history_act ;;
    compute) compute_act ;;
  esac
done
echo
echo "Everything is in $OUT (summary inputs, reports, SVGs, colocd.log; act 3's runs in history/, act 2's in compute/)."
exit $VERDICT
