#!/usr/bin/env bash
# tests/bench/slurm_bench.sh BUILD OUT_JSON — what coloc's Slurm plugin costs a step, on a live
# single-node Slurm (tests/integration/slurm/cluster.sh) with colocd on simgpu.
#
#   step start: `srun true` with the plugin (every step starts `coloc anchor`, which registers the
#               job with colocd before the task runs) against `srun --coloc=off true` (the plugin is
#               loaded and does nothing), in alternating rounds: ROUNDS rounds of N sruns each, the
#               median over rounds of the mean per srun.
#   scancel:    from `scancel` of a running job (coloc-train in its batch step) to its report on
#               disk; the median of CANCELS jobs.
# Needs root, Slurm (slurmctld, slurmd, munge, the clients) and the build's spank_coloc.so;
# without them it says so and exits 0 (make bench goes on).
set -u
BUILD=${1:?usage: slurm_bench.sh BUILD OUT_JSON}
OUT=${2:?usage: slurm_bench.sh BUILD OUT_JSON}
ROUNDS=${ROUNDS:-7} N=${N:-10} CANCELS=${CANCELS:-5}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
PATH=$PATH:/usr/sbin:/sbin

for tool in slurmctld slurmd munged srun sbatch; do
  command -v $tool >/dev/null || { echo "bench-slurm: skipped: $tool is not installed (mk/deps.sh installs Slurm with COLOC_WITH_SLURM=1)"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "bench-slurm: skipped: the cluster runs as root"; exit 0; }
[ -e "$BUILD/lib/spank_coloc.so" ] || { echo "bench-slurm: skipped: $BUILD/lib/spank_coloc.so is not built"; exit 0; }

WORK=$(mktemp -d /tmp/coloc-bench-slurm.XXXXXX)
COLOCD=
cleanup() {
  "$HERE/tests/integration/slurm/cluster.sh" stop "$WORK/cluster" >/dev/null 2>&1
  [ -n "$COLOCD" ] && kill "$COLOCD" 2>/dev/null && wait "$COLOCD" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# The installed layout, as a site has it.
env -u MAKEFLAGS -u MAKELEVEL make --no-print-directory -C "$HERE" -f mk/install.mk install BUILD="$BUILD" PREFIX="$WORK/usr" \
  SYSCONFDIR="$WORK/etc" >/dev/null || { echo "bench-slurm: make install failed" >&2; exit 1; }

export SIMGPU_STATE_DIR=$WORK/simgpu SIMGPU_DEVICES="SimGPU-80G:80GiB"
export LD_LIBRARY_PATH=$BUILD/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export COLOC_SOCKET=$WORK/colocd.sock
COLOC_CONFIG= "$WORK/usr/sbin/colocd" --socket "$COLOC_SOCKET" --state-dir "$WORK/state" 2>"$WORK/colocd.log" &
COLOCD=$!
for _ in $(seq 400); do "$WORK/usr/bin/coloc" status >/dev/null 2>&1 && break; sleep 0.05; done
"$WORK/usr/bin/coloc" status >/dev/null || { echo "bench-slurm: colocd did not start:" >&2; cat "$WORK/colocd.log" >&2; exit 1; }

echo "optional $WORK/usr/lib/coloc/spank_coloc.so socket=$COLOC_SOCKET" > "$WORK/plugstack.conf"
mkdir -p "$WORK/cluster"
"$HERE/tests/integration/slurm/cluster.sh" start "$WORK/cluster" "$WORK/plugstack.conf" >"$WORK/cluster.log" 2>&1 ||
  { echo "bench-slurm: the cluster did not start:" >&2; cat "$WORK/cluster.log" >&2; exit 1; }
export SLURM_CONF=$WORK/cluster/slurm.conf

now_us() { echo $(( $(date +%s%N) / 1000 )); }
# Mean microseconds per srun over N sruns of "$@".
per_srun() {
  local t0 t1
  t0=$(now_us)
  for _ in $(seq "$N"); do timeout 30 srun "$@" true || { echo "bench-slurm: srun $* failed" >&2; exit 1; }; done
  t1=$(now_us)
  echo $(( (t1 - t0) / N ))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

timeout 30 srun true >/dev/null  # the first step of a fresh cluster is slower: not measured
off=() on=()
printf '  %-8s %s\n' BENCH "slurm: step start, $ROUNDS rounds of $N sruns each way"
for r in $(seq "$ROUNDS"); do
  off+=("$(per_srun --coloc=off)")
  on+=("$(per_srun)")
done
off_us=$(printf '%s\n' "${off[@]}" | median)
on_us=$(printf '%s\n' "${on[@]}" | median)

printf '  %-8s %s\n' BENCH "slurm: scancel to report, $CANCELS jobs"
cancel=()
for i in $(seq "$CANCELS"); do
  jid=$(sbatch --parsable --coloc-mem=8G -o "$WORK/cancel-%j.out" \
    --wrap "exec $BUILD/bin/coloc-train --model bert-base --batch 2 --duration 60")
  running=0
  for _ in $(seq 300); do  # running: its process is in the books (30 s at most)
    if "$WORK/usr/bin/coloc" jobs --json 2>/dev/null | python3 -c "
import json,sys
j=[x for x in json.load(sys.stdin).get('jobs',[]) if x.get('job')=='slurm-$jid']
sys.exit(0 if j and j[0].get('pids') else 1)"; then running=1; break; fi
    squeue -h -j "$jid" 2>/dev/null | grep -q . || break  # it ended (failed) before it ran
    sleep 0.05
  done
  [ "$running" = 1 ] || { echo "bench-slurm: job $jid did not run under coloc:" >&2; cat "$WORK/cancel-$jid.out" >&2; exit 1; }
  t0=$(now_us)
  scancel "$jid"
  while [ ! -e "$WORK/state/reports/slurm-$jid.json" ]; do
    [ $(( $(now_us) - t0 )) -gt 30000000 ] && { echo "bench-slurm: no report for slurm-$jid" >&2; exit 1; }
    sleep 0.002
  done
  cancel+=($(( $(now_us) - t0 )))
done
cancel_us=$(printf '%s\n' "${cancel[@]}" | median)

mkdir -p "$(dirname "$OUT")"
cat > "$OUT" <<EOF
{
  "bench": "slurm",
  "slurm_version": "$(srun --version | awk '{print $2}')",
  "rounds": $ROUNDS, "sruns_per_round": $N, "cancels": $CANCELS,
  "srun_true_without_coloc_us": $off_us,
  "srun_true_with_coloc_us": $on_us,
  "added_per_step_us": $((on_us - off_us)),
  "scancel_to_report_us": $cancel_us,
  "rounds_without_us": [$(IFS=,; echo "${off[*]}")],
  "rounds_with_us": [$(IFS=,; echo "${on[*]}")],
  "scancel_to_report_each_us": [$(IFS=,; echo "${cancel[*]}")]
}
EOF
awk -v off="$off_us" -v on="$on_us" -v c="$cancel_us" -v n="$CANCELS" 'BEGIN {
  printf "slurm: srun true %.1f ms without coloc, %.1f ms with (%+.1f ms per step: coloc anchor registers the job)\n", off / 1000, on / 1000, (on - off) / 1000
  printf "slurm: scancel to report %.1f ms (median of %d)\n", c / 1000, n }'
echo "slurm: $OUT"
