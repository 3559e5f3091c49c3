#!/usr/bin/env bash
# make bench-peers: the same trivial jobs through a single-host Slurm and
# through Quartermaster, interleaved (Slurm, Quartermaster, Slurm, ...), and
# both throughputs with their ratio.
#
# Slurm is Debian's slurm-wlm, configured as its high-throughput guide
# says: no accounting, no job completion logging, no cgroups (linuxproc
# proctrack, no task plugin), errors-only logging, a main scheduler that
# looks at the whole queue every second (default_queue_depth, sched_interval;
# the best of the settings tried here, 32-50 jobs/s for 1,000 jobs),
# finished jobs purged after 2 s, one node with 256 CPUs (overriding what
# the hardware reports, so that throughput, not cores, is measured).
# Quartermaster is `qm-bench`'s throughput phase: one executor offering
# 1,000 instances, jobs that run `true`, 64 submits in flight.
#
# Settings: QM_PEERS_JOBS (3000), QM_PEERS_ROUNDS (3), QM_PEERS_LOOPS (8
# parallel sbatch loops), QM_BIN_DIR (where qm-bench is),
# QM_PEERS_SLURM_SCHED (Slurm's SchedulerParameters), QM_PEERS_ONLY=slurm.
set -euo pipefail

jobs=${QM_PEERS_JOBS:-3000}
rounds=${QM_PEERS_ROUNDS:-3}
loops=${QM_PEERS_LOOPS:-8}
bin=${QM_BIN_DIR:-target/release}

if ! command -v slurmctld >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench-peers: installing slurm-wlm (Debian's package)"
    apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null
  else
    echo "bench-peers: needs Slurm: install Debian's slurm-wlm (and munge)" >&2
    exit 2
  fi
fi
[ -x "$bin/qm-bench" ] || { echo "bench-peers: no $bin/qm-bench (cargo build --release --bins)" >&2; exit 2; }

dir=$(mktemp -d /tmp/qm-slurm.XXXXXX)
mkdir -p "$dir/state" "$dir/spool" "$dir/out"
cleanup() {
  [ -f "$dir/slurmd.pid" ] && kill "$(cat "$dir/slurmd.pid")" 2>/dev/null || true
  [ -f "$dir/slurmctld.pid" ] && kill "$(cat "$dir/slurmctld.pid")" 2>/dev/null || true
  sleep 1
  rm -rf "$dir"
}
trap cleanup EXIT

export SLURM_CONF="$dir/slurm.conf"
cat > "$SLURM_CONF" <<CONF
ClusterName=qmbench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=error
SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=${QM_PEERS_SLURM_SCHED:-default_queue_depth=3000,max_rpc_cnt=150,sched_interval=1}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MinJobAge=2
MaxJobCount=100000
MessageTimeout=30
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=localhost CPUs=256 State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

# munge authenticates Slurm's messages (its key comes with the package).
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  if [ "$(id -u)" = 0 ]; then
    su -s /bin/sh munge -c munged 2>/dev/null || munged --force
  else
    munged
  fi
fi
slurmctld -c -i
slurmd -c
for _ in $(seq 1 100); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T | grep -q idle || { echo "bench-peers: Slurm did not come up"; cat "$dir"/*.log; exit 1; }

now() { date +%s.%N; }

slurm_round() {
  local per=$(( jobs / loops )) start end
  start=$(now)
  for l in $(seq 1 "$loops"); do
    ( for _ in $(seq 1 "$per"); do
        sbatch --wrap=true -o /dev/null -e /dev/null --parsable >/dev/null
      done ) &
  done
  wait
  submitted=$(now)
  while [ "$(squeue -h -t all 2>/dev/null | grep -cv ' CD ' || true)" != 0 ]; do
    sleep 0.2
  done
  end=$(now)
  echo "$start $submitted" | awk '{printf "  (Slurm: submitted in %.1f s)\n", $2 - $1}' >&2
  echo "$(( per * loops )) $start $end" | awk '{printf "%.1f\n", $1 / ($3 - $2)}'
}

qm_round() {
  QM_BIN_DIR="$bin" QM_BENCH_JOBS="$jobs" QM_BENCH_LATENCY_JOBS=1 \
    "$bin/qm-bench" 2>/dev/null | awk '/submit -> SUCCEEDED/ {print $4}'
}

slurm=() qm=()
for r in $(seq 1 "$rounds"); do
  s=$(slurm_round); slurm+=("$s")
  echo "round $r: Slurm            $s jobs/s"
  [ "${QM_PEERS_ONLY:-}" = slurm ] && continue
  q=$(qm_round); qm+=("$q")
  echo "round $r: Quartermaster    $q jobs/s"
done
[ "${QM_PEERS_ONLY:-}" = slurm ] && exit 0

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms=$(median "${slurm[@]}") mq=$(median "${qm[@]}")
echo "== $jobs trivial jobs, $rounds rounds interleaved (medians)"
echo "Slurm $(slurmctld -V | awk '{print $2}') (sbatch --wrap=true, $loops parallel loops)   $ms jobs/s"
echo "Quartermaster (qm-bench, 64 submits in flight)            $mq jobs/s"
awk -v q="$mq" -v s="$ms" 'BEGIN {printf "ratio                                                     %.1fx\n", q / s}'
