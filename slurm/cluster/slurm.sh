#!/usr/bin/env bash
# A real Slurm (Debian's slurmctld + slurmd + munge) on this machine, for the tests.
#   slurm.sh up ns3      one slurmd inside each namespace host of netns.sh (learner, shard, actor)
#   slurm.sh up single   one node: this host
#   slurm.sh down        stop what `up` started, by PID file (never by name)
# Root, no systemd. Installs the packages when they are missing. Every `up` starts from a
# clean state: daemons of an earlier run are stopped and Slurm's state is wiped.
set -euo pipefail
NODE_CPUS=${NODE_CPUS:-8}   # advertised per node: more than the real cores, so 7+ tasks fit
CONF=/etc/slurm/slurm.conf

stop_pid() {  # SIGTERM, wait until gone (a zombie counts: PID 1 here reaps late), then SIGKILL
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do
    case "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone)" in gone | Z) return 0 ;; esac
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null || true
}

stop_daemons() {
  for pidfile in /run/slurmd-*.pid /run/slurmctld.pid; do
    [ -s "$pidfile" ] && stop_pid "$(cat "$pidfile")"
    rm -f "$pidfile"
  done
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
    && command -v sbatch >/dev/null && command -v munged >/dev/null; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  munge -n >/dev/null 2>&1 || runuser -u munge -- /usr/sbin/munged
  munge -n | unmunge >/dev/null
}

write_conf() {  # $1 = controller address, $2 = memory per node (MB), then node lines on stdin
  local host nodes
  host=$(hostname -s)
  nodes=$(cat)
  install -d /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat >"$CONF" <<CONF
ClusterName=apex-ci
SlurmctldHost=${host}($1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only once its old credentials expire (default 120 s;
# 5 s is the least Slurm takes).
AuthInfo=cred_expire=5
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
# No cgroups on this VM: track processes by parentage, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Heterogeneous jobs start only from a backfill cycle: keep that cycle short. A requeued
# job waits out its BeginTime (the credentials' expiry), then for the main scheduling loop
# (every 60 s by default) to mark it eligible, then for the controller's next ping of the
# nodes (a third of SlurmdTimeout, or so) before backfill takes it: 32 s from requeue to
# start at sched_interval and SlurmdTimeout 60, 6.5 s with these.
SchedulerParameters=bf_interval=1,sched_interval=1
# Nodes advertise NODE_CPUS, more than this machine has (slurmd checks it otherwise).
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
KillWait=5
MinJobAge=300
# Also sets how often the controller pings the nodes (see SchedulerParameters).
SlurmdTimeout=15
NodeName=DEFAULT CPUs=${NODE_CPUS} RealMemory=$2 State=UNKNOWN
${nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
}

wait_idle() {
  for _ in $(seq 150); do
    [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && return 0
    sleep 0.2
  done
  sinfo -N -l || true
  tail -n 20 /var/log/slurm/*.log || true
  echo "slurm.sh: nodes never became idle" >&2
  return 1
}

up() {
  local mode=${1:-single}
  install_packages
  stop_daemons
  start_munge
  local nodes
  case "$mode" in
    ns3)
      ip link show br-apex >/dev/null 2>&1 || { echo "slurm.sh: run netns.sh up first" >&2; exit 1; }
      nodes="learner shard actor"
      printf '%s\n' "NodeName=learner NodeAddr=10.200.0.11" "NodeName=shard NodeAddr=10.200.0.12" \
        "NodeName=actor NodeAddr=10.200.0.13" | write_conf 10.200.0.1 4000
      ;;
    single)
      nodes=$(hostname -s)
      echo "NodeName=$nodes NodeAddr=127.0.0.1" \
        | write_conf 127.0.0.1 $(($(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 1024))
      ;;
    *) echo "usage: slurm.sh up ns3|single" >&2; exit 2 ;;
  esac
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
  /usr/sbin/slurmctld
  for node in $nodes; do
    install -d "/var/spool/slurmd/$node"
    if [ "$mode" = ns3 ]; then
      # Enter only the host's network namespace plus private UTS and mount namespaces (for its
      # hostname and /etc/hosts). `ip netns exec` would remount /sys and hide the cgroup
      # mounts that slurmd checks at start.
      nsenter --net="/run/netns/$node" unshare --uts --mount sh -c \
        "hostname $node && mount --bind /etc/netns/$node/hosts /etc/hosts && exec /usr/sbin/slurmd -N $node"
    else
      /usr/sbin/slurmd -N "$node"
    fi
  done
  wait_idle
}

case "${1:-}" in
  up) up "${2:-single}" ;;
  down)
    # Only a controller we started can cancel jobs. With none running, Slurm's clients retry
    # for over a minute (munge and controller connects), so never ask one then.
    if [ -s /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null; then
      timeout 15 scancel --user=root 2>/dev/null || true
    fi
    stop_daemons
    ;;
  *) echo "usage: slurm.sh up ns3|single | down" >&2; exit 2 ;;
esac
