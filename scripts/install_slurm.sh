#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for vf-rl's Slurm tests (tests/test_slurm_e2e.py) and for
# trying `vf-rl @ cfg.toml --slurm --submit` on a laptop. Installs Debian's slurmctld, slurmd and munge
# with apt-get, writes /etc/slurm/slurm.conf for this host (its real cores and memory), starts munged,
# slurmctld and slurmd, and waits until the node takes jobs. Idempotent: a second call finds it running.
#
# Exit codes: 0 ready; 3 Slurm cannot be installed or started here (no apt-get, not root, no package
# source): the tests skip, saying so in one line; anything else: a fault worth reading.
set -uo pipefail

say() { echo "install_slurm: $*" >&2; }
cannot() { say "$*"; exit 3; }

node_ready() {
  command -v sinfo >/dev/null 2>&1 || return 1
  local state
  state=$(sinfo -h -N -n "$(hostname -s)" -o '%t' 2>/dev/null | head -1)
  [[ "$state" == idle* || "$state" == mix* || "$state" == alloc* ]]
}

if node_ready; then
  say "Slurm is running (node $(hostname -s) $(sinfo -h -N -o '%t' | head -1))"
  exit 0
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || cannot "needs root to install slurmctld, slurmd and munge (apt-get)"
  command -v apt-get >/dev/null 2>&1 || cannot "no apt-get on this machine: install Slurm (slurmctld, slurmd, munge) yourself"
  export DEBIAN_FRONTEND=noninteractive
  apt=(apt-get -q -y -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install --no-install-recommends slurmctld slurmd slurm-client munge >/tmp/install_slurm.apt.log 2>&1; then
    # the package lists may be missing or stale on a fresh machine
    "${apt[@]}" update >>/tmp/install_slurm.apt.log 2>&1 || cannot "apt-get update failed (no package source?): see /tmp/install_slurm.apt.log"
    "${apt[@]}" install --no-install-recommends slurmctld slurmd slurm-client munge >>/tmp/install_slurm.apt.log 2>&1 \
      || cannot "apt-get install slurmctld slurmd slurm-client munge failed: see /tmp/install_slurm.apt.log"
  fi
fi

host=$(hostname -s)
cpus=$(nproc)
mem_mib=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))  # leave the OS 1 GiB
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/log/munge /var/lib/munge
cat >/etc/slurm/slurm.conf <<EOF
# written by vfrl scripts/install_slurm.sh: one node, this machine
ClusterName=vfrl
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=30
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

if [[ ! -s /etc/munge/munge.key ]]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- munged --force 2>/dev/null || munged --force \
  || cannot "munged does not start: see /var/log/munge/munged.log"

# start (or restart, to read the config written above) the two daemons
pkill -x slurmctld 2>/dev/null; pkill -x slurmd 2>/dev/null
for _ in $(seq 100); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.1; done
slurmctld || cannot "slurmctld does not start: see /var/log/slurm/slurmctld.log"
slurmd || cannot "slurmd does not start: see /var/log/slurm/slurmd.log"

# wait on the node itself: slurmd registers with slurmctld, which marks the node idle
for _ in $(seq 600); do
  node_ready && { say "Slurm is running (node $host, $cpus CPUs, ${mem_mib} MiB)"; exit 0; }
  scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
  sleep 0.2
done
cannot "the node $host never became idle: see /var/log/slurm/slurmctld.log and slurmd.log"
