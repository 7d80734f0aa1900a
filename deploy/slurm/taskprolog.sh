#!/bin/sh
# deploy/slurm/taskprolog.sh — coloc for sites that cannot load SPANK plugins (docs/slurm.md,
# "Without the plugin"). slurm.conf: TaskProlog=/path/to/taskprolog.sh
#
# Slurm runs a TaskProlog as the job's user before each task and applies the lines it prints:
# `export NAME=value` sets a variable in the task's environment. This prints coloc's environment:
# the task runs under libcoloc.so, as coloc job slurm-<jobid> (arrays: slurm-<arrayjobid>_<taskid>),
# with the step as COLOC_STEP. Without the plugin there are no --coloc-* options and no anchor:
# the job's limit comes from its shards (COLOC_MEM_PER_SHARD below), and colocd keeps the job only
# while a process of it runs.
#
# Settings (edit here, or set them in slurmd's environment):
COLOC_LIB=${COLOC_LIB:-/usr/local/lib/coloc/libcoloc.so}
COLOC_SOCKET_PATH=${COLOC_SOCKET_PATH:-/run/coloc/colocd.sock}
COLOC_MEM_PER_SHARD=${COLOC_MEM_PER_SHARD:-}   # bytes per shard, e.g. 10737418240; empty = no limit

[ -n "${SLURM_JOB_ID:-}" ] || exit 0
[ -r "$COLOC_LIB" ] || exit 0   # coloc is not installed on this node: leave the task alone

case ":${LD_PRELOAD:-}:" in
  *":$COLOC_LIB:"*) ;;   # already there (an sbatch script's inner srun)
  *) echo "export LD_PRELOAD=$COLOC_LIB${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
  echo "export COLOC_JOB=slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
else
  echo "export COLOC_JOB=slurm-$SLURM_JOB_ID"
fi
case "${SLURM_STEP_ID:-}" in
  4294967291|batch) echo "export COLOC_STEP=batch" ;;
  4294967292|extern) echo "export COLOC_STEP=extern" ;;
  ''|*[!0-9]*) ;;
  *) echo "export COLOC_STEP=$SLURM_STEP_ID" ;;
esac
echo "export COLOC_SOCKET=$COLOC_SOCKET_PATH"
case "$COLOC_MEM_PER_SHARD:${SLURM_SHARDS_ON_NODE:-}" in
  :*|*:|*[!0-9:]*) ;;
  *) echo "export COLOC_MEM_LIMIT=$((COLOC_MEM_PER_SHARD * SLURM_SHARDS_ON_NODE))" ;;
esac
exit 0
