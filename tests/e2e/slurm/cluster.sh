#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost for the tests: munged (as the
# munge user), slurmctld and slurmd with their state in DIR, no systemd.
#   cluster.sh start DIR   → prints "export SLURM_CONF=DIR/slurm.conf"; exit 77 if Slurm cannot start here
#   cluster.sh stop DIR
# Facts and pitfalls: ../shared/SLURM-NOTES.md (munged refuses root; zombies
# pass kill -0; requeue holds and scheduling delays need config).
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?state dir}
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)

alive() {  # pid file → running and not a zombie
  local pid; pid=$(cat "$1" 2>/dev/null) || return 1
  [[ -n "$pid" && -r /proc/$pid/stat ]] || return 1
  [[ "$(awk '{print $3}' /proc/$pid/stat)" != Z ]]
}

stop() {
  for d in slurmd slurmctld munged; do
    if [[ -f "$dir/$d.pid" ]]; then
      kill "$(cat "$dir/$d.pid")" 2>/dev/null || true
    fi
  done
  for _ in $(seq 50); do
    alive "$dir/slurmd.pid" || alive "$dir/slurmctld.pid" || alive "$dir/munged.pid" || break
    sleep 0.1
  done
  for d in slurmd slurmctld munged; do
    alive "$dir/$d.pid" && kill -9 "$(cat "$dir/$d.pid")" 2>/dev/null || true
    rm -f "$dir/$d.pid"
  done
  if [[ -f "$dir/munge.path" ]]; then
    rm -rf "$(cat "$dir/munge.path")"
    rm -f "$dir/munge.path"
  fi
}

skip() { echo "SKIP: $*" >&2; exit 77; }

if [[ $cmd == stop ]]; then stop; exit 0; fi
[[ $cmd == start ]] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }

for b in munged slurmctld slurmd sbatch srun scontrol; do
  command -v "$b" >/dev/null || skip "$b is not installed (apt-get install slurm-wlm munge)"
done
[[ $(id -u) == 0 ]] || skip "starting slurmd needs root"

# munge runs as the munge user, which cannot enter a private (mktemp 0700)
# DIR: its socket, pid and log get their own folder under /tmp.
mdir=$(mktemp -d /tmp/shardd-munge.XXXXXX)
chmod 0755 "$mdir"
echo "$mdir" > "$dir/munge.path"
mkdir -p "$mdir/m"
chown munge:munge "$mdir/m" 2>/dev/null || skip "no munge user"
chmod 0700 "$mdir/m"
if [[ ! -s /etc/munge/munge.key ]]; then
  (command -v mungekey >/dev/null && mungekey --create --keyfile=/etc/munge/munge.key) || skip "no munge key"
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
mkdir -p /run/munge && chown munge:munge /run/munge  # clients look for the default socket too
sock="$mdir/m/munge.socket.2"
runuser -u munge -- munged --socket="$sock" --pid-file="$mdir/m/munged.pid" \
  --log-file="$mdir/m/munged.log" --seed-file="$mdir/m/munged.seed" --force >/dev/null 2>&1 \
  || skip "munged did not start ($(tail -n1 "$mdir/m/munged.log" 2>/dev/null))"
cp "$mdir/m/munged.pid" "$dir/munged.pid"

host=$(hostname -s)
cpus=${SLURM_TEST_CPUS:-8}
mkdir -p "$dir/ctld" "$dir/d" "$dir/log"
cat > "$dir/slurm.conf" <<CONF
ClusterName=shardd-test
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=${SLURM_TEST_CTLD_PORT:-6917}
SlurmdPort=${SLURM_TEST_D_PORT:-6918}
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
AuthType=auth/munge
AuthInfo=socket=$sock,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=600
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" >/dev/null 2>&1 || { stop; skip "slurmctld did not start: $(tail -n2 "$dir/log/slurmctld.log" 2>/dev/null)"; }
slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || { stop; skip "slurmd did not start: $(tail -n2 "$dir/log/slurmd.log" 2>/dev/null)"; }
for _ in $(seq 100); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -n1 || true)
  [[ $state == idle* ]] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.1
done
state=$(sinfo -h -N -o "%t %E" 2>&1 | head -n1 || true)
stop
skip "the Slurm node did not become idle (state: ${state:-none})"
