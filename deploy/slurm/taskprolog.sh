#!/bin/sh
# deploy/slurm/taskprolog.sh — coloc for sites that cannot load SPANK plugins (docs/slurm.md,
# "Without the plugin"). slurm.conf: TaskProlog=/path/to/this/script
#
# Slurm runs a TaskProlog as the job's user, in the task's environment, before each task, and
# applies the lines it prints: `export NAME=value` sets a variable in the task's environment. This
# prints coloc's environment: the task runs under libcoloc.so, as coloc job slurm-<jobid> (arrays:
# slurm-<arrayjobid>_<taskid>), with its step as COLOC_STEP. Without the plugin there are no
# --coloc-* options and no anchor: the job's limit comes from its shards (MEM_PER_SHARD below), and
# colocd keeps the job only while a process of it runs.
#
# Settings: edit them here. They are not read from the environment, which is the user's.
LIB=/usr/local/lib/coloc/libcoloc.so
SOCKET=/run/coloc/colocd.sock
MEM_PER_SHARD=             # bytes per shard, e.g. 10737418240 for 10 GiB; empty = no limit

[ -n "${SLURM_JOB_ID:-}" ] || exit 0
[ -r "$LIB" ] || exit 0   # coloc is not installed on this node: leave the task alone

# LD_PRELOAD: libcoloc.so in front, once; no other copy of it (two would each count the memory).
rest=
old_ifs=$IFS
IFS=': '
for entry in ${LD_PRELOAD:-}; do
  case "$entry" in
    */libcoloc.so|libcoloc.so|*/libcoloc.so.*|libcoloc.so.*) ;;
    *) rest="$rest${rest:+:}$entry" ;;
  esac
done
IFS=$old_ifs
echo "export LD_PRELOAD=$LIB${rest:+:$rest}"

if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
  echo "export COLOC_JOB=slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
else
  echo "export COLOC_JOB=slurm-$SLURM_JOB_ID"
fi
# A batch step's task has no SLURM_STEP_ID (Slurm 22.05).
case "${SLURM_STEP_ID:-batch}" in
  batch|4294967291) echo "export COLOC_STEP=batch" ;;
  4294967290) echo "export COLOC_STEP=interactive" ;;
  *[!0-9]*) echo "unset COLOC_STEP" ;;
  *) echo "export COLOC_STEP=$SLURM_STEP_ID" ;;
esac
echo "export COLOC_SOCKET=$SOCKET"
case "$MEM_PER_SHARD:${SLURM_SHARDS_ON_NODE:-}" in
  :*|*:|*[!0-9:]*) echo "unset COLOC_MEM_LIMIT" ;;
  *) echo "export COLOC_MEM_LIMIT=$((MEM_PER_SHARD * SLURM_SHARDS_ON_NODE))" ;;
esac
exit 0
