#!/usr/bin/env bash
# tests/integration/slurm/cluster.sh — a throwaway single-node Slurm cluster for the live tests.
#
#   cluster.sh start DIR [PLUGSTACK_FILE]   munged + slurmctld + slurmd, everything under DIR
#   cluster.sh stop DIR                     stop them (TERM, then KILL), wait for them
#
# DIR should be a fresh directory (mktemp -d). Nothing outside DIR is written: the munge key,
# its socket, slurm.conf, gres.conf, the state and spool directories, logs and pid files all live
# there, and the ports are picked free, so two clusters can run side by side. An empty or missing
# PLUGSTACK_FILE means an empty plugstack.conf in DIR. start waits until the node is idle (20 s at
# most); on failure it prints the tails of the logs, stops what it started and exits non-zero.
# Its last line is `export SLURM_CONF=DIR/slurm.conf` for a human (or `eval "$(... | tail -1)"`).
# CLUSTER_EXTRA_CONF, when set, is appended to slurm.conf (lines such as PrologFlags=contain).
# With CLUSTER_OWNER_PID set, a watchdog stops the cluster when that process ends (a test binary
# that crashed or was killed leaves no daemons behind; its DIR stays).
#
# The node: <short hostname> at 127.0.0.1, CPUs=8 (config_overrides: whatever the machine has),
# Gres=gpu:1,shard:8 (gpu File=DIR/dev/nvidia0: a character device with /dev/null's numbers, so
# tasks get CUDA_VISIBLE_DEVICES=0 as on a real node; a plain file where mknod is refused).
# Runs as root (SlurmUser=SlurmdUser=root), no cgroups (proctrack/linuxproc, task/none), no
# accounting. Needs munged, slurmctld, slurmd and the Slurm clients (22.05 tested).
set -u
# The daemons are in sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin:/usr/local/sbin

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { die "usage: cluster.sh start DIR [PLUGSTACK_FILE] | cluster.sh stop DIR"; }

# Milliseconds since the epoch.
now_ms() { date +%s%3N; }

