#!/usr/bin/env bash
# A single-node Slurm on this machine, for tests and trials of
# deploy/slurm/train.sbatch: munged, slurmctld and slurmd (Debian's
# slurm-wlm), all state, logs and sockets in DIR, as root.
#
#   slurm_local.sh start DIR PORT   slurmctld on PORT, slurmd on PORT+1; waits until the node is idle
#   slurm_local.sh stop DIR         stops all three
#
# Then: SLURM_CONF=DIR/slurm.conf sbatch ... / srun ...
# The node offers 4 CPUs whatever this machine has (tasks may share cores);
# ranks meet through PMIx (MpiDefault=pmix), as Open MPI's MPI_Init expects.
set -euo pipefail

usage() {
  sed -n '6,7p' "$0" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1 dir=$2

# Waits (10 s at most) for each to exit: slurmctld saves its state as it
# goes, and whoever removes DIR next must not race it.
stop() {
  for d in slurmd slurmctld munged; do
    if [ -f "$dir/$d.pid" ]; then
      pid=$(cat "$dir/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/$d.pid"
    fi
  done
}

case $cmd in
  start)
    [ $# -eq 3 ] || usage
    port=$3
    for p in munged slurmctld slurmd sbatch; do
      command -v "$p" >/dev/null || { echo "slurm_local: $p is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
    done
    mkdir -p "$dir"/{state,spool,log}
    dir=$(cd "$dir" && pwd)
    node=$(hostname -s)
    head -c 128 /dev/urandom >"$dir/munge.key"
    chmod 600 "$dir/munge.key"
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
      --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
    cat >"$dir/slurm.conf" <<EOF
ClusterName=zerodlocal
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node CPUs=4 State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    export SLURM_CONF=$dir/slurm.conf
    if ! slurmctld || ! slurmd; then
      echo "slurm_local: slurmctld or slurmd did not start; see $dir/log" >&2
      stop
      exit 1
    fi
    for _ in $(seq 1 60); do
      if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; then exit 0; fi
      sleep 0.5
    done
    echo "slurm_local: the node did not come up idle in 30 s: $(sinfo -h -o '%T %E' 2>&1)" >&2
    tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    stop
    exit 1
    ;;
  stop)
    stop
    ;;
  *)
    usage
    ;;
esac
