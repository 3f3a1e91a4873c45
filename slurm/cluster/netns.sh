#!/usr/bin/env bash
# Three network namespaces that act as separate hosts for the Slurm tests:
#   learner 10.200.0.11, shard 10.200.0.12, actor 10.200.0.13
# each joined by a veth pair ("veth-<host>" on the root side) to bridge br-apex (10.200.0.1).
# The subnet has no route out, so nothing a test starts can leave it.
#   netns.sh up     create (idempotent: tears down an earlier set first)
#   netns.sh down   remove (stop the slurmd inside first: `slurm.sh down`)
# Root only. Inside a namespace, names resolve through /etc/netns/<host>/hosts.
set -euo pipefail
HOSTS=(learner shard actor)
BRIDGE=br-apex
SUBNET=10.200.0

down() {
  for host in "${HOSTS[@]}"; do
    ip netns del "$host" 2>/dev/null || true
    ip link del "veth-$host" 2>/dev/null || true
    rm -rf "/etc/netns/$host"
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

up() {
  for host in "${HOSTS[@]}"; do
    if [ -s "/run/slurmd-$host.pid" ] && kill -0 "$(cat "/run/slurmd-$host.pid")" 2>/dev/null; then
      echo "netns.sh: slurmd $host still runs; run slurm.sh down first" >&2
      exit 1
    fi
  done
  down
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local octet=11 hosts_file
  hosts_file=$(printf '%s\n' "127.0.0.1 localhost" "$SUBNET.1 $(hostname -s)" \
    "$SUBNET.11 learner" "$SUBNET.12 shard" "$SUBNET.13 actor")
  for host in "${HOSTS[@]}"; do
    ip netns add "$host"
    ip link add "veth-$host" type veth peer name eth0 netns "$host"
    ip link set "veth-$host" master "$BRIDGE" up
    ip -n "$host" addr add "$SUBNET.$octet/24" dev eth0
    ip -n "$host" link set eth0 up
    ip -n "$host" link set lo up
    mkdir -p "/etc/netns/$host"
    echo "$hosts_file" > "/etc/netns/$host/hosts"
    octet=$((octet + 1))
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: netns.sh up|down" >&2; exit 2 ;;
esac