# Is process $1 alive (and not a zombie waiting for its parent to reap it)?
pid_alive() {
  local st
  kill -0 "$1" 2>/dev/null || return 1
  st=$(sed -e 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# Is the process of pid file $1 alive?
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && pid_alive "$pid"
}

# Stops the daemons whose pids are in the given files, all at once: TERM, up to 5 s, then KILL,
# up to 3 s more. (Stopped one after the other, slurmd takes ~1 s, slurmctld and munged ~2 s each.)
stop_pids() {
  local f pid pids=() left deadline
  for f in "$@"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null)
    [ -n "$pid" ] && pid_alive "$pid" && pids+=("$pid")
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill -TERM "${pids[@]}" 2>/dev/null
    for sig in KILL NONE; do
      deadline=$(( $(now_ms) + 5000 ))
      [ $sig = NONE ] && deadline=$(( $(now_ms) + 3000 ))
      while :; do
        left=()
        for pid in "${pids[@]}"; do pid_alive "$pid" && left+=("$pid"); done
        [ ${#left[@]} -eq 0 ] && break 2
        [ "$(now_ms)" -ge "$deadline" ] && break
        sleep 0.02
      done
      [ $sig = KILL ] && kill -KILL "${left[@]}" 2>/dev/null
      pids=("${left[@]}")
    done
  fi
  rm -f "$@"
}

# The pids of this cluster's leftovers: slurmstepds (slurmd's environment, so SLURM_CONF is this
# cluster's) and job tasks (SLURM_CONF from the submitter, and SLURM_JOB_ID), never a shell that
# merely exported SLURM_CONF.
leftovers() {
  local dir=$1 p env
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    env=$( { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null) || continue
    printf '%s\n' "$env" | grep -qx "SLURM_CONF=$dir/slurm.conf" || continue
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] || printf '%s\n' "$env" | grep -q '^SLURM_JOB_ID='; then
      echo "$p"
    fi
  done
}

stop_all() {
  local dir=$1 deadline left p
  # Jobs first, while slurmctld and slurmd are there to end them (a slurmstepd whose slurmd is gone
  # lingers, and so does its job): cancel them all, wait up to 5 s for the queue to empty.
  if alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid"; then
    export SLURM_CONF="$dir/slurm.conf"
    if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
      scancel --partition=debug 2>/dev/null
      deadline=$(( $(now_ms) + 5000 ))
      while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.05; done
    fi
  fi
  # All three together: slurmctld and slurmd need munge for nothing they do on the way out.
  stop_pids "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"
  # Whatever of the jobs is still there (killed on a deadline, a stuck step).
  left=$(leftovers "$dir")
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null
    deadline=$(( $(now_ms) + 2000 ))
    for p in $left; do
      while pid_alive "$p" && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.02; done
    done
  fi
  # The owner's watchdog, unless this is the watchdog stopping the cluster.
  # It leads a session of its own (setsid): its tail goes with it.
  if [ -z "${CLUSTER_WATCHDOG:-}" ] && [ -s "$dir/watchdog.pid" ]; then
    kill -TERM -- "-$(cat "$dir/watchdog.pid")" 2>/dev/null
    stop_pids "$dir/watchdog.pid"
  fi
  return 0
}

show_logs() {
  local dir=$1 f
  for f in munged.log slurmctld.log slurmd.log; do
    [ -f "$dir/$f" ] || continue
    echo "---- tail of $dir/$f ----" >&2
    tail -n 30 "$dir/$f" >&2
  done
}

# Two free TCP ports on 127.0.0.1 (bound at once, so they differ, then released).
free_ports() {
  python3 - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

start() {
  local dir=$1 plugstack=${2:-}
  local host ports ctld_port slurmd_port deadline state
  for b in munged slurmctld slurmd sinfo python3; do
    command -v "$b" >/dev/null 2>&1 || die "$b not found (apt-get install slurmctld slurmd slurm-client munge)"
  done
  mkdir -p "$dir" || die "cannot create $dir"
  dir=$(cd "$dir" && pwd) || die "cannot enter $dir"
  chmod 0700 "$dir"
  host=$(hostname -s)

  # ---- munge ----
  mkdir -p "$dir/munge"
  chmod 0700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none || die "cannot write the munge key"
  chmod 0400 "$dir/munge/munge.key"
  munged -F --force --key-file="$dir/munge/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/munged.seed" \
    --num-threads=4 </dev/null >>"$dir/munged.log" 2>&1 &
  echo $! >"$dir/munged.pid"
  deadline=$(( $(now_ms) + 10000 ))
  until [ -S "$dir/munge.sock" ]; do
    if ! alive "$dir/munged.pid" || [ "$(now_ms)" -ge "$deadline" ]; then
      echo "cluster.sh: munged did not start" >&2
      show_logs "$dir"; stop_all "$dir"; exit 1
    fi
    sleep 0.02
  done

  # ---- configuration ----
  read -r ctld_port slurmd_port < <(free_ports) || die "cannot pick free ports"
  [ -n "$slurmd_port" ] || die "cannot pick free ports"
  mkdir -p "$dir/state" "$dir/spool" "$dir/dev"
  # A character device (a copy of /dev/null's numbers): slurmd sets CUDA_VISIBLE_DEVICES (from the
  # name's number) only for a gres file that is a device; a plain file is only logged as an error.
  mknod -m 0666 "$dir/dev/nvidia0" c 1 3 2>/dev/null || : >"$dir/dev/nvidia0"
  if [ -z "$plugstack" ]; then
    plugstack="$dir/plugstack.conf"
    : >"$plugstack"
  fi
  case $plugstack in /*) ;; *) plugstack="$(pwd)/$plugstack" ;; esac
  [ -f "$plugstack" ] || die "no plugstack file $plugstack"

  cat >"$dir/slurm.conf" <<EOF
# Written by tests/integration/slurm/cluster.sh
ClusterName=coloctest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.conf.pid
SlurmdPidFile=$dir/slurmd.conf.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu,shard
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
PlugStackConfig=$plugstack
KillWait=2
UnkillableStepTimeout=10
MessageTimeout=5
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 Gres=gpu:1,shard:8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  # More slurm.conf lines from the caller (e.g. PrologFlags=contain).
  if [ -n "${CLUSTER_EXTRA_CONF:-}" ]; then printf '%s\n' "$CLUSTER_EXTRA_CONF" >>"$dir/slurm.conf"; fi
  cat >"$dir/gres.conf" <<EOF
# Written by tests/integration/slurm/cluster.sh
NodeName=$host Name=gpu File=$dir/dev/nvidia0
NodeName=$host Name=shard Count=8
EOF
  : >"$dir/cgroup.conf"

  export SLURM_CONF="$dir/slurm.conf"
  # Clients must not pick up a job's environment from the caller (running inside a Slurm job).
  unset SLURM_JOB_ID SLURM_JOBID

  # ---- daemons ----
  slurmctld -D -i -f "$dir/slurm.conf" </dev/null >>"$dir/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  slurmd -D -f "$dir/slurm.conf" </dev/null >>"$dir/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"

  deadline=$(( $(now_ms) + 20000 ))
  while :; do
    state=$(sinfo -h -o %t 2>/dev/null | head -n 1)
    case $state in idle) break ;; esac
    if ! alive "$dir/slurmctld.pid" || ! alive "$dir/slurmd.pid" || [ "$(now_ms)" -ge "$deadline" ]; then
      echo "cluster.sh: the node is not idle (state '${state}')" >&2
      for f in slurmctld.out slurmd.out; do
        [ -s "$dir/$f" ] && { echo "---- $dir/$f ----" >&2; tail -n 20 "$dir/$f" >&2; }
      done
      show_logs "$dir"; stop_all "$dir"; exit 1
    fi
    sleep 0.05
  done
  if [ -n "${CLUSTER_OWNER_PID:-}" ]; then
    CLUSTER_WATCHDOG=1 setsid "$0" watch "$dir" "$CLUSTER_OWNER_PID" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  echo "export SLURM_CONF=$dir/slurm.conf"
}

# The watchdog: waits for the owner to end, then stops the cluster.
watch() {
  echo $$ >"$1/watchdog.pid"
  tail --pid="$2" -s 0.5 -f /dev/null
  stop_all "$1"
  rm -f "$1/watchdog.pid"
}

case ${1:-} in
  start) [ $# -ge 2 ] && [ $# -le 3 ] || usage; start "$2" "${3:-}" ;;
  watch) [ $# -eq 3 ] || usage; watch "$2" "$3" ;;
  stop) [ $# -eq 2 ] || usage; [ -d "$2" ] || die "no directory $2"; stop_all "$2" ;;
  *) usage ;;
esac
